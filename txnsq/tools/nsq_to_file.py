# -*- test-case-name: tests.test_tools_nsq_to_file -*-
"""
``nsq_to_file``: consumes topics and writes their messages to
newline-delimited files, rotating and gzipping them, with Go
``nsq_to_file``'s flags.

Each topic has an archiver: a consumer of ``--channel`` and a
:class:`FileLogger <txnsq.tools.file_logger.FileLogger>`.  Messages are FINished only
once the batch they belong to is written and synced.  SIGINT and SIGTERM
sync and FIN what was written, close the consumers, then close the files
and move them from ``--work-dir`` to ``--output-dir``; SIGHUP closes the
files (a new one is opened by the next message).
"""

from __future__ import annotations

import signal
from typing import Any, Callable, List, Optional, Sequence

from twisted.internet.defer import Deferred
from twisted.logger import Logger

from txnsq.cli import BOOL, DURATION, INT, STRING, STRING_LIST, Flag
from txnsq.tools.common import (
    channel_flag,
    connection_config_or_exit,
    consumer_opt_flag,
    fatal,
    http_timeout_flags,
    lookupd_http_address_flag,
    max_in_flight_flag,
    nsqd_or_lookupd_problem,
    nsqd_tcp_address_flag,
    parse_command_line,
    run_reactor,
    tool_consumer,
    version_flag,
    version_requested,
)
from txnsq.tools.config_opts import ClientOptions, ConfigOptionError, parse_config_options
from txnsq.tools.file_logger import FileLogger, FileLoggerError, FileLoggerSettings
from txnsq.tools.filename import FilenameFormatError, compute_filename_format

__all__ = ["TopicArchiver", "main", "nsq_to_file_flags", "settings_from", "validate"]

PROGRAM = "nsq_to_file"

_log = Logger(namespace="txnsq.tools.nsq_to_file")


def nsq_to_file_flags() -> List[Flag]:
    """nsq_to_file's flag table, with Go's names, defaults and help."""
    return [
        version_flag(),
        Flag(
            "log-level",
            STRING,
            "info",
            "set log verbosity: debug, info, warn, error, or fatal",
        ),
        Flag("log-prefix", STRING, "[nsq_to_file] ", "log message prefix"),
        channel_flag("nsq_to_file", "nsq channel"),
        max_in_flight_flag(),
        Flag("output-dir", STRING, "/tmp", "directory to write output files to"),
        Flag(
            "work-dir",
            STRING,
            "",
            "directory for in-progress files before moving to output-dir",
        ),
        Flag(
            "datetime-format",
            STRING,
            "%Y-%m-%d_%H",
            "strftime compatible format for <DATETIME> in filename format",
        ),
        Flag(
            "filename-format",
            STRING,
            "<TOPIC>.<HOST><REV>.<DATETIME>.log",
            "output filename format (<TOPIC>, <HOST>, <PID>, <DATETIME>, <REV> are "
            "replaced. <REV> is increased when file already exists)",
        ),
        Flag(
            "host-identifier",
            STRING,
            "",
            "value to output in log filename in place of hostname. <SHORT_HOST> and "
            "<HOSTNAME> are valid replacement tokens",
        ),
        Flag(
            "gzip-level",
            INT,
            6,
            "gzip compression level (1-9, 1=BestSpeed, 9=BestCompression)",
        ),
        Flag("gzip", BOOL, False, "gzip output files."),
        Flag("skip-empty-files", BOOL, False, "skip writing empty files"),
        Flag(
            "topic-refresh",
            DURATION,
            60.0,
            "how frequently the topic list should be refreshed",
        ),
        Flag("topic-pattern", STRING, "", "only log topics matching the following pattern"),
        Flag(
            "rotate-size",
            INT,
            0,
            "rotate the file when it grows bigger than `rotate-size` bytes",
        ),
        Flag("rotate-interval", DURATION, 0.0, "rotate the file every duration"),
        Flag("sync-interval", DURATION, 30.0, "sync file to disk every duration"),
        *http_timeout_flags(),
        nsqd_tcp_address_flag(),
        lookupd_http_address_flag(),
        Flag("topic", STRING_LIST, [], "nsq topic (may be given multiple times)"),
        consumer_opt_flag(),
    ]


