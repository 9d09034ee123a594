# -*- test-case-name: tests.test_tools_config_opts -*-
"""
go-nsq's ``Config`` options, as the tools' ``--consumer-opt`` and
``--producer-opt`` flags pass them through.

Each flag value is ``name,value`` (go-nsq's ``ConfigFlag``; a bare
``name`` means ``true``); ``name=value`` is accepted as well when the name
is one of the options.  Names may use ``-`` for ``_``.  Values are checked
with go-nsq's types and bounds and Go's error texts (``invalid option
foo``, ``invalid read_timeout ! 50ms < 100ms``), then mapped onto
:class:`txnsq.client.ConnectionConfig` fields, :class:`txnsq.client.Consumer`
keyword arguments and TLS settings (:mod:`txnsq.tools.tls`).  The few
options txnsq has no use for (``local_addr``, ``backoff_strategy``,
``low_rdy_timeout``, ``rdy_redistribute_interval``) are accepted and
listed in :attr:`ClientOptions.ignored`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from txnsq.cli import FlagValueError
from txnsq.protocol.go_values import format_duration, parse_duration, parse_go_bool, parse_go_float

__all__ = [
    "ClientOptions",
    "ConfigOptionError",
    "OPTIONS",
    "TLSSettings",
    "parse_config_options",
]


class ConfigOptionError(ValueError):
    """An option is unknown or its value is wrong; ``str()`` is go-nsq's text."""


@dataclass
class TLSSettings:
    """go-nsq's ``tls_*`` options (the ``tls_config`` of its ``Config``)."""

    root_ca_file: str = ""
    insecure_skip_verify: bool = False
    cert: str = ""
    key: str = ""
    min_version: str = ""

    @property
    def configured(self) -> bool:
        """Whether any TLS option was given."""
        return bool(
            self.root_ca_file
            or self.insecure_skip_verify
            or self.cert
            or self.key
            or self.min_version
        )


@dataclass
class ClientOptions:
    """
    The outcome of :func:`parse_config_options`.

    :ivar connection: :class:`txnsq.client.ConnectionConfig` fields.
    :ivar consumer: :class:`txnsq.client.Consumer` keyword arguments.
    :ivar tls: the ``tls_*`` options.
    :ivar ignored: names of accepted options txnsq does not use.
    """

    connection: Dict[str, Any] = field(default_factory=dict)
    consumer: Dict[str, Any] = field(default_factory=dict)
    tls: TLSSettings = field(default_factory=TLSSettings)
    ignored: List[str] = field(default_factory=list)


_CONNECTION = "connection"
_CONSUMER = "consumer"
_TLS = "tls"
_IGNORED = "ignored"


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as error:
        raise FlagValueError(str(error))


def _int(text: str) -> int:
    # go-nsq coerces with strconv.ParseInt(s, 10, 64).
    try:
        if text.strip() != text or not text.lstrip("+-").isdigit():
            raise ValueError(text)
        return int(text, 10)
    except ValueError:
        raise FlagValueError('strconv.ParseInt: parsing "%s": invalid syntax' % (text,))


def _bool(text: str) -> bool:
    try:
        return parse_go_bool(text)
    except FlagValueError:
        raise FlagValueError('strconv.ParseBool: parsing "%s": invalid syntax' % (text,))


def _float(text: str) -> float:
    try:
        return parse_go_float(text)
    except FlagValueError:
        raise FlagValueError('strconv.ParseFloat: parsing "%s": invalid syntax' % (text,))


def _string(text: str) -> str:
    return text


_TLS_VERSIONS = ("ssl3.0", "tls1.0", "tls1.1", "tls1.2", "tls1.3")


def _tls_version(text: str) -> str:
    if text not in _TLS_VERSIONS:
        raise ConfigOptionError("unknown tls_min_version %s" % (text,))
    return text


def _backoff_strategy(text: str) -> str:
    if text not in ("exponential", "full_jitter"):
        raise ConfigOptionError("unknown backoff strategy %s" % (text,))
    return text


@dataclass(frozen=True)
class Option:
    """One go-nsq option: how to parse it, its bounds and where it goes."""

    name: str
    parse: Callable[[str], Any]
    target: str
    attr: str = ""
    minimum: Optional[float] = None
    maximum: Optional[float] = None
    is_duration: bool = False


def _option(
    name: str,
    parse: Callable[[str], Any],
    target: str,
    attr: str = "",
    minimum: Optional[float] = None,
    maximum: Optional[float] = None,
) -> Tuple[str, Option]:
    return name, Option(
        name, parse, target, attr or name, minimum, maximum, parse is _duration
    )


_MINUTE = 60.0
_HOUR = 3600.0

