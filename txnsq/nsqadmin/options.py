# -*- test-case-name: tests.test_nsqadmin_options -*-
"""
nsqadmin's settings, with Go nsqadmin v1.3's flags, defaults and help texts.

:class:`NSQAdminOptions` holds them as snake_case attributes; durations are
float seconds.  ``--lookupd-http-address`` is ``nsqlookupd_http_addresses``
and ``--nsqd-http-address`` is ``nsqd_http_addresses`` (Go's field names).

Not supported, and refused when set: ``--graphite-url`` and
``--proxy-graphite`` (the charts are drawn from nsqadmin's own samples,
``--sample-interval``), the ``--statsd-*`` flags set to anything but Go's
defaults (Go nsqadmin uses them only to name the graphite keys of those
charts) and ``--config``.  ``--base-path`` is normalized as Go does
(``nsq/`` is ``/nsq``).
"""

from __future__ import annotations

import ipaddress
import posixpath
from dataclasses import dataclass, field
from typing import List, Optional, Sequence

from txnsq import cli
from txnsq.cli import BOOL, DURATION, STRING, STRING_LIST, Flag
from txnsq.cli import log_flags
from txnsq.logging import parse_log_level_flag
from txnsq.listen_address import check_listen_address

__all__ = [
    "NSQAdminOptions",
    "normalize_base_path",
    "parse_cidr",
    "nsqadmin_flags",
    "parse_nsqadmin_args",
    "parse_nsqadmin_args_or_exit",
]


#: The ``--statsd-*`` defaults (Go's), the only values accepted.
_STATSD_DEFAULTS = {
    "statsd_counter_format": "stats.counters.%s.count",
    "statsd_gauge_format": "stats.gauges.%s",
    "statsd_prefix": "nsq.%s",
    "statsd_interval": 60.0,
}


def normalize_base_path(path: str) -> str:
    """Go's ``normalizeBasePath``: ``/`` for empty, a leading slash added, then cleaned."""
    if not path:
        return "/"
    if not path.startswith("/"):
        path = "/" + path
    cleaned = posixpath.normpath(path)
    # posixpath keeps a leading "//" (POSIX allows it); Go's path.Clean does not.
    return "/" + cleaned.lstrip("/")


def parse_cidr(text: str) -> "ipaddress.IPv4Network | ipaddress.IPv6Network":
    """
    ``--allow-config-from-cidr`` as Go's ``net.ParseCIDR`` reads it: an
    address and a prefix length, host bits allowed (``127.0.0.1/8``).

    :raises ValueError: Go's message, naming the flag.
    """
    try:
        _, slash, bits = text.partition("/")
        # Go takes a decimal prefix length only (no netmask form).
        if not slash or not bits.isdigit() or not bits.isascii():
            raise ValueError(text)
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise ValueError(
            "failed to parse --allow-config-from-cidr (%s) - invalid CIDR address: %s"
            % (text, text)
        )


