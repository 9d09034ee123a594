"""
What the ``nsqd`` console script imports: a plain nsqd (no TLS, no auth
server, TCP listeners) leaves out what it does not use, and one with a
certificate still gets TLS.

Each test runs :func:`txnsq.nsqd.script.main` in a child Python on
``127.0.0.1:0``; once it listens, the child prints the names in
``sys.modules`` as a JSON list and stops.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any, Generator, List

from twisted.internet.defer import inlineCallbacks
from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial.unittest import TestCase

from tests.integration.tls_certs import write_server_files

#: The child: nsqd's console script, reporting its modules once it listens.
_CHILD = """
import json, sys
import txnsq.nsqd.script as script

started = script._running

def running():
    started()
    from twisted.internet import reactor

    def report():
        sys.stdout.write(json.dumps({
            "modules": sorted(sys.modules),
            "startTLS": hasattr(sys.modules["twisted.internet.tcp"].Server, "startTLS"),
        }) + "\\n")
        sys.stdout.flush()
        reactor.stop()

    reactor.callLater(0, report)

script._running = running
script.main(sys.argv[1:])
"""

#: Modules a plain nsqd never uses, by prefix: the other daemons, Spark,
#: Prometheus, TLS and its libraries, the HTTP client (auth, lookupd
#: channel queries), the lookupd peers and statsd (not configured), the
#: twistd plugin scan, and until a client or request asks for them the
#: profiler (/debug/pprof) and snappy.
LAZY = (
    "txnsq.nsqadmin",
    "txnsq.nsqlookupd",
    "txnsq.spark",
    "txnsq.client",
    "txnsq.tools",
    "txnsq.nsqd.auth",
    "txnsq.nsqd.tap",
    "txnsq.nsqd.lookup_channels",
    "txnsq.nsqd.lookup_peer",
    "txnsq.nsqd.statsd",
    "twisted.application.internet",
    "txnsq.http_client",
    "pyspark",
    "pyarrow",
    "prometheus_client",
    "OpenSSL",
    "cryptography",
    "service_identity",
    "treq",
    "twisted.internet.ssl",
    "twisted.internet._sslverify",
    "twisted.protocols.tls",
    "twisted.web.client",
    "twisted.plugins",
    "twisted.scripts",
    "twisted.application.app",
    "txnsq.http.profiles",
    "cProfile",
    "snappy",
    "cramjam",
)


def _lazy_loaded(modules: List[str]) -> List[str]:
    return [
        name
        for name in modules
        if any(name == prefix or name.startswith(prefix + ".") for prefix in LAZY)
    ]


class NSQDScriptImportsTests(TestCase):
    """The modules a started ``nsqd`` console script has imported."""

    timeout = 60

    def run_nsqd(self, *flags: str) -> Any:
        """Run the script on free ports; fires with its JSON report."""
        data_path = self.mktemp()
        os.makedirs(data_path)
        argv = [
            "-c",
            _CHILD,
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
            "--https-address=127.0.0.1:0",
            "--data-path=" + data_path,
        ] + list(flags)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            [os.getcwd(), os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))]
            + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
        )
        done = getProcessOutputAndValue(sys.executable, argv, env=env)

        def parse(result: Any) -> Any:
            out, err, code = result
            self.assertEqual(code, 0, err.decode("utf-8", "replace"))
            lines = [line for line in out.splitlines() if line.startswith(b"{")]
            self.assertEqual(len(lines), 1, (out, err))
            return json.loads(lines[0])

        return done.addCallback(parse)

    @inlineCallbacks
    def test_plain_nsqd_leaves_out_what_it_does_not_use(self) -> Generator[Any, Any, None]:
        """A plain nsqd imports neither TLS, nor the other daemons, Spark, Prometheus or the plugins."""
        report = yield self.run_nsqd()
        self.assertIn("txnsq.nsqd.service", report["modules"])
        self.assertEqual(_lazy_loaded(report["modules"]), [])
        self.assertFalse(report["startTLS"])

    @inlineCallbacks
    def test_nsqd_with_certificate_has_tls(self) -> Generator[Any, Any, None]:
        """With --tls-cert and --tls-key, the reactor's TCP connections can start TLS."""
        directory = self.mktemp()
        os.makedirs(directory)
        files = write_server_files(directory)
        report = yield self.run_nsqd(*files.args())
        self.assertIn("OpenSSL", report["modules"])
        self.assertIn("twisted.protocols.tls", report["modules"])
        self.assertTrue(report["startTLS"])

    @inlineCallbacks
    def test_nsqd_with_auth_server_has_tls(self) -> Generator[Any, Any, None]:
        """With --auth-http-address (which may be https), the reactor keeps TLS."""
        report = yield self.run_nsqd("--auth-http-address=127.0.0.1:1")
        self.assertTrue(report["startTLS"])
