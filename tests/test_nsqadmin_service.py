"""
Tests for txnsq.nsqadmin.service and AdminBase.sample: the cluster sampled
every --sample-interval, whoever looks, for the rates and charts.
"""

from __future__ import annotations

from typing import Any

from twisted.internet.task import Clock
from twisted.internet.testing import MemoryReactorClock
from twisted.trial.unittest import SynchronousTestCase

from tests.nsqadmin_fakes import LOOKUPD, NSQD_A, FakeCluster, nsqd_stats
from txnsq.nsqadmin.app import NSQAdminApp
from txnsq.nsqadmin.clusterinfo import ClusterInfo
from txnsq.nsqadmin.options import NSQAdminOptions, parse_nsqadmin_args
from txnsq.nsqadmin.service import NSQAdminService


class SampleTests(SynchronousTestCase):
    """Tests for AdminBase.sample."""

    def setUp(self) -> None:
        self.fake = FakeCluster().standard()
        self.clock = Clock()
        self.clock.advance(1795600100)
        options = NSQAdminOptions(nsqlookupd_http_addresses=[LOOKUPD])
        self.app = NSQAdminApp(options, ClusterInfo(self.fake.request), self.clock)

    def test_samples_every_topic_and_channel(self) -> None:
        """A sample records each topic's summed depth and each channel's; two give a rate."""
        self.successResultOf(self.app.sample())
        # The fake nsqds hold 5 and 7 in the topic and in its channel.
        [first] = self.app.history.samples("orders")
        self.assertEqual(first.depth, 24)
        self.assertEqual(len(self.app.history.samples("orders/billing")), 1)
        self.fake.answers["http://%s/stats" % NSQD_A] = nsqd_stats(5, 150)
        self.clock.advance(10)
        self.successResultOf(self.app.sample())
        self.assertEqual(self.app.history.rate("orders"), 5.0)

    def test_cluster_down(self) -> None:
        """With every node refusing, a sample records nothing and does not fail."""
        self.fake.answers.clear()
        self.assertIsNone(self.successResultOf(self.app.sample()))
        self.assertEqual(self.app.history.samples("orders"), [])


class ServiceSamplingTests(SynchronousTestCase):
    """Tests for NSQAdminService's sampler."""

    def service(self, *flags: str) -> "tuple[NSQAdminService, MemoryReactorClock]":
        options = parse_nsqadmin_args(
            ["--http-address=127.0.0.1:0", "--nsqd-http-address=127.0.0.1:4151", *flags])
        options.validate()
        reactor = MemoryReactorClock()
        return NSQAdminService(options, reactor), reactor

    def test_samples_at_start_and_every_interval(self) -> None:
        """Started, the service asks nsqd for its stats at once and again every --sample-interval."""
        service, reactor = self.service("--sample-interval=5s")
        service.startService()
        self.assertEqual(len(reactor.tcpClients), 1)
        # The first round ends when its request times out (5 s by default).
        reactor.advance(5)
        reactor.advance(5)
        self.assertEqual(len(reactor.tcpClients), 2)
        service.stopService()
        self.assertFalse(service.sampler is not None and service.sampler.running)
        reactor.advance(60)
        self.assertEqual(len(reactor.tcpClients), 2)

    def test_zero_disables(self) -> None:
        """--sample-interval=0 samples only when a page is viewed."""
        service, reactor = self.service("--sample-interval=0")
        self.assertIsNone(service.sampler)
        service.startService()
        reactor.advance(60)
        self.assertEqual(reactor.tcpClients, [])
        service.stopService()

    def test_default_and_negative(self) -> None:
        """The default is 10 s; a negative interval is refused."""
        self.assertEqual(NSQAdminOptions().sample_interval, 10.0)
        options = parse_nsqadmin_args(["--nsqd-http-address=127.0.0.1:4151", "--sample-interval=-1s"])
        with self.assertRaises(ValueError) as raised:
            options.validate()
        self.assertEqual(str(raised.exception), "--sample-interval must not be negative")


class ConstructionTests(SynchronousTestCase):
    """NSQAdminService's constructor takes objects and does no I/O; fromOptions reads the TLS files."""

    def options(self, *flags: str) -> NSQAdminOptions:
        return parse_nsqadmin_args(["--nsqd-http-address=127.0.0.1:4151", "--sample-interval=0", *flags])

    def test_no_io(self) -> None:
        """Built, the service has neither listened nor connected anywhere."""
        reactor = MemoryReactorClock()
        service = NSQAdminService(self.options(), reactor)
        self.assertEqual((reactor.tcpServers, reactor.tcpClients), ([], []))
        self.assertEqual(service.http_listener.description, "tcp:4171:interface=0.0.0.0")

    def test_tls_files_need_from_options(self) -> None:
        """Options naming TLS files without a tls_policy point to fromOptions; it reads them."""
        from tests.integration.tls_certs import shared_pki

        directory = self.mktemp()
        cert, key = shared_pki().client.write(directory, "client")
        options = self.options("--http-client-tls-cert=" + cert, "--http-client-tls-key=" + key)
        error = self.assertRaises(ValueError, NSQAdminService, options, MemoryReactorClock())
        self.assertIn("fromOptions", str(error))
        service = NSQAdminService.fromOptions(options, MemoryReactorClock())
        self.assertIsNotNone(service.http)

    def test_from_options_bad_file(self) -> None:
        """fromOptions refuses a TLS file it cannot read, with Go's reason."""
        missing = self.options("--http-client-tls-root-ca-file=" + self.mktemp())
        error = self.assertRaises(ValueError, NSQAdminService.fromOptions, missing, MemoryReactorClock())
        self.assertIn("TLS root CA file", str(error))

    def test_tls_policy_object(self) -> None:
        """A tls_policy object is the HTTP client's, whatever the options name."""
        from twisted.web.client import BrowserLikePolicyForHTTPS

        import txnsq.http_client

        given = []
        real = txnsq.http_client.GoHTTPClient

        def recording(*args: Any, **kwargs: Any) -> Any:
            given.append(kwargs["tls_policy"])
            return real(*args, **kwargs)

        self.patch(txnsq.http_client, "GoHTTPClient", recording)
        policy = BrowserLikePolicyForHTTPS()
        options = self.options("--http-client-tls-root-ca-file=/nonexistent/ca.pem")
        NSQAdminService(options, MemoryReactorClock(), tls_policy=policy)
        self.assertEqual(given, [policy])

    def test_endpoint_object(self) -> None:
        """The HTTP listener may be an IStreamServerEndpoint; it listens once started."""
        from tests.endpoint_fakes import RecordingEndpoint

        endpoint = RecordingEndpoint(4171)
        reactor = MemoryReactorClock()
        service = NSQAdminService.fromOptions(self.options(), reactor, http_endpoint=endpoint)
        self.assertEqual(endpoint.factories, [])
        service.startService()
        self.addCleanup(service.stopService)
        self.assertEqual(len(endpoint.factories), 1)
        self.assertEqual(service.bound_port(), 4171)
        self.assertEqual(reactor.tcpServers, [])
