"""Tests for txnsq.daemon: the daemons' shared twistd options and console-script main."""

from __future__ import annotations

import io
import sys
from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Tuple

from twisted.internet.defer import Deferred, fail, succeed
from twisted.python import usage
from twisted.trial.unittest import SynchronousTestCase

from txnsq import daemon
from txnsq.cli import BOOL, INT, STRING, Flag, version_string
from txnsq.daemon import GoFlagsOptions, SettingsAlias, run_console_script
from txnsq.reactors import SteadyClock


@dataclass
class ToySettings:
    """A daemon's settings: the fields the shared code reads, and one of its own."""

    version: bool = False
    log_level: str = "info"
    log_prefix: str = "[toyd] "
    size: int = 10

    def validate(self) -> None:
        if self.size < 0:
            raise ValueError("--size must not be negative")


def toy_flags() -> List[Flag]:
    return [
        Flag("version", BOOL, False, "print version string"),
        Flag("log-level", STRING, "info", "log level"),
        Flag("log-prefix", STRING, "[toyd] ", "log message prefix"),
        Flag("size", INT, 10, "how many"),
    ]


class ToyService:
    """A service that records what the console script did with it."""

    def __init__(self, settings: ToySettings, listening: "Deferred[Any]") -> None:
        self.settings = settings
        self.listening = listening
        self.calls: List[str] = []

    def startService(self) -> None:
        self.calls.append("start")

    def stopService(self) -> "Optional[Deferred[None]]":
        self.calls.append("stop")
        return None

    def whenListening(self) -> "Deferred[Any]":
        self.calls.append("listening")
        return self.listening


class FakeReactor:
    """Records what is scheduled; run() runs the when-running calls in order."""

    def __init__(self) -> None:
        self.when_running: List[Callable[[], object]] = []
        self.triggers: List[Tuple[str, str, Callable[[], object]]] = []
        self.ran = False
        self.stopped = False

    def callWhenRunning(self, call: Callable[[], object]) -> None:
        self.when_running.append(call)

    def addSystemEventTrigger(self, phase: str, event: str, call: Callable[[], object]) -> None:
        self.triggers.append((phase, event, call))

    def run(self) -> None:
        self.ran = True
        for call in self.when_running:
            call()

    def stop(self) -> None:
        self.stopped = True


class ToyOptions(GoFlagsOptions[ToySettings]):
    """A daemon's twistd options as the daemons write theirs."""

    program = "toyd"
    description = "Run a toy daemon (toyd)."
    toy_options = SettingsAlias[ToySettings]()

    def new_settings(self) -> ToySettings:
        return ToySettings()

    def flag_table(self) -> List[Flag]:
        return toy_flags()

    def build_service(self, settings: ToySettings) -> ToyService:
        return ToyService(settings, succeed(None))


class GoFlagsOptionsTests(SynchronousTestCase):
    """GoFlagsOptions reads a daemon's Go flags for twistd."""

    def test_parses_into_settings(self) -> None:
        """Go's spellings land in a fresh settings object, mirrored in the mapping."""
        options = ToyOptions()
        options.parseOptions(["-size", "3", "--log-level=debug", "extra"])
        self.assertIsInstance(options.settings, ToySettings)
        self.assertEqual(options.settings.size, 3)
        self.assertEqual(options["size"], 3)
        self.assertEqual(options["log_level"], "debug")
        self.assertEqual(options.positional, ["extra"])

    def test_alias(self) -> None:
        """A SettingsAlias reads and writes the settings under the daemon's own name."""
        options = ToyOptions()
        options.parseOptions(["--size=4"])
        self.assertIs(options.toy_options, options.settings)
        replacement = ToySettings(size=7)
        options.toy_options = replacement
        self.assertIs(options.settings, replacement)
        self.assertIsInstance(ToyOptions.toy_options, SettingsAlias)

    def test_bad_flag(self) -> None:
        """A bad command line is a UsageError with Go's message."""
        with self.assertRaises(usage.UsageError) as caught:
            ToyOptions().parseOptions(["--nope"])
        self.assertEqual(str(caught.exception), "flag provided but not defined: -nope")

    def test_invalid_settings(self) -> None:
        """Settings that fail validate() are a UsageError with its reason."""
        with self.assertRaises(usage.UsageError) as caught:
            ToyOptions().parseOptions(["--size=-1"])
        self.assertEqual(str(caught.exception), "--size must not be negative")

    def test_version_skips_validation(self) -> None:
        """With --version the other settings are not validated."""
        options = ToyOptions()
        options.parseOptions(["--version", "--size=-1"])
        self.assertIs(options.settings.version, True)

    def test_help_exits(self) -> None:
        """--help prints the usage and exits 0."""
        out = io.StringIO()
        self.patch(sys, "stdout", out)
        with self.assertRaises(SystemExit) as caught:
            ToyOptions().parseOptions(["--help"])
        self.assertEqual(caught.exception.code, 0)
        self.assertIn("-size int", out.getvalue())

    def test_usage(self) -> None:
        """The usage is the description with the flags' syntax, then Go's flag list."""
        text = ToyOptions().getUsage()
        self.assertTrue(
            text.startswith(
                "Run a toy daemon (toyd). The flags are Go toyd's: -flag value, "
                "--flag=value, booleans bare or =true/false.\n\n"
            )
        )
        self.assertIn("  -size int\n", text)

    def test_make_service(self) -> None:
        """make_service builds the daemon's service from the parsed settings."""
        options = ToyOptions()
        options.parseOptions(["--size=2"])
        service = options.make_service()
        self.assertIsInstance(service, ToyService)
        self.assertIs(service.settings, options.settings)

    def test_make_service_steady_clock(self) -> None:
        """make_service (what twistd runs) gives the global reactor a steady clock."""
        from twisted.internet import reactor

        options = ToyOptions()
        options.parseOptions([])
        options.make_service()
        self.assertIsInstance(reactor.seconds.__self__, SteadyClock)  # type: ignore[attr-defined]

    def test_make_service_version(self) -> None:
        """For --version make_service prints the version and exits 0."""
        out = io.StringIO()
        self.patch(sys, "stdout", out)
        options = ToyOptions()
        options.parseOptions(["--version"])
        with self.assertRaises(SystemExit) as caught:
            options.make_service()
        self.assertEqual(caught.exception.code, 0)
        self.assertEqual(out.getvalue(), version_string("toyd") + "\n")


