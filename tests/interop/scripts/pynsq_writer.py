"""
Publish numbered messages to an nsqd with pynsq 0.9.1's Writer (Tornado):
the first ``--pub`` one at a time with PUB, the rest with MPUB in batches of
``--batch``, all sent at once without waiting for the answers.

Run by tests.interop.test_client_interop in a subprocess:
``python pynsq_writer.py HOST:TCP_PORT TOPIC --count=N [--pub=K] [--batch=B]``.
Bodies are ``msg-<index>``.  Prints one JSON object per line (``event``
key): ``published`` for each answer (with the command, the response and the
indexes it carried), ``error`` for a failed publish, then ``done``; exits 0
when every publish was answered OK, 1 otherwise or on timeout, 3 when
pynsq cannot be imported.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Dict, List

from script_events import emit

try:
    import nsq
    import tornado
    import tornado.ioloop
except ImportError as error:  # the trial test turns this into a failure
    emit("import_error", module="pynsq", error=str(error))
    sys.exit(3)


def main(argv: List[str]) -> None:
    """Publish everything, report each answer, stop when all are in."""
    parser = argparse.ArgumentParser()
    parser.add_argument("address")
    parser.add_argument("topic")
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--pub", type=int, default=None, help="how many go by PUB (default: half)")
    parser.add_argument("--batch", type=int, default=25)
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args(argv)
    singles = args.count // 2 if args.pub is None else args.pub

    loop = tornado.ioloop.IOLoop.current()
    emit("versions", pynsq=nsq.__version__, tornado=tornado.version)
    writer = nsq.Writer([args.address])
    state: Dict[str, Any] = {"answers": 0, "expected": 0, "failed": False, "exit": 1}

    def answered(command: str, indexes: List[int]) -> Any:
        def callback(conn: Any, data: Any) -> None:
            state["answers"] += 1
            if isinstance(data, Exception):
                state["failed"] = True
                emit("error", command=command, indexes=indexes, error=str(data))
            else:
                response = data.decode() if isinstance(data, bytes) else str(data)
                emit("published", command=command, response=response, indexes=indexes)
                if response != "OK":
                    state["failed"] = True
            if state["answers"] == state["expected"]:
                emit("done")
                state["exit"] = 1 if state["failed"] else 0
                loop.stop()

        return callback

    def publish() -> None:
        if not any(conn.connected() for conn in writer.conns.values()):
            # The Writer connects on its own: poll until it has.
            loop.call_later(0.05, publish)
            return
        commands = []
        for index in range(singles):
            commands.append(("pub", [index]))
        for start in range(singles, args.count, args.batch):
            commands.append(("mpub", list(range(start, min(start + args.batch, args.count)))))
        state["expected"] = len(commands)
        for command, indexes in commands:
            bodies = [b"msg-%d" % (index,) for index in indexes]
            if command == "pub":
                writer.pub(args.topic, bodies[0], callback=answered(command, indexes))
            else:
                writer.mpub(args.topic, bodies, callback=answered(command, indexes))

    def too_late() -> None:
        emit("timeout", answers=state["answers"], expected=state["expected"])
        loop.stop()

    loop.add_callback(publish)
    loop.call_later(args.timeout, too_late)
    loop.start()
    sys.exit(state["exit"])


if __name__ == "__main__":
    main(sys.argv[1:])
