# -*- test-case-name: tests.test_tools_nsq_log -*-
"""
``nsq_log``: prints the records of one partition of a retained topic,
read by offset over nsqd's MetaQ listener (``--metaq-address``), in the
manner of the other tools' flags and errors.

It reads from the first record the partition keeps (``--earliest``, the
default) or from ``--offset=N``; an offset the broker cannot serve (not a
record start, or outside the partition) is moved by the broker (301) and
followed.  It stops at the end of the partition, or with ``--follow``
polls for new records every ``--poll-interval``; ``-n N`` stops after N
records.  ``--format=text`` writes each body and a newline;
``--format=json`` one JSON object per record: ``id`` (16 hex digits),
``partition``, ``offset``, ``flag``, ``attribute`` and ``body`` (text when
valid UTF-8, else ``attribute_base64``/``body_base64``).

``--timestamp=T`` (RFC 3339 or unix milliseconds, as nsqd's
``/channel/rewind`` takes) prints exactly the records published at or
after T: txnsq's offset by time (``offset ... @unixMs``, docs/metaq.md)
gives a start at or before the first of them, and the records read whose
nsqd id time is before T are skipped.
"""

from __future__ import annotations

import base64
import json
import sys
from typing import IO, Any, Dict, List, Optional, Sequence

from twisted.internet.defer import Deferred
from twisted.internet.interfaces import IDelayedCall, IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure

from txnsq.cli import BOOL, DURATION, INT, STRING, Flag
from txnsq.client.metaq import DEFAULT_GROUP, LogRecord, MetaqReader, id_time, id_time_threshold
from txnsq.tools.common import fatal, parse_command_line, run_reactor, version_flag, version_requested

__all__ = ["LogPrinter", "follow_partition", "format_json", "main", "nsq_log_flags", "timestamp_ns", "validate"]

PROGRAM = "nsq_log"

_log = Logger(namespace="txnsq.tools.nsq_log")

_FORMATS = ("text", "json")


def nsq_log_flags() -> List[Flag]:
    """nsq_log's flag table."""
    return [
        version_flag(),
        Flag("nsqd-metaq-address", STRING, "", "nsqd MetaQ address (host:port)"),
        Flag("topic", STRING, "", "NSQ topic (a retained topic)"),
        Flag("partition", INT, 0, "partition to read"),
        Flag("offset", INT, -1, "read from this offset (default: the earliest kept)"),
        Flag("earliest", BOOL, False, "read from the earliest record kept (the default)"),
        Flag(
            "timestamp",
            STRING,
            "",
            "print the records published at or after this time (RFC 3339 or unix milliseconds)",
        ),
        Flag("n", INT, 0, "total records to show (0: all)"),
        Flag("format", STRING, "text", "output format: text (body per line) or json (one object per record)"),
        Flag("max-size", INT, 64 * 1024, "bytes asked for by each get (a larger record is still read)"),
        Flag("follow", BOOL, False, "at the end of the partition, wait for new records (as tail -f)"),
        Flag("poll-interval", DURATION, 1.0, "with --follow, how often to ask for new records"),
        Flag("group", STRING, DEFAULT_GROUP, "MetaQ consumer group named in requests"),
        Flag("request-timeout", DURATION, 30.0, "timeout for each request"),
        Flag("auth-secret", STRING, "", "secret for txnsq's MetaQ auth (when nsqd requires auth)"),
        Flag("tls", BOOL, False, "connect with TLS (nsqd with --tls-required serves MetaQ over TLS only)"),
        Flag("tls-root-ca-file", STRING, "", "PEM roots to verify nsqd with (default: the system's)"),
        Flag("tls-cert", STRING, "", "client certificate (PEM)"),
        Flag("tls-key", STRING, "", "client key (PEM)"),
        Flag("tls-insecure-skip-verify", BOOL, False, "do not verify nsqd's certificate"),
        Flag("tls-min-version", STRING, "", "minimum TLS version: tls1.0, tls1.1, tls1.2 or tls1.3"),
    ]


