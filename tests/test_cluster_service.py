"""Tests for :mod:`txnsq.cluster.service`: building the cluster service of nsqd."""

from __future__ import annotations

import dataclasses
import os

from twisted.internet.task import Clock
from twisted.trial.unittest import SynchronousTestCase

from tests.core_fakes import make_broker
from txnsq.cluster.service import ClusterService, cluster_tls_options
from txnsq.nsqd.options import NSQDOptions
from txnsq.nsqd.tls import TLSConfigError


def options(**changes: object) -> NSQDOptions:
    return dataclasses.replace(
        NSQDOptions(), cluster_address="127.0.0.1:0", cluster_name="c", **changes
    )


class ClusterServiceTests(SynchronousTestCase):
    """The service is built from objects; the TLS files are read beforehand."""

    def test_no_io_without_tls(self) -> None:
        """Without TLS the service is built with its listener and no route yet."""
        service = ClusterService(make_broker(), options(), Clock())
        self.assertEqual([listener.label for listener in service.listeners()], ["Cluster"])
        self.assertEqual(service.node.connections, set())
        self.assertFalse(service.node.tls)

    def test_tls_files_need_reading(self) -> None:
        """Options naming TLS files without tls= are refused: the files are read by cluster_tls_options."""
        named = options(cluster_tls_cert="c.pem", cluster_tls_key="k.pem")
        self.assertRaises(ValueError, ClusterService, make_broker(), named, Clock())

    def test_missing_tls_file(self) -> None:
        """A TLS file that cannot be read is a TLSConfigError naming the cluster."""
        missing = os.path.join(self.mktemp(), "missing.pem")
        named = options(cluster_tls_cert=missing, cluster_tls_key=missing)
        with self.assertRaises(TLSConfigError) as caught:
            cluster_tls_options(named)
        self.assertIn("cluster TLS", str(caught.exception))

    def test_no_tls_options(self) -> None:
        """Without --cluster-tls-cert there are no TLS options."""
        self.assertIsNone(cluster_tls_options(options()))

    def test_tls_marks_routes(self) -> None:
        """With tls= the node says tls_required in INFO and CONNECT."""
        from twisted.internet.ssl import CertificateOptions

        service = ClusterService(
            make_broker(), options(), Clock(), tls=(CertificateOptions(), CertificateOptions())
        )
        self.assertTrue(service.node.info_fields()["tls_required"])
        self.assertTrue(service.node.connect_fields()["tls_required"])
