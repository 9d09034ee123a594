"""
The IDENTIFY upgrades over real sockets on 127.0.0.1, against an nsqd
running in the test's reactor (``txnsq.testing.start_nsqd``): TLS, snappy
and deflate in every combination carrying PUB/SUB/RDY/FIN, client
certificate policies, ``--tls-required``, ``--tls-min-version``, and what
``/stats`` reports about upgraded clients.

Certificates come from :mod:`tests.integration.tls_certs`; the client is
:class:`tests.integration.nsq_client.UpgradingNSQClient`.  Nothing sleeps:
every wait is a Deferred with a timeout.
"""

from __future__ import annotations

from typing import Any, Dict, Generator, List, Optional, Tuple

import treq
from OpenSSL import SSL
from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.error import ConnectionDone, ConnectionLost
from twisted.internet.ssl import TLSVersion
from twisted.trial.unittest import TestCase
from twisted.web.client import Agent, HTTPConnectionPool

from tests.integration.nsq_client import NSQError, UpgradingNSQClient, connect_upgrading
from tests.integration.tls_certs import Issued, ServerFiles, client_tls_options, shared_pki, write_server_files
from txnsq.nsqd import tcp
from txnsq.testing import RunningNSQD, start_nsqd

#: How long messages may take to arrive.
DELIVERY_TIMEOUT = 10.0

#: What a refused TLS client sees: the handshake's alert, or the connection closing.
REFUSED = (SSL.Error, ConnectionLost, ConnectionDone)

# Bodies for the round trips: small ones, and one larger than a snappy
# chunk (64 KiB) and than the output buffer (16 KiB), not compressible to
# nothing.
BODIES = [b"first", b"second \x00\xff binary", bytes(range(256)) * 400]


class UpgradeTestCase(TestCase):
    """An nsqd with a certificate per test; clients that upgrade."""

    timeout = 20

    def setUp(self) -> None:
        from twisted.internet import reactor

        self.reactor = reactor
        self.pki = shared_pki()
        self.files: ServerFiles = write_server_files(self.mktemp(), self.pki)

    @inlineCallbacks
    def start(self, *args: str) -> Generator[Any, Any, RunningNSQD]:
        """An nsqd with the test certificate (no HTTPS listener) and ``args``."""
        nsqd = yield start_nsqd(args=self.files.args("--https-address=", *args))
        self.addCleanup(nsqd.stop)
        return nsqd  # type: ignore[no-any-return]

    @inlineCallbacks
    def connect(self, nsqd: RunningNSQD) -> Generator[Any, Any, UpgradingNSQClient]:
        """A connected client (magic sent), closed at the end of the test."""
        client = yield connect_upgrading(self.reactor, nsqd.tcp_port)
        self.addCleanup(client.close)
        return client  # type: ignore[no-any-return]

    @inlineCallbacks
    def upgraded(
        self,
        nsqd: RunningNSQD,
        tls: bool = False,
        compression: Optional[str] = None,
        certificate: Optional[Issued] = None,
        tls_options: Any = None,
        **fields: Any,
    ) -> Generator[Any, Any, Tuple[UpgradingNSQClient, Dict[str, Any]]]:
        """A client that identified and made the upgrades asked for; its IDENTIFY reply."""
        client = yield self.connect(nsqd)
        if compression is not None:
            fields[compression] = True
        if tls and tls_options is None:
            tls_options = client_tls_options(client=certificate)
        reply = yield client.identify(tls_options if tls else None, **fields)
        return client, reply

    def server_client(self, nsqd: RunningNSQD, client_id: str) -> Any:
        """nsqd's connection object for the client that identified as ``client_id``."""
        [found] = [c for c in nsqd.service.tcp_factory.clients if c.client_id == client_id]
        return found


