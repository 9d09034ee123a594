#!/usr/bin/env python
"""
Benchmark of what the IDENTIFY upgrades cost nsqd on its hot path: publish
and consume throughput over one connection each, in plain V2, with snappy,
with deflate, with TLS, and with TLS under snappy or deflate.

Each mode starts its own nsqd child process on ``127.0.0.1:0`` (with a
throwaway self-signed certificate as ``--tls-cert``/``--tls-key``, and a
``--mem-queue-size`` that holds every message), creates the channel (``SUB``
on a plain connection that then closes; the channel stays), then:

- publishes over one connection in ``MPUB`` batches, waiting for each
  ``OK``;
- consumes over another with ``SUB``, ``RDY`` and a ``FIN`` for every
  message, checking that every body came back once and intact.

Both connections first send ``IDENTIFY`` with ``feature_negotiation`` and
the mode's ``tls_v1``/``snappy``/``deflate``: nsqd replies with its JSON in
clear, then the client runs the TLS handshake and reads an ``OK`` inside
TLS, then sets the codec and reads a compressed ``OK``. The phases are timed
after the upgrades, and nsqd's CPU time (user + system, from
``/proc/PID/stat``) is read around each one, so that the client's own
compression, decompression and TLS work is not mistaken for the server's.

Run by hand; not part of the test suite::

    python bench/system/upgrades.py
    python bench/system/upgrades.py --modes plain,snappy,tls+snappy --count 200000

The client is the harness's (txnsq's codec: the handshake machine, and
nsqd's own snappy and deflate codecs). The certificate comes from the
``openssl`` command, else from the ``cryptography`` package.
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.common.process import process_cpu_seconds  # noqa: E402  (needs the path above)
from bench.common.report import progress, table  # noqa: E402
from bench.system.harness import (  # noqa: E402
    BenchError,
    NSQDChild,
    NSQDError,
    NSQDStartError,
    V2Connection,
    create_channel,
    describe_frame,
    nsqd_command,
)
from txnsq.protocol.frames import FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE  # noqa: E402
from txnsq.protocol.message import MESSAGE_HEADER_LENGTH  # noqa: E402
from txnsq.protocol.v2_client import OK, fin, mpub, rdy, sub  # noqa: E402

TOPIC = b"bench_upgrades"
CHANNEL = b"bench"

#: nsqd's default ``--max-deflate-level``: higher levels need the flag.
NSQD_MAX_DEFLATE_LEVEL = 6

DEFAULT_MODES = "plain,snappy,deflate1,deflate6,tls,tls+snappy,tls+deflate1,tls+deflate6"

#: Every body opens with ``{"seq":`` and ten digits: the consumer reads the
#: sequence number there.
_SEQ_PREFIX = b'{"seq":'
_SEQ_DIGITS = 10
_SEQ_END = len(_SEQ_PREFIX) + _SEQ_DIGITS
MIN_SIZE = _SEQ_END


@dataclass(frozen=True)
class Mode:
    """
    One combination of upgrades.

    :ivar name: as given to ``--modes``: ``plain``, or ``tls``, ``snappy``,
        ``deflateN`` joined by ``+``.
    :ivar deflate_level: 0 for no deflate.
    """

    name: str
    tls: bool
    snappy: bool
    deflate_level: int

    def features(self, heartbeats: bool) -> Dict[str, Any]:
        """
        The IDENTIFY body asking for this mode's upgrades.

        :param heartbeats: False for the publisher, which compresses its
            commands ahead of the clock: a NOP between them would break
            the stream. The consumer needs them (nsqd refuses ``SUB``
            with heartbeats disabled), and answers them as it goes.
        """
        features: Dict[str, Any] = {
            "client_id": "bench-upgrades",
            "hostname": "localhost",
            "user_agent": "txnsq-bench/upgrades",
            "feature_negotiation": True,
            "heartbeat_interval": 30000 if heartbeats else -1,
            "tls_v1": self.tls,
            "snappy": self.snappy,
            "deflate": self.deflate_level > 0,
        }
        if self.deflate_level:
            features["deflate_level"] = self.deflate_level
        return features


def parse_mode(text: str) -> Mode:
    """
    A ``--modes`` item: ``plain``, or ``tls``, ``snappy``, ``deflate`` (level
    6) and ``deflateN`` joined by ``+``.

    :raises ValueError: an unknown part, or snappy with deflate.
    """
    name = text.strip().lower()
    tls = snappy = False
    level = 0
    if name != "plain":
        for part in name.split("+"):
            if part == "tls":
                tls = True
            elif part == "snappy":
                snappy = True
            elif part.startswith("deflate"):
                digits = part[len("deflate"):].lstrip(":-") or "6"
                if not digits.isdigit() or not 1 <= int(digits) <= 9:
                    raise ValueError("bad deflate level in %r (1 to 9)" % (text,))
                level = int(digits)
            else:
                raise ValueError("unknown upgrade %r in mode %r" % (part, text))
    if snappy and level:
        raise ValueError("mode %r: snappy and deflate exclude each other" % (text,))
    return Mode(name, tls, snappy, level)


@dataclass(frozen=True)
class RunConfig:
    """
    One benchmark run.

    :ivar cert: ``(certificate, key)`` PEM paths nsqd serves TLS with.
    :ivar timeout: seconds the consumer waits with no message arriving.
    """

    mode: Mode
    count: int
    size: int
    batch: int
    rdy: int
    command: Tuple[str, ...]
    cert: Tuple[str, str]
    timeout: float

    def nsqd_args(self, data_path: str) -> List[str]:
        """nsqd's flags for this run: the same for every mode."""
        cert, key = self.cert
        return [
            "--tcp-address=127.0.0.1:0",
            "--http-address=127.0.0.1:0",
            "--https-address=127.0.0.1:0",
            "--data-path=%s" % (data_path,),
            "--mem-queue-size=%d" % (max(self.count, 10000),),
            "--tls-cert=%s" % (cert,),
            "--tls-key=%s" % (key,),
            "--max-deflate-level=%d" % (max(NSQD_MAX_DEFLATE_LEVEL, self.mode.deflate_level),),
        ]


