"""Tests for :mod:`txnsq.cluster.metrics`, read back with prometheus_client's parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families
from twisted.trial.unittest import SynchronousTestCase

from tests.cluster_fakes import dialed_route, make_node
from txnsq.cluster.metrics import render_cluster_metrics


class ClusterMetricsTests(SynchronousTestCase):
    """The cluster section of /stats as Prometheus families."""

    def test_samples(self) -> None:
        """Route counts, per-route traffic and interest, and the bridge counts are exposed."""
        node, clock, dials = make_node()
        node.start(["nats-route://127.0.0.1:6222"])
        protocol, transport = dialed_route(node, dials, "SA")
        protocol.dataReceived(b"RS+ $G s\r\n")
        node.publish("$G", "s", b"abcd")
        stats = node.stats()
        stats["nats_bridge"] = {"messages_from_nats": 3, "messages_to_nats": 1, "messages_invalid": 0}
        text = render_cluster_metrics(stats).decode()
        samples = {
            (sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
        }
        labels = (("direction", "out"), ("server_id", "SA"), ("server_name", "SA"))
        self.assertEqual(samples[("nsqd_cluster_routes", ())], 1)
        self.assertEqual(samples[("nsqd_cluster_route_interest", labels)], 1)
        self.assertEqual(samples[("nsqd_cluster_route_messages_out_total", labels)], 1)
        self.assertEqual(samples[("nsqd_cluster_route_bytes_out_total", labels)], 4)
        self.assertEqual(samples[("nsqd_nats_bridge_messages_from_nats_total", ())], 3)