class RunConsoleScriptTests(SynchronousTestCase):
    """run_console_script is each daemon's console-script main."""

    def setUp(self) -> None:
        self.out = io.StringIO()
        self.err = io.StringIO()
        self.patch(sys, "stdout", self.out)
        self.patch(sys, "stderr", self.err)
        self.logging: List[Tuple[str, str, Optional[str]]] = []
        self.patch(
            daemon,
            "start_console_logging",
            lambda program, level, prefix: self.logging.append((program, level, prefix)),
        )
        self.reactor = FakeReactor()
        self.services: List[ToyService] = []
        self.listening: "Deferred[Any]" = succeed(None)

    def parse(self, argv: List[str]) -> ToySettings:
        options = ToyOptions()
        options.parseOptions(argv)
        return options.settings

    def build(self, settings: ToySettings, reactor: Any) -> ToyService:
        self.assertIs(reactor, self.reactor)
        service = ToyService(settings, self.listening)
        self.services.append(service)
        return service

    def run_script(self, argv: List[str], hooks: Any = ()) -> int:
        with self.assertRaises(SystemExit) as caught:
            run_console_script("toyd", argv, self.parse, self.build, hooks, self.reactor)
        code = caught.exception.code
        assert isinstance(code, int)
        return code

    def test_version(self) -> None:
        """--version prints the version and exits 0 without building the service."""
        self.assertEqual(self.run_script(["--version"]), 0)
        self.assertEqual(self.out.getvalue(), version_string("toyd") + "\n")
        self.assertEqual(self.services, [])
        self.assertFalse(self.reactor.ran)

    def test_invalid_settings(self) -> None:
        """Impossible settings are reported as ``PROGRAM: reason`` and exit 1."""
        self.patch(self, "parse", lambda argv: ToySettings(size=-1))
        self.assertEqual(self.run_script([]), 1)
        self.assertEqual(self.err.getvalue(), "toyd: --size must not be negative\n")
        self.assertEqual(self.logging, [])
        self.assertFalse(self.reactor.ran)

    def test_runs_service(self) -> None:
        """The service starts, then the hooks run, then listening is awaited; exit 0."""
        order: List[str] = []
        code = self.run_script(["--size=5"], [lambda: order.append("hook")])
        self.assertEqual(code, 0)
        self.assertEqual(self.logging, [("toyd", "info", "[toyd] ")])
        [service] = self.services
        self.assertEqual(service.settings.size, 5)
        self.assertEqual(service.calls, ["start", "listening"])
        self.assertEqual(order, ["hook"])
        self.assertTrue(self.reactor.ran)
        self.assertFalse(self.reactor.stopped)
        self.assertEqual(self.reactor.triggers, [("before", "shutdown", service.stopService)])

    def test_steady_clock_before_build(self) -> None:
        """The reactor has a steady clock before the service is built."""
        seen: List[Any] = []
        build = self.build

        def recording_build(settings: ToySettings, reactor: Any) -> ToyService:
            seen.append(reactor.seconds)
            return build(settings, reactor)

        self.patch(self, "build", recording_build)
        self.run_script([])
        [seconds] = seen
        self.assertIsInstance(seconds.__self__, SteadyClock)

    def test_hooks_after_start(self) -> None:
        """The hooks run after the service started and before listening is awaited."""
        seen: List[List[str]] = []
        self.run_script([], [lambda: seen.append(list(self.services[0].calls))])
        self.assertEqual(seen, [["start"]])

    def test_listen_failure(self) -> None:
        """When a listener cannot listen the reactor stops and the script exits 1."""
        self.listening = fail(OSError("address in use"))
        self.assertEqual(self.run_script([]), 1)
        self.assertTrue(self.reactor.stopped)

    def test_argv_from_process(self) -> None:
        """Without argv the process's arguments after the program name are read."""
        self.patch(sys, "argv", ["toyd", "--size=8"])
        with self.assertRaises(SystemExit):
            run_console_script("toyd", None, self.parse, self.build, (), self.reactor)
        self.assertEqual(self.services[0].settings.size, 8)
