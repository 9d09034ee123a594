"""
A slow, unreliable TCP proxy: every connection accepted on ``--listen``
is relayed to ``--to``, each direction through a delay line.

- **Delay and jitter.** Each chunk read (one ``recv``, up to 64 KiB:
  how TCP happened to cut the stream, not a packet) is written on after
  ``delay + uniform(-jitter, +jitter)`` ms (at least 0), but never before
  the chunk ahead of it in the same direction: order is kept, so under
  load the jitter adds up towards ``delay + jitter``.  Bandwidth is not
  limited (``tc ... tbf`` does that, see :mod:`lab.bandwidth`).  A
  direction holding more than 4 MiB stops reading until it is under
  1 MiB (TCP's own backpressure then reaches the sender).
- **Drop.** TCP cannot lose bytes silently, so a drop cuts the
  connection: both sides are aborted (RST), what the delay line held is
  lost with them.  ``drop`` is the chance, per chunk read, that it cuts
  its connection; ``cut_every_s`` cuts each connection after an
  exponentially distributed time of that mean (drawn when it opens and
  again when the settings change).
- **Control.** ``--control FILE`` holds JSON with any of ``delay_ms``,
  ``jitter_ms``, ``drop``, ``cut_every_s``; SIGUSR1 reads it again
  (keys absent keep their value) and the proxy prints ``tcpproxy:
  settings {...}`` once they apply.  Every cut is printed too.

    python -m lab.workers.tcpproxy --listen 198.18.0.10:7222 \\
        --to 198.18.0.10:6222 --delay-ms 50 --jitter-ms 30 --seed 1
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import sys
from collections import deque
from typing import Any, Deque, Dict, List, Optional, Tuple

from twisted.internet import protocol
from twisted.internet import reactor as _reactor

reactor: Any = _reactor

__all__ = ["Settings", "main"]

#: A direction stops reading above this many bytes held, and reads again below the second.
HIGH_WATER, LOW_WATER = 4 * 1024 * 1024, 1024 * 1024


class Settings:
    """What the proxy does to the connections, now."""

    KEYS = ("delay_ms", "jitter_ms", "drop", "cut_every_s")

    def __init__(self, delay_ms: float = 0.0, jitter_ms: float = 0.0, drop: float = 0.0,
                 cut_every_s: float = 0.0) -> None:
        self.delay_ms = delay_ms
        self.jitter_ms = jitter_ms
        self.drop = drop
        self.cut_every_s = cut_every_s

    def update(self, values: Dict[str, Any]) -> None:
        """Take the known keys of ``values``; ValueError for a negative or non-number value."""
        for key in self.KEYS:
            if key in values:
                value = float(values[key])
                if value < 0 or (key == "drop" and value > 1):
                    raise ValueError("%s out of range: %r" % (key, value))
                setattr(self, key, value)

    def as_dict(self) -> Dict[str, float]:
        """JSON-ready."""
        return {key: getattr(self, key) for key in self.KEYS}


class _Line:
    """One direction of a connection: chunks held until their time, in order."""

    def __init__(self, proxy: "Proxy", source: "_End", sink: "_End") -> None:
        self.proxy = proxy
        self.source = source
        self.sink = sink
        self.held: Deque[Tuple[float, bytes]] = deque()
        self.bytes = 0
        self.last_at = 0.0
        self.call: Any = None
        self.paused = False

    def push(self, data: bytes) -> None:
        settings = self.proxy.settings
        if settings.drop and self.proxy.rng.random() < settings.drop:
            self.source.pair.cut("drop")
            return
        if not settings.delay_ms and not settings.jitter_ms and not self.held:
            self.sink.send(data)
            return
        now = reactor.seconds()
        jitter = self.proxy.rng.uniform(-settings.jitter_ms, settings.jitter_ms) if settings.jitter_ms else 0.0
        at = max(now + max(0.0, settings.delay_ms + jitter) / 1000.0, self.last_at)
        self.last_at = at
        self.held.append((at, data))
        self.bytes += len(data)
        if self.bytes > HIGH_WATER and not self.paused:
            self.paused = True
            self.source.pause()
        if self.call is None:
            self.call = reactor.callLater(max(0.0, at - now), self.release)

    def release(self) -> None:
        self.call = None
        now = reactor.seconds()
        while self.held and self.held[0][0] <= now + 0.0005:
            _, data = self.held.popleft()
            self.bytes -= len(data)
            self.sink.send(data)
        if self.paused and self.bytes < LOW_WATER:
            self.paused = False
            self.source.resume()
        if self.held:
            self.call = reactor.callLater(max(0.0, self.held[0][0] - now), self.release)

    def stop(self) -> None:
        if self.call is not None and self.call.active():
            self.call.cancel()
        self.call = None
        self.held.clear()
        self.bytes = 0


class _End(protocol.Protocol):
    """One side's socket (the accepted one or the dialed one)."""

    def __init__(self, pair: "_Pair") -> None:
        self.pair = pair
        self.line: Optional[_Line] = None
        self.early: List[bytes] = []
        self.open = False

    def connectionMade(self) -> None:
        self.open = True

    def dataReceived(self, data: bytes) -> None:
        if self.line is None:
            self.early.append(data)
        else:
            self.line.push(data)

    def connectionLost(self, reason: Any = None) -> None:
        self.open = False
        self.pair.lost(self)

    def send(self, data: bytes) -> None:
        if self.open and self.transport is not None:
            self.transport.write(data)

    def pause(self) -> None:
        # A TCP transport is also an IProducer and an ITCPTransport.
        transport: Any = self.transport
        if transport is not None:
            transport.pauseProducing()

    def resume(self) -> None:
        transport: Any = self.transport
        if transport is not None:
            transport.resumeProducing()

    def abort(self) -> None:
        transport: Any = self.transport
        if self.open and transport is not None:
            transport.abortConnection()

    def close(self) -> None:
        if self.open and self.transport is not None:
            self.transport.loseConnection()


