# -*- test-case-name: tests_spark.test_offsets -*-
"""
The ``nsq`` source's offset mode: a retained topic read by byte offsets
over MetaQ, without channels, FINs or anything in flight.

Offsets are a JSON object ``{partition: byte offset}`` (partition numbers
as strings, as JSON keys must be; with more than one nsqd the keys are
``"host:port/partition"``, the MetaQ address first).  A range
``[start, end)`` of a partition holds the records whose offsets are in
it; ``end`` is always a record start or the log's end, so two runs over
the same range read the same records.

This module runs on the driver (option parsing, discovery, resolving
starting and ending offsets, admission control, planning input
partitions) and on executors (:func:`read_range`).  It needs no pyspark;
:func:`read_range` needs numpy and pyarrow.
"""

from __future__ import annotations

import json
import logging
import re
import struct
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from txnsq.protocol.host_port import join_host_port, split_host_port
from txnsq.protocol.message_id import id_time_threshold
from txnsq.protocol.metaq_results import (
    MetaqConnectionError,
    MetaqEndOfPartition,
    MetaqMoved,
    MetaqNotFound,
    MetaqRecordTooLarge,
    MetaqResultError,
)
from txnsq.spark.metaq import BlockingMetaqClient
from txnsq.spark.options import OptionError, _addresses, _bool, _get, _int, _seconds, _topic

__all__ = [
    "DataLossError",
    "LogOptions",
    "LogView",
    "OFFSET_OPTIONS",
    "OffsetSourceError",
    "ReadRange",
    "discover_metaq_addresses",
    "parse_position",
    "plan_ranges",
    "read_range",
]

_log = logging.getLogger("txnsq.spark")

#: Options that only the offset mode has: any of them selects it.
OFFSET_OPTIONS = (
    "metaq_addresses",
    "nsqd_http_addresses",
    "starting_offsets",
    "ending_offsets",
    "max_offsets_per_trigger",
    "max_bytes_per_trigger",
    "max_bytes_per_partition",
    "fail_on_data_loss",
    "get_size",
)

#: Default ``max_bytes_per_partition``: one Spark task reads at most this much.
DEFAULT_PARTITION_BYTES = 32 * 1024 * 1024

#: Default ``get_size``: bytes asked for by each ``get`` (one Arrow batch each).
DEFAULT_GET_SIZE = 4 * 1024 * 1024

#: The largest ``get`` answer accepted (a record larger than this cannot be read).
MAX_GET_SIZE = 16 * 1024 * 1024

EARLIEST = "earliest"
LATEST = "latest"

#: ``starting_offsets``/``ending_offsets``: ``"earliest"``, ``"latest"``, a
#: time (``("timestamp", unix ms)``) or offsets by key (-2 earliest, -1 latest).
Position = Union[str, Tuple[str, int], Dict[str, int]]

_HEADER = struct.Struct(">i")
_HEADER_SIZE = 20
_STATS_LINE = re.compile(r"^(.+)-([0-9]+) (-?[0-9]+) (-?[0-9]+) ")


class OffsetSourceError(ValueError):
    """
    The offsets asked for cannot be read as asked: beyond a log's end, not
    a record start, a topic that is not retained.  The message names the
    topic, the partition and the offset.
    """


class DataLossError(OffsetSourceError):
    """
    Records between the offsets asked for were deleted by retention (or set
    aside as damaged) before they were read; with ``fail_on_data_loss=false``
    the source skips ahead instead and logs it.

    :ivar earliest: the earliest offset that can be read now.
    """

    def __init__(self, message: str, earliest: int) -> None:
        OffsetSourceError.__init__(self, message)
        self.earliest = earliest


