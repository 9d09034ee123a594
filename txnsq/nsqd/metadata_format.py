# -*- test-case-name: tests.test_metadata -*-
"""
The format of ``nsqd.dat``, sans-IO: Go's ``json.Marshal`` of nsqd's
``Metadata`` struct, byte for byte (:func:`encode_metadata`), and a reader
as strict about its shape as Go's decoder (:func:`decode_metadata`), which
skips invalid names as Go does.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple

from txnsq.protocol.names import is_valid_channel_name, is_valid_topic_name

__all__ = [
    "ChannelMetadata",
    "MetadataError",
    "Skipped",
    "TopicMetadata",
    "decode_metadata",
    "encode_metadata",
]


class MetadataError(Exception):
    """``nsqd.dat`` cannot be read, or is not a Go nsqd metadata file."""


@dataclass
class ChannelMetadata:
    """A durable channel as listed in ``nsqd.dat``."""

    name: str
    paused: bool = False


@dataclass
class TopicMetadata:
    """A durable topic as listed in ``nsqd.dat``, with its durable channels."""

    name: str
    paused: bool = False
    channels: List[ChannelMetadata] = field(default_factory=list)
    #: txnsq's retention settings (``RetentionSettings.to_json()``), or
    #: ``None``; written as an extra ``"retention"`` key, which Go ignores.
    retention: Optional[Dict[str, Any]] = None


class Skipped(NamedTuple):
    """
    An entry of ``nsqd.dat`` with an invalid name, which Go and txnsq
    skip: ``kind`` is ``"topic"`` (its channels are skipped with it) or
    ``"channel"``.
    """

    kind: str
    name: str


# What Go's encoder escapes beyond what json.dumps does (HTML-safe output
# and the JavaScript line separators).
_GO_EXTRA_ESCAPES = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}
_GO_EXTRA = re.compile("[<>&\u2028\u2029]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _go_string(value: str) -> str:
    """A JSON string literal as Go's ``encoding/json`` writes it."""
    # Go writes invalid UTF-8 as U+FFFD; a lone surrogate is its analogue.
    value = _SURROGATE.sub("\ufffd", value)
    text = json.dumps(value, ensure_ascii=False)
    return _GO_EXTRA.sub(lambda match: _GO_EXTRA_ESCAPES[match.group()], text)


def _bool(value: bool) -> str:
    return "true" if value else "false"


def encode_metadata(topics: Sequence[TopicMetadata], version: str) -> bytes:
    """
    The bytes of ``nsqd.dat`` listing ``topics``, exactly as Go nsqd 1.3's
    ``json.Marshal(Metadata)`` writes them: keys in struct order
    (``topics``, ``version``; ``name``, ``paused``, ``channels``), compact,
    no trailing newline, an empty list written ``null``.
    """
    topic_parts = []
    for topic in topics:
        if topic.channels:
            channels = "[%s]" % ",".join(
                '{"name":%s,"paused":%s}' % (_go_string(channel.name), _bool(channel.paused))
                for channel in topic.channels
            )
        else:
            channels = "null"
        retention = ""
        if topic.retention is not None:
            retention = ',"retention":%s' % (
                json.dumps(topic.retention, separators=(",", ":"), sort_keys=True),
            )
        topic_parts.append(
            '{"name":%s,"paused":%s,"channels":%s%s}'
            % (_go_string(topic.name), _bool(topic.paused), channels, retention)
        )
    listed = "[%s]" % ",".join(topic_parts) if topic_parts else "null"
    return ('{"topics":%s,"version":%s}' % (listed, _go_string(version))).encode("utf-8")


class _Object:
    """A decoded JSON object: its members in order, duplicates kept."""

    __slots__ = ("pairs",)

    def __init__(self, pairs: List[Tuple[str, Any]]) -> None:
        self.pairs = pairs


def _reject_constant(name: str) -> Any:
    raise ValueError("invalid JSON value %s" % (name,))


# Go matches JSON keys to struct fields ignoring case, by Unicode simple
# folding: besides ASCII, only U+017F (long s) and U+212A (Kelvin sign) fold
# to the ASCII letters of the field names.
_FOLD = {**{c: c + 32 for c in range(ord("A"), ord("Z") + 1)}, 0x017F: ord("s"), 0x212A: ord("k")}