@dataclass
class Phase:
    """
    What one phase (publish or consume) measured.

    :ivar wire_bytes: bytes the client's socket sent (publish) or received
        (consume) during the phase.
    :ivar nsqd_cpu: nsqd's user + system CPU seconds during the phase, or
        ``None`` where ``/proc`` cannot tell.
    :ivar client_cpu: this process's CPU seconds during the phase.
    """

    seconds: float
    wire_bytes: int
    nsqd_cpu: Optional[float]
    client_cpu: float


@dataclass
class RunResult:
    """
    What one run measured.

    :ivar tls: the TLS version and cipher of the publishing connection.
    :ivar intact: distinct messages consumed with the body they were
        published with.
    :ivar duplicates: messages delivered again after an intact copy.
    :ivar corrupt: messages whose body was not one that was published.
    """

    config: RunConfig
    publish: Phase
    consume: Phase
    tls: str
    intact: int
    duplicates: int
    corrupt: int

    @property
    def ok(self) -> bool:
        """Every message came back once and intact."""
        return self.intact == self.config.count and not (self.duplicates or self.corrupt)


def make_bodies(count: int, size: int, seed: int = 20261124) -> List[bytes]:
    """
    ``count`` JSON-like bodies of exactly ``size`` bytes, each opening with
    its sequence number: repeated keys and vocabulary, random numbers and
    IDs, as event payloads are. Alone a 200-byte body barely compresses
    (deflate: about 150 bytes); in a connection's stream, where the keys
    repeat from message to message, it comes to about 40-75 bytes on the
    wire. The same seed gives the same bodies.
    """
    rng = random.Random(seed)
    actions = ["view", "click", "add_to_cart", "purchase", "search", "logout"]
    countries = ["de", "fr", "us", "gb", "jp", "br", "in", "nl"]
    bodies = []
    for sequence in range(count):
        text = (
            '{"seq":%010d,"ts":%d,"user":"u%06d","action":"%s","item":"sku-%05d",'
            '"price":"%d.%02d","country":"%s","session":"%016x","ok":%s,"tags":["%s","%s"],'
            '"ua":"Mozilla/5.0 (X11; Linux x86_64) bench/%d"}'
        ) % (
            sequence,
            1795000000000 + sequence * 7 + rng.randrange(5),
            rng.randrange(200000),
            rng.choice(actions),
            rng.randrange(30000),
            rng.randrange(500),
            rng.randrange(100),
            rng.choice(countries),
            rng.getrandbits(64),
            rng.choice(("true", "false")),
            rng.choice(actions),
            rng.choice(countries),
            rng.randrange(100),
        )
        raw = text.encode("ascii")
        while len(raw) < size:  # longer bodies: more of the same kind
            raw += (',"n%d":"%s-%08x"' % (len(raw), rng.choice(actions), rng.getrandbits(32))).encode("ascii")
        bodies.append(raw[:size])
    return bodies