class CombinationTests(UpgradeTestCase):
    """Every combination of TLS and compression carries PUB, MPUB, SUB, RDY and FIN."""

    @inlineCallbacks
    def round_trip(
        self, tls: bool, compression: Optional[str], level: Optional[int] = None
    ) -> Generator[Any, Any, None]:
        nsqd = yield self.start()
        fields: Dict[str, Any] = {}
        if level is not None:
            fields["deflate_level"] = level
        consumer, reply = yield self.upgraded(nsqd, tls, compression, client_id="consumer", **fields)
        self.assertEqual(
            (reply["tls_v1"], reply["snappy"], reply["deflate"]),
            (tls, compression == "snappy", compression == "deflate"),
        )
        if level is not None:
            self.assertEqual(reply["deflate_level"], level)
        yield consumer.sub("t", "c")
        consumer.rdy(10)
        yield consumer.round_trip()
        producer, _ = yield self.upgraded(nsqd, tls, compression, client_id="producer", **fields)
        for body in BODIES:
            response = yield producer.pub("t", body)
            self.assertEqual(response, b"OK")
        response = yield producer.mpub("t", [b"batch-1", b"batch-2"])
        self.assertEqual(response, b"OK")
        expected = BODIES + [b"batch-1", b"batch-2"]
        arrived = yield consumer.wait_messages(len(expected), DELIVERY_TIMEOUT)
        self.assertTrue(arrived)
        self.assertEqual([m.body for m in consumer.messages], expected)
        for message in consumer.messages:
            consumer.fin(message.id)
        yield consumer.round_trip()
        topic = nsqd.broker.find_topic("t")
        assert topic is not None
        channel = topic.get_channel("c")
        self.assertEqual((channel.in_flight_count, channel.depth()), (0, 0))
        for name in ("consumer", "producer"):
            connection = self.server_client(nsqd, name)
            self.assertEqual(
                (connection.tls, connection.snappy, connection.deflate),
                (tls, compression == "snappy", compression == "deflate"),
            )
        self.assertEqual(consumer.tls_version != "", tls)

    def test_plain(self) -> "Deferred[None]":
        """No upgrade: the reply grants nothing and messages go through."""
        return self.round_trip(False, None)

    def test_snappy(self) -> "Deferred[None]":
        """Snappy without TLS."""
        return self.round_trip(False, "snappy")

    def test_deflate(self) -> "Deferred[None]":
        """Deflate without TLS, at nsqd's default level."""
        return self.round_trip(False, "deflate")

    def test_deflate_level_1(self) -> "Deferred[None]":
        """Deflate at level 1."""
        return self.round_trip(False, "deflate", 1)

    def test_deflate_level_6(self) -> "Deferred[None]":
        """Deflate at level 6, the --max-deflate-level default."""
        return self.round_trip(False, "deflate", 6)

    def test_tls(self) -> "Deferred[None]":
        """TLS alone."""
        return self.round_trip(True, None)

    def test_tls_snappy(self) -> "Deferred[None]":
        """Snappy inside TLS."""
        return self.round_trip(True, "snappy")

    def test_tls_deflate(self) -> "Deferred[None]":
        """Deflate inside TLS."""
        return self.round_trip(True, "deflate")

    def test_tls_deflate_level_1(self) -> "Deferred[None]":
        """Deflate at level 1 inside TLS."""
        return self.round_trip(True, "deflate", 1)

    @inlineCallbacks
    def test_deflate_level_clamped(self) -> Generator[Any, Any, None]:
        """A level above --max-deflate-level is lowered to it, and works."""
        nsqd = yield self.start("--max-deflate-level=3")
        client, reply = yield self.upgraded(nsqd, False, "deflate", deflate_level=9)
        self.assertEqual((reply["deflate_level"], reply["max_deflate_level"]), (3, 3))
        self.assertEqual(client.encoder.level, 3)
        response = yield client.pub("t", b"x" * 1000)
        self.assertEqual(response, b"OK")

    @inlineCallbacks
    def test_compression_disabled(self) -> Generator[Any, Any, None]:
        """With --snappy=false and --deflate=false both are declined; the connection stays plain."""
        nsqd = yield self.start("--snappy=false", "--deflate=false")
        for compression in ("snappy", "deflate"):
            client, reply = yield self.upgraded(nsqd, False, compression)
            self.assertFalse(reply[compression])
            self.assertIsNone(client.decoder)
            response = yield client.pub("t", b"plain")
            self.assertEqual(response, b"OK")

    @inlineCallbacks
    def test_both_compressions_refused(self) -> Generator[Any, Any, None]:
        """Asking for snappy and deflate is E_IDENTIFY_FAILED, and the connection is closed."""
        nsqd = yield self.start()
        client = yield self.connect(nsqd)
        error = yield self.assertFailure(client.negotiate(snappy=True, deflate=True), NSQError)
        self.assertEqual(error.args[0], b"E_IDENTIFY_FAILED cannot enable both deflate and snappy compression")
        yield client.when_lost()


