"""
Drive an nsqd with gnsq 1.0.2 (gevent): a Producer publishes with PUB
(one also deferred) and MPUB; a Consumer FINs everything except one
message it REQs once (which must come back with attempts 2).

Run by tests.interop.test_clients in a subprocess (gevent monkey-patching
stays in this process): ``python gnsq_client.py HOST:TCP_PORT TOPIC``.
Prints one JSON object per line (``event`` key); exits 0 after ``done``,
3 when gnsq cannot be imported, 1 on timeout.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List

from script_events import emit

try:
    import gevent.monkey

    gevent.monkey.patch_all()
    import gevent
    import gevent.event
    import gnsq
except ImportError as error:  # the trial test turns this into a failure
    emit("import_error", module="gnsq", error=str(error))
    sys.exit(3)

TIMEOUT = 30.0
EXPECTED = [("pub-1", 1), ("pub-2", 1), ("mpub-1", 1), ("mpub-2", 1), ("req-me", 1), ("req-me", 2), ("dpub-1", 1)]


def main(address: str, topic: str) -> None:
    """Publish, consume, report."""
    emit("versions", gnsq=gnsq.__version__, gevent=gevent.__version__)
    seen: List[Dict[str, Any]] = []
    complete = gevent.event.Event()

    consumer = gnsq.Consumer(topic, "gnsq", nsqd_tcp_addresses=[address], max_in_flight=10)

    @consumer.on_message.connect
    def handler(consumer: Any, message: Any) -> None:
        body = message.body.decode("utf-8")
        record = {"body": body, "attempts": message.attempts, "id": message.id.decode("ascii")}
        seen.append(record)
        emit("message", **record)
        if body == "req-me" and message.attempts == 1:
            message.requeue(time_ms=0, backoff=False)
            emit("requeued", id=record["id"])
        else:
            message.finish()
        if sorted((m["body"], m["attempts"]) for m in seen) == sorted(EXPECTED):
            complete.set()

    @consumer.on_error.connect
    def error(consumer: Any, error: Any) -> None:
        emit("error", side="consumer", error=str(error))

    consumer.start(block=False)
    producer = gnsq.Producer([address])
    producer.start()
    emit("published", command="pub", response=_text(producer.publish(topic, b"pub-1")))
    emit("published", command="pub", response=_text(producer.publish(topic, b"pub-2")))
    emit("published", command="mpub", response=_text(producer.multipublish(topic, [b"mpub-1", b"mpub-2", b"req-me"])))
    emit("published", command="dpub", response=_text(producer.publish(topic, b"dpub-1", defer=500)))

    if complete.wait(TIMEOUT):
        # Catch unwanted redeliveries for a moment before reporting.
        gevent.sleep(1.0)
        emit("done")
        code = 0
    else:
        emit("timeout", seen=seen)
        code = 1
    producer.close()
    consumer.close()
    sys.stdout.flush()
    # gevent workers may linger on closed sockets; the report is complete.
    import os

    os._exit(code)


def _text(response: Any) -> str:
    return response.decode("utf-8") if isinstance(response, bytes) else str(response)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
