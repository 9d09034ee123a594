"""
The ``nsq_log`` console script, run as a process against the fake MetaQ
broker on a loopback socket.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from twisted.trial.unittest import SynchronousTestCase

from tests.metaq_fakes import FakeMetaqStore, ThreadedFakeBroker
from tests.test_tools_nsq_log import nsqd_id
from txnsq.protocol.metaq import OffsetRequest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class NSQLogScriptTests(SynchronousTestCase):
    """The console script against the fake broker on a loopback socket."""

    def run_tool(self, *args: str) -> "subprocess.CompletedProcess[bytes]":
        env = dict(os.environ)
        env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
        return subprocess.run(
            [sys.executable, "-m", "txnsq.tools.nsq_log"] + list(args),
            capture_output=True,
            env=env,
            timeout=60,
        )

    def test_prints_partition(self) -> None:
        """nsq_log prints the records from the earliest kept as text, and as JSON from an offset (moved to the start of its record), exiting 0."""
        store = FakeMetaqStore(topics=("t",), partitions_per_topic=2)
        for n in range(3):
            store.add("t", 1, b"m%d" % (n,), attribute=b"a" if n == 1 else None)
        broker = ThreadedFakeBroker(store)
        self.addCleanup(broker.stop)
        address = "--nsqd-metaq-address=" + broker.address
        text = self.run_tool(address, "--topic=t", "--partition=1")
        self.assertEqual((text.returncode, text.stdout), (0, b"m0\nm1\nm2\n"), text.stderr)
        lines = self.run_tool(address, "--topic=t", "--partition=1", "--format=json", "--offset=23", "-n", "1")
        self.assertEqual(lines.returncode, 0, lines.stderr)
        self.assertEqual(
            [json.loads(line) for line in lines.stdout.splitlines()],
            [{"id": "0000000000000002", "partition": 1, "offset": 22, "flag": 1, "attribute": "a", "body": "m1"}],
        )

    def test_timestamp(self) -> None:
        """--timestamp asks for the offset by time and prints exactly the records whose id time is not before it."""
        store = FakeMetaqStore(topics=("t",))
        at = 1795687200000
        for n, time_ms in enumerate((at - 20, at - 10, at - 5, at, at + 7)):
            # The fake's times are 10 ms late, so its offset by time is before
            # the first record at or after the time: the older ones read
            # first are skipped by their ids' time.
            store.add("t", 0, b"m%d" % (n,), msg_id=nsqd_id(time_ms), time_ms=time_ms + 10)
        broker = ThreadedFakeBroker(store)
        self.addCleanup(broker.stop)
        address = "--nsqd-metaq-address=" + broker.address
        result = self.run_tool(address, "--topic=t", "--timestamp=%d" % (at,))
        self.assertEqual((result.returncode, result.stdout), (0, b"m3\nm4\n"), result.stderr)
        self.assertEqual([r.timestamp_ms for r in store.requests if isinstance(r, OffsetRequest)], [at])
        result = self.run_tool(address, "--topic=t", "--timestamp=2026-11-26T10:00:00.007Z", "--format=json")
        self.assertEqual([json.loads(line)["body"] for line in result.stdout.splitlines()], ["m4"], result.stderr)
        result = self.run_tool(address, "--topic=t", "--timestamp=%d" % (at + 60000,))
        self.assertEqual((result.returncode, result.stdout), (0, b""), result.stderr)

    def test_tls(self) -> None:
        """With --tls-root-ca-file the tool speaks TLS from the first byte and verifies the broker; an untrusted broker is fatal."""
        import ssl

        from tests.integration.tls_certs import write_server_files

        directory = self.mktemp()
        os.makedirs(directory)
        files = write_server_files(directory)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(files.cert, files.key)
        store = FakeMetaqStore(topics=("t",))
        store.add("t", 0, b"over tls")
        broker = ThreadedFakeBroker(store, context)
        self.addCleanup(broker.stop)
        address = "--nsqd-metaq-address=" + broker.address
        result = self.run_tool(address, "--topic=t", "--tls-root-ca-file=" + files.ca)
        self.assertEqual((result.returncode, result.stdout), (0, b"over tls\n"), result.stderr)
        untrusted = self.run_tool(address, "--topic=t", "--tls")
        self.assertEqual(untrusted.returncode, 1)
        self.assertEqual(untrusted.stdout, b"")

    def test_unknown_topic_is_fatal(self) -> None:
        """A topic the broker lacks exits 1 with the broker's message."""
        broker = ThreadedFakeBroker(FakeMetaqStore())
        self.addCleanup(broker.stop)
        result = self.run_tool("--nsqd-metaq-address=" + broker.address, "--topic=nope")
        self.assertEqual(result.returncode, 1)
        self.assertIn(b"The topic `nope` in partition `0` is not exists", result.stderr)

    def test_missing_flags(self) -> None:
        """Without an address the tool exits 1 with Go's fatal line."""
        result = self.run_tool("--topic=t")
        self.assertEqual(result.returncode, 1)
        self.assertTrue(result.stderr.rstrip().endswith(b"--nsqd-metaq-address required"))

    def test_version(self) -> None:
        """--version prints the version line."""
        result = self.run_tool("--version")
        self.assertEqual(result.returncode, 0)
        self.assertTrue(result.stdout.startswith(b"nsq_log v"))
