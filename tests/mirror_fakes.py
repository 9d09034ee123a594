"""
Fakes for testing the parts of the mirror (:mod:`txnsq.mirror`) one at a
time: a route that keeps what it is sent, peers on such routes, and a
connection waiting at the gate.
"""

from __future__ import annotations

from typing import List, Tuple

from txnsq.mirror.peer import MirrorPeer
from txnsq.mirror.standby import StandbyCopy
from txnsq.mirror.state import MirrorState
from txnsq.protocol.message import encode_message
from txnsq.protocol.mirror import OP_CHANNEL_CREATE, OP_MESSAGES, RecordBuilder, decode_records

__all__ = ["FakeConnection", "FakeRoute", "add_peer", "copy_holding", "message"]


class FakeRoute:
    """A route to one server: what it is sent, kept as (head, payload)."""

    def __init__(self, server_id: str) -> None:
        self.server_id = server_id
        self.sent: List[Tuple[bytes, bytes]] = []

    def send_message(self, head: bytes, payload: bytes) -> None:
        self.sent.append((head, payload))

    def subjects(self) -> List[str]:
        """The subject of each message sent, in order."""
        return [subject_of(head) for head, _ in self.sent]

    def payloads(self, subject: str) -> List[bytes]:
        """The payloads sent on ``subject``, in order."""
        return [payload for head, payload in self.sent if subject_of(head) == subject]

    def records(self, subject: str) -> List[list]:
        """The records of each payload sent on ``subject`` (the payload's number dropped)."""
        return [decode_records(payload)[1] for payload in self.payloads(subject)]


def subject_of(head: bytes) -> str:
    """The subject of an RMSG head (``RMSG account subject size``)."""
    return head.split()[2].decode()


def add_peer(state: MirrorState, server_id: str, node_id: str, epoch: str = "e", now: float = 0.0) -> FakeRoute:
    """A peer routed now on a new FakeRoute (acked up to ``state.seq``); the route."""
    route = FakeRoute(server_id)
    peer = MirrorPeer(route, node_id, epoch, now)  # type: ignore[arg-type]
    peer.acked = state.seq
    state.peers[server_id] = peer
    return route


class FakeConnection:
    """A producer's connection as the mirror gate sees it."""

    def __init__(self) -> None:
        self.released = 0
        self.failed: List[str] = []

    def mirror_release(self) -> None:
        self.released += 1

    def mirror_fail(self, reason: str) -> None:
        self.failed.append(reason)


def message(n: int, body: bytes = b"x") -> bytes:
    """Message ``n`` as a channel holds it, its id made of the number."""
    return encode_message(1, 0, b"%016d" % (n,), body)


def copy_holding(node_id: str, topic: str, count: int, epoch: str = "e") -> StandbyCopy:
    """A copy of ``node_id`` holding messages 0 to ``count`` - 1 of ``topic``'s channel ``c``."""
    copy = StandbyCopy(node_id, epoch)
    builder = RecordBuilder()
    builder.add(OP_CHANNEL_CREATE, topic, "c", [])
    builder.add(OP_MESSAGES, topic, "", [message(n) for n in range(count)])
    copy.apply(1, decode_records(builder.encode(1))[1])
    return copy
