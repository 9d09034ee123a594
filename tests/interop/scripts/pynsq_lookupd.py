"""
Consume with a pynsq 0.9.1 Reader that knows only nsqlookupd HTTP addresses:
it must discover every nsqd producing the topic and read from all of them.

Run by tests.interop.test_discovery in a subprocess:
``python pynsq_lookupd.py LOOKUPD_HTTP[,LOOKUPD_HTTP...] TOPIC BODY[,BODY...]``.
Prints one JSON object per line (``event`` key) and exits 0 after ``done``
(every expected body arrived, and nothing else within a second); 3 when
pynsq cannot be imported, 1 on timeout.
"""

from __future__ import annotations

import sys
from typing import Any, List

from script_events import emit

try:
    import nsq
    import tornado
    import tornado.ioloop
except ImportError as error:  # the trial test turns this into a failure
    emit("import_error", module="pynsq", error=str(error))
    sys.exit(3)

TIMEOUT = 30.0


def main(lookupds: List[str], topic: str, expected: List[str]) -> None:
    """Read until every expected body arrived; report each message and connection."""
    loop = tornado.ioloop.IOLoop.current()
    emit("versions", pynsq=nsq.__version__, tornado=tornado.version)
    seen: List[str] = []
    state = {"exit": 1, "finishing": False}

    def finish_run() -> None:
        emit("connections", addresses=sorted(reader.conns))
        emit("done")
        state["exit"] = 0
        loop.stop()

    def handler(message: Any) -> bool:
        body = message.body.decode("utf-8")
        seen.append(body)
        emit("message", body=body, attempts=message.attempts)
        if sorted(seen) == sorted(expected) and not state["finishing"]:
            state["finishing"] = True
            # Let the last FIN reach nsqd, and catch any unwanted redelivery.
            loop.call_later(1.0, finish_run)
        return True

    reader = nsq.Reader(
        topic=topic,
        channel="discovery",
        message_handler=handler,
        lookupd_http_addresses=["http://" + address for address in lookupds],
        lookupd_poll_interval=1,
        max_in_flight=10,
    )

    def give_up() -> None:
        emit("timeout", seen=sorted(seen))
        loop.stop()

    loop.call_later(TIMEOUT, give_up)
    loop.start()
    sys.exit(state["exit"])


if __name__ == "__main__":
    main(sys.argv[1].split(","), sys.argv[2], sys.argv[3].split(","))
