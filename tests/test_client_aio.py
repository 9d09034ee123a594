"""
Tests for txnsq.client.aio, the client for asyncio programs: in this
process, a round trip under ``asyncio.run`` against an nsqd started on the
same loop's reactor; and the guide's asyncio example (docs/client.md),
which imports nothing from Twisted, run with ``asyncio.run`` in a
subprocess against an nsqd process, where it must also exit by itself.
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import threading
from typing import Any, List

from twisted.internet.defer import inlineCallbacks
from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial.unittest import SynchronousTestCase, TestCase

from tests.integration.nsqd_process import NSQDProcess
from txnsq.client import aio
from txnsq.client.message import Message

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GUIDE = os.path.join(ROOT, "docs", "client.md")


def guide_example() -> str:
    """The guide's example that uses txnsq.client.aio."""
    with open(GUIDE, encoding="utf-8") as guide:
        blocks = re.findall(r"```python\n(.*?)```", guide.read(), re.S)
    [example] = [block for block in blocks if "from txnsq.client.aio import" in block]
    return example


async def _start_nsqd() -> Any:
    from txnsq.testing import start_nsqd

    loop = asyncio.get_running_loop()
    return await start_nsqd(reactor=aio.reactor_for()).asFuture(loop)


class InLoopTests(SynchronousTestCase):
    """The asyncio client and an nsqd on one asyncio loop, in this process."""

    def run_in_loop(self, coroutine: Any) -> Any:
        return asyncio.run(asyncio.wait_for(coroutine, timeout=30))

    def test_round_trip(self) -> None:
        """Publishes and an async handler's answers work under asyncio.run; no thread is left."""

        async def scenario() -> List[Any]:
            nsqd = await _start_nsqd()
            loop = asyncio.get_running_loop()
            address = "localhost:%d" % (nsqd.tcp_port,)
            received: "asyncio.Queue[Message]" = asyncio.Queue()
            answers = [False, True, True, True]

            async def handler(message: Message) -> bool:
                await asyncio.sleep(0)
                await received.put(message)
                return answers.pop(0)

            consumer = aio.Consumer(
                "events",
                "aio",
                handler,
                nsqd_tcp_addresses=[address],
                default_requeue_delay=0.1,
                max_backoff_duration=0,
            )
            async with consumer:
                async with aio.Producer(address) as producer:
                    await producer.publish("events", b"one")
                    await producer.multi_publish("events", [b"two", b"three"])
                got = [await received.get() for _ in range(4)]
            # Closed: every handler has answered.
            stats = consumer.stats()
            await nsqd.stop().asFuture(loop)
            return [sorted((m.body, m.attempts) for m in got), stats]

        bodies, stats = self.run_in_loop(scenario())
        self.assertEqual(bodies, [(b"one", 1), (b"one", 2), (b"three", 1), (b"two", 1)])
        self.assertEqual((stats.messages_finished, stats.messages_requeued), (3, 1))
        # Nothing would keep the interpreter from exiting (the reactor's
        # thread pool was stopped): no thread but this one is non-daemon.
        lasting = [t for t in threading.enumerate() if not t.daemon and t is not threading.current_thread()]
        self.assertEqual(lasting, [])

    def test_error_raised(self) -> None:
        """nsqd's error answer is raised in the awaiting coroutine."""
        from txnsq.protocol.v2_client import NSQError

        async def scenario() -> None:
            nsqd = await _start_nsqd()
            loop = asyncio.get_running_loop()
            try:
                async with aio.Producer(nsqd.tcp_address) as producer:
                    await producer.publish("bad!topic", b"x")
            finally:
                await nsqd.stop().asFuture(loop)

        self.assertRaises(NSQError, self.run_in_loop, scenario())

    def test_needs_running_loop(self) -> None:
        """Made outside a running loop, they say so."""
        self.assertRaises(RuntimeError, aio.Producer, "127.0.0.1:4150")
        self.assertRaises(RuntimeError, aio.Consumer, "t", "c", lambda m: True)

    def test_one_reactor_per_loop(self) -> None:
        """Every producer and consumer of a loop shares its reactor; reactor_for gives it."""

        async def scenario() -> bool:
            first = aio.Producer("127.0.0.1:1")
            second = aio.Producer("127.0.0.1:2")
            shared = first.producer.reactor is second.producer.reactor is aio.reactor_for()
            await first.close()
            await second.close()
            await second.close()
            return shared

        self.assertTrue(self.run_in_loop(scenario()))


class GuideExampleTests(TestCase):
    """docs/client.md's asyncio example, as written."""

    def test_no_twisted_in_example(self) -> None:
        """The example imports nothing from Twisted and runs with asyncio.run."""
        example = guide_example()
        self.assertNotIn("twisted", example)
        self.assertIn("asyncio.run(", example)

    @inlineCallbacks
    def test_example_round_trip(self) -> Any:
        """The example publishes and consumes against an nsqd process, then exits by itself."""
        nsqd = NSQDProcess(["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0", "--storage=memory"])
        yield nsqd.start()
        self.addCleanup(nsqd.stop)
        script = os.path.join(os.path.abspath(self.mktemp()) + ".py")
        with open(script, "w", encoding="utf-8") as file:
            file.write(guide_example())
        env = dict(os.environ, PYTHONPATH=ROOT)
        out, err, code = yield getProcessOutputAndValue(
            sys.executable,
            ["-c", "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')",
             script, "localhost:%d" % (nsqd.tcp_port,)],
            env=env,
        )
        self.assertEqual(code, 0, err)
        self.assertEqual(out.strip(), b"received hello from asyncio", err)
