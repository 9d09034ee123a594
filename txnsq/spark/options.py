# -*- test-case-name: tests.test_spark_options -*-
"""
The ``nsq`` data source's options (strings, as Spark passes them), checked
and typed once on the driver so that a mistake is reported by its option
name before any task starts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Mapping, Optional

from txnsq.protocol.host_port import split_host_port
from txnsq.protocol.names import is_valid_channel_name, is_valid_topic_name
from txnsq.spark.settings import DEFAULT_MAX_BODY_SIZE, DEFAULT_MAX_MSG_SIZE, ClientSettings

__all__ = ["OptionError", "SinkOptions", "SourceOptions", "client_settings"]

_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off", "")


class OptionError(ValueError):
    """An option of the ``nsq`` data source is missing or invalid; the message names it."""

    def __init__(self, option: str, problem: str) -> None:
        self.option = option
        ValueError.__init__(self, "nsq data source: option %r %s" % (option, problem))


def _get(options: Mapping[str, str], name: str) -> Optional[str]:
    # Spark hands a case-insensitive dict; a plain dict from a test is
    # looked up as given.
    value = options.get(name)
    if value is None:
        return None
    return str(value).strip()


def _addresses(options: Mapping[str, str], name: str) -> List[str]:
    value = _get(options, name)
    if not value:
        return []
    found = [part.strip() for part in value.split(",") if part.strip()]
    for address in found:
        try:
            split_host_port(address.split("://", 1)[-1].split("/", 1)[0])
        except ValueError:
            raise OptionError(name, "has %r, which is not host:port" % (address,)) from None
    return found


def _int(options: Mapping[str, str], name: str, default: int, minimum: int = 1) -> int:
    value = _get(options, name)
    if value is None or value == "":
        return default
    try:
        number = int(value)
    except ValueError:
        number = minimum - 1
    if number < minimum:
        raise OptionError(name, "must be an integer of at least %d, not %r" % (minimum, value))
    return number


def _seconds(options: Mapping[str, str], name: str, default: Optional[float]) -> Optional[float]:
    value = _get(options, name)
    if value is None or value == "":
        return default
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not number > 0:
        raise OptionError(name, "must be a positive number of seconds, not %r" % (value,))
    return number


def _bool(options: Mapping[str, str], name: str) -> bool:
    value = (_get(options, name) or "").lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise OptionError(name, "must be true or false, not %r" % (value,))


def _topic(options: Mapping[str, str], required: bool) -> Optional[str]:
    topic = _get(options, "topic")
    if not topic:
        if required:
            raise OptionError("topic", "is required")
        return None
    if not is_valid_topic_name(topic):
        raise OptionError("topic", "is not a valid NSQ topic name: %r" % (topic,))
    return topic


def client_settings(options: Mapping[str, str]) -> ClientSettings:
    """
    The connection settings the TLS, AUTH and timeout options describe.

    :raises OptionError: a bad value, or a TLS file option without ``tls``.
    """
    tls = _bool(options, "tls")
    files = {name: _get(options, name) or None for name in ("tls_ca_file", "tls_cert_file", "tls_key_file")}
    for name, value in files.items():
        if value and not tls:
            raise OptionError(name, "needs tls=true")
    if files["tls_key_file"] and not files["tls_cert_file"]:
        raise OptionError("tls_key_file", "needs tls_cert_file")
    compression = (_get(options, "compression") or "none").lower()
    if compression not in ("none", "snappy", "deflate"):
        raise OptionError("compression", "must be none, snappy or deflate, not %r" % (compression,))
    return ClientSettings(
        tls=tls,
        tls_ca_file=files["tls_ca_file"],
        tls_cert_file=files["tls_cert_file"],
        tls_key_file=files["tls_key_file"],
        tls_server_name=_get(options, "tls_server_name") or None,
        tls_insecure=_bool(options, "tls_insecure_skip_verify"),
        auth_secret=_get(options, "auth_secret") or None,
        compression=compression,
        msg_timeout=_seconds(options, "msg_timeout", None),
        heartbeat_interval=_seconds(options, "heartbeat_interval", 30.0) or 30.0,
        connect_timeout=_seconds(options, "connect_timeout", 5.0) or 5.0,
        client_id=_get(options, "client_id") or "txnsq-spark",
    )


@dataclass
class SourceOptions:
    """
    The options of ``spark.read`` / ``spark.readStream.format("nsq")``.

    :ivar nsqd_tcp_addresses: nsqds to consume from directly ...
    :ivar lookupd_http_addresses: ... or the lookupds that list them.
    :ivar topic: the topic.
    :ivar channel: the channel (created on first SUB).
    :ivar max_messages_per_batch: streaming: most messages in a micro-batch.
    :ivar batch_timeout: streaming: seconds a micro-batch waits to fill up.
    :ivar spool_path: streaming: directory of the spooled batches.
    :ivar max_messages: batch read: most messages drained.
    :ivar drain_timeout: batch read: seconds without a message after which
        the channel counts as empty.
    :ivar lookupd_poll_interval: streaming: seconds between lookups.
    :ivar settings: connection settings (TLS, AUTH, msg_timeout, ...).
    """

    nsqd_tcp_addresses: List[str]
    lookupd_http_addresses: List[str]
    topic: str
    channel: str
    max_messages_per_batch: int = 1000
    batch_timeout: float = 1.0
    spool_path: Optional[str] = None
    max_messages: int = 10000
    drain_timeout: float = 2.0
    lookupd_poll_interval: float = 60.0
    settings: ClientSettings = field(default_factory=ClientSettings)

    @classmethod
    def parse(cls, options: Mapping[str, str], streaming: bool) -> "SourceOptions":
        """
        Check and type a source's options.

        :raises OptionError: naming the first option missing or invalid.
        """
        nsqd = _addresses(options, "nsqd_tcp_addresses")
        lookupd = _addresses(options, "lookupd_http_addresses")
        if not nsqd and not lookupd:
            raise OptionError("nsqd_tcp_addresses", "or 'lookupd_http_addresses' is required")
        if nsqd and lookupd:
            raise OptionError("nsqd_tcp_addresses", "and 'lookupd_http_addresses' exclude each other")
        topic = _topic(options, True)
        assert topic is not None
        channel = _get(options, "channel")
        if not channel:
            raise OptionError("channel", "is required")
        if not is_valid_channel_name(channel):
            raise OptionError("channel", "is not a valid NSQ channel name: %r" % (channel,))
        spool_path = _get(options, "spool_path") or None
        if streaming and not spool_path:
            raise OptionError("spool_path", "is required for streaming (a directory for the batches not yet committed)")
        return cls(
            nsqd_tcp_addresses=nsqd,
            lookupd_http_addresses=lookupd,
            topic=topic,
            channel=channel,
            max_messages_per_batch=_int(options, "max_messages_per_batch", 1000),
            batch_timeout=_seconds(options, "batch_timeout", 1.0) or 1.0,
            spool_path=spool_path,
            max_messages=_int(options, "max_messages", 10000),
            drain_timeout=_seconds(options, "drain_timeout", 2.0) or 2.0,
            lookupd_poll_interval=_seconds(options, "lookupd_poll_interval", 60.0) or 60.0,
            settings=client_settings(options),
        )


@dataclass
class SinkOptions:
    """
    The options of ``df.write`` / ``df.writeStream.format("nsq")``.

    :ivar nsqd_tcp_addresses: the nsqds to publish to (task ``i`` uses
        address ``i`` modulo their number).
    :ivar topic: the topic for every row (``None``: each row's ``topic``).
    :ivar max_msg_size: the largest body nsqd accepts (its ``--max-msg-size``;
        no more than ``max_body_size - 8``).
    :ivar max_body_size: the largest MPUB body (its ``--max-body-size``).
    :ivar publish_timeout: seconds to wait for nsqd's answer to an MPUB.
    :ivar settings: connection settings (TLS, AUTH, ...).
    :ivar idempotent: publish with MetaQ ``put``\s carrying a producer id
        and a sequence, which nsqd appends once (a retained target topic).
    :ivar producer_id: idempotent mode: the name of this writer, the same
        across restarts of the query (task ``i`` is producer ``<id>/<i>``).
    :ivar batch_id: idempotent batch writes: the number of this write
        (sequences are ``batch_id << 32 | row index``); streams use Spark's
        micro-batch id.
    :ivar metaq_addresses: idempotent mode: the MetaQ listeners to put to
        (given, or found through ``nsqd_http_addresses``' ``/info``).
    """

    nsqd_tcp_addresses: List[str]
    topic: Optional[str]
    max_msg_size: int = DEFAULT_MAX_MSG_SIZE
    max_body_size: int = DEFAULT_MAX_BODY_SIZE
    publish_timeout: float = 30.0
    settings: ClientSettings = field(default_factory=ClientSettings)
    idempotent: bool = False
    producer_id: Optional[str] = None
    batch_id: int = 0
    metaq_addresses: List[str] = field(default_factory=list)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> "SinkOptions":
        """
        Check and type a sink's options.

        :raises OptionError: naming the first option missing or invalid.
        """
        nsqd = _addresses(options, "nsqd_tcp_addresses")
        idempotent = _bool(options, "idempotent")
        producer_id = _get(options, "producer_id") or None
        if idempotent:
            if not _get(options, "topic"):
                raise OptionError("topic", "is required with idempotent=true (one retained target topic)")
            if not producer_id or any(c.isspace() for c in producer_id):
                raise OptionError(
                    "producer_id", "is required with idempotent=true: a name without spaces, the same across restarts"
                )
            if not (_get(options, "metaq_addresses") or _get(options, "nsqd_http_addresses")):
                raise OptionError("metaq_addresses", "or 'nsqd_http_addresses' is required with idempotent=true")
        elif producer_id:
            raise OptionError("producer_id", "needs idempotent=true")
        if not nsqd and not idempotent:
            if _get(options, "lookupd_http_addresses"):
                raise OptionError("nsqd_tcp_addresses", "is required to publish (lookupds only list consumers' sources)")
            raise OptionError("nsqd_tcp_addresses", "is required")
        max_msg_size = _int(options, "max_msg_size", DEFAULT_MAX_MSG_SIZE)
        max_body_size = _int(options, "max_body_size", DEFAULT_MAX_BODY_SIZE)
        if max_body_size < 9:
            raise OptionError("max_body_size", "must be at least 9 (an MPUB of one 1-byte message)")
        # An MPUB body of one message is 8 bytes longer than the message.
        max_msg_size = min(max_msg_size, max_body_size - 8)
        return cls(
            nsqd_tcp_addresses=nsqd,
            topic=_topic(options, False),
            max_msg_size=max_msg_size,
            max_body_size=max_body_size,
            publish_timeout=_seconds(options, "publish_timeout", 30.0) or 30.0,
            settings=client_settings(options),
            idempotent=idempotent,
            producer_id=producer_id,
            batch_id=_int(options, "batch_id", 0, 0),
            metaq_addresses=_addresses(options, "metaq_addresses"),
        )
