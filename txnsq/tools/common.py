# -*- test-case-name: tests.test_tools_common,tests.test_tools_config_opts -*-
"""
What the tools share: their common flags (Go's names, defaults and help
texts), the reading of a command line and Go's checks of the nsqd and
lookupd addresses, Go's ``log.Fatal`` and version lines, the go-nsq
settings of ``--consumer-opt``/``--producer-opt`` turned into txnsq client
settings and consumers, and the reactor run of a console script.
"""

from __future__ import annotations

import random
import sys
import time
from typing import IO, Any, Callable, Dict, List, NoReturn, Optional, Sequence, Tuple, TypeVar

from twisted.internet.defer import Deferred
from twisted.internet.error import ReactorNotRunning
from twisted.logger import Logger
from twisted.python.failure import Failure

from txnsq.version import NSQ_VERSION, TXNSQ_VERSION
from txnsq import cli
from txnsq.cli import BOOL, DURATION, INT, STRING, STRING_LIST, Flag, FlagError, ParsedFlags
from txnsq.tools.config_opts import ClientOptions, ConfigOptionError, parse_config_options

__all__ = [
    "ToolExit",
    "channel_flag",
    "check_http_addresses",
    "client_options_or_exit",
    "connection_config",
    "consumer_opt_flag",
    "ephemeral_tail_channel",
    "fatal",
    "nsqd_or_lookupd_problem",
    "parse_command_line",
    "or_fatal",
    "tool_consumer",
    "version_requested",
    "http_timeout_flags",
    "lookupd_http_address_flag",
    "max_in_flight_flag",
    "nsqd_tcp_address_flag",
    "print_version",
    "producer_opt_flag",
    "run_reactor",
    "user_agent",
    "version_flag",
]

_log = Logger(namespace="txnsq.tools")

_T = TypeVar("_T")

GODOC_CONFIG = "http://godoc.org/github.com/nsqio/go-nsq#Config"


# --- flags ------------------------------------------------------------------


def version_flag(help: str = "print version string") -> Flag:
    """``--version`` (nsq_stat's help says only ``print version``)."""
    return Flag("version", BOOL, False, help)


def channel_flag(default: str = "", help: str = "NSQ channel") -> Flag:
    """``--channel``."""
    return Flag("channel", STRING, default, help)


def nsqd_tcp_address_flag(
    help: str = "nsqd TCP address (may be given multiple times)",
) -> Flag:
    """``--nsqd-tcp-address``, repeatable."""
    return Flag("nsqd-tcp-address", STRING_LIST, [], help)


def lookupd_http_address_flag() -> Flag:
    """``--lookupd-http-address``, repeatable."""
    return Flag(
        "lookupd-http-address",
        STRING_LIST,
        [],
        "lookupd HTTP address (may be given multiple times)",
    )


def max_in_flight_flag() -> Flag:
    """``--max-in-flight`` (default 200)."""
    return Flag("max-in-flight", INT, 200, "max number of messages to allow in flight")


def consumer_opt_flag() -> Flag:
    """``--consumer-opt``, go-nsq ``Config`` options, repeatable."""
    return Flag(
        "consumer-opt",
        STRING_LIST,
        [],
        "option to passthrough to nsq.Consumer (may be given multiple times, %s)"
        % (GODOC_CONFIG,),
    )


def producer_opt_flag() -> Flag:
    """``--producer-opt``, go-nsq ``Config`` options, repeatable."""
    return Flag(
        "producer-opt",
        STRING_LIST,
        [],
        "option to passthrough to nsq.Producer (may be given multiple times, %s)"
        % (GODOC_CONFIG,),
    )


def http_timeout_flags(request_timeout: float = 5.0) -> List[Flag]:
    """
    ``--http-client-connect-timeout`` (2s) and ``--http-client-request-timeout``
    (5s; nsq_to_http's is 20s).
    """
    return [
        Flag("http-client-connect-timeout", DURATION, 2.0, "timeout for HTTP connect"),
        Flag("http-client-request-timeout", DURATION, request_timeout, "timeout for HTTP request"),
    ]


# --- Go's process manners -----------------------------------------------------


class ToolExit(SystemExit):
    """A tool stops with Go's status: 1 after ``log.Fatal``."""


