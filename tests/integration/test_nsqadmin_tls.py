"""
nsqadmin reading and acting on an nsqd that requires TLS, over real
sockets: an in-process nsqd with ``--tls-required=true`` answers plain
HTTP ``403 TLS_REQUIRED`` with its HTTPS port, and nsqadmin asks again
over HTTPS, checking the certificate with ``--http-client-tls-root-ca-file``
and showing ``--http-client-tls-cert`` when nsqd requires one.
"""

from __future__ import annotations

import json
import os
from typing import Any, Generator, List

import treq
from twisted.internet import reactor
from twisted.internet.defer import inlineCallbacks
from twisted.trial.unittest import TestCase

from tests.integration.tls_certs import shared_pki, write_server_files
from txnsq.nsqadmin.options import parse_nsqadmin_args
from txnsq.nsqadmin.service import NSQAdminService
from txnsq.testing import start_nsqd


class NSQAdminTLSTests(TestCase):
    """nsqadmin over an nsqd that serves its API only over HTTPS."""

    timeout = 60

    @inlineCallbacks
    def start(
        self, nsqd_args: List[str], admin_args: List[str]
    ) -> Generator[Any, Any, "tuple[Any, str]"]:
        directory = self.mktemp()
        os.makedirs(directory)
        files = write_server_files(directory)
        self.ca = files.ca
        self.client_cert, self.client_key = shared_pki().client.write(directory, "client")
        nsqd = yield start_nsqd(
            files.args(
                "--https-address=127.0.0.1:0",
                "--tls-required=true",
                # Actions go to the address nsqd broadcasts, which the
                # certificate names.
                "--broadcast-address=127.0.0.1",
                *[arg.format(ca=self.ca) for arg in nsqd_args],
            )
        )
        self.addCleanup(nsqd.stop)
        options = parse_nsqadmin_args(
            [
                "--http-address=127.0.0.1:0",
                "--nsqd-http-address=127.0.0.1:%d" % (nsqd.http_port,),
                "--sample-interval=0",
                "--http-client-request-timeout=10s",
                *[arg.format(ca=self.ca, cert=self.client_cert, key=self.client_key) for arg in admin_args],
            ]
        )
        options.validate()
        admin = NSQAdminService.fromOptions(options, reactor)
        admin.startService()
        self.addCleanup(admin.stopService)
        yield admin.whenListening()
        return nsqd, "http://127.0.0.1:%d" % (admin.bound_port(),)

    @inlineCallbacks
    def call(self, method: str, url: str, body: Any = None) -> Generator[Any, Any, "tuple[int, Any]"]:
        data = None if body is None else json.dumps(body).encode("utf-8")
        response = yield treq.request(method, url, data=data, persistent=False)
        content = yield treq.content(response)
        return response.code, json.loads(content)

    @inlineCallbacks
    def test_reads_and_acts_over_https(self) -> Generator[Any, Any, None]:
        """With the CA, nsqadmin lists the TLS-only nsqd's topics and pauses one there."""
        nsqd, admin = yield self.start([], ["--http-client-tls-root-ca-file={ca}"])
        topic = nsqd.broker.get_topic("secure")
        code, doc = yield self.call("POST", admin + "/api/topics/secure", {"action": "pause"})
        self.assertEqual((code, doc), (200, {"message": ""}))
        self.assertTrue(topic.paused)
        code, doc = yield self.call("GET", admin + "/api/topics")
        self.assertEqual((code, doc), (200, {"topics": ["secure"], "message": ""}))
        code, doc = yield self.call("GET", admin + "/api/topics/secure")
        self.assertEqual(code, 200)
        self.assertEqual(doc["topic_name"], "secure")

    @inlineCallbacks
    def test_untrusted_certificate(self) -> Generator[Any, Any, None]:
        """Without the CA (the system's roots) the nsqd is unreachable: 502 naming the node."""
        nsqd, admin = yield self.start([], [])
        code, doc = yield self.call("GET", admin + "/api/topics")
        self.assertEqual(code, 502)
        self.assertIn("127.0.0.1:%d" % (nsqd.http_port,), doc["message"])

    @inlineCallbacks
    def test_insecure_skip_verify(self) -> Generator[Any, Any, None]:
        """--http-client-tls-insecure-skip-verify reads the nsqd without checking its certificate."""
        _, admin = yield self.start([], ["--http-client-tls-insecure-skip-verify"])
        code, doc = yield self.call("GET", admin + "/api/topics")
        self.assertEqual((code, doc), (200, {"topics": [], "message": ""}))

    @inlineCallbacks
    def test_client_certificate(self) -> Generator[Any, Any, None]:
        """An nsqd that requires a client certificate is read with --http-client-tls-cert and -key."""
        verify = ["--tls-client-auth-policy=require-verify", "--tls-root-ca-file={ca}"]
        _, without = yield self.start(verify, ["--http-client-tls-root-ca-file={ca}"])
        code, _ = yield self.call("GET", without + "/api/topics")
        self.assertEqual(code, 502)
        _, admin = yield self.start(
            verify,
            [
                "--http-client-tls-root-ca-file={ca}",
                "--http-client-tls-cert={cert}",
                "--http-client-tls-key={key}",
            ],
        )
        code, doc = yield self.call("GET", admin + "/api/topics")
        self.assertEqual((code, doc), (200, {"topics": [], "message": ""}))
