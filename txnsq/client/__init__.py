"""
The NSQ client on Twisted: consuming (:class:`Consumer`), connections to
nsqd, messages, and publishing over TCP (:class:`Producer`) or HTTP
(:class:`HTTPPublisher`).

- :mod:`txnsq.client.consumer`: :class:`Consumer`, with RDY distribution
  (:mod:`rdy <txnsq.client.rdy>`), backoff (:mod:`backoff <txnsq.client.backoff>`) and
  nsqlookupd discovery (:mod:`discovery <txnsq.client.discovery>`)
- :mod:`txnsq.client.message`: :class:`Message` and its answers (FIN, REQ, TOUCH)
- :mod:`txnsq.client.connection`: :class:`NSQConnection`, :class:`ConnectionConfig`,
  :func:`connect`
- :mod:`txnsq.client.producer`: :class:`Producer`
- :mod:`txnsq.client.http_publish`: :class:`HTTPPublisher`
- :mod:`txnsq.client.metaq`: ``MetaqClient``, ``connect_metaq`` and
  ``MetaqReader``: retained topics read by offset over the MetaQ protocol

Nothing here imports the global reactor at import time.

Public API: the names in ``__all__``, and the submodules
:mod:`txnsq.client.consumer`, :mod:`txnsq.client.producer`,
:mod:`txnsq.client.message`, :mod:`txnsq.client.connection`,
:mod:`txnsq.client.http_publish`, :mod:`txnsq.client.metaq` and
:mod:`txnsq.client.aio` (the producer and the consumer for asyncio).
Every other submodule is private.
"""

from txnsq.client.config import ConnectionConfig
from txnsq.client.connection import NSQConnection, connect
from txnsq.client.delegate import ConnectionDelegate, NSQConnectionError
from txnsq.client.consumer import Consumer
from txnsq.client.http_publish import HTTPPublisher, NSQHTTPError
from txnsq.client.message import Message
from txnsq.client.producer import Producer
from txnsq.protocol.v2_client import NSQError

__all__ = [
    "ConnectionConfig",
    "Consumer",
    "ConnectionDelegate",
    "HTTPPublisher",
    "Message",
    "NSQConnection",
    "NSQConnectionError",
    "NSQError",
    "NSQHTTPError",
    "Producer",
    "connect",
]
