# -*- test-case-name: tests.test_spark_publisher -*-
"""
The sink's work in one Spark task, without Spark: publish an iterator of
rows to one nsqd with MPUB, in batches that nsqd accepts.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, List, Optional, Tuple

from txnsq.protocol.v2_client import NSQError
from txnsq.spark.batching import MPubBatcher, RowError, row_message
from txnsq.spark.blocking import BlockingConnection
from txnsq.spark.options import SinkOptions

__all__ = ["PublishError", "publish_rows", "publish_rows_idempotent"]

#: Idempotent puts written before their replies are read.
PUT_PIPELINE = 2000

Connect = Callable[[str, SinkOptions], BlockingConnection]


class PublishError(RuntimeError):
    """nsqd refused a batch; says which rows and how many were published before."""


def _connect(address: str, options: SinkOptions) -> BlockingConnection:
    return BlockingConnection(address, options.settings, options.max_msg_size, options.max_body_size)


def publish_rows(
    rows: Iterable[Any],
    options: SinkOptions,
    task: int = 0,
    connect: Connect = _connect,
) -> int:
    """
    Publish ``rows`` (each with ``body`` and, without a ``topic`` option,
    ``topic``) to nsqd number ``task`` modulo the configured addresses;
    how many messages were published.

    A task with no rows does not connect.  Each MPUB is checked whole (body
    sizes, topic) before it is sent, so a bad row stops the task before the
    batch it is in is written; batches sent before it stay published.

    :raises RowError: a row's body is null, empty, not binary or string, or
        larger than nsqd's ``max_msg_size``; or its topic is invalid.
    :raises PublishError: nsqd refused an MPUB.
    :raises txnsq.spark.blocking.NSQConnectionFailed: nsqd unreachable.
    """
    address = options.nsqd_tcp_addresses[task % len(options.nsqd_tcp_addresses)]
    conn: Optional[BlockingConnection] = None
    batcher: Optional[MPubBatcher] = None
    published = 0
    max_msg_size = options.max_msg_size
    first_row = 0

    def send(topic: str, bodies: list) -> None:
        nonlocal published, first_row
        assert conn is not None
        try:
            conn.mpublish(topic, bodies, options.publish_timeout)
        except NSQError as error:
            raise PublishError(
                "nsq sink: nsqd %s refused rows %d to %d (topic %s) after %d were published: %s"
                % (address, first_row, first_row + len(bodies) - 1, topic, published, error)
            ) from None
        published += len(bodies)
        first_row += len(bodies)

    try:
        for index, row in enumerate(rows):
            topic, body = row_message(row, index, options.topic, max_msg_size)
            if conn is None:
                conn = connect(address, options)
                max_msg_size = min(max_msg_size, conn.max_msg_size)
                batcher = MPubBatcher(min(options.max_body_size, conn.max_body_size))
                if len(body) > max_msg_size:
                    raise RowError(
                        "nsq sink: row %d (topic %s) has a body of %d bytes, more than the server's "
                        "max_msg_size %d" % (index, topic, len(body), max_msg_size)
                    )
            assert batcher is not None
            for ready_topic, bodies in batcher.add(topic, body):
                send(ready_topic, bodies)
        if batcher is not None:
            for ready_topic, bodies in batcher.flush():
                send(ready_topic, bodies)
    finally:
        if conn is not None:
            conn.close()
    return published


def _connect_metaq(address: str, options: SinkOptions) -> Any:
    from txnsq.spark.metaq import BlockingMetaqClient

    settings = options.settings
    return BlockingMetaqClient(
        address,
        auth_secret=settings.auth_secret,
        connect_timeout=settings.connect_timeout,
        request_timeout=options.publish_timeout,
    )


def publish_rows_idempotent(
    rows: Iterable[Any],
    options: SinkOptions,
    task: int,
    batch_id: int,
    connect: Callable[[str, SinkOptions], Any] = _connect_metaq,
) -> int:
    """
    Put ``rows`` to partition ``task`` modulo the target topic's partitions,
    over MetaQ (``metaq_addresses[task % n]``), each carrying producer
    ``<producer_id>/<task>`` and sequence ``batch_id << 32 | row index``:
    nsqd appends a put only if its sequence is above the last one it
    appended for that producer, so a replayed batch that yields the same
    rows in the same order appends each row once.  How many rows were put
    (repeats included).

    :raises RowError: as :func:`publish_rows`.
    :raises PublishError: the topic is not retained, or a put was refused.
    :raises txnsq.client.metaq.MetaqConnectionError: nsqd unreachable.
    """
    from txnsq.client.metaq import MetaqResultError
    from txnsq.metaq.backend import sequence_attribute
    from txnsq.spark.offsets import topic_partitions

    address = options.metaq_addresses[task % len(options.metaq_addresses)]
    producer = "%s/%d" % (options.producer_id, task)
    base = batch_id << 32
    client: Any = None
    partition = 0
    pending: List[Tuple[bytes, Optional[bytes]]] = []
    published = 0
    topic = options.topic
    assert topic is not None

    def send() -> None:
        nonlocal published
        try:
            client.put_many(topic, partition, pending)
        except MetaqResultError as error:
            raise PublishError(
                "nsq sink: nsqd %s refused idempotent puts of rows %d to %d (topic %s partition %d): %s"
                % (address, published, published + len(pending) - 1, topic, partition, error)
            ) from None
        published += len(pending)
        del pending[:]

    try:
        for index, row in enumerate(rows):
            _, body = row_message(row, index, topic, options.max_msg_size)
            if client is None:
                client = connect(address, options)
                partitions = topic_partitions(client, topic)
                if not partitions:
                    raise PublishError(
                        "nsq sink: topic %s is not retained on the nsqd with MetaQ at %s; idempotent writes need a "
                        "retained target topic (POST /topic/retention?topic=%s&bytes=N)" % (topic, address, topic)
                    )
                partition = task % len(partitions)
            pending.append((body, sequence_attribute(producer, base | index)))
            if len(pending) >= PUT_PIPELINE:
                send()
        if pending:
            send()
    finally:
        if client is not None:
            client.close()
    return published
