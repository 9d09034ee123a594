"""
Mirrored topics: a topic's messages kept by other txnsq nodes, over the
NATS cluster routes, until they are finished -- and delivered by one of
them when the node they were published on is lost (docs/mirroring.md).

The core, no IO (what the broker core calls, or is read through):

- :mod:`txnsq.mirror.recorder`: what a mirrored topic's publishes, FINs,
  REQs and channel changes become (records)
- :mod:`txnsq.mirror.standby`: the copy a standby keeps of another node,
  and its takeover
- :mod:`txnsq.mirror.snapshot`: what a topic and its channels hold, read
  for a catch-up and dropped by a fail-back exchange

Around it, the mirror itself, on Twisted and the routes of
:mod:`txnsq.cluster` (the route transport carries the records; it knows
nothing of them):

- :mod:`txnsq.mirror.mirror`: :class:`Mirror <txnsq.mirror.mirror.Mirror>`,
  one node's mirroring, composed of the parts below
- :mod:`txnsq.mirror.state`: :class:`MirrorState
  <txnsq.mirror.state.MirrorState>`, what the parts share; each part is
  built from it and tested alone
- :mod:`txnsq.mirror.peer`: a mirroring peer routed now
- :mod:`txnsq.mirror.gate`: the sending of payloads and the ack gate
- :mod:`txnsq.mirror.catch_up`: a peer that comes is sent what it lacks
- :mod:`txnsq.mirror.exchange`: the fail-back exchange
- :mod:`txnsq.mirror.heartbeat`: pings, and silent peers
- :mod:`txnsq.mirror.failover`: a lost peer's copy taken over
- :mod:`txnsq.mirror.files`: the node id and the named topics, kept in
  the data path
- :mod:`txnsq.mirror.journal`: a standby's copies kept on disk
- :mod:`txnsq.mirror.stats`: the mirror's part of /stats
- :mod:`txnsq.mirror.hold`: a V2 connection's output held for the gate (no IO
  either: the connection does the writes)

Public API: none.  This package is private to txnsq.
"""

__all__ = [
    "catch_up",
    "exchange",
    "failover",
    "files",
    "gate",
    "heartbeat",
    "hold",
    "journal",
    "mirror",
    "peer",
    "recorder",
    "snapshot",
    "standby",
    "state",
    "stats",
]