class ClientCertificateTests(UpgradeTestCase):
    """--tls-client-auth-policy: require (any certificate) and require-verify."""

    @inlineCallbacks
    def refused(self, nsqd: RunningNSQD, certificate: Optional[Issued]) -> Generator[Any, Any, None]:
        """A client presenting ``certificate`` fails the upgrade and is disconnected."""
        client = yield self.connect(nsqd)
        yield self.assertFailure(client.identify(client_tls_options(client=certificate)), *REFUSED)
        yield client.when_lost()
        self.assertEqual(nsqd.broker.find_topic("t"), None)

    @inlineCallbacks
    def accepted(self, nsqd: RunningNSQD, certificate: Issued, name: str) -> Generator[Any, Any, None]:
        """A client presenting ``certificate`` (common name ``name``) upgrades and publishes."""
        client, reply = yield self.upgraded(nsqd, True, certificate=certificate, client_id="cert")
        self.assertTrue(reply["tls_v1"])
        response = yield client.pub("t", b"signed")
        self.assertEqual(response, b"OK")
        peer = self.server_client(nsqd, "cert").transport.getPeerCertificate()
        self.assertEqual(peer.get_subject().commonName, name)

    @inlineCallbacks
    def test_require_refuses_no_certificate(self) -> Generator[Any, Any, None]:
        """require: a client without a certificate cannot complete the upgrade."""
        nsqd = yield self.start("--tls-client-auth-policy=require")
        yield self.refused(nsqd, None)

    @inlineCallbacks
    def test_require_accepts_any_certificate(self) -> Generator[Any, Any, None]:
        """require: a certificate from a CA nsqd does not know is accepted."""
        nsqd = yield self.start("--tls-client-auth-policy=require")
        yield self.accepted(nsqd, self.pki.stranger, "mallory")

    @inlineCallbacks
    def test_require_verify_refuses_other_ca(self) -> Generator[Any, Any, None]:
        """require-verify: a certificate from another CA, or none, is refused."""
        nsqd = yield self.start(
            "--tls-client-auth-policy=require-verify", "--tls-root-ca-file=" + self.files.ca
        )
        yield self.refused(nsqd, self.pki.stranger)
        yield self.refused(nsqd, None)

    @inlineCallbacks
    def test_require_verify_accepts_root_ca(self) -> Generator[Any, Any, None]:
        """require-verify: a certificate from --tls-root-ca-file's CA is accepted."""
        nsqd = yield self.start(
            "--tls-client-auth-policy=require-verify", "--tls-root-ca-file=" + self.files.ca
        )
        yield self.accepted(nsqd, self.pki.client, "alice")

    @inlineCallbacks
    def test_policy_implies_tls_required(self) -> Generator[Any, Any, None]:
        """A client auth policy turns on --tls-required: SUB without TLS is refused."""
        nsqd = yield self.start("--tls-client-auth-policy=require")
        client = yield self.connect(nsqd)
        error = yield self.assertFailure(client.sub("t", "c"), NSQError)
        self.assertEqual(error.args[0], b"E_INVALID cannot SUB in current state (TLS required)")
        yield client.when_lost()