def make_certificate(directory: str) -> Tuple[str, str]:
    """
    A throwaway self-signed certificate for ``127.0.0.1`` (also its subject
    alternative name), valid for a day: ``(certificate path, key path)``.

    Made with the ``openssl`` command when there is one, else with the
    ``cryptography`` package.

    :raises BenchError: neither is available, or openssl failed.
    """
    cert = os.path.join(directory, "cert.pem")
    key = os.path.join(directory, "key.pem")
    openssl = shutil.which("openssl")
    if openssl:
        done = subprocess.run(
            [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-sha256",
             "-keyout", key, "-out", cert, "-days", "1", "-subj", "/CN=127.0.0.1",
             "-addext", "subjectAltName=IP:127.0.0.1"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        )
        if done.returncode != 0:
            raise BenchError("openssl could not make a certificate:\n%s"
                             % (done.stdout.decode("utf-8", "replace"),))
        return cert, key
    try:
        import ipaddress

        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import rsa
        from cryptography.x509.oid import NameOID
    except ImportError:
        raise BenchError("no openssl command and no cryptography package to make a "
                         "certificate with")
    private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(private.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(private, hashes.SHA256())
    )
    with open(cert, "wb") as out:
        out.write(certificate.public_bytes(serialization.Encoding.PEM))
    with open(key, "wb") as out:
        out.write(private.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        ))
    return cert, key


def connect(address: Tuple[str, int], mode: Mode, context: ssl.SSLContext, heartbeats: bool) -> V2Connection:
    """
    A connection that sent IDENTIFY with the mode's features and took the
    upgrades nsqd agreed to, in NSQ's order (TLS, then compression, each
    confirmed by an ``OK``: :class:`~txnsq.protocol.handshake.ClientHandshake`).

    :raises BenchError: nsqd declined an upgrade the mode asked for.
    :raises ProtocolError: nsqd broke the sequence (an error frame, or a
        missing or garbled ``OK``).
    """
    connection = V2Connection(address, features=mode.features(heartbeats), tls=context,
                              server_hostname="127.0.0.1")
    try:
        reply = connection.identify_response
        for feature, wanted in (("tls_v1", mode.tls), ("snappy", mode.snappy),
                                ("deflate", mode.deflate_level > 0)):
            if bool(reply.get(feature)) != wanted:
                raise BenchError("IDENTIFY asked %s=%s, nsqd replied %s=%r (reply: %r)"
                                 % (feature, wanted, feature, reply.get(feature), reply))
        if reply.get("deflate"):
            level = int(reply.get("deflate_level") or mode.deflate_level)
            if level != mode.deflate_level:
                raise BenchError("asked deflate level %d, nsqd chose %d" % (mode.deflate_level, level))
    except BaseException:
        connection.close()
        raise
    return connection


