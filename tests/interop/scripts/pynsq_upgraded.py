"""
pynsq 0.9.1 (Tornado) over upgraded connections: a Writer and a Reader,
both asking nsqd for ``tls_v1`` (verifying its certificate against a CA
file), ``snappy`` and/or ``deflate`` in IDENTIFY; the Writer publishes
``--count`` messages (PUB, then MPUB), the Reader FINs them and checks
every body.

Run by tests.interop.test_clients in a subprocess::

    python pynsq_upgraded.py TCP_ADDRESS HTTP_ADDRESS TOPIC \\
        [--tls-ca CA.pem] [--snappy] [--deflate [--deflate-level N]]
        [--count N] [--incompressible-size N] [--timeout SECONDS]

Prints one JSON object per line (``event`` key): ``identify_response``
(what nsqd offered), ``upgraded`` (what each connection runs on once
ready), ``published``, ``message``, ``error``, ``server_clients``
(nsqd's /stats view while connected), then ``done`` (exit 0) or
``timeout`` (exit 1); exit 3 when pynsq cannot be imported.
"""

from __future__ import annotations

import sys
from typing import Any, Dict, List, Set

from upgrade_common import batches, body, emit, parse_args, record_message, server_clients

try:
    import nsq
    import tornado
    import tornado.ioloop
    from tornado.iostream import SSLIOStream
except ImportError as error:  # the trial test turns this into a failure
    emit("import_error", module="pynsq", error=str(error))
    sys.exit(3)


def main() -> None:
    """Connect, publish, consume, report; stop the IOLoop at the end."""
    args = parse_args()
    loop = tornado.ioloop.IOLoop.current()
    emit("versions", pynsq=nsq.__version__, tornado=tornado.version)
    conn_kwargs: Dict[str, Any] = {
        "snappy": args.snappy,
        "deflate": args.deflate,
        "deflate_level": args.deflate_level,
    }
    if args.tls_ca:
        import ssl

        # pynsq's defaults are cert_reqs=CERT_REQUIRED and PROTOCOL_TLSv1_2;
        # these go to Tornado's start_tls as ssl_options: the chain is
        # verified against the CA, but the host name is only sent for SNI,
        # not checked (start_tls leaves the new stream without one).
        conn_kwargs["tls_v1"] = True
        conn_kwargs["tls_options"] = {"ca_certs": args.tls_ca, "cert_reqs": ssl.CERT_REQUIRED}

    expected = args.count
    received: Set[int] = set()
    state = {"exit": 1, "finishing": False}

    def report_ready(role: str, conn: Any) -> None:
        # pynsq swaps the IOStream for TLS and the stream's socket for a
        # compressing wrapper: what is in place is what was negotiated.
        socket_type = type(conn.socket).__name__
        emit(
            "upgraded",
            role=role,
            tls=isinstance(conn.stream, SSLIOStream),
            socket=socket_type,
            snappy=socket_type == "SnappySocket",
            deflate=socket_type == "DeflateSocket",
        )

    class Reporting:
        """Report the connection life of a pynsq Reader or Writer."""

        role = ""

        def _on_connection_identify_response(self, conn: Any, data: Any, **kwargs: Any) -> None:
            emit("identify_response", role=self.role, data=data)
            super()._on_connection_identify_response(conn, data, **kwargs)  # type: ignore[misc]

        def _on_connection_ready(self, conn: Any, **kwargs: Any) -> None:
            report_ready(self.role, conn)
            super()._on_connection_ready(conn, **kwargs)  # type: ignore[misc]

        def _on_connection_error(self, conn: Any, error: Any, **kwargs: Any) -> None:
            emit("error", side=self.role, error=repr(error))
            super()._on_connection_error(conn, error, **kwargs)  # type: ignore[misc]

    class ReportingReader(Reporting, nsq.Reader):  # type: ignore[misc]
        role = "reader"

    class ReportingWriter(Reporting, nsq.Writer):  # type: ignore[misc]
        role = "writer"

    def finish_run() -> None:
        try:
            emit("server_clients", clients=server_clients(args.http_address, args.topic))
        except Exception as error:  # reported; the test fails on its absence
            emit("error", side="stats", error=repr(error))
        emit("done", received=len(received))
        state["exit"] = 0
        loop.stop()

    def handler(message: Any) -> bool:
        record = record_message(message.body, message.attempts, args.incompressible_size)
        received.add(record["index"])
        emit("message", **record)
        if len(received) == expected and not state["finishing"]:
            state["finishing"] = True
            # Let the last FINs reach nsqd; catch any redelivery meanwhile.
            loop.call_later(1.0, finish_run)
        return True

    ReportingReader(
        topic=args.topic,
        channel="pynsq_upgraded",
        message_handler=handler,
        nsqd_tcp_addresses=[args.tcp_address],
        max_in_flight=50,
        heartbeat_interval=5,
        **conn_kwargs,
    )
    writer = ReportingWriter([args.tcp_address], **conn_kwargs)

    def published(indexes: List[int], command: str) -> Any:
        def callback(conn: Any, data: Any) -> None:
            emit(
                "published",
                command=command,
                indexes=indexes,
                response=data.decode() if isinstance(data, bytes) else repr(data),
            )

        return callback

    def publish() -> None:
        if not writer.conns:  # not ready yet (connected, identified, upgraded)
            loop.call_later(0.05, publish)
            return
        for group in batches(expected):
            if len(group) == 1:
                message = body(group[0], args.incompressible_size)
                writer.pub(args.topic, message, callback=published(group, "pub"))
            else:
                messages = [body(i, args.incompressible_size) for i in group]
                writer.mpub(args.topic, messages, callback=published(group, "mpub"))

    def too_late() -> None:
        emit("timeout", received=sorted(received))
        loop.stop()

    loop.call_later(0.05, publish)
    loop.call_later(args.timeout, too_late)
    loop.start()
    sys.exit(state["exit"])


if __name__ == "__main__":
    main()
