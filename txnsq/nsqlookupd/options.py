# -*- test-case-name: tests.test_nsqlookupd_options -*-
"""
nsqlookupd's settings, with Go nsqlookupd v1.3's flags and defaults.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field

__all__ = ["NSQLookupdOptions"]


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
