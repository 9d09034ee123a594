"""
A nats-py client driven over stdin, for the NATS route tests: one JSON
command per line in, one JSON event per line out (``script_events``).

Commands:
  {"op": "subscribe", "name": N, "url": U, "subject": S, "queue": Q|null}
      subscribe (a connection per URL, shared); answers {"event": "subscribed"}
      after a flush, so the server has the interest;
  {"op": "publish", "url": U, "subject": S, "count": C, "prefix": P}
      publish C messages with bodies P0..P(C-1), flush; answers
      {"event": "published", "count": C};
  {"op": "counts"}
      answers {"event": "counts", "counts": {N: received}, "bodies": {N: distinct},
      "reconnects": R};
  {"op": "reset"}     forget what was received; answers {"event": "reset"};
  {"op": "quit"}      close everything and exit.
Not a test module.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any, Dict, Set

import nats

from script_events import emit


async def main() -> None:
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    connections: Dict[str, Any] = {}
    counts: Dict[str, int] = {}
    bodies: Dict[str, Set[bytes]] = {}
    reconnects = [0]

    async def connection(url: str) -> Any:
        found = connections.get(url)
        if found is None:
            async def reconnected() -> None:
                reconnects[0] += 1

            found = connections[url] = await nats.connect(
                url,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.2,
                reconnected_cb=reconnected,
                pending_size=64 * 1024 * 1024,
            )
        return found

    while True:
        line = await reader.readline()
        if not line:
            break
        command = json.loads(line)
        op = command["op"]
        if op == "subscribe":
            name = command["name"]
            counts.setdefault(name, 0)
            bodies.setdefault(name, set())

            def handler(name: str) -> Any:
                async def received(msg: Any) -> None:
                    counts[name] += 1
                    bodies[name].add(msg.data)
                return received

            nc = await connection(command["url"])
            await nc.subscribe(
                command["subject"],
                queue=command.get("queue") or "",
                cb=handler(name),
                pending_msgs_limit=1000000,
                pending_bytes_limit=256 * 1024 * 1024,
            )
            await nc.flush()
            emit("subscribed", name=name)
        elif op == "publish":
            nc = await connection(command["url"])
            prefix = command["prefix"].encode()
            subject = command["subject"]
            for index in range(command["count"]):
                await nc.publish(subject, prefix + str(index).encode())
            await nc.flush()
            emit("published", count=command["count"])
        elif op == "counts":
            emit(
                "counts",
                counts=counts,
                bodies={name: len(found) for name, found in bodies.items()},
                reconnects=reconnects[0],
            )
        elif op == "reset":
            for name in counts:
                counts[name] = 0
                bodies[name] = set()
            emit("reset")
        elif op == "quit":
            break
    for nc in connections.values():
        try:
            await nc.close()
        except Exception:
            pass


if __name__ == "__main__":
    asyncio.run(main())
