"""
Cluster routes: txnsq as one more server of a NATS cluster.

- :mod:`txnsq.cluster.subjects`: NATS subject matching (``*``, ``>``)
- :mod:`txnsq.cluster.interest`: what one route peer wants (RS+/RS-)
- :mod:`txnsq.cluster.route`: one route connection (Twisted protocol)
- :mod:`txnsq.cluster.node`: this server's routes: listener, dialer,
  gossip, full mesh, local interest, subject dispatch and the
  exactly-once send plan
- :mod:`txnsq.cluster.bridge`: NSQ topics as NATS subjects
- :mod:`txnsq.cluster.service`: the Twisted service nsqd starts

The route layer (``node``, ``route``, ``interest``, ``subjects``) knows
nothing of NSQ; the bridge is one user of it, and mirrored topics
(:mod:`txnsq.mirror`, which the service starts) are another.

Public API: none.  This package is private to txnsq.
"""

__all__ = ["bridge", "interest", "node", "route", "service", "subjects"]
