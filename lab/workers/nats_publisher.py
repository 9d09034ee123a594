"""
A numbering NATS publisher: publishes ``<process>:<n>`` bodies to one
subject through one nats-server's client port with nats-py (plain
asyncio, in a process of its own), one at a time at a fixed rate, and
records each publish's invoke and outcome:

- ``ok``: a marker published after the PUB on the same connection, to a
  subject this publisher subscribes to itself, came back: a server
  handles a client's operations in order, so it had processed the PUB
  and handed it to the routes with interest -- the message was
  acknowledged on its way in;
- ``fail``: refused before anything was written (the connection is
  closed);
- ``info``: unknown -- the marker did not come back in ``--timeout``
  seconds (the PUB may sit in nats-py's reconnect buffer and go out
  later).

Not nats-py's ``flush()``: in nats-py 2.16 its PING is written to the
socket ahead of the PUBs still in the client's buffer (a PONG then says
nothing of them), and while the client reconnects it returns at once
without any round trip.

    python -m lab.workers.nats_publisher --server nats://A:4222 \\
        --subject nsq.fromnats --rate 100 --duration 20 \\
        --out history.jsonl --process np-x1
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any, Dict, List, Optional

import nats
from nats import errors

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
    loop = asyncio.get_running_loop()
    markers: Dict[int, "asyncio.Future[None]"] = {}

    async def marker(msg: Any) -> None:
        waiting = markers.pop(int(msg.data), None)
        if waiting is not None and not waiting.done():
            waiting.set_result(None)

    marker_subject = "lab.ack.%s" % args.process
    await nc.subscribe(marker_subject, cb=marker)
    await nc.flush(5)
    interval = 1.0 / args.rate
    end = loop.time() + args.duration
    due = loop.time()
    number = args.start - 1
    subject = args.subject
    while loop.time() < end:
        number += 1
        history.write("invoke", "pub", number, server)
        body = ("%s:%d" % (args.process, number)).encode()
        try:
            await nc.publish(subject, body)
        except (errors.ConnectionClosedError, errors.ConnectionDrainingError) as e:
            history.write("fail", "pub", number, server, why=repr(e)[:200])
        except Exception as e:
            # Buffered or partly written: the server may still get it.
            history.write("info", "pub", number, server, why=repr(e)[:200])
        else:
            waiting = markers[number] = loop.create_future()
            try:
                await nc.publish(marker_subject, str(number).encode())
                await asyncio.wait_for(waiting, args.timeout)
            except Exception as e:
                markers.pop(number, None)
                history.write("info", "pub", number, server, why=repr(e)[:200] or "timeout")
            else:
                history.write("ok", "pub", number, server)
        history.flush()
        # A steady rate; time lost to a slow flush is not made up in a burst.
        due = max(due + interval, loop.time())
        await asyncio.sleep(max(0.0, due - loop.time()))
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
    parser.add_argument("--rate", type=float, default=100.0, help="messages a second")
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--timeout", type=float, default=2.0, help="seconds before an unacknowledged publish is unknown")
    parser.add_argument("--start", type=int, default=1)
    parser.add_argument("--out", required=True)
    parser.add_argument("--process", default="np1")
    args = parser.parse_args(argv)
    asyncio.run(_run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
