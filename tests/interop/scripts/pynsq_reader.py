"""
Consume numbered messages from an nsqd with pynsq 0.9.1's Reader (Tornado),
finishing each one (the handler returns ``True``).

Run by tests.interop.test_client_interop in a subprocess:
``python pynsq_reader.py HOST:TCP_PORT TOPIC CHANNEL --count=N``.  Prints
one JSON object per line (``event`` key): ``message`` for each delivery
(body, attempts, id), ``error`` for each error frame, and ``done`` once
``N`` distinct bodies arrived; then closes the Reader and exits 0 (1 on
timeout, 3 when pynsq cannot be imported).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, List, Set

from script_events import emit

try:
    import nsq
    import tornado
    import tornado.ioloop
except ImportError as error:  # the trial test turns this into a failure
    emit("import_error", module="pynsq", error=str(error))
    sys.exit(3)


def main(argv: List[str]) -> None:
    """Consume until ``--count`` distinct bodies arrived."""
    parser = argparse.ArgumentParser()
    parser.add_argument("address")
    parser.add_argument("topic")
    parser.add_argument("channel")
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--max-in-flight", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args(argv)

    loop = tornado.ioloop.IOLoop.current()
    emit("versions", pynsq=nsq.__version__, tornado=tornado.version)
    bodies: Set[str] = set()
    state = {"exit": 1}

    def handler(message: Any) -> bool:
        body = message.body.decode("utf-8")
        emit("message", body=body, attempts=message.attempts, id=message.id.decode("ascii"))
        bodies.add(body)
        if len(bodies) == args.count and state["exit"] != 0:
            state["exit"] = 0
            # After this handler returns and pynsq has written the FIN.
            loop.add_callback(finish)
        return True

    def finish() -> None:
        emit("done")
        reader.close()
        loop.stop()

    class ReportingReader(nsq.Reader):  # type: ignore[misc]
        """A Reader that reports the error frames nsqd sends it."""

        def _on_connection_error(self, conn: Any, error: Any, **kwargs: Any) -> None:
            emit("error", error=str(error))
            super()._on_connection_error(conn, error, **kwargs)

    reader = ReportingReader(
        topic=args.topic,
        channel=args.channel,
        message_handler=handler,
        nsqd_tcp_addresses=[args.address],
        max_in_flight=args.max_in_flight,
    )

    def too_late() -> None:
        emit("timeout", received=len(bodies))
        loop.stop()

    loop.call_later(args.timeout, too_late)
    loop.start()
    sys.exit(state["exit"])


if __name__ == "__main__":
    main(sys.argv[1:])
