"""Tests for :mod:`txnsq.cluster.options`: nsqd's cluster flags and checks."""

from __future__ import annotations

import dataclasses
from typing import Any

from twisted.trial.unittest import SynchronousTestCase

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
