# -*- test-case-name: tests.test_nsqlookupd_options -*-
"""
nsqlookupd's settings, with Go nsqlookupd v1.3's flags, defaults and help
texts.

:class:`NSQLookupdOptions` holds them as snake_case attributes
(``--tombstone-lifetime`` is ``tombstone_lifetime``, in float seconds).
:func:`parse_nsqlookupd_args` reads a Go-style command line into them, with
the flag parser the nsqd console script uses (:mod:`txnsq.cli`); listen
addresses are Go's ``host:port`` or any Twisted server endpoint
description, as for nsqd.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

from txnsq import cli
from txnsq.cli import BOOL, DURATION, STRING, Flag
from txnsq.cli import log_flags
from txnsq.logging import parse_log_level_flag
from txnsq.listen_address import check_listen_address

__all__ = [
    "NSQLookupdOptions",
    "nsqlookupd_flags",
    "parse_nsqlookupd_args",
    "parse_nsqlookupd_args_or_exit",
]


@dataclass
class NSQLookupdOptions:
    """
    Every nsqlookupd setting.  Attribute names are the flag names in
    snake_case; durations are float seconds.
    """

    version: bool = False
    config: str = ""
    log_level: str = "info"
    log_prefix: str = "[nsqlookupd] "
    tcp_address: str = "0.0.0.0:4160"
    http_address: str = "0.0.0.0:4161"
    broadcast_address: str = field(default_factory=socket.gethostname)
    #: Seconds after its last PING that a producer stops being listed.
    inactive_producer_timeout: float = 300.0
    #: Seconds a tombstoned producer stays hidden for its topic.
    tombstone_lifetime: float = 45.0

    def validate(self) -> None:
        """
        Refuse impossible settings; the level name is lower-cased.

        :raises ValueError: naming the flag and what is wrong with it.
        """
        # Checked and lower-cased as the flag is (FlagValueError is a ValueError).
        self.log_level = parse_log_level_flag(self.log_level)
        for name in ("inactive_producer_timeout", "tombstone_lifetime"):
            value = getattr(self, name)
            if value < 0:
                raise ValueError(
                    "--%s must not be negative (%s)"
                    % (name.replace("_", "-"), cli.format_duration(value))
                )
        check_listen_address("tcp-address", self.tcp_address)
        check_listen_address("http-address", self.http_address)
        if self.config:
            raise ValueError(
                "--config is not supported yet (config file %r): give the "
                "settings as flags" % (self.config,)
            )


def nsqlookupd_flags(defaults: Optional[NSQLookupdOptions] = None) -> List[Flag]:
    """
    nsqlookupd's flag table, in Go's declaration order, with defaults taken
    from ``defaults`` (a fresh :class:`NSQLookupdOptions` when omitted).
    """
    o = defaults if defaults is not None else NSQLookupdOptions()
    return [
        Flag("config", STRING, "", "path to config file"),
        Flag("version", BOOL, False, "print version string"),
        *log_flags(o.log_level, o.log_prefix),
        Flag(
            "tcp-address",
            STRING,
            o.tcp_address,
            "<addr>:<port> to listen on for TCP clients",
        ),
        Flag(
            "http-address",
            STRING,
            o.http_address,
            "<addr>:<port> to listen on for HTTP clients",
        ),
        Flag(
            "broadcast-address",
            STRING,
            o.broadcast_address,
            "address of this lookupd node, (default to the OS hostname)",
        ),
        Flag(
            "inactive-producer-timeout",
            DURATION,
            o.inactive_producer_timeout,
            "duration of time a producer will remain in the active list since its last ping",
        ),
        Flag(
            "tombstone-lifetime",
            DURATION,
            o.tombstone_lifetime,
            "duration of time a producer will remain tombstoned if registration remains",
        ),
    ]


def parse_nsqlookupd_args(
    argv: Sequence[str], defaults: Optional[NSQLookupdOptions] = None
) -> NSQLookupdOptions:
    """
    nsqlookupd's command line (without the program name) as
    :func:`txnsq.cli.parse_settings` reads it; not validated
    (:meth:`NSQLookupdOptions.validate`).
    """
    return cli.parse_settings(nsqlookupd_flags, NSQLookupdOptions, argv, defaults)


def parse_nsqlookupd_args_or_exit(
    argv: Sequence[str], defaults: Optional[NSQLookupdOptions] = None
) -> NSQLookupdOptions:
    """
    :func:`parse_nsqlookupd_args` for the console script: Go's exits on errors
    and ``-h`` (:func:`txnsq.cli.parse_settings_or_exit`).
    """
    return cli.parse_settings_or_exit(
        nsqlookupd_flags, NSQLookupdOptions, argv, "nsqlookupd", defaults
    )
