"""
gnsq 1.0.2 (gevent) over upgraded connections: a Producer and a Consumer,
both asking nsqd for ``tls_v1`` (verifying its certificate against a CA
file), ``snappy`` or ``deflate`` in IDENTIFY (gnsq takes snappy when both
are offered); the Producer publishes ``--count`` messages (publish, then
multipublish), the Consumer FINs them and checks every body.  The
Producer carries a work-around for gnsq's own upgrade bug (see
``_UpgradableProducer``).

Run by tests.interop.test_clients in a subprocess (gevent monkey-patching
stays in this process)::

    python gnsq_upgraded.py TCP_ADDRESS HTTP_ADDRESS TOPIC \\
        [--tls-ca CA.pem] [--snappy] [--deflate [--deflate-level N]]
        [--count N] [--incompressible-size N] [--timeout SECONDS]

Prints one JSON object per line (``event`` key): ``identify_response``
(what nsqd offered), ``upgraded`` (what each connection runs on after
IDENTIFY), ``published``, ``message``, ``error``, ``server_clients``
(nsqd's /stats view while connected), then ``done`` (exit 0) or
``timeout`` (exit 1); exit 3 when gnsq cannot be imported.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Dict, Set

from upgrade_common import batches, body, emit, parse_args, record_message, server_clients

try:
    import gevent.monkey

    gevent.monkey.patch_all()
    import gevent
    import gevent.event
    import gevent.ssl
    import gnsq
    import gnsq.nsqd
except ImportError as error:  # the trial test turns this into a failure
    emit("import_error", module="gnsq", error=str(error))
    sys.exit(3)


def _report_identify() -> None:
    """
    Wrap ``NsqdTCPClient.identify`` (Producer and Consumer both call it
    right after connecting; it runs the upgrades) to report what nsqd
    offered and what the connection's socket became; gnsq itself only logs
    a failed IDENTIFY.
    """
    original = gnsq.nsqd.NsqdTCPClient.identify

    def identify(self: Any) -> Any:
        try:
            data = original(self)
        except Exception as error:
            emit("error", side=self.client_id, error="IDENTIFY: %r" % (error,))
            raise
        emit("identify_response", role=self.client_id, data=data)
        outer = self.stream.socket
        inner = getattr(outer, "_socket", outer)  # under a compression wrapper
        emit(
            "upgraded",
            role=self.client_id,
            tls=isinstance(inner, gevent.ssl.SSLSocket),
            tls_version=inner.version() if isinstance(inner, gevent.ssl.SSLSocket) else "",
            socket=type(outer).__name__,
            snappy=type(outer).__name__ == "SnappySocket",
            deflate=type(outer).__name__ == "DefalteSocket",  # sic
        )
        return data

    gnsq.nsqd.NsqdTCPClient.identify = identify


class _UpgradableProducer(gnsq.Producer):  # type: ignore[misc]
    """
    gnsq 1.0.2's Producer with its upgrade bug worked around
    (wtolson/gnsq#25, the same against Go nsqd): the OK that confirms an
    upgrade arrives during IDENTIFY, before the connection has a queue of
    pending publishes, and ``handle_response`` raises KeyError for it.
    """

    def handle_response(self, conn: Any, response: Any) -> None:
        if conn not in self._response_queues:
            # IDENTIFY's own replies (its JSON, an OK per upgrade), which
            # NsqdTCPClient.identify checks itself.
            emit("response_before_ready", response=_text(response))
            return
        super().handle_response(conn, response)


def main() -> None:
    """Connect, publish, consume, report."""
    args = parse_args()
    emit("versions", gnsq=gnsq.__version__, gevent=gevent.__version__)
    _report_identify()
    conn_kwargs: Dict[str, Any] = {
        "snappy": args.snappy,
        "deflate": args.deflate,
        "deflate_level": args.deflate_level,
        "timeout": args.timeout,
    }
    if args.tls_ca:
        # Passed to gevent.ssl.SSLSocket(sock, **tls_options): the chain is
        # verified, the host name is not (gnsq sets no server_hostname).
        conn_kwargs["tls_v1"] = True
        conn_kwargs["tls_options"] = {"ca_certs": args.tls_ca, "cert_reqs": gevent.ssl.CERT_REQUIRED}

    expected = args.count
    received: Set[int] = set()
    complete = gevent.event.Event()

    consumer = gnsq.Consumer(
        args.topic, "gnsq_upgraded", nsqd_tcp_addresses=[args.tcp_address], max_in_flight=50,
        client_id="reader", **conn_kwargs,
    )

    @consumer.on_message.connect
    def handler(consumer: Any, message: Any) -> None:
        record = record_message(message.body, message.attempts, args.incompressible_size)
        received.add(record["index"])
        emit("message", **record)
        message.finish()
        if len(received) == expected:
            complete.set()

    @consumer.on_error.connect
    def consumer_error(consumer: Any, error: Any) -> None:
        emit("error", side="reader", error=repr(error))

    consumer.start(block=False)
    producer = _UpgradableProducer([args.tcp_address], client_id="writer", **conn_kwargs)

    @producer.on_error.connect
    def producer_error(producer: Any, error: Any) -> None:
        emit("error", side="writer", error=repr(error))

    code = 1
    try:
        producer.start()
        for group in batches(expected):
            if len(group) == 1:
                message = body(group[0], args.incompressible_size)
                response = producer.publish(args.topic, message, timeout=args.timeout)
                command = "pub"
            else:
                messages = [body(i, args.incompressible_size) for i in group]
                response = producer.multipublish(args.topic, messages, timeout=args.timeout)
                command = "mpub"
            emit("published", command=command, indexes=group, response=_text(response))
        if complete.wait(args.timeout):
            # Catch unwanted redeliveries for a moment before reporting.
            gevent.sleep(1.0)
            try:
                emit("server_clients", clients=server_clients(args.http_address, args.topic))
            except Exception as error:  # reported; the test fails on its absence
                emit("error", side="stats", error=repr(error))
            emit("done", received=len(received))
            code = 0
        else:
            emit("timeout", received=sorted(received))
    except Exception as error:
        emit("error", side="writer", error=repr(error))
        emit("timeout", received=sorted(received))
    producer.close()
    consumer.close()
    sys.stdout.flush()
    # gevent workers may linger on closed sockets; the report is complete.
    os._exit(code)


def _text(response: Any) -> str:
    return response.decode("utf-8") if isinstance(response, bytes) else repr(response)


if __name__ == "__main__":
    main()
