"""
The client from asyncio code, as docs/client.md shows it: the guide's
asyncio example (Twisted's asyncio reactor installed on an asyncio loop
first, txnsq's Deferreds awaited with ``asFuture(loop)``, coroutines
bridged with ``ensureDeferred`` and ``Deferred.fromFuture``) is taken from
the guide and run in a subprocess, where it publishes one message and
consumes it: against a txnsq nsqd it starts in that same process, and
against an nsqd child process given as ``localhost:PORT`` (so that the name
is resolved through the reactor's thread pool, which only a running
reactor starts).
"""

from __future__ import annotations

import os
import re
import sys
from typing import Any, Generator, List, Tuple

from twisted.internet.defer import inlineCallbacks
from twisted.internet.utils import getProcessOutputAndValue
from twisted.trial.unittest import TestCase

from tests.integration.nsqd_process import NSQDProcess

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GUIDE = os.path.join(ROOT, "docs", "client.md")

#: The line the example prints after its round trip.
RECEIVED = b"received hello from asyncio"


def asyncio_example() -> str:
    """The guide's one Python example that installs the asyncio reactor."""
    with open(GUIDE, encoding="utf-8") as guide:
        blocks = re.findall(r"```python\n(.*?)```", guide.read(), re.S)
    [example] = [block for block in blocks if "asyncioreactor.install" in block]
    return example


class AsyncioExampleTests(TestCase):
    """docs/client.md's asyncio example, run as a program."""

    timeout = 60

    def setUp(self) -> None:
        from twisted.internet import reactor

        self.reactor = reactor
        directory = os.path.abspath(self.mktemp())
        os.makedirs(directory)
        self.script = os.path.join(directory, "round_trip.py")
        with open(self.script, "w", encoding="utf-8") as script:
            script.write(asyncio_example())

    def run_example(self, args: List[str]) -> "Any":
        """Run the example with this interpreter; fires with (stdout, stderr, exit code)."""
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
        return getProcessOutputAndValue(
            sys.executable, [self.script] + args, env=env, path=ROOT, reactor=self.reactor)

    def assert_round_trip(self, result: Tuple[bytes, bytes, int]) -> None:
        """The example exited 0 after printing the body it consumed."""
        out, err, code = result
        details = "exit %s\nstdout:\n%s\nstderr:\n%s" % (
            code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace")[-4000:])
        self.assertEqual((code, out.strip().splitlines()[-1:]), (0, [RECEIVED]), details)

    @inlineCallbacks
    def test_own_nsqd(self) -> Generator[Any, Any, None]:
        """The example starts a txnsq nsqd on the asyncio reactor and round-trips a message through it."""
        result = yield self.run_example([])
        self.assert_round_trip(result)

    @inlineCallbacks
    def test_nsqd_process(self) -> Generator[Any, Any, None]:
        """The example round-trips a message through an nsqd child process reached as localhost:PORT."""
        data_path = os.path.abspath(self.mktemp())
        os.makedirs(data_path)
        nsqd = NSQDProcess(
            ["--tcp-address=127.0.0.1:0", "--http-address=127.0.0.1:0", "--data-path=" + data_path],
            self.reactor)
        yield nsqd.start()
        self.addCleanup(nsqd.stop)
        result = yield self.run_example(["localhost:%d" % (nsqd.tcp_port,)])
        self.assert_round_trip(result)
