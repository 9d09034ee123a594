"""
The examples of ``docs/embedding.md`` run as they are written, but for
their fixed ports: each Python block is executed here with its port
numbers replaced by free ones (0, where nothing else needs to know the
port), and the services it builds are started, checked and stopped on
127.0.0.1.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, Generator, List

from twisted.application.service import IService
from twisted.internet.defer import inlineCallbacks
from twisted.trial.unittest import TestCase

from tests.integration.nsqd_process import free_port

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "embedding.md")

_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.M | re.S)


def example_blocks() -> List[str]:
    """The Python code blocks of ``docs/embedding.md``, in order."""
    with open(DOC, encoding="utf-8") as doc:
        return _BLOCK.findall(doc.read())


def run_example(number: int, ports: Dict[int, int]) -> Dict[str, Any]:
    """Execute block ``number`` with each port of ``ports`` replaced; its names."""
    block = example_blocks()[number]
    for old, new in ports.items():
        block, count = re.subn(r"\b%d\b" % (old,), str(new), block)
        assert count, "port %d is not in example %d" % (old, number)
    namespace: Dict[str, Any] = {"__name__": "embedding_example_%d" % (number,)}
    exec(compile(block, "%s[python block %d]" % (DOC, number), "exec"), namespace)
    return namespace


class EmbeddingDocExamplesTests(TestCase):
    """docs/embedding.md's examples."""

    def test_examples_on_page(self) -> None:
        """The page holds the two examples run here."""
        blocks = example_blocks()
        self.assertEqual(len(blocks), 2)
        self.assertIn('Application("my-app")', blocks[0])
        self.assertIn("TCP4ServerEndpoint", blocks[1])

    @inlineCallbacks
    def test_tac_example(self) -> Generator[Any, Any, None]:
        """The .tac example's nsqd listens, and its tick publishes in-process."""
        here = os.getcwd()
        data = os.path.abspath(self.mktemp())
        os.makedirs(data)
        # The example keeps nsqd's data in the current directory, as nsqd does.
        os.chdir(data)
        try:
            example = run_example(0, {4150: 0, 4151: 0})
            ticker = example["ticker"]
            self.assertTrue(ticker.running)
            ticker.stop()
            application = IService(example["application"])
            application.startService()
            try:
                nsqd = example["nsqd"]
                yield nsqd.whenListening()
                ports = nsqd.bound_ports()
                self.assertTrue(ports["TCP"] and ports["HTTP"])
                example["tick"]()
                self.assertEqual(nsqd.broker.find_topic("ticks").depth(), 1)
            finally:
                yield application.stopService()
            self.assertTrue(os.path.exists(os.path.join(data, "nsqd.dat")))
        finally:
            os.chdir(here)

    @inlineCallbacks
    def test_endpoints_example(self) -> Generator[Any, Any, None]:
        """The endpoints example's nsqlookupd and nsqd listen where they were told."""
        lookupd_tcp = free_port()
        example = run_example(1, {4150: 0, 4151: 0, 4160: lookupd_tcp, 4161: 0})
        cluster = example["cluster"]
        cluster.startService()
        try:
            lookupd, nsqd = example["lookupd"], example["nsqd"]
            yield lookupd.whenListening()
            yield nsqd.whenListening()
            self.assertEqual(lookupd.bound_ports()["TCP"], lookupd_tcp)
            self.assertNotEqual(lookupd.bound_ports()["HTTP"], 0)
            self.assertIsNotNone(nsqd.tcp_listener.endpoint)
            self.assertEqual(nsqd.storage.name, "memory")
            self.assertEqual(nsqd.options.lookupd_tcp_address, ["127.0.0.1:%d" % (lookupd_tcp,)])
        finally:
            yield cluster.stopService()