def validate(values: Any) -> Optional[str]:
    """The fatal message for bad flag values, or None."""
    if not values["nsqd_metaq_address"]:
        return "--nsqd-metaq-address required"
    if not values["topic"]:
        return "--topic required"
    if values["offset"] >= 0 and values["earliest"]:
        return "use --offset or --earliest not both"
    if values["timestamp"]:
        if values["offset"] >= 0 or values["earliest"]:
            return "use --timestamp without --offset or --earliest"
        try:
            timestamp_ns(values["timestamp"])
        except ValueError:
            return "--timestamp must be RFC 3339 or unix milliseconds"
    if values["offset"] < -1:
        return "--offset must be 0 or more"
    if values["partition"] < 0:
        return "--partition must be 0 or more"
    if values["format"] not in _FORMATS:
        return "--format must be text or json"
    if values["max_size"] <= 0:
        return "--max-size must be positive"
    if values["n"] < 0:
        return "-n must be 0 or more"
    if values["poll_interval"] <= 0:
        return "--poll-interval must be positive"
    if values["tls_min_version"] and values["tls_min_version"] not in ("tls1.0", "tls1.1", "tls1.2", "tls1.3"):
        return "--tls-min-version must be tls1.0, tls1.1, tls1.2 or tls1.3"
    if bool(values["tls_cert"]) != bool(values["tls_key"]):
        return "--tls-cert and --tls-key go together"
    return None


def timestamp_ns(text: str) -> int:
    """
    ``--timestamp``: RFC 3339 (``2026-11-26T10:00:00.25Z``) or unix
    milliseconds, in unix nanoseconds, as nsqd's ``/channel/rewind``
    reads it.

    :raises ValueError: neither form, or before 1970.
    """
    from txnsq.nsqd.retention import parse_timestamp

    value = parse_timestamp(text)
    if value < 0:
        raise ValueError("before 1970: %r" % (text,))
    return value


def _field(record: Dict[str, Any], name: str, value: Optional[bytes]) -> None:
    if value is None:
        record[name] = None
        return
    try:
        record[name] = value.decode("utf-8")
    except UnicodeDecodeError:
        record[name + "_base64"] = base64.b64encode(value).decode("ascii")


def format_json(record: LogRecord, partition: int) -> bytes:
    """
    One record as a JSON line: ``id`` as 16 hex digits (nsqd's message id
    form), ``partition``, ``offset``, ``flag``, then ``attribute`` (null
    without one) and ``body``; an attribute or body that is not UTF-8 is
    given as ``attribute_base64``/``body_base64`` instead.
    """
    out: Dict[str, Any] = {
        "id": "%016x" % (record.id,),
        "partition": partition,
        "offset": record.offset,
        "flag": record.flag,
    }
    _field(out, "attribute", record.attribute)
    _field(out, "body", record.payload)
    return json.dumps(out, ensure_ascii=False).encode("utf-8") + b"\n"


class LogPrinter:
    """
    Writes records to a byte stream, as text or JSON lines.

    :ivar shown: records written so far.
    """

    def __init__(
        self,
        out: IO[bytes],
        partition: int,
        output: str = "text",
        total: int = 0,
        since_ns: Optional[int] = None,
    ) -> None:
        self.out = out
        self.partition = partition
        self.json = output == "json"
        self.total = total
        self.shown = 0
        #: With ``since_ns``, the id time below which records are skipped.
        self.since: Optional[int] = None if since_ns is None else id_time_threshold(since_ns)

    @property
    def finished(self) -> bool:
        """Whether ``total`` records have been written."""
        return self.total > 0 and self.shown >= self.total

    def write(self, records: List[LogRecord]) -> None:
        """
        Write ``records`` (those published at or after ``since_ns`` by the
        time in their ids, when given), up to ``total`` in all, as one write.
        """
        since = self.since
        if since is not None:
            records = [record for record in records if id_time(record.id) >= since]
        if self.total > 0:
            records = records[: self.total - self.shown]
        if self.json:
            lines = [format_json(record, self.partition) for record in records]
        else:
            lines = [record.payload + b"\n" for record in records]
        self.shown += len(records)
        self.out.write(b"".join(lines))
        self.out.flush()