def _cpu(child: NSQDChild) -> Optional[float]:
    return process_cpu_seconds(child.pid)


def _delta(after: Optional[float], before: Optional[float]) -> Optional[float]:
    if after is None or before is None:
        return None
    return after - before


def publish(config: RunConfig, child: NSQDChild, bodies: Sequence[bytes],
            context: ssl.SSLContext) -> Tuple[Phase, str]:
    """
    Upgrade a connection, then send the ``MPUB``\\s and wait for each ``OK``.

    The commands are built and compressed before the clock starts; TLS
    encryption happens as they are sent.

    :return: the phase, and the TLS version and cipher (``""`` without TLS).
    :raises ProtocolError: nsqd refused one.
    """
    batch = config.batch
    commands = [mpub(TOPIC, bodies[start:start + batch])
                for start in range(0, len(bodies), batch)]
    with connect(child.tcp_address, config.mode, context, heartbeats=False) as connection:
        encoded = [connection.encode(command) for command in commands]
        del commands
        send = connection.send_encoded
        expect = connection.expect
        sent = connection.bytes_sent
        cpu = _cpu(child)
        client_cpu = time.process_time()
        start = time.perf_counter()
        for command in encoded:
            send(command)
            expect(OK)
        seconds = time.perf_counter() - start
        phase = Phase(seconds, connection.bytes_sent - sent, _delta(_cpu(child), cpu),
                      time.process_time() - client_cpu)
        return phase, connection.tls_description()


def consume(config: RunConfig, child: NSQDChild, bodies: Sequence[bytes],
            context: ssl.SSLContext) -> Tuple[Phase, int, int, int]:
    """
    Upgrade a connection, subscribe, take every message and ``FIN`` it,
    checking the bodies. FINs for everything one ``recv`` brought go out in
    one write.

    :return: ``(phase, intact, duplicates, corrupt)``.
    :raises BenchError: no message came for ``config.timeout`` seconds.
    :raises ProtocolError: nsqd sent an error frame.
    """
    count = config.count
    seen = bytearray(count)
    intact = duplicates = corrupt = 0
    header = MESSAGE_HEADER_LENGTH
    seq_start = header + len(_SEQ_PREFIX)
    seq_stop = header + _SEQ_END
    with connect(child.tcp_address, config.mode, context, heartbeats=True) as connection:
        connection.send(sub(TOPIC, CHANNEL))
        connection.expect(OK)
        received = connection.bytes_received
        cpu = _cpu(child)
        client_cpu = time.process_time()
        start = time.perf_counter()
        connection.send(rdy(config.rdy))
        while intact + corrupt < count:
            try:
                frames = connection.frames(time.monotonic() + config.timeout)
            except (TimeoutError, OSError) as error:
                raise BenchError(
                    "consumer stalled after %d of %d messages (%s)"
                    % (intact + corrupt, count, str(error) or type(error).__name__)
                )
            fins = []
            for frame_type, data in frames:
                if frame_type == FRAME_TYPE_MESSAGE:
                    fins.append(fin(data[10:header]))
                    digits = data[seq_start:seq_stop]
                    sequence = int(digits) if digits.isdigit() else count
                    if sequence >= count or data[header:] != bodies[sequence]:
                        corrupt += 1
                    elif seen[sequence]:
                        duplicates += 1
                    else:
                        seen[sequence] = 1
                        intact += 1
                elif frame_type == FRAME_TYPE_ERROR:
                    raise BenchError("nsqd sent an %s while consuming" % (describe_frame(frame_type, data),))
            if fins:
                connection.send(b"".join(fins))
        seconds = time.perf_counter() - start
        phase = Phase(seconds, connection.bytes_received - received,
                      _delta(_cpu(child), cpu), time.process_time() - client_cpu)
    return phase, intact, duplicates, corrupt


