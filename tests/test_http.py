"""
Tests for txnsq.nsqd.http, driven in-process through ``treq.testing``
(no sockets).
"""

from __future__ import annotations

from typing import Any, Dict

from treq.testing import StubTreq
from twisted.trial.unittest import SynchronousTestCase

from tests.core_fakes import RecordingStorage, make_broker
from txnsq.nsqd.http import NSQDHTTPAPI


class PingTests(SynchronousTestCase):
    """GET /ping reports nsqd's health."""

    def setUp(self) -> None:
        self.storage = RecordingStorage()
        self.broker = make_broker(storage=self.storage)

        def ports() -> Dict[str, int]:
            return {"TCP": 4150, "HTTP": 4151}

        self.api = NSQDHTTPAPI(self.broker, 0.0, ports)
        self.client = StubTreq(self.api.app.resource())

    def get(self, path: str) -> Any:
        response = self.successResultOf(self.client.get("http://nsqd" + path))
        body = self.successResultOf(response.content())
        return response.code, body

    def test_healthy(self) -> None:
        """A healthy nsqd answers 200 OK."""
        self.assertEqual(self.get("/ping"), (200, b"OK"))

    def test_failing_queue(self) -> None:
        """While a queue cannot write, /ping answers 500 with Go's NOK - reason."""
        self.broker.get_topic("t").get_channel("c")
        self.storage.queues["t:c"].error = "failed to write to diskqueue t:c - disk full"
        self.assertEqual(
            self.get("/ping"),
            (500, b"NOK - failed to write to diskqueue t:c - disk full"),
        )
