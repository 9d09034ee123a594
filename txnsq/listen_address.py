# -*- test-case-name: tests.test_listen_address -*-
"""
Listen flags (``--tcp-address``, ``--http-address`` ... of every daemon):
Go's ``host:port``, a socket path or a Twisted server endpoint description,
checked and turned into the endpoint description that
``twisted.internet.endpoints.serverFromString`` reads.  Sans-IO: nothing
listens here.
"""

from __future__ import annotations

import ipaddress
import re
from functools import lru_cache
from typing import FrozenSet, Tuple

__all__ = ["check_listen_address", "listen_endpoint_description"]

# Endpoint types serverFromString knows without a plugin scan.
_KNOWN_ENDPOINT_TYPES = frozenset(["tcp", "tcp6", "unix", "ssl", "systemd"])
_HOSTNAME = re.compile(r"[A-Za-z0-9_]([A-Za-z0-9_.-]*[A-Za-z0-9_])?\.?\Z")
_ENDPOINT_TYPE = re.compile(r"[A-Za-z][A-Za-z0-9_+-]*\Z")


@lru_cache(maxsize=None)
def _plugin_endpoint_types() -> FrozenSet[str]:
    """The prefixes of installed endpoint string parser plugins, lower case."""
    try:
        from twisted.internet.interfaces import IStreamServerEndpointStringParser
        from twisted.plugin import getPlugins

        return frozenset(
            str(plugin.prefix).lower()
            for plugin in getPlugins(IStreamServerEndpointStringParser)
        )
    except Exception:  # a broken third-party plugin must not stop nsqd
        return frozenset()


def _is_endpoint_type(word: str) -> bool:
    if not _ENDPOINT_TYPE.match(word):
        return False
    lowered = word.lower()
    return lowered in _KNOWN_ENDPOINT_TYPES or lowered in _plugin_endpoint_types()


def _quote(value: str) -> str:
    """Escape a value for an endpoint description (``\\``, ``:`` and ``=``)."""
    return value.replace("\\", "\\\\").replace(":", "\\:").replace("=", "\\=")


def _split_host_port(address: str) -> Tuple[str, str]:
    """Go's net.SplitHostPort, raising ValueError with Go's reasons."""
    colon = address.rfind(":")
    if colon < 0:
        raise ValueError("missing port in address")
    if address.startswith("["):
        end = address.find("]")
        if end < 0:
            raise ValueError("missing ']' in address")
        if end + 1 == len(address):
            raise ValueError("missing port in address")
        if end + 1 != colon:
            if address[end + 1] == ":":
                raise ValueError("too many colons in address")
            raise ValueError("missing port in address")
        host = address[1:end]
        start, finish = 1, end + 1
    else:
        host = address[:colon]
        if ":" in host:
            raise ValueError("too many colons in address")
        start, finish = 0, 0
    if "[" in address[start:]:
        raise ValueError("unexpected '[' in address")
    if "]" in address[finish:]:
        raise ValueError("unexpected ']' in address")
    return host, address[colon + 1 :]


def check_listen_address(flag: str, address: str) -> None:
    """
    Refuse the value of the listen flag ``--flag`` when it is empty or
    :func:`listen_endpoint_description` cannot read it.

    :raises ValueError: ``--flag must not be empty`` or ``--flag: reason``.
    """
    if not address:
        raise ValueError("--%s must not be empty" % (flag,))
    try:
        listen_endpoint_description(address)
    except ValueError as error:
        raise ValueError("--%s: %s" % (flag, error))


def listen_endpoint_description(address: str) -> str:
    """
    A Twisted server endpoint description for a listen flag's value.

    - ``host:port`` as Go takes it: ``127.0.0.1:4150`` becomes
      ``tcp:4150:interface=127.0.0.1``, ``[::1]:0`` becomes
      ``tcp6:0:interface=\\:\\:1``, an empty host (``:4150``) listens on
      every IPv4 interface (``tcp:4150``), a host name is resolved when
      listening (``tcp:4150:interface=localhost``);
    - a Twisted endpoint description (``tcp:4150:interface=127.0.0.1``,
      ``unix:/run/nsqd.sock``, any installed endpoint plugin's prefix) is
      returned unchanged;
    - a socket path (containing ``/`` or ending in ``.sock``) becomes a UNIX
      endpoint, as Go nsqd v1.3 listens on a UNIX socket for any address
      that is not ``host:port``.

    :raises ValueError: for anything else, or a bad host or port.
    """
    if not address:
        raise ValueError("empty listen address")
    if "\x00" in address or address != address.strip():
        raise ValueError("invalid listen address %r" % (address,))
    prefix = address.split(":", 1)[0]
    if ":" in address and _is_endpoint_type(prefix):
        return address
    try:
        host, port_text = _split_host_port(address)
    except ValueError as error:
        if "/" in address or address.endswith(".sock"):
            return "unix:" + _quote(address)
        raise ValueError(
            "invalid listen address %r: %s (expected <addr>:<port>, a socket "
            "path or a Twisted endpoint description)" % (address, error)
        )
    if port_text == "":
        port = 0  # Go listens on a free port, as for ":0"
    elif port_text.isdigit() and port_text.isascii():
        port = int(port_text)
        if port > 65535:
            raise ValueError("invalid port %r in listen address %r" % (port_text, address))
    else:
        raise ValueError("invalid port %r in listen address %r" % (port_text, address))
    if host == "":
        return "tcp:%d" % (port,)
    zone = ""
    literal = host
    if "%" in host:
        literal, zone = host.split("%", 1)
    try:
        ip = ipaddress.ip_address(literal)
    except ValueError:
        ip = None
    if ip is not None:
        if ip.version == 6:
            if not address.startswith("["):  # pragma: no cover - Go needs brackets
                raise ValueError("IPv6 address %r must be in brackets" % (host,))
            return "tcp6:%d:interface=%s" % (port, _quote(host))
        if zone:
            raise ValueError("invalid host %r in listen address %r" % (host, address))
        return "tcp:%d:interface=%s" % (port, host)
    if address.startswith("[") or not _HOSTNAME.match(host):
        raise ValueError("invalid host %r in listen address %r" % (host, address))
    return "tcp:%d:interface=%s" % (port, _quote(host))
