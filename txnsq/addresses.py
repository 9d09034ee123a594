# -*- test-case-name: tests.test_addresses -*-
"""
Peer addresses written the way Go writes them, for logs, stats and the
``remote_address`` nsqlookupd reports.
"""

from __future__ import annotations

from typing import Optional, Tuple

from twisted.internet.address import IPv4Address, IPv6Address, UNIXAddress
from twisted.internet.interfaces import IAddress

__all__ = ["go_address"]


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
