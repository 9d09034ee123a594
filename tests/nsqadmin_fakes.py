"""
A fake cluster for the nsqadmin tests: canned nsqlookupd and nsqd answers
by URL, a node that never answers, and a record of every request.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Tuple

from twisted.internet.defer import Deferred, fail, succeed
from twisted.internet.error import ConnectionRefusedError

LOOKUPD = "127.0.0.1:4161"
NSQD_A = "127.0.0.1:4151"
NSQD_B = "127.0.0.1:5151"


def producer(http_port: int, tcp_port: int, hostname: str, topics: List[str]) -> Dict[str, Any]:
    """A producer as nsqlookupd's ``/nodes`` lists it."""
    return {
        "remote_address": "127.0.0.1:%d" % (tcp_port + 1000,),
        "hostname": hostname,
        "broadcast_address": "127.0.0.1",
        "tcp_port": tcp_port,
        "http_port": http_port,
        "version": "1.3.0",
        "topics": topics,
        "tombstones": [False] * len(topics),
    }


def client(client_id: str, user_agent: str = "txnsq/0.1.0", **extra: Any) -> Dict[str, Any]:
    """A client as nsqd's ``/stats`` shows it."""
    doc = {
        "client_id": client_id,
        "hostname": "consumer-host",
        "version": "V2",
        "remote_address": "127.0.0.1:50000",
        "state": 3,
        "ready_count": 5,
        "in_flight_count": 1,
        "message_count": 10,
        "finish_count": 9,
        "requeue_count": 0,
        "connect_ts": 1795600000,
        "sample_rate": 0,
        "deflate": False,
        "snappy": True,
        "user_agent": user_agent,
        "tls": False,
        "authed": False,
    }
    doc.update(extra)
    return doc


def nsqd_stats(
    depth: int, messages: int, clients: Optional[List[Dict[str, Any]]] = None, paused: bool = False
) -> Dict[str, Any]:
    """An nsqd ``/stats`` with topic ``orders`` and its channel ``billing``."""
    return {
        "version": "1.3.0",
        "health": "OK",
        "start_time": 1795600000,
        "topics": [
            {
                "topic_name": "orders",
                "channels": [
                    {
                        "channel_name": "billing",
                        "depth": depth,
                        "backend_depth": 0,
                        "in_flight_count": 1,
                        "deferred_count": 2,
                        "message_count": messages,
                        "requeue_count": 3,
                        "timeout_count": 4,
                        "client_count": len(clients or []),
                        "clients": clients or [],
                        "paused": paused,
                        "e2e_processing_latency": {"count": 0, "percentiles": None},
                    }
                ],
                "depth": depth,
                "backend_depth": 0,
                "message_count": messages,
                "message_bytes": messages * 10,
                "paused": False,
                "e2e_processing_latency": {"count": 0, "percentiles": None},
            }
        ],
        "memory": {},
        "producers": [],
    }


class FakeCluster:
    """
    Answers requests from a table of ``URL prefix -> answer``: a JSON-able
    value (200), ``(code, body)``, an exception (a failed request) or
    ``"hang"`` (a Deferred that never fires until cancelled).

    :ivar requests: ``(method, url, body)`` of each request, in order.
    """

    def __init__(self) -> None:
        self.answers: Dict[str, Any] = {}
        self.requests: List[Tuple[str, str, Optional[bytes]]] = []
        self.hanging: List["Deferred[Any]"] = []

    def standard(self, clients: Optional[List[Dict[str, Any]]] = None) -> "FakeCluster":
        """One lookupd knowing two nsqds, both with ``orders``/``billing``."""
        self.answers.update(
            {
                "http://%s/nodes"
                % LOOKUPD: {
                    "producers": [
                        producer(4151, 4150, "alpha", ["orders"]),
                        producer(5151, 5150, "beta", ["orders"]),
                    ]
                },
                "http://%s/topics" % LOOKUPD: {"topics": ["orders"]},
                "http://%s/lookup?topic=orders"
                % LOOKUPD: {
                    "channels": ["billing"],
                    "producers": [
                        producer(4151, 4150, "alpha", ["orders"]),
                        producer(5151, 5150, "beta", ["orders"]),
                    ],
                },
                "http://%s/lookup?topic=" % LOOKUPD: (404, b'{"message":"TOPIC_NOT_FOUND"}'),
                "http://%s/channels?topic=orders" % LOOKUPD: {"channels": ["billing"]},
                "http://%s/channels?topic=" % LOOKUPD: {"channels": []},
                "http://%s/stats" % NSQD_A: nsqd_stats(5, 100, clients),
                "http://%s/stats" % NSQD_B: nsqd_stats(7, 200),
                "http://%s/info"
                % NSQD_A: {
                    "version": "1.3.0",
                    "broadcast_address": "127.0.0.1",
                    "hostname": "alpha",
                    "http_port": 4151,
                    "tcp_port": 4150,
                },
                "http://%s/info"
                % NSQD_B: {
                    "version": "1.3.0",
                    "broadcast_address": "127.0.0.1",
                    "hostname": "beta",
                    "http_port": 5151,
                    "tcp_port": 5150,
                },
            }
        )
        return self

    def request(self, method: str, url: str, body: Optional[bytes] = None) -> "Deferred[Any]":
        """The requester nsqadmin is given."""
        self.requests.append((method, url, body))
        answer: Any = None
        best = -1
        for prefix, value in self.answers.items():
            if url.startswith(prefix) and len(prefix) > best:
                answer, best = value, len(prefix)
        if method == "POST" and best < 0:
            return succeed((200, b"OK", b""))
        if best < 0:
            return fail(ConnectionRefusedError("nothing at %s" % (url,)))
        if isinstance(answer, Exception):
            return fail(answer)
        if answer == "hang":
            waiting: Deferred[Any] = Deferred()
            self.hanging.append(waiting)
            return waiting
        if isinstance(answer, tuple):
            return succeed((answer[0], b"Status", answer[1]))
        return succeed((200, b"OK", json.dumps(answer).encode("utf-8")))

    def posted(self) -> List[str]:
        """The URLs POSTed, in order."""
        return [url for method, url, _ in self.requests if method == "POST"]
