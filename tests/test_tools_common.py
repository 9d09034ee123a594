"""Tests for the command-line helpers of txnsq.tools.common."""

from __future__ import annotations

import io
import sys
from typing import Any, Dict, List, Tuple

from twisted.trial.unittest import SynchronousTestCase

from txnsq.tools.common import (
    nsqd_or_lookupd_problem,
    or_fatal,
    parse_command_line,
    tool_consumer,
    version_requested,
)
from txnsq.tools.config_opts import parse_config_options
from txnsq.tools.nsq_to_nsq import nsq_to_nsq_flags


class ParseCommandLineTests(SynchronousTestCase):
    """A tool's flags and its --consumer-opt/--producer-opt values."""

    def test_options_in_order(self) -> None:
        """Each named option flag's values become client options, in the order named."""
        parsed, (consumer, producer) = parse_command_line(
            "nsq_to_nsq",
            nsq_to_nsq_flags(),
            ["--topic", "t", "--consumer-opt", "max_attempts,7", "--producer-opt", "snappy"],
            ["consumer-opt", "producer-opt"],
        )
        self.assertEqual(parsed["topic"], ["t"])
        self.assertEqual(consumer.consumer["max_attempts"], 7)
        self.assertTrue(producer.connection["snappy"])

    def test_argv_defaults_to_sys_argv(self) -> None:
        """Without argv the command line is sys.argv after the program name."""
        self.patch(sys, "argv", ["nsq_to_nsq", "--channel", "c"])
        parsed, options = parse_command_line("nsq_to_nsq", nsq_to_nsq_flags())
        self.assertEqual(parsed["channel"], "c")
        self.assertEqual(options, [])

    def test_bad_option(self) -> None:
        """A bad option value is Go's flag error, the usage, and exit status 2."""
        stderr = io.StringIO()
        with self.assertRaises(SystemExit) as raised:
            parse_command_line(
                "nsq_to_nsq", nsq_to_nsq_flags(), ["--producer-opt", "nope"], ["producer-opt"], stderr
            )
        self.assertEqual(raised.exception.code, 2)
        self.assertTrue(stderr.getvalue().startswith('invalid value "nope" for flag -producer-opt: '))
        self.assertIn("Usage of nsq_to_nsq:\n", stderr.getvalue())


class VersionRequestedTests(SynchronousTestCase):
    """The --version check."""

    def test_version(self) -> None:
        """With --version the version line is printed and the answer is True."""
        out = io.StringIO()
        self.assertTrue(version_requested({"version": True}, "nsq_tail", out))
        self.assertRegex(out.getvalue(), r"^nsq_tail v\S+\n$")

    def test_no_version(self) -> None:
        """Without --version nothing is printed and the answer is False."""
        out = io.StringIO()
        self.assertFalse(version_requested({"version": False}, "nsq_tail", out))
        self.assertEqual(out.getvalue(), "")


class NsqdOrLookupdProblemTests(SynchronousTestCase):
    """Go's "exactly one of the nsqd and lookupd addresses" check."""

    def test_neither(self) -> None:
        """Neither address is Go's "required" text, ended as the tool asks."""
        values = {"nsqd_tcp_address": [], "lookupd_http_address": []}
        self.assertEqual(
            nsqd_or_lookupd_problem(values), "--nsqd-tcp-address or --lookupd-http-address required"
        )
        self.assertEqual(
            nsqd_or_lookupd_problem(values, required_end="."),
            "--nsqd-tcp-address or --lookupd-http-address required.",
        )

    def test_both(self) -> None:
        """Both addresses are refused, naming the tool's nsqd flag."""
        values = {"nsqd_http_address": ["a:1"], "lookupd_http_address": ["b:2"]}
        self.assertEqual(
            nsqd_or_lookupd_problem(values, "nsqd-http-address"),
            "use --nsqd-http-address or --lookupd-http-address not both",
        )

    def test_one(self) -> None:
        """Either address alone passes."""
        self.assertIsNone(
            nsqd_or_lookupd_problem({"nsqd_tcp_address": ["a:1"], "lookupd_http_address": []})
        )
        self.assertIsNone(
            nsqd_or_lookupd_problem({"nsqd_tcp_address": [], "lookupd_http_address": ["b:2"]})
        )


class ToolConsumerTests(SynchronousTestCase):
    """Consumers made from a tool's flags."""

    values = {
        "nsqd_tcp_address": ["127.0.0.1:4150"],
        "lookupd_http_address": [],
        "max_in_flight": 200,
    }

    def make(self, calls: List[Tuple[Any, Dict[str, Any]]]) -> Any:
        def make_consumer(*args: Any, **kwargs: Any) -> str:
            calls.append((args, kwargs))
            return "consumer"

        return make_consumer

    def test_settings(self) -> None:
        """Addresses, consumer options, --max-in-flight and then overrides reach the consumer."""
        calls: List[Tuple[Any, Dict[str, Any]]] = []
        options = parse_config_options(["max_attempts,3"])
        made = tool_consumer(
            "t", "c", print, self.values, options, "config", "reactor", self.make(calls),
            max_in_flight=5,
        )
        self.assertEqual(made, "consumer")
        [(args, kwargs)] = calls
        self.assertEqual(args, ("t", "c", print))
        self.assertEqual(
            kwargs,
            {
                "nsqd_tcp_addresses": ["127.0.0.1:4150"],
                "lookupd_http_addresses": [],
                "config": "config",
                "reactor": "reactor",
                "max_attempts": 3,
                "max_in_flight": 5,
            },
        )


class OrFatalTests(SynchronousTestCase):
    """Go's fatal exit when a client refuses its settings."""

    def test_made(self) -> None:
        """What the maker returns is returned."""
        self.assertEqual(or_fatal(lambda: "consumer"), "consumer")

    def test_value_error(self) -> None:
        """A ValueError is Go's fatal line, worded by the failure text, and exit status 1."""

        def refuse() -> Any:
            raise ValueError("invalid topic name")

        stderr = io.StringIO()
        self.patch(sys, "stderr", stderr)
        with self.assertRaises(SystemExit) as raised:
            or_fatal(refuse, "failed creating producer %s")
        self.assertEqual(raised.exception.code, 1)
        self.assertTrue(stderr.getvalue().endswith(" failed creating producer invalid topic name\n"))