def follow_partition(
    reader: MetaqReader,
    printer: LogPrinter,
    clock: IReactorTime,
    follow: bool = False,
    poll_interval: float = 1.0,
) -> "Deferred[int]":
    """
    Read batches from ``reader`` into ``printer`` until the end of the
    partition (or, with ``follow``, forever, asking again every
    ``poll_interval`` seconds at the end) or ``printer.finished``.

    :return: a Deferred firing with 0 when done, or failing with the
        reader's error.  Cancelling it stops the walk (a poll timer is
        cancelled).
    """
    state: Dict[str, Optional[IDelayedCall]] = {"poll": None}

    def cancel(_: Any) -> None:
        call = state["poll"]
        if call is not None and call.active():
            call.cancel()

    done: "Deferred[int]" = Deferred(cancel)

    def step() -> None:
        state["poll"] = None
        reader.next_batch().addCallbacks(got, failed)

    def got(records: List[LogRecord]) -> None:
        if done.called:
            return
        if records:
            printer.write(records)
            if printer.finished:
                done.callback(0)
                return
            step()
            return
        if not follow:
            done.callback(0)
            return
        state["poll"] = clock.callLater(poll_interval, step)

    def failed(failure: Failure) -> None:
        if not done.called:
            done.errback(failure)

    step()
    return done


def _tls_options(values: Any) -> Any:
    """The client TLS connection creator the ``--tls-*`` flags describe."""
    from txnsq.tools.config_opts import TLSSettings
    from txnsq.tools.tls import client_tls_options

    settings = TLSSettings(
        root_ca_file=values["tls_root_ca_file"],
        insecure_skip_verify=values["tls_insecure_skip_verify"],
        cert=values["tls_cert"],
        key=values["tls_key"],
        min_version=values["tls_min_version"],
    )
    return client_tls_options(settings)


def main(argv: Optional[Sequence[str]] = None, stdout: Optional[IO[bytes]] = None) -> None:
    """The ``nsq_log`` console script."""
    values, _ = parse_command_line(PROGRAM, nsq_log_flags(), argv)
    if version_requested(values, PROGRAM):
        return
    problem = validate(values)
    if problem:
        fatal(problem)
    out = stdout if stdout is not None else sys.stdout.buffer
    address = values["nsqd_metaq_address"]
    tls = values["tls"] or bool(
        values["tls_root_ca_file"] or values["tls_insecure_skip_verify"] or values["tls_cert"] or values["tls_min_version"]
    )

    def start(reactor: Any) -> "Deferred[Any]":
        from txnsq.client.metaq import connect_metaq
        from txnsq.logging import start_console_logging

        start_console_logging(PROGRAM, "info", "")
        try:
            tls_options = _tls_options(values) if tls else None
        except Exception as error:  # unreadable or invalid PEM files
            fatal("failed to load TLS files - %s" % (error,))
        try:
            connecting = connect_metaq(
                reactor,
                address,
                tls=tls,
                tls_options=tls_options,
                auth_secret=values["auth_secret"] or None,
                request_timeout=values["request_timeout"],
            )
        except ValueError as error:
            fatal("bad --nsqd-metaq-address %s - %s" % (address, error))
        clients: List[Any] = []

        since_ns = timestamp_ns(values["timestamp"]) if values["timestamp"] else None

        def walk_from(client: Any, offset: int) -> "Deferred[int]":
            reader = MetaqReader(
                client, values["topic"], values["partition"], offset, values["max_size"], values["group"]
            )
            printer = LogPrinter(out, values["partition"], values["format"], values["n"], since_ns)
            walk = follow_partition(reader, printer, reactor, values["follow"], values["poll_interval"])
            reactor.addSystemEventTrigger("before", "shutdown", walk.cancel)
            return walk

        def connected(client: Any) -> "Deferred[int]":
            clients.append(client)
            if since_ns is not None:
                # The wire takes milliseconds: the start is at or before the
                # first record of that millisecond; the printer filters by
                # the exact time.
                asked = client.offset_for_time(
                    values["topic"], values["partition"], since_ns // 1000000, values["group"]
                )
                return asked.addCallback(lambda offset: walk_from(client, offset))
            return walk_from(client, 0 if values["offset"] < 0 else values["offset"])

        def finish(result: Any) -> Any:
            if clients and clients[0].connected:
                return clients[0].close().addCallback(lambda _: result)
            return result

        def failed(failure: Failure) -> None:
            from twisted.internet.defer import CancelledError

            if failure.check(CancelledError):
                return None
            text = str(failure.value) or type(failure.value).__name__
            fatal(text if address in text else "%s: %s" % (address, text))

        return connecting.addCallback(connected).addBoth(finish).addErrback(failed)

    run_reactor(start)


if __name__ == "__main__":
    main()