def parse_position(option: str, text: Optional[str], default: str) -> Position:
    """
    ``starting_offsets`` or ``ending_offsets``: ``earliest``, ``latest``,
    ``timestamp:<unix ms or RFC 3339>`` or a JSON object of offsets
    (``{"0": 1024, "1": -2}``; -2 is earliest, -1 latest).

    :raises OptionError: anything else.
    """
    text = (text or "").strip() or default
    if text.lower() in (EARLIEST, LATEST):
        return text.lower()
    if text.lower().startswith("timestamp:"):
        # Imported here: the broker's modules are not needed by executors.
        from txnsq.nsqd.retention import parse_timestamp

        try:
            nanoseconds = parse_timestamp(text.split(":", 1)[1])
        except ValueError as error:
            raise OptionError(option, "has a bad timestamp: %s" % (error,)) from None
        return ("timestamp", nanoseconds // 1000000)
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict) or not value:
        raise OptionError(
            option, 'must be earliest, latest, timestamp:<ms or RFC 3339> or a JSON object like {"0": 0}, not %r' % (text,)
        )
    offsets: Dict[str, int] = {}
    for key, offset in value.items():
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < -2:
            raise OptionError(option, "has %r for partition %s: an offset is an integer >= -2" % (offset, key))
        offsets[str(key)] = offset
    return offsets


@dataclass
class LogOptions:
    """
    The offset mode's options.  ``tls``, ``tls_ca_file``,
    ``tls_server_name``, ``tls_insecure``, ``auth_secret``,
    ``connect_timeout`` and ``request_timeout`` say how to connect.

    :ivar topic: the retained topic.
    :ivar metaq_addresses: the MetaQ listeners to read (given, or found
        through ``/info``).
    :ivar starting_offsets: where a new query, or a batch read, starts.
    :ivar ending_offsets: where a batch read ends.
    :ivar max_offsets_per_trigger: streaming: most records per micro-batch.
    :ivar max_bytes_per_trigger: streaming: most bytes per micro-batch.
    :ivar max_bytes_per_partition: most bytes one Spark task reads.
    :ivar fail_on_data_loss: fail when records to read were deleted
        (else skip ahead, logged).
    :ivar get_size: bytes per ``get``.
    """

    topic: str
    metaq_addresses: List[str]
    starting_offsets: Position = LATEST
    ending_offsets: Position = LATEST
    max_offsets_per_trigger: Optional[int] = None
    max_bytes_per_trigger: Optional[int] = None
    max_bytes_per_partition: int = DEFAULT_PARTITION_BYTES
    fail_on_data_loss: bool = True
    get_size: int = DEFAULT_GET_SIZE
    tls: bool = False
    tls_ca_file: Optional[str] = None
    tls_server_name: Optional[str] = None
    tls_insecure: bool = False
    auth_secret: Optional[str] = None
    connect_timeout: float = 5.0
    request_timeout: float = 60.0

    @classmethod
    def parse(cls, options: Mapping[str, str], metaq_addresses: List[str], streaming: bool) -> "LogOptions":
        """
        Check and type the offset mode's options (``metaq_addresses`` as
        found by :func:`discover_metaq_addresses`).

        :raises OptionError: naming the first option invalid.
        """
        topic = _topic(options, True)
        assert topic is not None
        if not streaming:
            for name in ("max_offsets_per_trigger", "max_bytes_per_trigger"):
                if _get(options, name):
                    raise OptionError(name, "is for streaming reads (readStream)")
        elif _get(options, "ending_offsets"):
            raise OptionError("ending_offsets", "is for batch reads (spark.read); a stream has no end")
        starting = parse_position("starting_offsets", _get(options, "starting_offsets"), LATEST if streaming else EARLIEST)
        ending = parse_position("ending_offsets", _get(options, "ending_offsets"), LATEST)
        if ending == EARLIEST:
            raise OptionError("ending_offsets", "cannot be earliest")
        if isinstance(ending, dict) and any(v == -2 for v in ending.values()):
            raise OptionError("ending_offsets", "cannot hold -2 (earliest)")
        max_offsets = _get(options, "max_offsets_per_trigger")
        max_bytes = _get(options, "max_bytes_per_trigger")
        tls = _bool(options, "tls")
        return cls(
            topic=topic,
            metaq_addresses=metaq_addresses,
            starting_offsets=starting,
            ending_offsets=ending,
            max_offsets_per_trigger=_int(options, "max_offsets_per_trigger", 0) if max_offsets else None,
            max_bytes_per_trigger=_int(options, "max_bytes_per_trigger", 0) if max_bytes else None,
            max_bytes_per_partition=_int(options, "max_bytes_per_partition", DEFAULT_PARTITION_BYTES, 1024),
            fail_on_data_loss=_bool(options, "fail_on_data_loss") if _get(options, "fail_on_data_loss") else True,
            get_size=min(_int(options, "get_size", DEFAULT_GET_SIZE, 1024), MAX_GET_SIZE),
            tls=tls,
            tls_ca_file=_get(options, "tls_ca_file") or None,
            tls_server_name=_get(options, "tls_server_name") or None,
            tls_insecure=_bool(options, "tls_insecure_skip_verify"),
            auth_secret=_get(options, "auth_secret") or None,
            connect_timeout=_seconds(options, "connect_timeout", 5.0) or 5.0,
            request_timeout=_seconds(options, "request_timeout", 60.0) or 60.0,
        )

    def connect(self, address: str) -> BlockingMetaqClient:
        """A blocking MetaQ connection to ``address`` with these settings."""
        context = None
        if self.tls:
            import ssl

            context = ssl.create_default_context(cafile=self.tls_ca_file)
            if self.tls_insecure:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
        return BlockingMetaqClient(
            address,
            tls=self.tls,
            ssl_context=context,
            tls_server_name=self.tls_server_name,
            auth_secret=self.auth_secret,
            connect_timeout=self.connect_timeout,
            request_timeout=self.request_timeout,
            max_reply_size=MAX_GET_SIZE,
        )


