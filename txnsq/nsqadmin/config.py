# -*- test-case-name: tests.test_nsqadmin_api -*-
"""
nsqadmin's ``/config/:opt``, as Go nsqadmin v1.3's ``doConfig``.

``GET`` answers any option that has a flag by its config name (the flag
name with ``_``, or Go's ``cfg`` name: ``nsqlookupd_http_addresses``,
``nsqd_http_addresses``, ``admin_users``), typed as Go types it
(durations in nanoseconds, the log level as Go's number); ``PUT`` changes
the two Go lets change at run time, ``nsqlookupd_http_addresses`` (a JSON
list) and ``log_level`` (a level name).  Both are answered only to clients
within ``--allow-config-from-cidr`` (``403 FORBIDDEN`` otherwise; every
client when it is empty).
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from txnsq.cli import BOOL, DURATION, STRING_LIST, Flag
from txnsq.logging import LOG_LEVELS
from txnsq.nsqadmin.options import NSQAdminOptions, nsqadmin_flags, parse_cidr
from txnsq.nsqd.http_config import LOG_LEVEL_NUMBERS
from txnsq.protocol.http_params import APIError, decode_string_list

__all__ = ["CONFIG_FLAGS", "MAX_CONFIG_BODY", "config_allowed", "config_value", "set_config_value"]

#: Go reads at most 1 MiB of a ``PUT`` body; a longer one is ``413 INVALID_VALUE``.
MAX_CONFIG_BODY = 1024 * 1024

_NS = 1000000000

#: Go's Options has no field for these flags (they are main's own).
_NOT_OPTIONS = frozenset(["version", "config"])

#: The flags by config name (their attribute names are Go's config names).
CONFIG_FLAGS: Dict[str, Flag] = {
    str(flag.attr): flag
    for flag in nsqadmin_flags()
    if flag.name not in _NOT_OPTIONS and not flag.ignored and flag.attr
}


def config_allowed(cidr: str, client_host: Optional[str]) -> None:
    """
    Go's check of the client's address against ``--allow-config-from-cidr``.

    :param client_host: the client's IP address; None when it has none
        (a UNIX socket).
    :raises APIError: ``400 INVALID_REMOTE_ADDR`` for an address that is
        not an IP; ``403 FORBIDDEN`` for one outside ``cidr``.
    """
    if not cidr:
        return
    import ipaddress

    network = parse_cidr(cidr)
    try:
        address = ipaddress.ip_address((client_host or "").split("%")[0])
    except ValueError:
        raise APIError(400, "INVALID_REMOTE_ADDR")
    # Go's IPNet.Contains matches an IPv4-mapped IPv6 address to an IPv4 net.
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.version != network.version or address not in network:
        raise APIError(403, "FORBIDDEN")


def config_value(options: NSQAdminOptions, name: str) -> Any:
    """
    The value Go's ``getOptByCfgName`` answers for ``name``.

    :raises APIError: ``400 INVALID_OPTION`` for a name no option has.
    """
    flag = CONFIG_FLAGS.get(name)
    if flag is None:
        raise APIError(400, "INVALID_OPTION")
    value = getattr(options, str(flag.attr))
    if name == "log_level":
        return LOG_LEVEL_NUMBERS.get(str(value).lower(), 0)
    if flag.kind == DURATION:
        return int(round(value * _NS))
    if flag.kind == STRING_LIST:
        return [str(item) for item in value]
    if flag.kind == BOOL:
        return bool(value)
    return str(value)


def set_config_value(options: NSQAdminOptions, name: str, body: bytes) -> None:
    """
    ``PUT /config/NAME`` with ``body``: change ``options`` as Go does.

    :raises APIError: ``413 INVALID_VALUE`` for an empty body or one over
        :data:`MAX_CONFIG_BODY`; ``400 INVALID_VALUE`` for a value Go
        refuses; ``400 INVALID_OPTION`` for an option that cannot change.
    """
    if not body or len(body) > MAX_CONFIG_BODY:
        raise APIError(413, "INVALID_VALUE")
    if name == "nsqlookupd_http_addresses":
        addresses = decode_string_list(body)
        if addresses is None:
            raise APIError(400, "INVALID_VALUE")
        options.nsqlookupd_http_addresses = addresses
    elif name == "log_level":
        level = body.decode("latin-1").lower()
        if level not in LOG_LEVELS:
            raise APIError(400, "INVALID_VALUE")
        options.log_level = level
    else:
        raise APIError(400, "INVALID_OPTION")