class TLSRequiredTests(UpgradeTestCase):
    """--tls-required: nothing but IDENTIFY before the TLS upgrade."""

    @inlineCallbacks
    def refused_before_tls(self, value: str) -> Generator[Any, Any, None]:
        nsqd = yield self.start("--tls-required=" + value)
        sub = yield self.connect(nsqd)
        error = yield self.assertFailure(sub.sub("t", "c"), NSQError)
        self.assertEqual(error.args[0], b"E_INVALID cannot SUB in current state (TLS required)")
        yield sub.when_lost()
        publisher = yield self.connect(nsqd)
        error = yield self.assertFailure(publisher.pub("t", b"x"), NSQError)
        self.assertEqual(error.args[0], b"E_INVALID cannot PUB in current state (TLS required)")
        yield publisher.when_lost()
        self.assertIsNone(nsqd.broker.find_topic("t"))
        # IDENTIFY is allowed, but without tls_v1 nothing else is.
        declined, reply = yield self.upgraded(nsqd)
        self.assertFalse(reply["tls_v1"])
        error = yield self.assertFailure(declined.pub("t", b"x"), NSQError)
        self.assertEqual(error.args[0], b"E_INVALID cannot PUB in current state (TLS required)")
        yield declined.when_lost()
        # With TLS everything works.
        client, _ = yield self.upgraded(nsqd, True)
        response = yield client.pub("t", b"x")
        self.assertEqual(response, b"OK")
        response = yield client.sub("t", "c")
        self.assertEqual(response, b"OK")

    def test_true(self) -> "Deferred[None]":
        """--tls-required=true refuses SUB and PUB before TLS, fatally."""
        return self.refused_before_tls("true")

    def test_tcp_https(self) -> "Deferred[None]":
        """--tls-required=tcp-https applies to TCP clients just the same."""
        return self.refused_before_tls("tcp-https")


class TLSFailureTests(UpgradeTestCase):
    """Clients that get TLS wrong lose their connection, and only theirs."""

    @inlineCallbacks
    def test_clear_text_after_tls_reply(self) -> Generator[Any, Any, None]:
        """A client that asks for TLS then writes clear text is disconnected; another keeps working."""
        nsqd = yield self.start()
        good, _ = yield self.upgraded(nsqd, True, "snappy")
        yield good.sub("t", "c")
        good.rdy(5)
        yield good.round_trip()
        bad = yield self.connect(nsqd)
        reply = yield bad.negotiate(tls_v1=True)
        self.assertTrue(reply["tls_v1"])
        bad.transport.write(b"PUB t\n\x00\x00\x00\x05hello")
        yield bad.when_lost()
        topic = nsqd.broker.find_topic("t")
        self.assertEqual(topic.depth() if topic is not None else 0, 0)
        response = yield good.pub("t", b"still here")
        self.assertEqual(response, b"OK")
        arrived = yield good.wait_messages(1, DELIVERY_TIMEOUT)
        self.assertTrue(arrived)
        self.assertEqual(good.messages[0].body, b"still here")

    @inlineCallbacks
    def test_handshake_never_started(self) -> Generator[Any, Any, None]:
        """A client that asks for TLS and never shakes hands is closed at the handshake deadline."""
        self.patch(tcp, "TLS_HANDSHAKE_TIMEOUT", 0.2)
        nsqd = yield self.start()
        silent = yield self.connect(nsqd)
        reply = yield silent.negotiate(tls_v1=True, heartbeat_interval=60000)
        self.assertTrue(reply["tls_v1"])
        yield silent.when_lost()

    @inlineCallbacks
    def test_untrusted_server(self) -> Generator[Any, Any, None]:
        """A client that does not trust nsqd's CA gives up the handshake."""
        nsqd = yield self.start()
        client = yield self.connect(nsqd)
        options = client_tls_options(trust=self.pki.other_ca)
        yield self.assertFailure(client.identify(options), *REFUSED)

    @inlineCallbacks
    def test_tls_without_certificate(self) -> Generator[Any, Any, None]:
        """An nsqd without a certificate declines tls_v1 and the connection stays usable."""
        nsqd = yield start_nsqd()
        self.addCleanup(nsqd.stop)
        client, reply = yield self.upgraded(nsqd, False, "deflate", tls_v1=True)
        self.assertEqual((reply["tls_v1"], reply["deflate"]), (False, True))
        response = yield client.pub("t", b"x")
        self.assertEqual(response, b"OK")

    @inlineCallbacks
    def test_min_version(self) -> Generator[Any, Any, None]:
        """--tls-min-version=tls1.3 refuses a TLS 1.2 client; without it, the client gets TLS 1.2."""
        capped = dict(lowerMaximumSecurityTo=TLSVersion.TLSv1_2)
        nsqd = yield self.start()
        client, _ = yield self.upgraded(nsqd, True, tls_options=client_tls_options(**capped))
        self.assertEqual(client.tls_version, "TLSv1.2")
        strict = yield self.start("--tls-min-version=tls1.3")
        refused = yield self.connect(strict)
        yield self.assertFailure(refused.identify(client_tls_options(**capped)), *REFUSED)
        yield refused.when_lost()