# -- discovery -------------------------------------------------------------------


def _http_json(url: str, timeout: float) -> Any:
    # Imported here, as in _lookup_http_addresses: HTTP is only for
    # discovery, and the process Spark starts for each streaming query
    # imports this module before its first batch.
    import urllib.request

    with urllib.request.urlopen(url, timeout=timeout) as reply:
        data = json.loads(reply.read().decode("utf-8"))
    if isinstance(data, dict) and "status_code" in data and isinstance(data.get("data"), dict):
        data = data["data"]
    return data


def metaq_address_from_info(http_address: str, timeout: float = 5.0, host: Optional[str] = None) -> Optional[str]:
    """
    The MetaQ ``host:port`` of the nsqd whose HTTP API is at
    ``http_address``, from its ``/info`` (``metaq_port``); None when it
    runs no MetaQ listener.

    :raises OptionError: it did not answer.
    """
    url = http_address if "://" in http_address else "http://" + http_address
    try:
        info = _http_json(url.rstrip("/") + "/info", timeout)
    except (OSError, ValueError) as error:
        raise OptionError("nsqd_http_addresses", "has %s, whose /info failed: %s" % (http_address, error)) from None
    port = info.get("metaq_port") if isinstance(info, dict) else None
    if not isinstance(port, int) or port <= 0:
        return None
    if host is None:
        host = split_host_port(url.split("://", 1)[1].split("/", 1)[0])[0]
    return join_host_port(host, port)


def _lookup_http_addresses(lookupd_addresses: Sequence[str], topic: str, timeout: float) -> List[str]:
    """The ``host:http_port`` of each nsqd the lookupds list for ``topic``."""
    import urllib.error

    from txnsq.client.discovery import lookup_url

    found: List[str] = []
    for address in lookupd_addresses:
        try:
            data = _http_json(lookup_url(address, topic), timeout)
        except urllib.error.HTTPError as error:
            if error.code == 404:
                continue
            raise OptionError("lookupd_http_addresses", "has %s, which answered HTTP %d" % (address, error.code)) from None
        except (OSError, ValueError) as error:
            raise OptionError("lookupd_http_addresses", "has %s, which failed: %s" % (address, error)) from None
        for producer in data.get("producers", []) if isinstance(data, dict) else []:
            host = producer.get("broadcast_address") or producer.get("address")
            port = producer.get("http_port")
            if isinstance(host, str) and isinstance(port, int):
                http = join_host_port(host, port)
                if http not in found:
                    found.append(http)
    return found