def _json_type(value: Any) -> str:
    """The JSON type of a decoded value, as Go's errors name it."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _struct(value: Any, struct: str, fields: Dict[str, type]) -> Dict[str, Any]:
    """
    Decode ``value`` as Go decodes a JSON object into a struct with
    ``fields`` (name to Python type): keys matched ignoring case, unknown
    keys ignored, the last duplicate winning; ``null`` leaves a string or a
    bool as it was and empties a list.  Absent fields are missing from the
    result.

    :raises MetadataError: ``value`` is not an object, or a field has the
        wrong type.
    """
    if not isinstance(value, _Object):
        raise MetadataError(
            "json: cannot unmarshal %s into Go value of type nsqd.%s" % (_json_type(value), struct)
        )
    found: Dict[str, Any] = {}
    for key, member in value.pairs:
        name = key.translate(_FOLD)
        kind = fields.get(name)
        if kind is None:
            continue
        if member is None:
            if kind is list:
                found[name] = []
            continue
        if type(member) is not kind:
            raise MetadataError(
                "json: cannot unmarshal %s into Go struct field %s.%s of type %s"
                % (_json_type(member), struct, name, _GO_TYPES[struct][name])
            )
        found[name] = member
    return found


_GO_TYPES = {
    "Metadata": {"topics": "[]nsqd.TopicMetadata", "version": "string"},
    "TopicMetadata": {
        "name": "string",
        "paused": "bool",
        "channels": "[]nsqd.ChannelMetadata",
    },
    "ChannelMetadata": {"name": "string", "paused": "bool"},
}
_METADATA_FIELDS: Dict[str, type] = {"topics": list, "version": str}
_TOPIC_FIELDS: Dict[str, type] = {"name": str, "paused": bool, "channels": list}
_CHANNEL_FIELDS: Dict[str, type] = {"name": str, "paused": bool}


def decode_metadata(data: bytes) -> Tuple[List[TopicMetadata], List[Skipped]]:
    """
    Parse ``nsqd.dat`` as Go nsqd does: the topics and their channels, in
    file order, and the entries left out for their invalid names (a topic's
    channels are not looked at when the topic is skipped).  A ``null`` entry
    is Go's zero value: a topic or channel with the invalid name ``""``.
    Unknown keys (``version``, say) are ignored; so is key case.

    :raises MetadataError: ``data`` is not JSON, or not shaped like Go's
        ``Metadata`` struct (a field of the wrong type, say); Go nsqd
        refuses to start on such a file.
    """
    # Go reads bytes: invalid UTF-8 inside a string becomes U+FFFD, and
    # anywhere else is a syntax error either way.  Decoding here also keeps
    # json from guessing UTF-16, which Go does not accept.
    text = data.decode("utf-8", "replace")
    try:
        document = json.loads(
            text, object_pairs_hook=_Object, parse_constant=_reject_constant
        )
    except RecursionError:
        raise MetadataError("json: exceeded max depth") from None
    except ValueError as e:
        raise MetadataError(str(e)) from None
    if document is None:
        return [], []
    fields = _struct(document, "Metadata", _METADATA_FIELDS)
    # Nothing is created from the file before all of it has parsed (Go
    # unmarshals first), so names are checked in the same pass.
    topics: List[TopicMetadata] = []
    skipped: List[Skipped] = []
    for topic_value in fields.get("topics", []):
        if topic_value is None:
            topic_value = _Object([])
        topic_fields = _struct(topic_value, "TopicMetadata", _TOPIC_FIELDS)
        topic_name = topic_fields.get("name", "")
        channels: List[ChannelMetadata] = []
        channel_skips: List[Skipped] = []
        for channel_value in topic_fields.get("channels", []):
            if channel_value is None:
                channel_value = _Object([])
            channel_fields = _struct(channel_value, "ChannelMetadata", _CHANNEL_FIELDS)
            channel_name = channel_fields.get("name", "")
            if is_valid_channel_name(channel_name):
                channels.append(ChannelMetadata(channel_name, channel_fields.get("paused", False)))
            else:
                channel_skips.append(Skipped("channel", channel_name))
        if is_valid_topic_name(topic_name):
            topics.append(
                TopicMetadata(
                    topic_name,
                    topic_fields.get("paused", False),
                    channels,
                    _retention_of(topic_value),
                )
            )
            skipped.extend(channel_skips)
        else:
            # Go skips the topic without looking at its channels.
            skipped.append(Skipped("topic", topic_name))
    return topics, skipped


def _retention_of(value: _Object) -> Optional[Dict[str, Any]]:
    """A topic entry's txnsq ``"retention"`` object as a dict (the last one), or ``None``."""
    found: Optional[Dict[str, Any]] = None
    for key, member in value.pairs:
        if key == "retention" and isinstance(member, _Object):
            found = {k: v for k, v in member.pairs}
    return found