def validate(values: Any) -> Optional[str]:
    """Go nsq_to_file's checks after ``--version``, in its order: the fatal message, or None."""
    if not values["channel"]:
        return "--channel is required"
    if values["http_client_connect_timeout"] <= 0:
        return "--http-client-connect-timeout should be positive"
    if values["http_client_request_timeout"] <= 0:
        return "--http-client-request-timeout should be positive"
    problem = nsqd_or_lookupd_problem(values, required_end=".")
    if problem:
        return problem
    if not 1 <= values["gzip_level"] <= 9:
        return "invalid --gzip-level value (%d), should be 1-9" % (values["gzip_level"],)
    if not values["topic"] and not values["topic_pattern"]:
        return "--topic or --topic-pattern required"
    if not values["topic"] and not values["lookupd_http_address"]:
        return "--lookupd-http-address must be specified when no --topic specified"
    return None


def settings_from(values: Any) -> FileLoggerSettings:
    """The file settings of the flags (``--work-dir`` defaults to ``--output-dir``)."""
    return FileLoggerSettings(
        output_dir=values["output_dir"],
        work_dir=values["work_dir"] or values["output_dir"],
        channel=values["channel"],
        datetime_format=values["datetime_format"],
        gzip=values["gzip"],
        gzip_level=values["gzip_level"],
        rotate_size=values["rotate_size"],
        rotate_interval=values["rotate_interval"],
        sync_interval=values["sync_interval"],
        skip_empty_files=values["skip_empty_files"],
        max_in_flight=values["max_in_flight"],
    )


class TopicArchiver:
    """
    One topic's consumer and file.

    :param file_logger: the topic's file.
    :param make_consumer: makes the consumer, given the handler.
    :param on_fatal: called with Go's message when a file cannot be
        written (Go exits 1).
    """

    def __init__(
        self,
        file_logger: FileLogger,
        make_consumer: Callable[[Callable[[Any], None]], Any],
        on_fatal: Callable[[str], None],
    ) -> None:
        self.file_logger = file_logger
        self._on_fatal = on_fatal
        self.consumer = make_consumer(self.handle)
        self._stopped: Optional[Deferred[None]] = None

    def start(self) -> None:
        """Start the sync timer and the consumer."""
        self.file_logger.start()
        self.consumer.start()

    def handle(self, message: Any) -> None:
        """The consumer's handler: the message goes to the file, answered later."""
        try:
            self.file_logger.handle(message)
        except FileLoggerError as error:
            message.enable_async()
            self._on_fatal(str(error))

    def reopen(self) -> None:
        """SIGHUP: close the file."""
        try:
            self.file_logger.reopen()
        except FileLoggerError as error:
            self._on_fatal(str(error))

    def stop(self) -> "Deferred[None]":
        """FIN what is written, close the consumer, then close and move the file."""
        if self._stopped is None:
            try:
                self.file_logger.stop()
            except FileLoggerError as error:
                self._on_fatal(str(error))
            closed = self.consumer.close()

            def close_file(result: Any) -> None:
                try:
                    self.file_logger.close()
                except FileLoggerError as error:
                    self._on_fatal(str(error))

            self._stopped = closed.addBoth(close_file)
        stopped: Deferred[None] = Deferred()

        def chain(result: Any) -> Any:
            stopped.callback(None)
            return result

        self._stopped.addBoth(chain)
        return stopped