def discover_metaq_addresses(options: Mapping[str, str]) -> List[str]:
    """
    The MetaQ listeners to read ``topic`` from: ``metaq_addresses``, or
    found through ``/info`` of the nsqds of ``nsqd_http_addresses`` or of
    those the lookupds list for the topic.  Empty when none runs one (or
    only ``nsqd_tcp_addresses`` are given: TCP says nothing of MetaQ).

    :raises OptionError: a bad address, an nsqd or lookupd that does not answer.
    """
    given = _addresses(options, "metaq_addresses")
    if given:
        return given
    timeout = _seconds(options, "connect_timeout", 5.0) or 5.0
    http = _addresses(options, "nsqd_http_addresses")
    hosts: Dict[str, Optional[str]] = {address: None for address in http}
    if not http:
        lookupd = _addresses(options, "lookupd_http_addresses")
        topic = _topic(options, True)
        if lookupd and topic:
            for address in _lookup_http_addresses(lookupd, topic, timeout):
                hosts[address] = split_host_port(address)[0]
    found = []
    for address, host in hosts.items():
        metaq = metaq_address_from_info(address, timeout, host)
        if metaq is not None:
            found.append(metaq)
    return found


def topic_partitions(client: BlockingMetaqClient, topic: str) -> Optional[List[Tuple[int, int]]]:
    """
    ``(first offset, next offset)`` of each partition of ``topic`` from the
    broker's ``stats <topic>``; None when it has no such retained topic.
    """
    try:
        text = client.stats(topic)
    except MetaqNotFound:
        return None
    found: Dict[int, Tuple[int, int]] = {}
    for line in text.splitlines():
        match = _STATS_LINE.match(line + " ")
        if match and match.group(1) == topic:
            found[int(match.group(2))] = (int(match.group(3)), int(match.group(4)))
    return [found[number] for number in sorted(found)]


# -- the driver's view of the logs ---------------------------------------------------


