# -*- test-case-name: tests.test_addresses -*-
"""
``host:port`` as Go reads and writes it (``net.SplitHostPort``,
``net.JoinHostPort``): IPv6 hosts in brackets.  Sans-IO; the Twisted side
(peers' addresses, client endpoints) is :mod:`txnsq.addresses`.
"""

from __future__ import annotations

from typing import Tuple

__all__ = ["join_host_port", "split_host_port"]


def split_host_port(address: str) -> Tuple[str, int]:
    """
    ``host:port`` or ``[v6]:port`` as Go's ``net.SplitHostPort`` reads it.

    :raises ValueError: no port, or not a valid one.
    """
    host, colon, port = address.rpartition(":")
    if not colon or not host or not port.isdigit():
        raise ValueError("invalid address %r (want host:port)" % (address,))
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    elif ":" in host:
        raise ValueError("invalid address %r (IPv6 hosts go in brackets)" % (address,))
    number = int(port)
    if number > 65535:
        raise ValueError("invalid port in %r" % (address,))
    return host, number


def join_host_port(host: str, port: int) -> str:
    """Go's ``net.JoinHostPort``: brackets around IPv6 hosts."""
    if ":" in host:
        return "[%s]:%d" % (host, port)
    return "%s:%d" % (host, port)