def main(argv: Optional[Sequence[str]] = None) -> None:
    """The ``nsq_to_file`` console script."""
    parsed, _ = parse_command_line(PROGRAM, nsq_to_file_flags(), argv)
    values = parsed.values
    if parsed.args:
        fatal("unknown arguments: [%s]" % (" ".join(parsed.args),))
    if values["log_level"].lower() not in ("debug", "info", "warn", "error", "fatal"):
        fatal("--log-level is invalid")
    if version_requested(values, PROGRAM):
        return
    problem = validate(values)
    if problem:
        fatal(problem)
    try:
        client_options = parse_config_options(values["consumer_opt"])
    except ConfigOptionError as error:
        fatal("--consumer-opt %s: %s" % (getattr(error, "flag_value", ""), error))
    settings = settings_from(values)

    def start(reactor: Any) -> "Deferred[Any]":
        from txnsq.logging import start_console_logging

        start_console_logging(PROGRAM, values["log_level"].lower(), values["log_prefix"])
        return run(reactor, values, settings, client_options)

    run_reactor(start)


def run(
    reactor: Any, values: Any, settings: FileLoggerSettings, client_options: ClientOptions
) -> "Deferred[int]":
    """Start archiving; the Deferred fires with the exit status once stopped."""
    from txnsq.http_client import GoHTTPClient
    from txnsq.tools.cluster_http import ClusterHTTP
    from txnsq.tools.common import user_agent
    from txnsq.tools.topic_discoverer import TopicDiscoverer

    config = connection_config_or_exit(client_options, PROGRAM)
    outcome: Deferred[int] = Deferred()
    status = {"code": 0, "stopping": False}

    def on_fatal(message: str) -> None:
        _log.critical("{message}", message=message)
        status["code"] = 1
        shutdown()

    def make_archiver(topic: str) -> TopicArchiver:
        try:
            template = compute_filename_format(
                values["filename_format"],
                topic,
                gzip=settings.gzip,
                rotate_size=settings.rotate_size,
                rotate_interval=settings.rotate_interval,
                work_dir=settings.work_dir,
                output_dir=settings.output_dir,
                host_identifier=values["host_identifier"],
            )
        except FilenameFormatError as error:
            raise ValueError(str(error))
        holder: List[Any] = []
        file_logger = FileLogger(
            topic,
            settings,
            template,
            reactor,
            is_starved=lambda: bool(holder) and holder[0].is_starved(),
        )

        def make_consumer(handler: Callable[[Any], None]) -> Any:
            consumer = tool_consumer(
                topic,
                settings.channel,
                handler,
                values,
                client_options,
                config,
                reactor,
                lookupd_connect_timeout=values["http_client_connect_timeout"],
                lookupd_request_timeout=values["http_client_request_timeout"],
            )
            holder.append(consumer)
            return consumer

        archiver = TopicArchiver(file_logger, make_consumer, on_fatal)
        archiver.start()
        return archiver

    client = GoHTTPClient(
        reactor,
        values["http_client_connect_timeout"],
        values["http_client_request_timeout"],
        user_agent=user_agent(PROGRAM).encode("ascii"),
    )
    cluster = ClusterHTTP(client.request)
    lookupds = values["lookupd_http_address"]
    discoverer = TopicDiscoverer(
        values["topic"],
        values["topic_pattern"],
        values["topic_refresh"],
        lambda: cluster.lookupd_topics(lookupds),
        make_archiver,
        reactor,
    )

    def shutdown() -> "Deferred[Any]":
        if not status["stopping"]:
            status["stopping"] = True
            stopped = discoverer.stop()

            def report(result: Any) -> None:
                if not outcome.called:
                    outcome.callback(status["code"])

            stopped.addBoth(report)
        return outcome

    def before_shutdown() -> "Deferred[None]":
        waiting: Deferred[None] = Deferred()

        def release(result: Any) -> None:
            waiting.callback(None)

        shutdown().addBoth(release)
        return waiting

    # Files are closed and moved before the reactor stops.
    reactor.addSystemEventTrigger("before", "shutdown", before_shutdown)
    if hasattr(signal, "SIGHUP"):
        signal.signal(
            signal.SIGHUP,
            lambda number, frame: reactor.callFromThread(discoverer.reopen),
        )
    discoverer.start()
    return outcome


if __name__ == "__main__":
    main()