class LogView:
    """
    The driver's connections to the topic's logs, and what it asks them:
    each partition's range, offsets by time, record boundaries.

    Keys name partitions in offsets: ``"3"`` with one nsqd,
    ``"host:port/3"`` with several.
    """

    def __init__(self, options: LogOptions, connect: Optional[Callable[[str], BlockingMetaqClient]] = None) -> None:
        self.options = options
        self.topic = options.topic
        self._connect = connect or options.connect
        self._clients: Dict[str, BlockingMetaqClient] = {}

    def key(self, address: str, partition: int) -> str:
        """The offsets key of ``partition`` on ``address``."""
        if len(self.options.metaq_addresses) == 1:
            return str(partition)
        return "%s/%d" % (address, partition)

    def split_key(self, key: str) -> Tuple[str, int]:
        """``(address, partition)`` of an offsets key. :raises OffsetSourceError: a key of no known form."""
        addresses = self.options.metaq_addresses
        address, _, number = key.rpartition("/")
        if not address and len(addresses) == 1:
            address = addresses[0]
        if address not in addresses or not number.isdigit():
            raise OffsetSourceError(
                "nsq source: topic %s: offsets key %r names no partition of %s"
                % (self.topic, key, ", ".join(addresses))
            )
        return address, int(number)

    def client(self, address: str) -> BlockingMetaqClient:
        """The (reconnected when broken) connection to ``address``."""
        client = self._clients.get(address)
        if client is None or client.closed:
            client = self._clients[address] = self._connect(address)
        return client

    def close(self) -> None:
        """Close every connection."""
        for client in self._clients.values():
            client.close()
        self._clients.clear()

    def ranges(self) -> Dict[str, Tuple[int, int]]:
        """
        ``(first offset, next offset)`` of every partition, by key.

        :raises OffsetSourceError: the topic is not retained on an nsqd.
        """
        found: Dict[str, Tuple[int, int]] = {}
        for address in self.options.metaq_addresses:
            try:
                partitions = topic_partitions(self.client(address), self.topic)
            except MetaqConnectionError:
                self._clients.pop(address, None)
                partitions = topic_partitions(self.client(address), self.topic)
            if partitions is None:
                raise OffsetSourceError(
                    "nsq source: topic %s is not retained on the nsqd with MetaQ at %s (the offset mode needs a "
                    "retained topic: POST /topic/retention?topic=%s&bytes=N turns retention on; a channel "
                    "reads any topic)" % (self.topic, address, self.topic)
                )
            for number, span in enumerate(partitions):
                found[self.key(address, number)] = span
        return found

    def _get(self, address: str, partition: int, offset: int, size: int) -> bytes:
        return self.client(address).get_raw(self.topic, partition, offset, size)

    def offset_for_time(self, key: str, timestamp_ms: int, span: Tuple[int, int]) -> int:
        """The offset of the first record of ``key`` published at or after ``timestamp_ms`` (its end if none)."""
        from txnsq.spark.log_rows import frame_records, id_times

        address, partition = self.split_key(key)
        pos = max(self.client(address).offset_for_time(self.topic, partition, timestamp_ms), span[0])
        threshold = id_time_threshold(timestamp_ms * 1000000)
        while pos < span[1]:
            data = self._get_at(key, address, partition, pos, 1024 * 1024)
            if data is None:
                return pos
            if isinstance(data, int):
                pos = data
                continue
            starts, _ = frame_records(data, pos, self.topic, partition)
            newer = (id_times(data, starts) >= threshold).nonzero()[0]
            if len(newer):
                return pos + int(starts[newer[0]])
            pos += len(data)
        return pos

    def _get_at(self, key: str, address: str, partition: int, pos: int, size: int) -> Union[None, int, bytes]:
        """
        Bytes of whole records at ``pos``, the offset to move to (an int)
        when the broker moved it forward, or None at the log's end.
        """
        while True:
            try:
                data = self._get(address, partition, pos, size)
            except MetaqEndOfPartition:
                return None
            except MetaqMoved as moved:
                if moved.offset > pos:
                    return moved.offset
                raise OffsetSourceError(
                    "nsq source: topic %s partition %s: offset %d is not a record start (the record holding it "
                    "starts at %d)" % (self.topic, key, pos, moved.offset)
                ) from None
            if data:
                return data
            if size >= MAX_GET_SIZE:
                raise MetaqRecordTooLarge(pos, size)
            size = min(size * 2, MAX_GET_SIZE)

    def record_start(self, key: str, offset: int) -> int:
        """The start of the record holding ``offset`` (``offset`` itself at a boundary)."""
        address, partition = self.split_key(key)
        return self.client(address).offset(self.topic, partition, offset)

    def after_records(self, key: str, start: int, end: int, count: int) -> int:
        """The offset after at most ``count`` records from ``start`` (no further than ``end``)."""
        address, partition = self.split_key(key)
        pos = start
        while count > 0 and pos < end:
            data = self._get_at(key, address, partition, pos, min(self.options.get_size, max(end - pos, 1024)))
            if data is None:
                break
            if isinstance(data, int):
                pos = data
                continue
            walked, taken = _walk_records(data, count, end - pos)
            if taken == 0:
                break
            pos += walked
            count -= taken
        return min(pos, end)

    def after_bytes(self, key: str, start: int, end: int, budget: int) -> int:
        """The last record start at most ``budget`` bytes after ``start`` (at least one record on)."""
        if end - start <= budget:
            return end
        target = self.record_start(key, start + budget)
        if target <= start:
            return self.after_records(key, start, end, 1)
        return target

    def resolve(self, position: Position, spans: Dict[str, Tuple[int, int]], option: str) -> Dict[str, int]:
        """
        The offsets ``position`` names, one per partition, checked against
        the logs (``spans`` as :meth:`ranges` gives them).

        :raises OffsetSourceError: an offset beyond a log's end, not a
            record start, or for a partition that does not exist.
        :raises DataLossError: an offset already deleted by retention
            (with ``fail_on_data_loss``; else it moves to the earliest).
        """
        resolved: Dict[str, int] = {}
        if position == EARLIEST:
            return {key: span[0] for key, span in spans.items()}
        if position == LATEST:
            return {key: span[1] for key, span in spans.items()}
        if isinstance(position, tuple):
            return {key: self.offset_for_time(key, position[1], span) for key, span in spans.items()}
        assert isinstance(position, dict)
        for key in position:
            self.split_key(key)
            if key not in spans:
                raise OffsetSourceError(
                    "nsq source: topic %s has no partition %s (%s names it; partitions: %s)"
                    % (self.topic, key, option, ", ".join(sorted(spans)))
                )
        for key, span in spans.items():
            offset = position.get(key, -2 if option == "starting_offsets" else -1)
            if offset == -2:
                resolved[key] = span[0]
            elif offset == -1:
                resolved[key] = span[1]
            else:
                resolved[key] = self.check_offset(key, offset, span, option)
        return resolved

    def check_offset(self, key: str, offset: int, span: Tuple[int, int], what: str) -> int:
        """
        ``offset`` if it can be read from in partition ``key``; the
        earliest offset instead when it was deleted and
        ``fail_on_data_loss`` is false.

        :raises OffsetSourceError: beyond the log's end, or not a record start.
        :raises DataLossError: deleted (with ``fail_on_data_loss``).
        """
        first, following = span
        if offset > following:
            raise OffsetSourceError(
                "nsq source: topic %s partition %s: %s offset %d is beyond the log's end (next offset %d)"
                % (self.topic, key, what, offset, following)
            )
        if offset < first:
            return self.lost(key, offset, first, what)
        if first < offset < following:
            start = self.record_start(key, offset)
            if start != offset:
                raise OffsetSourceError(
                    "nsq source: topic %s partition %s: %s offset %d is not a record start (the record holding it "
                    "starts at %d)" % (self.topic, key, what, offset, start)
                )
        return offset

    def lost(self, key: str, offset: int, earliest: int, what: str) -> int:
        """
        Records from ``offset`` to ``earliest`` are gone: fail, or (without
        ``fail_on_data_loss``) log it and return ``earliest``.

        :raises DataLossError: with ``fail_on_data_loss``.
        """
        return data_lost(self.options, self.topic, key, offset, earliest, what)


