"""
A recording NATS subscriber: connects to one nats-server's client port
with nats-py (plain asyncio, in a process of its own), subscribes to a
subject and records each delivery (``recv``: the body's producer and
number, the server, the subject) until ``--stop-file`` appears.

Connection changes (disconnected, reconnected) are recorded too
(``conn`` events, which the checkers skip), so that a round's history
shows when the subscriber was away.

    python -m lab.workers.nats_subscriber --server nats://A:4222 \\
        --subject nsq.orders --out history.jsonl --process sub-x1 \\
        --stop-file stop
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from typing import Any, List, Optional

import nats

from lab.workers.common import HistoryWriter

__all__ = ["main"]


async def _run(args: argparse.Namespace) -> None:
    history = HistoryWriter(args.out, args.process)
    server = args.name or args.server

    async def disconnected() -> None:
        history.write("conn", "disconnected", 0, server)

    async def reconnected() -> None:
        history.write("conn", "reconnected", 0, server)

    async def error(e: Exception) -> None:
        history.write("conn", "error", 0, server, why=repr(e)[:200])

    # Only this server: the cluster does not advertise its others
    # (no_advertise), so a reconnect comes back here and the path a
    # message takes stays the one the round names.
    nc = await nats.connect(
        servers=[args.server],
        name=args.process,
        allow_reconnect=True,
        max_reconnect_attempts=-1,
        reconnect_time_wait=0.2,
        connect_timeout=2,
        # A killed server closes the socket: no PINGs are needed to see
        # it, and a loop stalled by the busy machine must not reconnect.
        ping_interval=5,
        max_outstanding_pings=3,
        dont_randomize=True,
        disconnected_cb=disconnected,
        reconnected_cb=reconnected,
        error_cb=error,
    )

    async def received(msg: Any) -> None:
        body = msg.data.decode("utf-8", "replace")
        producer, _, number = body.rpartition(":")
        try:
            value: object = int(number)
        except ValueError:
            value = body
        history.write("recv", "msg", value, server, ch=args.process, src=producer, subj=msg.subject)

    await nc.subscribe(args.subject, cb=received)
    await nc.flush(5)
    # The lab waits for this line before it publishes.
    print("subscribed to %s on %s" % (args.subject, args.server), flush=True)
    while not os.path.exists(args.stop_file):
        history.flush()
        await asyncio.sleep(0.2)
    try:
        await asyncio.wait_for(nc.close(), 5)
    except Exception:
        pass
    history.close()


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1] if __doc__ else None)
    parser.add_argument("--server", required=True, help="nats://HOST:PORT of one nats-server")
    parser.add_argument("--name", default="", help="the server's name in the history")
    parser.add_argument("--subject", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--process", default="sub1")
    parser.add_argument("--stop-file", required=True)
    args = parser.parse_args(argv)
    asyncio.run(_run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
