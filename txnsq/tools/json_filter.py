# -*- test-case-name: tests.test_tools_nsq_to_nsq -*-
"""
``nsq_to_nsq``'s JSON filters (``--require-json-field``,
``--require-json-value``, ``--whitelist-json-field``) as Go's
``shouldPassMessage`` and ``filterMessage`` apply them, over bodies decoded
as Go's ``json.Unmarshal`` decodes them (:func:`decode_go_json_object`).
"""

from __future__ import annotations

import json
import math
from typing import Any, Dict, Optional, Sequence, Tuple

from twisted.logger import Logger

from txnsq.cli import FlagValueError, parse_go_float
from txnsq.protocol.go_json import go_json

__all__ = ["BACKOFF", "JSONFilter", "PUBLISH", "SKIP", "decode_go_json_object"]

#: How much of a body that is not JSON the error line shows.
_LOGGED_BODY_BYTES = 200

# The lines are nsq_to_nsq's.
_log = Logger(namespace="txnsq.tools.nsq_to_nsq")

#: :meth:`JSONFilter.apply` outcomes: publish the (filtered) body ...
PUBLISH = "publish"
#: ... finish the message without publishing ...
SKIP = "skip"
#: ... requeue it with backoff (a required value's field is missing).
BACKOFF = "backoff"

_MISSING = object()
_INT64 = 1 << 63


def _go_number(text: str) -> float:
    # Go decodes every JSON number into a float64, and refuses one that
    # does not fit.
    value = float(text)
    if math.isinf(value):
        raise ValueError("json: cannot unmarshal number %s into Go value of type float64" % (text,))
    return value


def _no_constant(name: str) -> Any:
    raise ValueError("invalid character %r looking for beginning of value" % (name[:1],))


def decode_go_json_object(body: bytes) -> Optional[Dict[str, Any]]:
    """
    ``json.Unmarshal(body, &map[string]interface{})``: the object, with
    every number a float; None for ``null`` (Go leaves the map nil).

    :raises ValueError: ``body`` is not JSON, or not an object.
    """
    text = body.decode("utf-8", "replace")
    try:
        value = json.loads(
            text, parse_int=_go_number, parse_float=_go_number, parse_constant=_no_constant
        )
    except RecursionError:
        # Go's decoder refuses such nesting too (and must not requeue forever).
        raise ValueError("exceeded max depth")
    if value is None:
        return None
    if not isinstance(value, dict):
        raise ValueError(
            "json: cannot unmarshal %s into Go value of type map[string]interface {}"
            % (type(value).__name__,)
        )
    return value


def _sorted_keys(value: Any) -> Any:
    # Go's json.Marshal writes a map's keys in sorted order.
    if isinstance(value, dict):
        return {key: _sorted_keys(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [_sorted_keys(item) for item in value]
    return value


class JSONFilter:
    """
    ``--require-json-field``, ``--require-json-value`` and
    ``--whitelist-json-field``, as Go's ``shouldPassMessage`` and
    ``filterMessage`` apply them.

    :param require_field: only bodies with this field pass ("" for all).
    :param require_value: ... and only if the field is this string, or
        this number when it parses as one (Go's ``strconv.ParseFloat``).
    :param whitelist: publish only these fields (none: the body as is).
    """

    def __init__(
        self, require_field: str = "", require_value: str = "", whitelist: Sequence[str] = ()
    ) -> None:
        self.require_field = require_field
        self.require_value = require_value
        self.whitelist = list(whitelist)
        self.active = bool(require_field or self.whitelist)
        self._number: Optional[float] = None
        if require_value:
            try:
                self._number = parse_go_float(require_value)
            except FlagValueError:
                self._number = None

    def apply(self, body: bytes) -> Tuple[str, bytes]:
        """
        What to do with ``body``: ``(PUBLISH, body to publish)``,
        ``(SKIP, body)`` or ``(BACKOFF, body)``.
        """
        if not self.active:
            return PUBLISH, body
        try:
            fields = decode_go_json_object(body)
        except ValueError:
            # Go logs the whole body; a message may be a megabyte, so the
            # line shows its start and its length.
            _log.error(
                "Unable to decode json: {body} ({size} bytes)",
                body=body[:_LOGGED_BODY_BYTES].decode("utf-8", "replace"),
                size=len(body),
            )
            return SKIP, body
        outcome = self._check(fields)
        if outcome != PUBLISH:
            return outcome, body
        if not self.whitelist:
            return PUBLISH, body
        return PUBLISH, self._filtered(fields or {})

    def _check(self, fields: Optional[Dict[str, Any]]) -> str:
        if not self.require_field:
            return PUBLISH
        value = _MISSING if fields is None else fields.get(self.require_field, _MISSING)
        if value is _MISSING:
            if self.require_value:
                _log.error("missing field to check required value")
                return BACKOFF
            return SKIP
        if not self.require_value:
            return PUBLISH
        if isinstance(value, str):
            return PUBLISH if value == self.require_value else SKIP
        if self._number is not None:
            # Decoded numbers are floats (true and false are not).
            if isinstance(value, float) and value == self._number:
                return PUBLISH
            return SKIP
        # Neither a string nor comparable to a number: Go gives up.
        return SKIP

    def _filtered(self, fields: Dict[str, Any]) -> bytes:
        kept: Dict[str, Any] = {}
        for key in self.whitelist:
            if key not in fields:
                continue
            value = fields[key]
            # Go writes an integral top-level number as an int64.
            if isinstance(value, float) and value.is_integer() and -_INT64 <= value < _INT64:
                value = int(value)
            kept[key] = value
        return go_json(_sorted_keys(kept))