class _Pair:
    """An accepted connection and the one dialed for it."""

    def __init__(self, proxy: "Proxy", number: int) -> None:
        self.proxy = proxy
        self.number = number
        self.inside = _End(self)
        self.outside = _End(self)
        self.lines: List[_Line] = []
        self.cut_call: Any = None
        self.done = False

    def connected(self) -> None:
        """The dialed side is up: the delay lines start, with what came meanwhile."""
        if self.done:
            # The accepted side went first.
            self.outside.abort()
            return
        up = _Line(self.proxy, self.inside, self.outside)
        down = _Line(self.proxy, self.outside, self.inside)
        self.inside.line, self.outside.line = up, down
        self.lines = [up, down]
        for end in (self.inside, self.outside):
            early, end.early = end.early, []
            for data in early:
                assert end.line is not None
                end.line.push(data)
        self.arm()

    def arm(self) -> None:
        """(Re)draw this connection's cut from ``cut_every_s``."""
        if self.cut_call is not None and self.cut_call.active():
            self.cut_call.cancel()
        self.cut_call = None
        mean = self.proxy.settings.cut_every_s
        if mean and not self.done:
            self.cut_call = reactor.callLater(self.proxy.rng.expovariate(1.0 / mean), self.cut, "timer")

    def cut(self, why: str) -> None:
        """Abort both sides (RST): what the lines held is lost."""
        if self.done:
            return
        self.proxy.cuts += 1
        print("tcpproxy: cut connection %d (%s)" % (self.number, why), flush=True)
        self.finish(abort=True)

    def lost(self, end: _End) -> None:
        """One side closed: the other is closed once what it is owed was written."""
        if self.done:
            return
        self.finish(abort=False)

    def finish(self, abort: bool) -> None:
        self.done = True
        if self.cut_call is not None and self.cut_call.active():
            self.cut_call.cancel()
        self.cut_call = None
        for line in self.lines:
            if not abort:
                # Flush what is held rather than lose it on a clean close.
                while line.held:
                    line.sink.send(line.held.popleft()[1])
            line.stop()
        for end in (self.inside, self.outside):
            if abort:
                end.abort()
            else:
                end.close()
        self.proxy.pairs.discard(self)


class _Dialed(protocol.ClientFactory):
    def __init__(self, pair: _Pair) -> None:
        self.pair = pair

    def buildProtocol(self, addr: Any) -> _End:
        end = self.pair.outside
        end.factory = self  # type: ignore[attr-defined]
        reactor.callLater(0, self.pair.connected)
        return end

    def clientConnectionFailed(self, connector: Any, reason: Any) -> None:
        self.pair.finish(abort=True)


class Proxy(protocol.Factory):
    """Accepts connections and dials ``target`` for each."""

    def __init__(self, target: Tuple[str, int], settings: Settings, rng: random.Random) -> None:
        self.target = target
        self.settings = settings
        self.rng = rng
        self.pairs: set = set()
        self.accepted = 0
        self.cuts = 0

    def buildProtocol(self, addr: Any) -> _End:
        self.accepted += 1
        pair = _Pair(self, self.accepted)
        self.pairs.add(pair)
        reactor.connectTCP(self.target[0], self.target[1], _Dialed(pair), timeout=5)
        return pair.inside

    def apply(self, values: Dict[str, Any]) -> None:
        """New settings; connections' cut timers drawn again."""
        self.settings.update(values)
        for pair in list(self.pairs):
            pair.arm()
        print("tcpproxy: settings %s" % json.dumps(self.settings.as_dict(), sort_keys=True), flush=True)


def _address(text: str) -> Tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[1] if __doc__ else None)
    parser.add_argument("--listen", required=True, help="ADDR:PORT")
    parser.add_argument("--to", required=True, help="ADDR:PORT")
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--jitter-ms", type=float, default=0.0)
    parser.add_argument("--drop", type=float, default=0.0, help="chance per chunk of cutting its connection")
    parser.add_argument("--cut-every-s", type=float, default=0.0, help="mean seconds before each connection is cut")
    parser.add_argument("--control", default="", help="JSON settings read again on SIGUSR1")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    settings = Settings()
    settings.update({"delay_ms": args.delay_ms, "jitter_ms": args.jitter_ms, "drop": args.drop,
                     "cut_every_s": args.cut_every_s})
    proxy = Proxy(_address(args.to), settings, random.Random(args.seed))
    host, port = _address(args.listen)

    def reload() -> None:
        try:
            with open(args.control) as f:
                values = json.load(f)
            proxy.apply(values)
        except (OSError, ValueError, TypeError) as e:
            print("tcpproxy: control file %s not applied: %s" % (args.control, e), flush=True)

    def on_usr1(signum: int, frame: Any) -> None:
        reactor.callFromThread(reload)

    def on_term(signum: int, frame: Any) -> None:
        reactor.callFromThread(reactor.stop)

    signal.signal(signal.SIGUSR1, on_usr1)
    signal.signal(signal.SIGTERM, on_term)
    reactor.listenTCP(port, proxy, interface=host)
    print("tcpproxy: listening on %s:%d, to %s; settings %s" % (
        host, port, args.to, json.dumps(settings.as_dict(), sort_keys=True)), flush=True)
    reactor.run(installSignalHandlers=False)
    print("tcpproxy: accepted %d, cut %d" % (proxy.accepted, proxy.cuts), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
