# -*- test-case-name: tests.test_cluster_options -*-
"""
nsqd's cluster flags (``--cluster-*``, ``--routes``, ``--nats-*``,
``--mirror-*``), kept here so that nsqd's flag table
(:mod:`txnsq.nsqd.flags`) only lists them; their checks are in
:mod:`txnsq.cluster.options`.
"""

from __future__ import annotations

from typing import Any, List

from txnsq.cli import DURATION, INT, STRING, STRING_LIST, Flag

__all__ = ["cluster_flags"]


def cluster_flags(o: Any) -> List[Flag]:
    """The cluster flags, with defaults from the options object ``o``."""
    return [
        Flag(
            "cluster-address",
            STRING,
            o.cluster_address,
            "<addr>:<port> to listen on for NATS cluster routes (txnsq; empty: "
            "no route listener)",
        ),
        Flag(
            "cluster-name",
            STRING,
            o.cluster_name,
            "name of the NATS cluster to join (must match the servers' "
            "cluster name) (txnsq)",
        ),
        Flag(
            "routes",
            STRING_LIST,
            list(o.routes),
            "NATS route URL to dial, nats-route://host:port, comma separated "
            "or given multiple times (txnsq)",
        ),
        Flag(
            "cluster-advertise",
            STRING,
            o.cluster_advertise,
            "<addr>:<port> told to other cluster servers for dialing this one "
            "(txnsq; defaults to the route listener's address)",
        ),
        Flag(
            "cluster-ping-interval",
            DURATION,
            o.cluster_ping_interval,
            "interval between PINGs on a route; two unanswered close it (txnsq)",
        ),
        Flag(
            "cluster-tls-cert",
            STRING,
            o.cluster_tls_cert,
            "path to the certificate file for TLS routes (txnsq)",
        ),
        Flag(
            "cluster-tls-key",
            STRING,
            o.cluster_tls_key,
            "path to the private key file for TLS routes (txnsq)",
        ),
        Flag(
            "cluster-tls-ca",
            STRING,
            o.cluster_tls_ca,
            "path to the CA file that route peers' certificates must be signed "
            "by (txnsq)",
        ),
        Flag(
            "nats-subject-prefix",
            STRING,
            o.nats_subject_prefix,
            "NATS subject prefix of bridged NSQ topics: <prefix><topic> (txnsq)",
        ),
        Flag(
            "nats-account",
            STRING,
            o.nats_account,
            "NATS account of bridged subjects (txnsq)",
        ),
        Flag(
            "nats-topics",
            STRING,
            o.nats_topics,
            "regular expression: NSQ topics bridged to NATS (txnsq; empty: all)",
        ),
        Flag(
            "mirror-topics",
            STRING,
            o.mirror_topics,
            "regular expression: topics mirrored to the txnsq nodes routed to "
            "this one (txnsq; see docs/mirroring.md)",
        ),
        Flag(
            "mirror-ack",
            STRING,
            o.mirror_ack,
            "when a publish to a mirrored topic is answered: sync (after the "
            "standby nodes have it) or async (at once) (txnsq)",
        ),
        Flag(
            "mirror-failover-timeout",
            DURATION,
            o.mirror_failover_timeout,
            "how long a node's route may be down before its mirrored messages "
            "are delivered by its standby (txnsq)",
        ),
        Flag(
            "mirror-min-standbys",
            INT,
            o.mirror_min_standbys,
            "publishes to a mirrored topic fail unless this many standby nodes "
            "are live, and with --mirror-ack=sync have applied them (txnsq; "
            "0: off)",
        ),
    ]