@dataclass
class NSQAdminOptions:
    """Every nsqadmin setting; attribute names are Go's option names in snake_case."""

    version: bool = False
    config: str = ""
    log_level: str = "info"
    log_prefix: str = "[nsqadmin] "
    http_address: str = "0.0.0.0:4171"
    base_path: str = "/"
    graphite_url: str = ""
    proxy_graphite: bool = False
    statsd_counter_format: str = "stats.counters.%s.count"
    statsd_gauge_format: str = "stats.gauges.%s"
    statsd_prefix: str = "nsq.%s"
    statsd_interval: float = 60.0
    nsqlookupd_http_addresses: List[str] = field(default_factory=list)
    nsqd_http_addresses: List[str] = field(default_factory=list)
    http_client_connect_timeout: float = 2.0
    http_client_request_timeout: float = 5.0
    http_client_tls_insecure_skip_verify: bool = False
    http_client_tls_root_ca_file: str = ""
    http_client_tls_cert: str = ""
    http_client_tls_key: str = ""
    allow_config_from_cidr: str = "127.0.0.1/8"
    notification_http_endpoint: str = ""
    acl_http_header: str = "X-Forwarded-User"
    admin_users: List[str] = field(default_factory=list)
    # txnsq's own: Go nsqadmin draws its charts from graphite.
    sample_interval: float = 10.0

    def validate(self) -> None:
        """
        Refuse impossible or unsupported settings (Go's texts where Go has
        them); the log level is lower-cased.

        :raises ValueError: naming the flag and what is wrong.
        """
        # Checked and lower-cased as the flag is (FlagValueError is a ValueError).
        self.log_level = parse_log_level_flag(self.log_level)
        if not self.nsqd_http_addresses and not self.nsqlookupd_http_addresses:
            raise ValueError("--nsqd-http-address or --lookupd-http-address required")
        if self.nsqd_http_addresses and self.nsqlookupd_http_addresses:
            raise ValueError("use --nsqd-http-address or --lookupd-http-address not both")
        if self.sample_interval < 0:
            raise ValueError("--sample-interval must not be negative")
        for name in ("http_client_connect_timeout", "http_client_request_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError("--%s must be positive" % (name.replace("_", "-"),))
        check_listen_address("http-address", self.http_address)
        if self.notification_http_endpoint and not (
            self.notification_http_endpoint.startswith("http://")
            or self.notification_http_endpoint.startswith("https://")
        ):
            raise ValueError("--notification-http-endpoint must be a fully qualified http(s) URL")
        if self.http_client_tls_cert and not self.http_client_tls_key:
            raise ValueError("--http-client-tls-key must be specified with --http-client-tls-cert")
        if self.http_client_tls_key and not self.http_client_tls_cert:
            raise ValueError("--http-client-tls-cert must be specified with --http-client-tls-key")
        if self.http_client_tls_root_ca_file or self.http_client_tls_cert:
            from txnsq.nsqadmin.http_client import ClientTLSPolicy

            # Read the files now, as Go's nsqadmin.New does: a bad one is
            # refused before anything listens.
            ClientTLSPolicy(
                self.http_client_tls_root_ca_file,
                self.http_client_tls_cert,
                self.http_client_tls_key,
                self.http_client_tls_insecure_skip_verify,
            )
        if self.allow_config_from_cidr:
            parse_cidr(self.allow_config_from_cidr)
        self.base_path = normalize_base_path(self.base_path)
        if self.config:
            raise ValueError("--config is not supported by txnsq's nsqadmin (give the flags)")
        for flag, given in (
            ("graphite-url", self.graphite_url != ""),
            ("proxy-graphite", self.proxy_graphite),
        ):
            if given:
                raise ValueError(
                    "--%s is not supported by txnsq's nsqadmin: it draws its charts from "
                    "its own samples (--sample-interval), not from graphite" % (flag,)
                )
        for name, default in _STATSD_DEFAULTS.items():
            if getattr(self, name) != default:
                raise ValueError(
                    "--%s is not supported by txnsq's nsqadmin: Go nsqadmin uses it only to "
                    "name the graphite keys of --graphite-url charts, which txnsq's nsqadmin "
                    "does not draw (its charts come from --sample-interval)"
                    % (name.replace("_", "-"),)
                )


def nsqadmin_flags(defaults: Optional[NSQAdminOptions] = None) -> List[Flag]:
    """nsqadmin's flag table, in Go's order, with defaults from ``defaults``."""
    o = defaults if defaults is not None else NSQAdminOptions()
    return [
        Flag("version", BOOL, False, "print version string"),
        Flag("config", STRING, "", "path to config file"),
        *log_flags(o.log_level, o.log_prefix),
        Flag("http-address", STRING, o.http_address, "<addr>:<port> to listen on for HTTP clients"),
        Flag("base-path", STRING, o.base_path, "URL base path"),
        Flag("graphite-url", STRING, o.graphite_url, "graphite HTTP address"),
        Flag("proxy-graphite", BOOL, o.proxy_graphite, "proxy HTTP requests to graphite"),
        Flag(
            "statsd-counter-format",
            STRING,
            o.statsd_counter_format,
            "The counter stats key formatting applied by the implementation of statsd. "
            "If no formatting is desired, set this to an empty string.",
        ),
        Flag(
            "statsd-gauge-format",
            STRING,
            o.statsd_gauge_format,
            "The gauge stats key formatting applied by the implementation of statsd. "
            "If no formatting is desired, set this to an empty string.",
        ),
        Flag(
            "statsd-prefix",
            STRING,
            o.statsd_prefix,
            "prefix used for keys sent to statsd (%s for host replacement, must match nsqd)",
        ),
        Flag(
            "statsd-interval",
            DURATION,
            o.statsd_interval,
            "time interval nsqd is configured to push to statsd (must match nsqd)",
        ),
        Flag(
            "lookupd-http-address",
            STRING_LIST,
            list(o.nsqlookupd_http_addresses),
            "lookupd HTTP address (may be given multiple times)",
            attr="nsqlookupd_http_addresses",
        ),
        Flag(
            "nsqd-http-address",
            STRING_LIST,
            list(o.nsqd_http_addresses),
            "nsqd HTTP address (may be given multiple times)",
            attr="nsqd_http_addresses",
        ),
        Flag(
            "http-client-connect-timeout",
            DURATION,
            o.http_client_connect_timeout,
            "timeout for HTTP connect",
        ),
        Flag(
            "http-client-request-timeout",
            DURATION,
            o.http_client_request_timeout,
            "timeout for HTTP request",
        ),
        Flag(
            "http-client-tls-insecure-skip-verify",
            BOOL,
            o.http_client_tls_insecure_skip_verify,
            "configure the HTTP client to skip verification of TLS certificates",
        ),
        Flag(
            "http-client-tls-root-ca-file",
            STRING,
            o.http_client_tls_root_ca_file,
            "path to CA file for the HTTP client",
        ),
        Flag(
            "http-client-tls-cert",
            STRING,
            o.http_client_tls_cert,
            "path to certificate file for the HTTP client",
        ),
        Flag(
            "http-client-tls-key",
            STRING,
            o.http_client_tls_key,
            "path to key file for the HTTP client",
        ),
        Flag(
            "allow-config-from-cidr",
            STRING,
            o.allow_config_from_cidr,
            "A CIDR from which to allow HTTP requests to the /config endpoint",
        ),
        Flag(
            "notification-http-endpoint",
            STRING,
            o.notification_http_endpoint,
            "HTTP endpoint (fully qualified) to which POST notifications of admin actions "
            "will be sent",
        ),
        Flag(
            "acl-http-header",
            STRING,
            o.acl_http_header,
            "HTTP header to check for authenticated admin users",
        ),
        Flag(
            "admin-user",
            STRING_LIST,
            list(o.admin_users),
            "admin user (may be given multiple times; if specified, only these users will "
            "be able to perform privileged actions; acl-http-header is used to determine "
            "the authenticated user)",
            attr="admin_users",
        ),
        Flag(
            "sample-interval",
            DURATION,
            o.sample_interval,
            "how often to sample every topic's and channel's depth and message count for "
            "the rates and charts, whether or not a page is open (0 to sample only when "
            "a page is viewed; txnsq's own flag)",
        ),
    ]


def parse_nsqadmin_args(
    argv: Sequence[str], defaults: Optional[NSQAdminOptions] = None
) -> NSQAdminOptions:
    """
    nsqadmin's command line (without the program name) as
    :func:`txnsq.cli.parse_settings` reads it; not validated
    (:meth:`NSQAdminOptions.validate`).
    """
    return cli.parse_settings(nsqadmin_flags, NSQAdminOptions, argv, defaults)


def parse_nsqadmin_args_or_exit(
    argv: Sequence[str], defaults: Optional[NSQAdminOptions] = None
) -> NSQAdminOptions:
    """
    :func:`parse_nsqadmin_args` for the console script: Go's exits on errors
    and ``-h`` (:func:`txnsq.cli.parse_settings_or_exit`).
    """
    return cli.parse_settings_or_exit(
        nsqadmin_flags, NSQAdminOptions, argv, "nsqadmin", defaults
    )