def run(config: RunConfig, bodies: Sequence[bytes]) -> RunResult:
    """
    One run: start nsqd, create the channel, publish, consume, stop nsqd.

    :raises NSQDStartError: nsqd did not start (its output is in the message).
    :raises BenchError: a phase failed (with nsqd's output).
    """
    context = ssl.create_default_context(cafile=config.cert[0])
    with tempfile.TemporaryDirectory(prefix="txnsq-bench-") as root:
        data_path = os.path.join(root, "data")
        os.mkdir(data_path)
        child = NSQDChild(config.nsqd_args(data_path), config.command, os.path.join(root, "nsqd.log"))
        _progress("%s: starting nsqd" % (config.mode.name,))
        child.start()
        phase = "creating the channel"
        try:
            create_channel(child.tcp_address, TOPIC, CHANNEL)
            phase = "publishing (%s)" % (config.mode.name,)
            published, tls = publish(config, child, bodies, context)
            phase = "consuming (%s)" % (config.mode.name,)
            _progress("%s: published in %.2f s; consuming" % (config.mode.name, published.seconds))
            consumed, intact, duplicates, corrupt = consume(config, child, bodies, context)
            _progress("%s: consumed in %.2f s" % (config.mode.name, consumed.seconds))
        except (NSQDError, BenchError, OSError, ssl.SSLError) as error:
            raise BenchError("%s: %s: %s\n%s" % (phase, type(error).__name__, error,
                                                 child.describe_exit()))
        finally:
            status = child.stop()
        if status not in (0, None, -15):  # -15: SIGTERM ended it unhandled
            _progress("warning: nsqd exited with status %s" % (status,))
    return RunResult(config, published, consumed, tls, intact, duplicates, corrupt)


def _progress(message: str) -> None:
    progress("upgrades", message)


def _cpu_cell(seconds: Optional[float]) -> str:
    return "?" if seconds is None else "%.2f" % (seconds,)


def result_rows(results: Sequence[RunResult]) -> List[Tuple[str, ...]]:
    """The table's header, then one row per mode."""
    header = (
        "mode", "pub msg/s", "pub MB/s", "pub B/msg", "nsqd cpu", "client cpu",
        "sub msg/s", "sub MB/s", "sub B/msg", "nsqd cpu", "client cpu", "check",
    )
    rows: List[Tuple[str, ...]] = [header]
    for result in results:
        config = result.config
        count = config.count
        body_bytes = count * config.size
        pub, sub = result.publish, result.consume
        if result.ok:
            check = "ok"
        else:
            check = "%d/%d intact, %d dup, %d corrupt" % (
                result.intact, count, result.duplicates, result.corrupt
            )
        rows.append((
            config.mode.name,
            "{:,.0f}".format(count / pub.seconds),
            "%.2f" % (body_bytes / pub.seconds / 1e6,),
            "%.1f" % (pub.wire_bytes / count,),
            _cpu_cell(pub.nsqd_cpu),
            "%.2f" % (pub.client_cpu,),
            "{:,.0f}".format(count / sub.seconds),
            "%.2f" % (body_bytes / sub.seconds / 1e6,),
            "%.1f" % (sub.wire_bytes / count,),
            _cpu_cell(sub.nsqd_cpu),
            "%.2f" % (sub.client_cpu,),
            check,
        ))
    return rows