def data_lost(options: LogOptions, topic: str, key: str, offset: int, earliest: int, what: str) -> int:
    """See :meth:`LogView.lost`."""
    message = (
        "nsq source: topic %s partition %s: %s offset %d was deleted by retention (or set aside as damaged); "
        "the earliest valid offset is %d" % (topic, key, what, offset, earliest)
    )
    if options.fail_on_data_loss:
        raise DataLossError(message + " (fail_on_data_loss=false skips ahead)", earliest)
    _log.warning("%s: skipping %d bytes", message, earliest - offset)
    return earliest


def _walk_records(data: bytes, count: int, limit: int) -> Tuple[int, int]:
    """``(bytes, records)`` of at most ``count`` whole records of ``data`` within ``limit`` bytes."""
    unpack = _HEADER.unpack_from
    pos = 0
    taken = 0
    end = min(len(data), limit)
    while taken < count and pos + _HEADER_SIZE <= end:
        following = pos + _HEADER_SIZE + unpack(data, pos)[0]
        if following > end:
            break
        pos = following
        taken += 1
    return pos, taken


# -- planning and reading ---------------------------------------------------------------


@dataclass(frozen=True)
class ReadRange:
    """The records of ``partition`` on ``address`` from ``start`` to ``end`` (a Spark task's share)."""

    address: str
    partition: int
    key: str
    start: int
    end: int


