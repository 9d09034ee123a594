"""
A numbering writer into a retained topic: record ``n`` (its body from
:func:`lab.log_bodies.record_body`) goes over MetaQ ``put`` to partition
``n % partitions``, or as a V2 ``PUB`` (nsqd picks the partition), or
alternately (``--mode both``: odd numbers put, even ones PUB), at a fixed
rate.  Each record's invoke and outcome is recorded: ``ok`` (with the
partition, offset and message id a ``put`` returns), ``fail`` (nsqd said
nothing was stored: a MetaQ ``result`` refusal, ``E_PUB_FAILED``, or it
never left: no connection) or ``info`` (unknown: the connection was lost
or no answer came within ``--timeout``).

    python -m lab.workers.log_writer --metaq A:8123 --nsqd A:4150 \\
        --topic log --partitions 2 --rate 200 --duration 10 \\
        --out history.jsonl --process w1
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Dict, List, Optional

from twisted.internet import reactor as _reactor
from twisted.internet.defer import Deferred
from twisted.internet.task import LoopingCall
from twisted.python.failure import Failure

from lab.log_bodies import record_body
from lab.workers.common import HistoryWriter
from txnsq.client import ConnectionConfig, Producer
from txnsq.client.connection import NSQConnectionError
from txnsq.client.metaq import (
    MetaqClient,
    MetaqConnectionError,
    MetaqResultError,
    connect_metaq,
)
from txnsq.protocol.v2_client import NSQError

reactor: Any = _reactor

__all__ = ["main"]

#: E_* answers after which nsqd has stored nothing (docs/retention.md:
#: a publish to a retained topic is all or nothing).
_DEFINITE_FAILURES = ("E_PUB_FAILED", "E_BAD_TOPIC", "E_BAD_MESSAGE", "E_INVALID")


class LogWriter:
    """The writer's state machine; see the module docstring."""

    def __init__(self, args: argparse.Namespace, history: HistoryWriter) -> None:
        self.args = args
        self.history = history
        self.next_n = args.start
        self.outstanding = 0
        self.stopping = False
        self.done: Deferred = Deferred()
        self.loop = LoopingCall(self.tick)
        self.metaq: Optional[MetaqClient] = None
        self.connecting: Optional[Deferred] = None
        self.producer: Optional[Producer] = None
        self.generation = 0
        #: pub number -> generation, for the ones awaiting an answer.
        self.pubs: Dict[int, int] = {}

    # -- life ----------------------------------------------------------------

    def start(self, waited: float = 0.0) -> None:
        # The first records would fail for want of a MetaQ connection:
        # make it first (for up to 5 s).
        if self.args.mode != "pub" and self._metaq_client() is None and waited < 5.0:
            reactor.callLater(0.05, self.start, waited + 0.05)
            return
        self.loop.start(1.0 / self.args.rate, now=True)
        if self.args.duration > 0:
            reactor.callLater(self.args.duration, self.stop)

    def stop(self) -> None:
        if self.stopping:
            return
        self.stopping = True
        if self.loop.running:
            self.loop.stop()
        reactor.callLater(self.args.timeout + 0.5, self.finish)

    def finish(self) -> None:
        for n in list(self.pubs):
            self.history.write("info", "pub", n, self.args.nsqd, why="stopped")
        self.pubs.clear()
        closing = []
        if self.producer is not None:
            closing.append(self.producer.close())
        if self.metaq is not None:
            closing.append(self.metaq.close())
        for d in closing:
            d.addErrback(lambda _: None)
        if not self.done.called:
            self.done.callback(None)

    # -- writing -------------------------------------------------------------

    def tick(self) -> None:
        if self.stopping or self.outstanding >= self.args.window:
            return
        if self.args.count and self.next_n >= self.args.start + self.args.count:
            self.stop()
            return
        n = self.next_n
        self.next_n += 1
        mode = self.args.mode
        if mode == "put" or (mode == "both" and n % 2):
            self.put(n)
        else:
            self.pub(n)

    def body(self, n: int) -> bytes:
        return record_body(self.args.process, n, self.args.size)

    def _metaq_client(self) -> Optional[MetaqClient]:
        """The MetaQ connection when it is up; otherwise start making one."""
        client = self.metaq
        if client is not None and client.connected:
            return client
        self.metaq = None
        if self.connecting is None:
            attempt = connect_metaq(
                reactor, self.args.metaq, connect_timeout=1.0, request_timeout=self.args.timeout
            )
            self.connecting = attempt

            def made(client: MetaqClient) -> None:
                self.connecting = None
                if self.stopping:
                    client.close()
                else:
                    self.metaq = client

            def failed(_: Failure) -> None:
                # Try again on a later tick, not at once: nsqd may be down.
                reactor.callLater(0.2, setattr, self, "connecting", None)

            attempt.addCallbacks(made, failed)
        return None

    def put(self, n: int) -> None:
        address = self.args.metaq
        partition = n % self.args.partitions
        self.history.write("invoke", "put", n, address, part=partition)
        client = self._metaq_client()
        if client is None:
            self.history.write("fail", "put", n, address, why="not connected")
            return
        self.outstanding += 1
        d = client.put(self.args.topic, partition, self.body(n))

        def stored(result: Any) -> None:
            self.outstanding -= 1
            msg_id, part, offset = result
            self.history.write("ok", "put", n, address, part=part, off=offset, id="%016x" % msg_id)

        def refused(failure: Failure) -> None:
            self.outstanding -= 1
            error = failure.value
            why = str(error)[:200]
            if isinstance(error, MetaqResultError):
                # A refusal: nsqd stored nothing (docs/metaq.md, 500 included).
                self.history.write("fail", "put", n, address, why=why, code=error.code)
                return
            if isinstance(error, MetaqConnectionError) and client is self.metaq:
                self.metaq = None
            self.history.write("info", "put", n, address, why=why)

        d.addCallbacks(stored, refused)

    def _producer(self) -> Producer:
        if self.producer is None:
            config = ConnectionConfig(heartbeat_interval=1.0, read_timeout=3.0, dial_timeout=1.0)
            self.producer = Producer(self.args.nsqd, config=config, initial_backoff=0.2, max_backoff=1.0)
        return self.producer

    def pub(self, n: int) -> None:
        address = self.args.nsqd
        self.history.write("invoke", "pub", n, address)
        producer = self._producer()
        generation = self.generation
        self.pubs[n] = generation
        self.outstanding += 1
        d = producer.publish(self.args.topic, self.body(n))
        timer = reactor.callLater(self.args.timeout, self.pub_timed_out)

        def settled(result: object) -> None:
            self.outstanding -= 1
            if timer.active():
                timer.cancel()
            if self.pubs.get(n) != generation:
                return  # already recorded as unknown by a timeout
            del self.pubs[n]
            if not isinstance(result, Failure):
                self.history.write("ok", "pub", n, address)
                return
            error = result.value
            why = str(error)[:200]
            if isinstance(error, NSQError) and error.code in _DEFINITE_FAILURES:
                kind = "fail"
            elif isinstance(error, NSQConnectionError) and why.startswith("no nsqd available"):
                kind = "fail"  # never sent
            else:
                kind = "info"
            self.history.write(kind, "pub", n, address, why=why)

        d.addBoth(settled)

    def pub_timed_out(self) -> None:
        """No answer in time: every PUB outstanding is of unknown outcome; a new connection."""
        for n in list(self.pubs):
            self.history.write("info", "pub", n, self.args.nsqd, why="timeout")
        self.pubs.clear()
        self.generation += 1
        producer, self.producer = self.producer, None
        if producer is not None:
            producer.close().addErrback(lambda _: None)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1] if __doc__ else None)
    parser.add_argument("--metaq", default="", help="nsqd's MetaQ address (for put)")
    parser.add_argument("--nsqd", default="", help="nsqd's TCP address (for PUB)")
    parser.add_argument("--mode", choices=("put", "pub", "both"), default="both")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--partitions", type=int, default=1, help="the topic's partitions (put: n %% partitions)")
    parser.add_argument("--rate", type=float, default=200.0, help="records a second")
    parser.add_argument("--duration", type=float, default=0.0, help="seconds to write (0: until --count)")
    parser.add_argument("--count", type=int, default=0, help="records to write (0: until --duration)")
    parser.add_argument("--size", type=int, default=120, help="bytes of each body")
    parser.add_argument("--window", type=int, default=32, help="records outstanding at most")
    parser.add_argument("--timeout", type=float, default=4.0, help="seconds before an answer is unknown")
    parser.add_argument("--start", type=int, default=1)
    parser.add_argument("--out", required=True)
    parser.add_argument("--process", default="w1")
    args = parser.parse_args(argv)
    if args.duration <= 0 and args.count <= 0:
        parser.error("give --duration or --count")
    if args.mode in ("put", "both") and not args.metaq:
        parser.error("--mode %s needs --metaq" % args.mode)
    if args.mode in ("pub", "both") and not args.nsqd:
        parser.error("--mode %s needs --nsqd" % args.mode)
    history = HistoryWriter(args.out, args.process)
    writer = LogWriter(args, history)

    def end(_: object) -> None:
        history.close()
        reactor.stop()

    writer.done.addBoth(end)
    reactor.callWhenRunning(writer.start)
    reactor.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