def fatal(message: str, stderr: Optional[IO[str]] = None, now: Optional[float] = None) -> NoReturn:
    """
    Go's ``log.Fatal``: ``2006/01/02 15:04:05 message`` on standard
    error, then exit status 1.

    :raises ToolExit: always (``SystemExit`` with code 1).
    """
    stream = stderr if stderr is not None else sys.stderr
    when = time.time() if now is None else now
    stream.write("%s %s\n" % (time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(when)), message))
    stream.flush()
    raise ToolExit(1)


def print_version(program: str, stdout: Optional[IO[str]] = None) -> None:
    """``nsq_tail v1.3.0``: Go's version line (the NSQ version implemented)."""
    stream = stdout if stdout is not None else sys.stdout
    stream.write("%s v%s\n" % (program, NSQ_VERSION))
    stream.flush()


def user_agent(program: str) -> str:
    """``nsq_tail/1.3.0 txnsq/0.1.0``, in the shape of Go's ``nsq_tail/1.3.0 go-nsq/1.1.0``."""
    return "%s/%s txnsq/%s" % (program, NSQ_VERSION, TXNSQ_VERSION)


def ephemeral_tail_channel(rng: Optional[random.Random] = None) -> str:
    """nsq_tail's default channel: ``tail`` six random digits ``#ephemeral``."""
    chooser = rng if rng is not None else random
    return "tail%06d#ephemeral" % (chooser.randrange(1 << 62) % 999999,)


def check_http_addresses(addresses: Sequence[str]) -> Optional[str]:
    """Go's ``checkAddrs``: an address must not start with a scheme."""
    for address in addresses:
        if address.startswith("http"):
            return "address should not contain scheme"
    return None


def client_options_or_exit(
    flag_name: str,
    values: Sequence[str],
    usage: Callable[[], str],
    stderr: Optional[IO[str]] = None,
) -> ClientOptions:
    """
    Parse ``--consumer-opt``/``--producer-opt`` values.  A bad one is what
    Go's flag package reports for a bad ``nsq.ConfigFlag``: ``invalid value
    "x" for flag -consumer-opt: invalid option x``, the usage, exit 2.
    """
    try:
        return parse_config_options(values)
    except ConfigOptionError as error:
        from txnsq.protocol.go_values import go_quote as _go_quote

        stream = stderr if stderr is not None else sys.stderr
        problem = FlagError(
            "invalid value %s for flag -%s: %s"
            % (_go_quote(getattr(error, "flag_value", "")), flag_name, error)
        )
        stream.write(problem.message + "\n")
        stream.write(usage())
        stream.flush()
        raise SystemExit(problem.exit_code)


def parse_command_line(
    program: str,
    flags: Sequence[Flag],
    argv: Optional[Sequence[str]] = None,
    option_flags: Sequence[str] = (),
    stderr: Optional[IO[str]] = None,
) -> Tuple[ParsedFlags, List[ClientOptions]]:
    """
    A tool's command line (``sys.argv[1:]`` unless ``argv`` is given) as
    Go's ``flag.Parse`` reads it, then the values of each of
    ``option_flags`` (``consumer-opt``, ``producer-opt``) as client
    options, in that order.

    :raises SystemExit: Go's flag error or bad option: message and usage on
        ``stderr``, status 2 (0 for ``-h``).
    """
    arguments = list(sys.argv[1:] if argv is None else argv)
    parsed = cli.run_or_exit(flags, arguments, program, stderr)

    def usage() -> str:
        return cli.format_usage(flags, program)

    options = [
        client_options_or_exit(name, parsed[name.replace("-", "_")], usage, stderr)
        for name in option_flags
    ]
    return parsed, options


def version_requested(values: Any, program: str, stdout: Optional[IO[str]] = None) -> bool:
    """Whether ``--version`` was given; if so, the version line is printed."""
    if values["version"]:
        print_version(program, stdout)
        return True
    return False


def nsqd_or_lookupd_problem(
    values: Any, nsqd_flag: str = "nsqd-tcp-address", required_end: str = ""
) -> Optional[str]:
    """
    Go's check that exactly one of ``--nsqd-...-address`` and
    ``--lookupd-http-address`` is given: the fatal message, or None.
    ``required_end`` ends the "required" text (nsq_to_file's has a period).
    """
    nsqds = values[nsqd_flag.replace("-", "_")]
    lookupds = values["lookupd_http_address"]
    if not nsqds and not lookupds:
        return "--%s or --lookupd-http-address required%s" % (nsqd_flag, required_end)
    if nsqds and lookupds:
        return "use --%s or --lookupd-http-address not both" % (nsqd_flag,)
    return None


