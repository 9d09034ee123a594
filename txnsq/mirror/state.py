# -*- test-case-name: tests.test_mirror_state -*-
"""
The state one node's mirror keeps (:class:`MirrorState`), shared by the
parts :class:`Mirror <txnsq.mirror.mirror.Mirror>` is composed of: each
part is built from it and reads and writes there what another part, or
/stats, reads too.  What only one part uses (its timers, mostly) stays in
that part.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Deque, Dict, List, Set, Tuple

if TYPE_CHECKING:
    from txnsq.cluster.route import RouteProtocol
    from txnsq.mirror.peer import MirrorPeer
    from txnsq.mirror.standby import StandbyCopy
    from txnsq.protocol.mirror import RecordBuilder

__all__ = ["MAX_LAG_BYTES", "MirrorState", "Taken"]

#: Unacked bytes past which ``async`` mode holds producers too.
MAX_LAG_BYTES = 64 * 1024 * 1024

#: Taken-over ids by ``(topic, channel)``.
Taken = Dict[Tuple[str, str], List[bytes]]


@dataclass
class MirrorState:
    """
    One node's mirroring: its settings, its peers, what it sent and what
    waits for acks, the catch-up under way, the copies it keeps of its
    peers, the takeovers and exchanges, and the counts /stats shows.

    A connection waiting at the gate is any object with
    ``mirror_release()`` and ``mirror_fail(reason)``.
    """

    # -- settings -------------------------------------------------------------

    #: This node's stable mirror id (kept in the data path).
    node_id: str
    #: A random id of this process.
    epoch: str
    #: ``--mirror-ack=sync``: producers wait for every peer's ack.
    sync: bool = True
    #: Seconds a peer may be unrouted before its copy is delivered here.
    failover_timeout: float = 10.0
    #: Unacked bytes past which ``async`` producers wait too.
    max_lag_bytes: int = MAX_LAG_BYTES
    #: Live peers a publish to a mirrored topic needs (0: none).
    min_standbys: int = 0
    #: (ping interval, silence limit) in seconds; (0, 0): no heartbeat.
    heartbeat: Tuple[float, float] = (0.0, 0.0)
    #: Topics named by ``POST /topic/mirror`` (and kept in the data path).
    named: Set[str] = field(default_factory=set)

    # -- peers ----------------------------------------------------------------

    #: The mirroring peers routed now, by route server id.
    peers: Dict[str, MirrorPeer] = field(default_factory=dict)
    #: Routes of peers silent past the limit (routed still), by server id.
    silenced: Dict[str, RouteProtocol] = field(default_factory=dict)
    #: Peers found silent so far.
    silences: int = 0
    #: When each unrouted peer (node id) went, until it is back.
    down_since: Dict[str, float] = field(default_factory=dict)
    #: Node ids unrouted for the failover timeout (and not back since).
    lost: Set[str] = field(default_factory=set)

    # -- sending and the ack gate ---------------------------------------------

    #: The number of the last payload sent.
    seq: int = 0
    #: (seq, size) of payloads some peer has not acked, oldest first.
    unacked: List[Tuple[int, int]] = field(default_factory=list)
    #: Their bytes.
    lag_bytes: int = 0
    #: (seq, connection): producers waiting for every peer's ack of seq.
    waiting: List[Tuple[int, Any]] = field(default_factory=list)
    batches_sent: int = 0
    bytes_sent: int = 0
    #: Producers held at the gate, and failed there
    #: (``--mirror-min-standbys``: stored here, not confirmed by enough
    #: standbys).
    producers_held: int = 0
    producers_failed: int = 0

    # -- the catch-up ---------------------------------------------------------

    #: A catch-up is under way: records go behind it.
    catching_up: bool = False
    #: (topic, channel, messages) still to send, from the first one's
    #: :attr:`catch_up_pos`.
    catch_up_queue: Deque[Tuple[str, str, List[bytes]]] = field(default_factory=deque)
    catch_up_pos: int = 0
    #: The records gathered meanwhile (sent behind it, in order), their
    #: bytes, and the producers waiting for them.
    behind: List[RecordBuilder] = field(default_factory=list)
    behind_bytes: int = 0
    waiting_behind: List[Any] = field(default_factory=list)
    #: Catch-ups run, and messages they sent.
    catch_ups: int = 0
    catch_up_messages: int = 0

    # -- the copies of the peers ----------------------------------------------

    #: The copies kept, by the peer's node id.
    copies: Dict[str, StandbyCopy] = field(default_factory=dict)
    #: Copies of lost or restarted nodes that another node is to take
    #: over, by node id: kept in case that node is lost too.
    kept: Dict[str, StandbyCopy] = field(default_factory=dict)
    batches_applied: int = 0
    decode_errors: int = 0

    # -- failover and fail-back -----------------------------------------------

    #: Failovers done: dicts for /stats.
    taken_over: List[Dict[str, Any]] = field(default_factory=list)
    #: Per peer node id: (its epoch, the ids taken over) of each takeover
    #: not yet applied by that node in an exchange.
    taken_ids: Dict[str, List[Tuple[str, Taken]]] = field(default_factory=dict)
    #: Topics whose delivery waits for the first exchange (at start).
    holding_topics: Set[str] = field(default_factory=set)
    #: Fail-back exchanges applied (received) and answered to us.
    exchanges_applied: int = 0
    exchanges_answered: int = 0
    #: Messages dropped here because a peer took them over, and because
    #: the peer finished them apart.
    dropped_taken: int = 0
    dropped_finished_apart: int = 0