class StatsTests(UpgradeTestCase):
    """/stats reports each client's upgrades."""

    @inlineCallbacks
    def stats_clients(self, nsqd: RunningNSQD) -> Generator[Any, Any, Dict[str, Dict[str, Any]]]:
        """The clients of every channel in /stats?format=json, by client_id."""
        pool = HTTPConnectionPool(self.reactor, persistent=False)
        http = treq.client.HTTPClient(Agent(self.reactor, pool=pool))
        response = yield http.get("http://127.0.0.1:%d/stats?format=json" % (nsqd.http_port,))
        stats = yield response.json()
        found: Dict[str, Dict[str, Any]] = {}
        for topic in stats["topics"]:
            for channel in topic["channels"]:
                for client in channel["clients"]:
                    found[client["client_id"]] = client
        return found

    @inlineCallbacks
    def test_upgrades_reported(self) -> Generator[Any, Any, None]:
        """tls, tls_version, tls_cipher_suite, snappy and deflate, per connected client."""
        nsqd = yield self.start()
        consumers: List[Tuple[str, bool, Optional[str], Any]] = [
            ("tls-snappy", True, "snappy", None),
            ("tls12-deflate", True, "deflate", client_tls_options(lowerMaximumSecurityTo=TLSVersion.TLSv1_2)),
            ("deflate", False, "deflate", None),
            ("plain", False, None, None),
        ]
        clients: Dict[str, UpgradingNSQClient] = {}
        for name, tls, compression, options in consumers:
            client, _ = yield self.upgraded(nsqd, tls, compression, tls_options=options, client_id=name)
            yield client.sub("t", "c")
            clients[name] = client
        found = yield self.stats_clients(nsqd)
        self.assertEqual(sorted(found), sorted(clients))
        for name, tls, compression, _ in consumers:
            entry = found[name]
            expected_version = clients[name].tls_version.replace("TLSv", "TLS")
            self.assertEqual(
                (entry["tls"], entry["tls_version"], entry["snappy"], entry["deflate"]),
                (tls, expected_version, compression == "snappy", compression == "deflate"),
                name,
            )
            self.assertEqual(bool(entry["tls_cipher_suite"]), tls, name)
        self.assertEqual(found["tls12-deflate"]["tls_version"], "TLS1.2")
        self.assertIn(found["tls-snappy"]["tls_version"], ("TLS1.2", "TLS1.3"))