def relative(results: Sequence[RunResult]) -> str:
    """Each mode's nsqd CPU per message next to the plain run's, when there is one."""
    plain = [result for result in results if result.config.mode.name == "plain"]
    lines = []
    for result in results:
        pub, sub = result.publish.nsqd_cpu, result.consume.nsqd_cpu
        if pub is None or sub is None:
            continue
        count = result.config.count
        line = "%-14s nsqd CPU per message: publish %5.1f µs, consume %5.1f µs" % (
            result.config.mode.name, pub / count * 1e6, sub / count * 1e6)
        if plain and result is not plain[0]:
            base_pub, base_sub = plain[0].publish.nsqd_cpu, plain[0].consume.nsqd_cpu
            if base_pub and base_sub:
                line += "  (%.2f×, %.2f× plain)" % (pub / base_pub, sub / base_sub)
        lines.append(line)
    return "\n".join(lines)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """The command line; exits with a usage message on bad values."""
    parser = argparse.ArgumentParser(
        description="Benchmark what nsqd's IDENTIFY upgrades (TLS, snappy, deflate) "
        "cost: publish then consume N messages over one connection each, per mode. "
        "Run by hand; not part of the test suite.",
    )
    parser.add_argument("--modes", default=DEFAULT_MODES,
                        help="comma-separated: plain, or tls, snappy, deflateN joined "
                        "by + (default: %s)" % (DEFAULT_MODES,))
    parser.add_argument("--count", type=int, default=100000,
                        help="messages to publish and consume per mode (default: 100000)")
    parser.add_argument("--size", type=int, default=200,
                        help="body size in bytes, at least %d (default: 200)" % (MIN_SIZE,))
    parser.add_argument("--batch", type=int, default=100,
                        help="messages per MPUB (default: 100)")
    parser.add_argument("--nsqd", default=None, metavar="COMMAND",
                        help="command running nsqd, shell-quoted (default: the nsqd "
                        "script next to this Python, else python -m txnsq.nsqd)")
    parser.add_argument("--rdy", type=int, default=2500,
                        help="the consumer's RDY count (default: 2500, nsqd's max)")
    parser.add_argument("--timeout", type=float, default=60.0,
                        help="give up when no message arrives for this many seconds (default: 60)")
    args = parser.parse_args(argv)
    if args.size < MIN_SIZE:
        parser.error("--size must be at least %d (bodies carry a sequence number)" % (MIN_SIZE,))
    if args.count >= 10 ** _SEQ_DIGITS:
        parser.error("--count must be below %d" % (10 ** _SEQ_DIGITS,))
    for name in ("count", "batch", "rdy"):
        if getattr(args, name) < 1:
            parser.error("--%s must be at least 1" % (name,))
    try:
        args.modes = [parse_mode(item) for item in args.modes.split(",") if item.strip()]
    except ValueError as error:
        parser.error(str(error))
    if not args.modes:
        parser.error("--modes names no mode")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run every mode, print the table; 0 when every mode ran and checked out."""
    args = parse_args(argv)
    command = tuple(nsqd_command(args.nsqd))
    bodies = make_bodies(args.count, args.size)
    results: List[RunResult] = []
    failures: List[str] = []
    with tempfile.TemporaryDirectory(prefix="txnsq-bench-cert-") as cert_dir:
        try:
            cert = make_certificate(cert_dir)
        except BenchError as error:
            sys.stderr.write("upgrades: %s\n" % (error,))
            return 1
        _progress("nsqd: %s; %d messages of %d bytes, MPUB×%d, RDY %d"
                  % (" ".join(command), args.count, args.size, args.batch, args.rdy))
        for mode in args.modes:
            config = RunConfig(mode, args.count, args.size, args.batch, args.rdy,
                               command, cert, args.timeout)
            try:
                results.append(run(config, bodies))
            except NSQDStartError as error:
                sys.stderr.write("upgrades: nsqd did not start: %s\n" % (error,))
                return 1
            except BenchError as error:
                # Keep going: one broken upgrade should not hide the others.
                sys.stderr.write("upgrades: mode %s failed while %s\n" % (mode.name, error))
                failures.append(mode.name)
    if results:
        print(table(result_rows(results), left=(0, 11)))
        print(relative(results))
        for result in results:
            if result.tls:
                print("%-14s TLS: %s" % (result.config.mode.name, result.tls))
                break
    if failures:
        print("FAILED modes: %s (see stderr)" % (", ".join(failures),))
    return 0 if not failures and all(result.ok for result in results) else 1


if __name__ == "__main__":
    sys.exit(main())
