# -*- test-case-name: tests.test_cluster_options -*-
"""
nsqd's cluster settings (``--cluster-*``, ``--routes``, ``--nats-*``,
``--mirror-*``): their checks and route URLs.  Values live on
:class:`NSQDOptions <txnsq.nsqd.options.NSQDOptions>` under the flags' snake_case names;
the flags themselves are in :mod:`txnsq.cluster.flags`.  No IO, no CLI.
"""

from __future__ import annotations

import re
from typing import Any, List, Tuple
from urllib.parse import urlsplit

__all__ = ["ROUTE_SCHEMES", "parse_route_url", "route_urls", "validate_cluster_options"]

#: The route schemes nats-server accepts in ``--routes``.
ROUTE_SCHEMES = ("nats-route", "nats", "tls")


def parse_route_url(url: str) -> Tuple[str, str, int]:
    """
    ``(scheme, host, port)`` of a route URL (``nats-route://host:port``).

    :raises ValueError: not such a URL.
    """
    parts = urlsplit(url.strip())
    if parts.scheme not in ROUTE_SCHEMES:
        raise ValueError("route URL %r: scheme must be nats-route://" % (url,))
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None:
        raise ValueError("route URL %r needs a host and a port" % (url,))
    return parts.scheme, parts.hostname, port


def route_urls(values: List[str]) -> List[str]:
    """``--routes`` values (each may list several, comma separated), split."""
    urls: List[str] = []
    for value in values:
        urls.extend(part.strip() for part in value.split(",") if part.strip())
    return urls


def validate_cluster_options(o: Any) -> None:
    """
    Check the cluster flags; ``--routes`` is normalised to one URL per item.

    :raises ValueError: with the reason.
    """
    o.routes = route_urls(list(o.routes))
    for url in o.routes:
        parse_route_url(url)
    if (o.cluster_address or o.routes) and not o.cluster_name:
        raise ValueError("--cluster-name is required with --cluster-address or --routes")
    if o.cluster_name and any(c in o.cluster_name for c in " \t\r\n"):
        raise ValueError("--cluster-name must not contain spaces")
    if bool(o.cluster_tls_cert) != bool(o.cluster_tls_key):
        raise ValueError("--cluster-tls-cert and --cluster-tls-key must be given together")
    if o.cluster_ping_interval <= 0:
        raise ValueError("--cluster-ping-interval must be positive")
    if not o.nats_account or " " in o.nats_account:
        raise ValueError("--nats-account must be a NATS account name")
    if any(c in o.nats_subject_prefix for c in " \t\r\n*>"):
        raise ValueError("--nats-subject-prefix must not contain spaces or wildcards")
    if o.mirror_ack not in ("sync", "async"):
        raise ValueError("--mirror-ack must be sync or async (%r)" % (o.mirror_ack,))
    if o.mirror_failover_timeout <= 0:
        raise ValueError("--mirror-failover-timeout must be positive")
    standbys = o.mirror_min_standbys
    if isinstance(standbys, bool) or not isinstance(standbys, int) or standbys < 0:
        raise ValueError(
            "--mirror-min-standbys must be an integer >= 0 (%r)" % (standbys,)
        )
    if standbys and not (o.cluster_address or o.routes):
        # No routes, no mirror: the promise could not be kept nor refused.
        raise ValueError("--mirror-min-standbys needs --cluster-address or --routes")
    if o.mirror_topics:
        if not (o.cluster_address or o.routes):
            raise ValueError("--mirror-topics needs --cluster-address or --routes")
        try:
            re.compile(o.mirror_topics)
        except re.error as e:
            raise ValueError("--mirror-topics is not a valid regular expression: %s" % (e,))
    if o.nats_topics:
        try:
            re.compile(o.nats_topics)
        except re.error as e:
            raise ValueError("--nats-topics is not a valid regular expression: %s" % (e,))
