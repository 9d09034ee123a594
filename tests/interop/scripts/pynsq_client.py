"""
Drive an nsqd with pynsq 0.9.1 (Tornado): a Writer publishes with PUB, MPUB
and DPUB; a Reader (IDENTIFY msg_timeout 1 s) FINs, REQs one message once
(it must come back with attempts 2) and TOUCHes another past its timeout.

Run by tests.interop.test_clients in a subprocess:
``python pynsq_client.py HOST:TCP_PORT TOPIC``.  Prints one JSON object per
line (``event`` key) and exits 0 after ``done``; 3 when pynsq cannot be
imported, 1 on timeout.
"""

from __future__ import annotations

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

TIMEOUT = 30.0
#: Bodies every run must see, with the attempts they must arrive with.
EXPECTED = [
    ("pub-1", 1), ("mpub-1", 1), ("mpub-2", 1), ("req-me", 1), ("req-me", 2),
    ("touch-me", 1), ("dpub-1", 1),
]


def main(address: str, topic: str) -> None:
    """Publish, consume, report; stop the IOLoop when everything arrived."""
    loop = tornado.ioloop.IOLoop.current()
    emit("versions", pynsq=nsq.__version__, tornado=tornado.version)
    seen: List[Dict[str, Any]] = []
    state = {"exit": 1, "finishing": False}

    def finish_run() -> None:
        emit("done")
        state["exit"] = 0
        loop.stop()

    def check_done() -> None:
        got = sorted((m["body"], m["attempts"]) for m in seen)
        if got == sorted(EXPECTED) and not state["finishing"]:
            state["finishing"] = True
            # Let the FIN/TOUCH just written reach nsqd, and catch any
            # unwanted redelivery (a TOUCH that did not work).
            loop.call_later(1.5, finish_run)

    def handler(message: Any) -> Any:
        body = message.body.decode("utf-8")
        record = {"body": body, "attempts": message.attempts, "id": message.id.decode("ascii")}
        seen.append(record)
        emit("message", **record)
        if body == "req-me" and message.attempts == 1:
            message.requeue(backoff=False, delay=0)
            emit("requeued", id=record["id"])
        elif body == "touch-me":
            # Hold it past msg_timeout (1 s), touching in time.
            message.enable_async()

            def touch() -> None:
                message.touch()
                emit("touched", id=record["id"])

            def fin() -> None:
                message.finish()
                emit("finished", id=record["id"])
                check_done()

            loop.call_later(0.6, touch)
            loop.call_later(1.2, touch)
            loop.call_later(1.8, fin)
            return None
        else:
            check_done()
            return True
        check_done()
        return None

    class ReportingReader(nsq.Reader):  # type: ignore[misc]
        """A Reader that reports the error frames nsqd sends it."""

        def _on_connection_error(self, conn: Any, error: Any, **kwargs: Any) -> None:
            emit("error", side="reader", error=str(error))
            super()._on_connection_error(conn, error, **kwargs)

    ReportingReader(
        topic=topic,
        channel="pynsq",
        message_handler=handler,
        nsqd_tcp_addresses=[address],
        max_in_flight=10,
        msg_timeout=1.0,
        heartbeat_interval=5,
    )
    writer = nsq.Writer([address])

    def published(command: str) -> Any:
        def callback(conn: Any, data: Any) -> None:
            emit("published", command=command, response=data.decode() if isinstance(data, bytes) else str(data))

        return callback

    def publish() -> None:
        if not any(conn.connected() for conn in writer.conns.values()):
            loop.call_later(0.1, publish)
            return
        writer.pub(topic, b"pub-1", callback=published("pub"))
        writer.mpub(topic, [b"mpub-1", b"mpub-2", b"req-me", b"touch-me"], callback=published("mpub"))
        writer.dpub(topic, 500, b"dpub-1", callback=published("dpub"))

    def too_late() -> None:
        emit("timeout", seen=seen)
        loop.stop()

    loop.call_later(0.1, publish)
    loop.call_later(TIMEOUT, too_late)
    loop.start()
    sys.exit(state["exit"])


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
