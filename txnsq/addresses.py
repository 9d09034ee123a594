# -*- test-case-name: tests.test_addresses -*-
"""
Addresses the way Go reads and writes them: ``host:port`` with IPv6 hosts
in brackets (``net.SplitHostPort``, ``net.JoinHostPort``), peers as
``RemoteAddr().String()`` for logs, stats and the ``remote_address``
nsqlookupd reports, and client endpoints for such addresses.  The
reading and writing of ``host:port`` itself is sans-IO
(:mod:`txnsq.protocol.host_port`, re-exported here), so that code with no
reactor (Spark's executors) reads addresses without importing Twisted.
"""

from __future__ import annotations

from typing import Any, Optional, Tuple

from twisted.internet.abstract import isIPAddress, isIPv6Address
from twisted.internet.address import IPv4Address, IPv6Address, UNIXAddress
from twisted.internet.endpoints import HostnameEndpoint, TCP4ClientEndpoint, TCP6ClientEndpoint
from twisted.internet.interfaces import IAddress, IStreamClientEndpoint

from txnsq.protocol.host_port import join_host_port, split_host_port

__all__ = ["client_endpoint", "go_address", "join_host_port", "split_host_port"]


def go_address(peer: Optional[IAddress]) -> Tuple[str, str]:
    """
    A peer's address as Go's ``RemoteAddr().String()`` (``1.2.3.4:5``,
    ``[::1]:5``) and its host part (Go's default client id and hostname).
    """
    if isinstance(peer, IPv4Address):
        return "%s:%d" % (peer.host, peer.port), peer.host
    if isinstance(peer, IPv6Address):
        return "[%s]:%d" % (peer.host, peer.port), peer.host
    if isinstance(peer, UNIXAddress):
        # No host part; Go shows an unnamed peer socket as "@".
        name = peer.name
        if isinstance(name, bytes):
            name = name.decode("utf-8", "replace")
        return name or "@", ""
    return "", ""


def client_endpoint(reactor: Any, host: str, port: int, timeout: float) -> IStreamClientEndpoint:
    """A client endpoint for ``host``; IP literals skip name resolution."""
    if isIPAddress(host):
        return TCP4ClientEndpoint(reactor, host, port, timeout=timeout)
    if isIPv6Address(host):
        return TCP6ClientEndpoint(reactor, host, port, timeout=timeout)
    return HostnameEndpoint(reactor, host, port, timeout=timeout)