#: go-nsq v1.1's options, with its bounds, by name.
OPTIONS: Dict[str, Option] = dict(
    [
        _option("dial_timeout", _duration, _CONNECTION),
        _option("read_timeout", _duration, _CONNECTION, minimum=0.1, maximum=5 * _MINUTE),
        _option("write_timeout", _duration, _CONNECTION, minimum=0.1, maximum=5 * _MINUTE),
        _option("local_addr", _string, _IGNORED),
        _option(
            "lookupd_poll_interval", _duration, _CONSUMER, minimum=0.01, maximum=5 * _MINUTE
        ),
        _option("lookupd_poll_jitter", _float, _CONSUMER, minimum=0, maximum=1),
        _option("max_requeue_delay", _duration, _CONSUMER, minimum=0, maximum=_HOUR),
        _option("default_requeue_delay", _duration, _CONSUMER, minimum=0, maximum=_HOUR),
        _option("backoff_strategy", _backoff_strategy, _IGNORED),
        _option("max_backoff_duration", _duration, _CONSUMER, minimum=0, maximum=_HOUR),
        _option("backoff_multiplier", _duration, _CONSUMER, minimum=0, maximum=_HOUR),
        _option("max_attempts", _int, _CONSUMER, minimum=0, maximum=65535),
        _option(
            "low_rdy_idle_timeout", _duration, _CONSUMER, minimum=1, maximum=5 * _MINUTE
        ),
        _option("low_rdy_timeout", _duration, _IGNORED, minimum=1, maximum=5 * _MINUTE),
        _option(
            "rdy_redistribute_interval", _duration, _IGNORED, minimum=0.001, maximum=5
        ),
        _option("client_id", _string, _CONNECTION),
        _option("hostname", _string, _CONNECTION),
        _option("user_agent", _string, _CONNECTION),
        _option("heartbeat_interval", _duration, _CONNECTION),
        _option("sample_rate", _int, _CONNECTION, minimum=0, maximum=99),
        _option("tls_v1", _bool, _CONNECTION),
        _option("tls_root_ca_file", _string, _TLS, "root_ca_file"),
        _option("tls_insecure_skip_verify", _bool, _TLS, "insecure_skip_verify"),
        _option("tls_cert", _string, _TLS, "cert"),
        _option("tls_key", _string, _TLS, "key"),
        _option("tls_min_version", _tls_version, _TLS, "min_version"),
        _option("deflate", _bool, _CONNECTION),
        _option("deflate_level", _int, _CONNECTION, minimum=1, maximum=9),
        _option("snappy", _bool, _CONNECTION),
        _option("output_buffer_size", _int, _CONNECTION),
        _option("output_buffer_timeout", _duration, _CONNECTION),
        _option("max_in_flight", _int, _CONSUMER, minimum=0),
        _option("msg_timeout", _duration, _CONNECTION, minimum=0),
        _option("auth_secret", _string, _CONNECTION),
    ]
)


def _bound_text(option: Option, value: float) -> str:
    if option.is_duration:
        return format_duration(value)
    if isinstance(value, float) and value.is_integer() and option.parse is not _float:
        return "%d" % (value,)
    return "%g" % (value,) if isinstance(value, float) else str(value)


def split_option(text: str) -> Tuple[str, Optional[str]]:
    """
    ``name,value`` (go-nsq's form), ``name=value`` (when ``name`` is an
    option) or a bare ``name``: the name, with ``-`` as ``_``, and the
    value (None for a bare name).
    """
    if "," in text:
        name, value = text.split(",", 1)
        return name.replace("-", "_"), value
    if "=" in text:
        name, value = text.split("=", 1)
        if name.replace("-", "_") in OPTIONS:
            return name.replace("-", "_"), value
    return text.replace("-", "_"), None


def parse_option(text: str) -> Tuple[Option, Any]:
    """
    One ``--consumer-opt`` value: its option and parsed value.

    :raises ConfigOptionError: with go-nsq's text.
    """
    name, value = split_option(text)
    option = OPTIONS.get(name)
    if option is None:
        raise ConfigOptionError("invalid option %s" % (name,))
    if value is None:
        # go-nsq sets a bare option to boolean true.
        if option.parse is not _bool:
            raise ConfigOptionError(
                "failed to coerce option %s (true) - invalid value type" % (name,)
            )
        value = "true"
    try:
        parsed = option.parse(value)
    except FlagValueError as error:
        raise ConfigOptionError("failed to coerce option %s (%s) - %s" % (name, value, error))
    if option.minimum is not None and parsed < option.minimum:
        raise ConfigOptionError(
            "invalid %s ! %s < %s"
            % (name, _bound_text(option, parsed), _bound_text(option, option.minimum))
        )
    if option.maximum is not None and parsed > option.maximum:
        raise ConfigOptionError(
            "invalid %s ! %s > %s"
            % (name, _bound_text(option, parsed), _bound_text(option, option.maximum))
        )
    return option, parsed


def parse_config_options(values: Sequence[str]) -> ClientOptions:
    """
    All the ``--consumer-opt`` (or ``--producer-opt``) values, in order;
    a later value of an option wins.

    :raises ConfigOptionError: for the first bad value, with go-nsq's text;
        ``.flag_value`` is that value.
    """
    result = ClientOptions()
    for text in values:
        try:
            option, parsed = parse_option(text)
        except ConfigOptionError as error:
            error.flag_value = text  # type: ignore[attr-defined]
            raise
        if option.target == _CONNECTION:
            result.connection[option.attr] = parsed
        elif option.target == _CONSUMER:
            result.consumer[option.attr] = parsed
        elif option.target == _TLS:
            setattr(result.tls, option.attr, parsed)
        elif option.name not in result.ignored:
            result.ignored.append(option.name)
    return result
