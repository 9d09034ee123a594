# -*- test-case-name: tests.integration.test_client_aio -*-
"""
txnsq's client for asyncio programs: :class:`Producer` and
:class:`Consumer` with coroutine methods, usable from ``asyncio.run()``
with no Twisted in sight::

    import asyncio
    from txnsq.client.aio import Consumer, Producer

    async def main():
        async with Producer("localhost:4150") as producer:
            await producer.publish("events", b"hello")

    asyncio.run(main())

They are the Twisted client (:mod:`txnsq.client.producer`,
:mod:`txnsq.client.consumer`) — the same protocol code, RDY handling,
backoff and discovery — run by a Twisted reactor that txnsq makes on the
running asyncio loop (``AsyncioSelectorReactor``, one per loop, private:
the global ``twisted.internet.reactor`` is neither installed nor
imported). Its thread pool (host name lookups) is stopped when the last
producer or consumer of the loop is closed, so that the program can exit.

Handlers may be plain functions or ``async def`` coroutines; a coroutine
runs as an asyncio task on the loop (it may await anything asyncio), and
its result is the handler's answer as for the Twisted client: ``True`` or
``None`` finishes the message, ``False`` requeues it, an exception
requeues it with backoff.
"""

from __future__ import annotations

import asyncio
import inspect
import weakref
from typing import Any, Callable, Optional, Sequence, Union

from twisted.internet.defer import Deferred

from txnsq.client.consumer import Consumer as TwistedConsumer
from txnsq.client.consumer import ConsumerStats
from txnsq.client.message import Message
from txnsq.client.producer import Producer as TwistedProducer

__all__ = ["Consumer", "Producer", "reactor_for"]


class _LoopReactor:
    """The Twisted reactor of one asyncio loop, and who is using it."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        from twisted.internet.asyncioreactor import AsyncioSelectorReactor

        self.reactor = AsyncioSelectorReactor(loop)
        # The loop runs already (asyncio.run): the reactor is marked
        # running, which starts what only a running reactor starts (its
        # thread pool, on first use), without run() taking over the loop.
        self.reactor.startRunning(installSignalHandlers=False)
        self.users = 0

    def acquire(self) -> Any:
        self.users += 1
        return self.reactor

    def release(self) -> None:
        self.users -= 1
        if self.users == 0 and self.reactor.threadpool is not None:
            # What the reactor's shutdown trigger does (the reactor never
            # shuts down: the loop is the program's): its worker threads
            # would otherwise keep the interpreter from exiting.
            self.reactor._stopThreadPool()


_reactors: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopReactor]" = (
    weakref.WeakKeyDictionary()
)


def _loop_reactor(loop: Optional[asyncio.AbstractEventLoop] = None) -> _LoopReactor:
    loop = loop if loop is not None else asyncio.get_running_loop()
    found = _reactors.get(loop)
    if found is None:
        found = _reactors[loop] = _LoopReactor(loop)
    return found


def reactor_for(loop: Optional[asyncio.AbstractEventLoop] = None) -> Any:
    """
    The Twisted reactor txnsq runs on ``loop`` (the running loop by
    default), for Twisted code that should share it.

    :raises RuntimeError: no loop given and none running.
    """
    return _loop_reactor(loop).reactor


async def _wait(deferred: "Deferred[Any]") -> Any:
    return await deferred.asFuture(asyncio.get_running_loop())


class Producer:
    """
    Publishes to one or more nsqd (:class:`txnsq.client.producer.Producer`)
    from asyncio code.  Make it inside the running loop; close it (or use
    ``async with``) when done.

    :param nsqd_tcp_addresses: ``host:port`` of one nsqd, or several.
    :param kwargs: the Twisted producer's other parameters (``config``,
        ``initial_backoff``, ``max_backoff``).
    :raises RuntimeError: no asyncio loop is running.
    """

    def __init__(self, nsqd_tcp_addresses: Union[str, Sequence[str]], **kwargs: Any) -> None:
        self._owner = _loop_reactor()
        self.producer = TwistedProducer(nsqd_tcp_addresses, reactor=self._owner.acquire(), **kwargs)
        self._closed = False

    async def publish(self, topic: str, body: bytes) -> None:
        """PUB ``body`` to ``topic``; returns once nsqd answered OK."""
        await _wait(self.producer.publish(topic, body))

    async def multi_publish(self, topic: str, bodies: Sequence[bytes]) -> None:
        """MPUB ``bodies`` to ``topic``."""
        await _wait(self.producer.multi_publish(topic, bodies))

    async def deferred_publish(self, topic: str, delay: float, body: bytes) -> None:
        """DPUB ``body`` to ``topic``, delivered ``delay`` seconds later."""
        await _wait(self.producer.deferred_publish(topic, delay, body))

    async def close(self) -> None:
        """Close the connections; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            await _wait(self.producer.close())
        finally:
            self._owner.release()

    async def __aenter__(self) -> "Producer":
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()


Handler = Callable[[Message], Any]


class Consumer:
    """
    Consumes a channel (:class:`txnsq.client.consumer.Consumer`) from
    asyncio code: ``start()``, then ``await close()`` (or ``async with``).

    :param handler: called with each :class:`Message <txnsq.client.message.Message>`;
        a plain function or an ``async def``, answering as the Twisted
        consumer's handler does.
    :param kwargs: the Twisted consumer's other parameters
        (``nsqd_tcp_addresses``, ``lookupd_http_addresses``,
        ``max_in_flight``, ...).
    :raises RuntimeError: no asyncio loop is running.
    """

    def __init__(self, topic: str, channel: str, handler: Handler, **kwargs: Any) -> None:
        self._owner = _loop_reactor()
        loop = asyncio.get_running_loop()

        def handle(message: Message) -> Any:
            result = handler(message)
            if inspect.iscoroutine(result):
                # An asyncio coroutine runs as an asyncio task.
                return Deferred.fromFuture(loop.create_task(result))
            if isinstance(result, asyncio.Future):
                return Deferred.fromFuture(result)
            return result

        self.consumer = TwistedConsumer(topic, channel, handle, reactor=self._owner.acquire(), **kwargs)
        self._closed = False

    def start(self) -> None:
        """Connect (to the nsqd given, or those lookupd names) and consume."""
        self.consumer.start()

    @property
    def connections(self) -> int:
        """How many nsqd connections are open."""
        return self.consumer.connections

    def stats(self) -> ConsumerStats:
        """Counters: received, finished, requeued, connections."""
        return self.consumer.stats()

    async def close(self) -> None:
        """CLS on every connection, wait for in-flight messages (up to the close timeout), disconnect; idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            await _wait(self.consumer.close())
        finally:
            self._owner.release()

    async def __aenter__(self) -> "Consumer":
        self.start()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()
