"""
A recording consumer: subscribes to a topic's channel on every nsqd that
nsqlookupd names (and any given directly), FINs every message and
records each delivery (``recv``: the body's producer and number, the
nsqd, the attempts).  It runs until ``--stop-file`` appears.

``--hold-every N`` leaves the first delivery of every message whose
number is a multiple of N unanswered (no FIN, REQ or TOUCH; recorded
with ``held``), so nsqd times it out after its msg-timeout and delivers
it again; later deliveries are FINed.

    python -m lab.workers.consumer --lookupd A:4161,B:4161 --topic t \\
        --channel c1 --out history.jsonl --stop-file stop
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from twisted.internet import reactor as _reactor
from twisted.internet.task import LoopingCall

from lab.workers.common import HistoryWriter
from txnsq.client import ConnectionConfig, Consumer, Message

reactor: object = _reactor

__all__ = ["main"]


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lookupd", default="", help="comma-separated nsqlookupd HTTP addresses")
    parser.add_argument("--nodes", default="", help="comma-separated nsqd TCP addresses")
    parser.add_argument("--topic", required=True)
    parser.add_argument("--channel", required=True)
    parser.add_argument("--max-in-flight", type=int, default=200)
    parser.add_argument("--out", required=True)
    parser.add_argument("--process", default="c1")
    parser.add_argument("--stop-file", required=True)
    parser.add_argument("--hold-every", type=int, default=0, help="leave 1 in N first deliveries unanswered")
    args = parser.parse_args(argv)
    history = HistoryWriter(args.out, args.process)
    channel = args.channel

    def handle(message: Message) -> bool:
        body = message.body.decode("utf-8", "replace")
        producer, _, number = body.rpartition(":")
        try:
            value: object = int(number)
        except ValueError:
            value = body
        if (
            args.hold_every
            and message.attempts == 1
            and isinstance(value, int)
            and value % args.hold_every == 0
        ):
            # Never answered: nsqd must time it out and deliver it again.
            message.enable_async()
            history.write(
                "recv", "msg", value, message.nsqd_address, ch=channel, src=producer, a=1, held=1
            )
            return True
        history.write(
            "recv", "msg", value, message.nsqd_address, ch=channel, src=producer, a=message.attempts
        )
        return True

    config = ConnectionConfig(heartbeat_interval=1.0, read_timeout=3.0, dial_timeout=1.0)
    consumer = Consumer(
        args.topic,
        channel,
        handle,
        nsqd_tcp_addresses=[a for a in args.nodes.split(",") if a],
        lookupd_http_addresses=[a for a in args.lookupd.split(",") if a],
        max_in_flight=args.max_in_flight,
        lookupd_poll_interval=1.0,
        lookupd_poll_jitter=0.1,
        reconnect_delay=0.2,
        max_reconnect_delay=1.0,
        config=config,
        close_timeout=2.0,
    )

    def check_stop() -> None:
        history.flush()
        if os.path.exists(args.stop_file):
            poll.stop()
            consumer.close().addBoth(lambda _: (history.close(), reactor.stop()))  # type: ignore[attr-defined]

    poll = LoopingCall(check_stop)
    reactor.callWhenRunning(consumer.start)  # type: ignore[attr-defined]
    reactor.callWhenRunning(poll.start, 0.2)  # type: ignore[attr-defined]
    reactor.run()  # type: ignore[attr-defined]
    return 0


if __name__ == "__main__":
    sys.exit(main())