def tool_consumer(
    topic: str,
    channel: str,
    handler: Callable[[Any], Any],
    values: Any,
    options: ClientOptions,
    config: Any,
    reactor: Any,
    make_consumer: Optional[Callable[..., Any]] = None,
    **overrides: Any,
) -> Any:
    """
    A consumer as the tools make one: the ``--nsqd-tcp-address`` or
    ``--lookupd-http-address`` of ``values``, the go-nsq consumer options,
    ``--max-in-flight``, then ``overrides``.

    :param make_consumer: :class:`txnsq.client.Consumer` unless given.
    :raises ValueError: the consumer refused its settings.
    """
    if make_consumer is None:
        from txnsq.client.consumer import Consumer

        make_consumer = Consumer
    settings = dict(options.consumer)
    settings["max_in_flight"] = values["max_in_flight"]
    settings.update(overrides)
    return make_consumer(
        topic,
        channel,
        handler,
        nsqd_tcp_addresses=values["nsqd_tcp_address"],
        lookupd_http_addresses=values["lookupd_http_address"],
        config=config,
        reactor=reactor,
        **settings,
    )


def or_fatal(make: Callable[[], _T], failure: str = "%s") -> _T:
    """
    ``make()``, typically a client refusing its settings with
    ``ValueError``, or Go's fatal exit: ``failure`` % the error is the text.

    :raises ToolExit: ``make`` raised ``ValueError``.
    """
    try:
        return make()
    except ValueError as error:
        fatal(failure % (error,))


def connection_config(options: ClientOptions, program: str, **overrides: Any) -> Any:
    """
    The :class:`txnsq.client.ConnectionConfig` of a tool: the tool's user
    agent, then the go-nsq options, then ``overrides``.

    :raises OSError: a ``tls_*`` file cannot be read.
    """
    from txnsq.client.connection import ConnectionConfig
    from txnsq.tools.tls import client_tls_options

    settings: Dict[str, Any] = {"user_agent": user_agent(program)}
    settings.update(options.connection)
    tls = client_tls_options(options.tls)
    if tls is not None:
        settings["tls_options"] = tls
    settings.update(overrides)
    for name in options.ignored:
        _log.warn("option {name} has no effect in txnsq", name=name)
    return ConnectionConfig(**settings)


def connection_config_or_exit(options: ClientOptions, program: str, failure: str = "%s") -> Any:
    """
    :func:`connection_config`, or Go's fatal exit when a ``tls_*`` file
    cannot be read (``failure`` % the error is the fatal text: Go's tools
    word it differently).
    """
    try:
        return connection_config(options, program)
    except OSError as error:
        fatal(failure % (error,))


# --- running ---------------------------------------------------------------


def run_reactor(
    start: Callable[[Any], "Optional[Deferred[Any]]"], reactor: Any = None
) -> NoReturn:
    """
    Run ``start(reactor)`` in the reactor and exit with the status the
    tool decided: the result of the Deferred it returns (an int, default
    0), or 1 if it fails.  ``ToolExit``/``SystemExit`` raised inside
    become the status.  SIGINT and SIGTERM stop the reactor (Twisted's
    handlers); the tool cleans up in ``before shutdown`` triggers.
    """
    if reactor is None:
        from twisted.internet import reactor as global_reactor

        reactor = global_reactor
    outcome = {"code": 0}

    def finished(result: Any) -> None:
        if isinstance(result, Failure):
            # Failure.check() does not see SystemExit's bases.
            if isinstance(result.value, SystemExit):
                code = getattr(result.value, "code", 1)
                outcome["code"] = code if isinstance(code, int) else 1
            else:
                _log.failure("fatal error", result)
                outcome["code"] = 1
        elif isinstance(result, int):
            outcome["code"] = result
        try:
            reactor.stop()
        except ReactorNotRunning:
            # Already stopping: a signal began the shutdown.
            pass

    def begin() -> None:
        try:
            started = start(reactor)
        except SystemExit as error:
            finished(Failure(error))
            return
        except BaseException:
            finished(Failure())
            return
        if started is not None:
            started.addBoth(finished)

    reactor.callWhenRunning(begin)
    reactor.run()
    sys.stdout.flush()
    sys.exit(outcome["code"])
