"""Tests for :mod:`txnsq.cluster.options`: nsqd's cluster flags and checks."""

from __future__ import annotations

import dataclasses
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

from txnsq.cli import FlagError
from txnsq.cluster.options import parse_route_url, route_urls
from txnsq.nsqd.flags import parse_nsqd_args
from txnsq.nsqd.options import NSQDOptions


def valid(**changes: Any) -> NSQDOptions:
    return dataclasses.replace(NSQDOptions(), **changes)


class ClusterFlagTests(SynchronousTestCase):
    """The flags parse, in Go's spellings, to NSQDOptions attributes."""

    def test_parse(self) -> None:
        """Every cluster flag lands on its attribute; --routes repeats and splits on commas."""
        options = parse_nsqd_args(
            [
                "--cluster-address=127.0.0.1:6222",
                "--cluster-name", "c1",
                "--routes=nats-route://a:1,nats-route://b:2",
                "-routes=nats-route://c:3",
                "--cluster-advertise=10.0.0.1:6222",
                "--cluster-ping-interval=5s",
                "--nats-subject-prefix=bridge.",
                "--nats-account=ACC",
                "--nats-topics=^o",
            ]
        )
        options.validate()
        self.assertEqual(options.routes, ["nats-route://a:1", "nats-route://b:2", "nats-route://c:3"])
        self.assertEqual(
            (options.cluster_address, options.cluster_name, options.cluster_advertise),
            ("127.0.0.1:6222", "c1", "10.0.0.1:6222"),
        )
        self.assertEqual(options.cluster_ping_interval, 5.0)
        self.assertEqual(
            (options.nats_subject_prefix, options.nats_account, options.nats_topics),
            ("bridge.", "ACC", "^o"),
        )

    def test_defaults(self) -> None:
        """Off by default: no listener, no routes; prefix nsq., account $G."""
        options = NSQDOptions()
        options.validate()
        self.assertEqual((options.cluster_address, options.routes), ("", []))
        self.assertEqual((options.nats_subject_prefix, options.nats_account), ("nsq.", "$G"))

    def assertInvalid(self, text: str, **changes: Any) -> None:
        with self.assertRaises(ValueError) as caught:
            valid(**changes).validate()
        self.assertIn(text, str(caught.exception))

    def test_invalid(self) -> None:
        """Bad cluster settings are refused with the flag's name."""
        self.assertInvalid("--cluster-name is required", cluster_address="127.0.0.1:0")
        self.assertInvalid("--cluster-name is required", routes=["nats-route://a:1"])
        self.assertInvalid("scheme", cluster_name="c", routes=["http://a:1"])
        self.assertInvalid("host and a port", cluster_name="c", routes=["nats-route://a"])
        self.assertInvalid("--cluster-tls-cert and --cluster-tls-key", cluster_tls_cert="x")
        self.assertInvalid("--cluster-ping-interval", cluster_ping_interval=0.0)
        self.assertInvalid("--nats-account", nats_account="")
        self.assertInvalid("--nats-subject-prefix", nats_subject_prefix="a.*.")
        self.assertInvalid("--nats-topics", nats_topics="(")
        self.assertInvalid("--cluster-name must not contain spaces", cluster_name="a b")

    def test_route_urls(self) -> None:
        """Route URLs give scheme, host and port; lists split on commas."""
        self.assertEqual(parse_route_url("nats-route://127.0.0.1:6222/"), ("nats-route", "127.0.0.1", 6222))
        self.assertEqual(route_urls(["a, b", "c"]), ["a", "b", "c"])


class MinStandbysOptionTests(SynchronousTestCase):
    """``--mirror-min-standbys``: parsed, checked, off by default."""

    def assertInvalid(self, text: str, **changes: Any) -> None:
        with self.assertRaises(ValueError) as caught:
            valid(**changes).validate()
        self.assertIn(text, str(caught.exception))

    def test_default_off(self) -> None:
        """The default is 0 (no standby asked for), valid without routes."""
        options = NSQDOptions()
        options.validate()
        self.assertEqual(options.mirror_min_standbys, 0)

    def test_parse(self) -> None:
        """The flag, in Go's spelling, lands on mirror_min_standbys as an integer."""
        options = parse_nsqd_args(
            ["--cluster-name=c1", "--routes=nats-route://a:1", "--mirror-min-standbys=2"]
        )
        options.validate()
        self.assertEqual(options.mirror_min_standbys, 2)

    def test_with_either_ack(self) -> None:
        """Any count >= 0 is accepted with sync and with async (async refuses at publish time only)."""
        for ack in ("sync", "async"):
            for count in (0, 1, 3):
                valid(
                    cluster_name="c1",
                    routes=["nats-route://a:1"],
                    mirror_ack=ack,
                    mirror_min_standbys=count,
                ).validate()

    def test_invalid(self) -> None:
        """A negative count, a value not an integer, or a count without routes is refused with the flag's name."""
        routed: Any = {"cluster_name": "c1", "routes": ["nats-route://a:1"]}
        for value, shown in ((-1, "-1"), ("1", "'1'"), (1.5, "1.5"), (True, "True")):
            self.assertInvalid(
                "--mirror-min-standbys must be an integer >= 0 (%s)" % (shown,),
                mirror_min_standbys=value,
                **routed,
            )
        self.assertInvalid(
            "--mirror-min-standbys needs --cluster-address or --routes", mirror_min_standbys=1
        )
        with self.assertRaises(FlagError) as caught:
            parse_nsqd_args(["--mirror-min-standbys=x"])
        self.assertIn("-mirror-min-standbys", str(caught.exception))
