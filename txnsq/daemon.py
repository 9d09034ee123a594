# -*- test-case-name: tests.test_daemon -*-
"""
What nsqd, nsqlookupd and nsqadmin share as programs: the ``twistd``
options class that reads a daemon's Go flags, and the console script's
``main``.

Each daemon keeps its thin, specific part: its flag table and settings
class (``txnsq.<daemon>.options``), a :class:`GoFlagsOptions` subclass
naming them and building its service (``txnsq.<daemon>.tap``), and a
``main`` handing :func:`run_console_script` its parser and service
factory (``txnsq.<daemon>.service``).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any, Callable, Generic, List, NoReturn, Optional, Protocol, Sequence, TypeVar

from twisted.internet.defer import Deferred
from twisted.python import usage

from txnsq import cli
from txnsq.cli import Flag, version_string
from txnsq.logging import start_console_logging
from txnsq.reactors import install_steady_clock

__all__ = [
    "DaemonService",
    "DaemonSettings",
    "GoFlagsOptions",
    "SettingsAlias",
    "run_console_script",
]


class DaemonSettings(Protocol):
    """What the shared code reads of a daemon's settings dataclass."""

    version: bool
    log_level: str
    log_prefix: str

    def validate(self) -> None:
        """Refuse impossible settings; :raises ValueError: naming the problem."""


class DaemonService(Protocol):
    """What :func:`run_console_script` drives of a daemon's service."""

    def startService(self) -> None:
        """Start listening."""

    def stopService(self) -> "Optional[Deferred[None]]":
        """Stop listening and close."""

    def whenListening(self) -> "Deferred[Any]":
        """Fires once every listener is bound; fails if one could not be."""


S = TypeVar("S", bound=DaemonSettings)
T = TypeVar("T", bound=DaemonService)


class GoFlagsOptions(usage.Options, Generic[S]):
    """
    A daemon's flags for twistd, parsed the way Go's ``flag`` package does,
    with the same parser as its console script.

    A subclass names the daemon (:attr:`program`), describes it
    (:attr:`description`) and supplies :meth:`new_settings`,
    :meth:`flag_table` and :meth:`build_service`.  After
    :meth:`parseOptions`, :attr:`settings` holds the parsed and validated
    settings; the mapping itself holds the same values by attribute name,
    as usage.Options users expect.

    :ivar settings: the settings for the service.
    :ivar positional: arguments after the flags (ignored, as Go does).
    """

    #: The daemon's name, as ``--version`` prints it.
    program = ""
    #: What the daemon is, one sentence; :attr:`longdesc` adds the flags' syntax.
    description = ""
    synopsis = "[flags]"
    longdesc = ""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.description:
            cls.longdesc = (
                "%s The flags are Go %s's: -flag value, --flag=value, booleans bare "
                "or =true/false." % (cls.description, cls.program)
            )

    def __init__(self) -> None:
        usage.Options.__init__(self)
        self.settings: S = self.new_settings()
        self.positional: List[str] = []

    def new_settings(self) -> S:
        """The daemon's settings with Go's defaults."""
        raise NotImplementedError()

    def flag_table(self) -> List[Flag]:
        """The daemon's flags, in Go's order."""
        raise NotImplementedError()

    def build_service(self, settings: S) -> Any:
        """The service ``twistd`` runs for ``settings``."""
        raise NotImplementedError()

    def parseOptions(self, options: Optional[Sequence[str]] = None) -> None:
        """
        Parse the daemon's flags; ``--help`` prints the usage and exits 0.

        :raises usage.UsageError: with Go's message for a bad command line,
            or the reason the settings are impossible.
        """
        if options is None:
            options = sys.argv[1:]
        try:
            parsed = cli.parse_flags(self.flag_table(), options)
        except cli.HelpRequested:
            self.opt_help()
            return  # pragma: no cover - opt_help exits
        except cli.FlagError as error:
            raise usage.UsageError(error.message)
        self.settings = cli.settings_from(parsed, None, self.new_settings)
        self.positional = list(parsed.args)
        self.postOptions()

    def postOptions(self) -> None:
        """
        Validate the settings (unless only ``--version`` is wanted) and
        mirror them into the mapping.
        """
        if not self.settings.version:
            try:
                self.settings.validate()
            except ValueError as error:
                raise usage.UsageError(str(error))
        self.update(dataclasses.asdict(self.settings))  # type: ignore[call-overload]

    def getUsage(self, width: Optional[int] = None) -> str:
        """The description and every flag in Go's ``PrintDefaults`` layout."""
        return "%s\n\n%s" % (self.longdesc, cli.format_defaults(self.flag_table()))

    def make_service(self) -> Any:
        """
        What the tap's ``makeService`` returns: :meth:`build_service` of the
        settings, the global reactor given a steady clock first
        (:func:`txnsq.reactors.install_steady_clock`); for ``--version``,
        the version on standard output instead.

        :raises SystemExit: 0 after printing the version.
        """
        if self.settings.version:
            sys.stdout.write(version_string(self.program) + "\n")
            raise SystemExit(0)
        from twisted.internet import reactor

        install_steady_clock(reactor)
        return self.build_service(self.settings)