def plan_ranges(view: LogView, start: Mapping[str, int], end: Mapping[str, int]) -> List[ReadRange]:
    """
    One range per partition with records between ``start`` and ``end``
    (a partition missing from ``start`` is read from its first offset),
    split at record starts into pieces of at most
    ``max_bytes_per_partition`` bytes.
    """
    ranges: List[ReadRange] = []
    limit = view.options.max_bytes_per_partition
    for key in sorted(end, key=_key_order):
        address, partition = view.split_key(key)
        low, high = start.get(key, 0), end[key]
        while high > low:
            cut = high
            if high - low > limit:
                cut = view.record_start(key, low + limit)
                if cut <= low:
                    cut = view.after_records(key, low, high, 1)
            ranges.append(ReadRange(address, partition, key, low, cut))
            low = cut
    return ranges


def _key_order(key: str) -> Tuple[str, int]:
    address, _, number = key.rpartition("/")
    return (address, int(number) if number.isdigit() else -1)


def read_range(
    options: LogOptions,
    piece: ReadRange,
    schema: Any = None,
    connect: Optional[Callable[[str], BlockingMetaqClient]] = None,
) -> Iterator[Any]:
    """
    The Arrow record batches of ``piece``'s records (executors), one per
    ``get`` of up to ``get_size`` bytes, checksums verified.

    :raises CorruptRecord: a record fails its checksum (topic, partition, offset).
    :raises DataLossError: records of the range were deleted meanwhile
        (with ``fail_on_data_loss``).
    :raises OffsetSourceError: the log ends before the range does, or the
        range does not start at a record.
    """
    from txnsq.spark.log_rows import ARROW_SCHEMA, frame_records, records_to_batch

    schema = ARROW_SCHEMA if schema is None else schema
    topic = options.topic
    label = piece.address
    client = (connect or options.connect)(piece.address)
    try:
        pos = piece.start
        size = options.get_size
        while pos < piece.end:
            want = min(size, piece.end - pos)
            try:
                data = client.get_raw(topic, piece.partition, pos, want)
            except MetaqMoved as moved:
                if moved.offset > pos:
                    pos = data_lost(options, topic, piece.key, pos, moved.offset, "reading")
                    continue
                raise OffsetSourceError(
                    "nsq source: topic %s partition %s: offset %d cannot be read (%s); nearest valid offset %d"
                    % (topic, piece.key, pos, moved.message, moved.offset)
                ) from None
            except MetaqEndOfPartition:
                raise OffsetSourceError(
                    "nsq source: topic %s partition %s: the log ends at offset %d, before the end of the range "
                    "read (%d); was the log truncated, or the nsqd's data replaced?" % (topic, piece.key, pos, piece.end)
                ) from None
            except MetaqResultError as error:
                raise OffsetSourceError(
                    "nsq source: topic %s partition %s: get at offset %d refused: %s" % (topic, piece.key, pos, error)
                ) from None
            if not data:
                if want >= piece.end - pos or size >= MAX_GET_SIZE:
                    raise OffsetSourceError(
                        "nsq source: topic %s partition %s: the record at offset %d does not end by offset %d"
                        % (topic, piece.key, pos, min(piece.end, pos + size))
                    )
                size = min(size * 2, MAX_GET_SIZE)
                continue
            starts, lengths = frame_records(data, pos, topic, piece.partition)
            yield records_to_batch(data, starts, lengths, pos, topic, piece.partition, label, schema)
            pos += len(data)
            size = options.get_size
    finally:
        client.close()