class SettingsAlias(Generic[S]):
    """
    A daemon's own name for :attr:`GoFlagsOptions.settings`
    (``nsqd_options = SettingsAlias[NSQDOptions]()``), read and written
    through.
    """

    def __get__(self, instance: Optional[GoFlagsOptions[S]], owner: Any) -> S:
        if instance is None:
            return self  # type: ignore[return-value]
        return instance.settings

    def __set__(self, instance: GoFlagsOptions[S], settings: S) -> None:
        instance.settings = settings


def run_console_script(
    program: str,
    argv: Optional[Sequence[str]],
    parse_or_exit: Callable[[List[str]], S],
    build: Callable[[S, Any], T],
    on_running: Sequence[Callable[[], object]] = (),
    reactor: Optional[Any] = None,
    may_use_tls: Optional[Callable[[S], bool]] = None,
) -> NoReturn:
    """
    A daemon's console script, as Go's ``main``: parse the command line
    (``argv``, or the process's without the program name), print the
    version for ``--version``, refuse impossible settings with
    ``PROGRAM: reason`` on standard error, log to standard error in Go's
    format, then run the service ``build(settings, reactor)`` makes until
    the reactor stops.

    :param parse_or_exit: reads the arguments; exits 2 on a bad command
        line and 0 on ``-h``, as Go's ``flag`` does.
    :param build: makes the service; it may log why it cannot and exit 1.
    :param on_running: called once the reactor runs, after the service
        started.
    :param reactor: the global reactor when omitted.
    :param may_use_tls: whether the settings may need TLS; when it says
        no, the global reactor is imported without TLS support
        (:func:`txnsq.plain_reactor.import_reactor`), which saves the
        process pyOpenSSL and ``cryptography``.  Omitted: TLS is assumed.
        Either way the reactor gets a steady clock
        (:func:`txnsq.reactors.install_steady_clock`) before the service
        is built, so that no step of the wall clock moves its timers.
    :raises SystemExit: always: 0 for ``--version`` and after a clean
        shutdown; 1 for impossible settings or when a listener could not
        listen (which it logged).
    """
    arguments: List[str] = list(sys.argv[1:] if argv is None else argv)
    settings = parse_or_exit(arguments)
    if settings.version:
        sys.stdout.write(version_string(program) + "\n")
        sys.exit(0)
    try:
        settings.validate()
    except ValueError as error:
        sys.stderr.write("%s: %s\n" % (program, error))
        sys.exit(1)

    if reactor is None:
        from txnsq.plain_reactor import import_reactor

        reactor = import_reactor(may_use_tls is None or may_use_tls(settings))
    install_steady_clock(reactor)
    start_console_logging(program, settings.log_level, settings.log_prefix)
    service = build(settings, reactor)
    outcome = {"code": 0}

    def listen_failed(failure: Any) -> None:
        # Go exits 1 when it cannot listen; the listener logged why.
        outcome["code"] = 1
        reactor.stop()

    reactor.callWhenRunning(service.startService)
    for hook in on_running:
        reactor.callWhenRunning(hook)
    reactor.callWhenRunning(lambda: service.whenListening().addErrback(listen_failed))
    reactor.addSystemEventTrigger("before", "shutdown", service.stopService)
    reactor.run()
    sys.exit(outcome["code"])
