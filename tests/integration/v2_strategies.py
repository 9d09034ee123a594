# -*- test-case-name: tests.integration.test_faults -*-
"""
Hypothesis strategies for what a client may send an nsqd on the V2 TCP
protocol: well-formed commands, commands with wrong arguments, names or
sizes, and plain garbage.  :func:`command_pool` draws a pool of them
deterministically (a fixed seed, no database, no shrinking), and
:class:`FrameBatches` strings them together into sessions and batches for
the fault suite's fuzz runs (drawing every frame of a million-frame run
through Hypothesis would take most of an hour; combining a pool drawn by
Hypothesis costs next to nothing).

Names come from a small pool (plus names that are invalid by construction)
so that a long run creates a bounded set of topics and channels: what is
measured is how nsqd copes with the input, not how many topics it can hold.
"""

from __future__ import annotations

import json
import random
import struct
from typing import Any, List, Tuple

from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

__all__ = ["FUZZ_TOPICS", "MAGICS", "FrameBatches", "command", "command_pool"]

_SIZE = struct.Struct(">I")

#: The topics fuzz frames may name; the control topic is not among them.
FUZZ_TOPICS = ["fz", "fz.a", "fz-b", "fz_c#ephemeral"]
_CHANNELS = ["c", "c.1", "c-2#ephemeral"]
_NAME_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-"

_valid_topic = st.sampled_from(FUZZ_TOPICS)
_valid_channel = st.sampled_from(_CHANNELS)
_bad_name = st.one_of(
    st.just(""),
    st.text(_NAME_CHARS, min_size=65, max_size=80),  # too long
    st.text(_NAME_CHARS, max_size=8).map(lambda name: name + "!"),  # bad character
    st.just("#ephemeral"),
    st.just("a#ephemeral#ephemeral"),
    st.binary(min_size=1, max_size=12).filter(lambda raw: b"\n" not in raw).map(
        lambda raw: raw.decode("latin-1") + "\x00"
    ),
)
_topic = st.one_of(_valid_topic, _valid_topic, _valid_topic, _bad_name)
_channel = st.one_of(_valid_channel, _valid_channel, _bad_name)
_message_id = st.one_of(
    st.binary(min_size=16, max_size=16).filter(lambda raw: b"\n" not in raw and b" " not in raw),
    st.text("0123456789abcdef", min_size=16, max_size=16).map(str.encode),
    st.binary(max_size=20).filter(lambda raw: b"\n" not in raw and b" " not in raw),
)
_count = st.one_of(
    st.integers(-5, 3000),
    st.sampled_from([2**31 - 1, 2**31, 2**32 - 1, 2**63, -(2**63)]),
)
_body = st.binary(max_size=300)
_identify_values: Any = st.one_of(
    st.booleans(), st.integers(-(2**40), 2**40), st.text(max_size=20), st.none(),
    st.floats(allow_nan=False, allow_infinity=False), st.lists(st.integers(), max_size=3),
)
_identify_keys = st.sampled_from([
    "client_id", "hostname", "heartbeat_interval", "output_buffer_size",
    "output_buffer_timeout", "feature_negotiation", "tls_v1", "deflate", "deflate_level",
    "snappy", "sample_rate", "user_agent", "msg_timeout", "short_id", "long_id", "bogus",
])


def _latin(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _with_body(line: bytes, body: bytes, declared: Any = None) -> bytes:
    """A command line and its size-prefixed body (``declared`` may lie about the size)."""
    size = len(body) if declared is None else declared
    return line + _SIZE.pack(size & 0xFFFFFFFF) + body


@st.composite
def _identify(draw: Any) -> bytes:
    kind = draw(st.integers(0, 3))
    if kind == 0:
        data = json.dumps(draw(st.dictionaries(_identify_keys, _identify_values, max_size=6))).encode()
    elif kind == 1:
        data = draw(st.binary(max_size=64))
    elif kind == 2:
        data = b'{"heartbeat_interval": %d}' % (draw(st.integers(-2, 70000)),)
    else:
        data = b'{"feature_negotiation": true, "msg_timeout": %d}' % (draw(st.integers(-1, 10**7)),)
    declared = draw(st.one_of(st.none(), st.none(), _count))
    return _with_body(b"IDENTIFY\n", data, declared)


@st.composite
def _pub(draw: Any) -> bytes:
    topic = _latin(draw(_topic))
    body = draw(_body)
    declared = draw(st.one_of(st.none(), st.none(), st.none(), _count))
    return _with_body(b"PUB %s\n" % (topic,), body, declared)


@st.composite
def _dpub(draw: Any) -> bytes:
    topic = _latin(draw(_topic))
    delay = draw(st.one_of(st.integers(-10, 4000), st.sampled_from([3600001, 2**40]), st.just("x")))
    body = draw(_body)
    return _with_body(b"DPUB %s %s\n" % (topic, str(delay).encode()), body)


@st.composite
def _mpub(draw: Any) -> bytes:
    topic = _latin(draw(_topic))
    bodies = draw(st.lists(_body, max_size=8))
    num = len(bodies) if draw(st.booleans()) else draw(_count)
    payload = _SIZE.pack(num & 0xFFFFFFFF) + b"".join(
        _SIZE.pack(len(body) if draw(st.integers(0, 9)) else draw(_count) & 0xFFFFFFFF) + body
        for body in bodies
    )
    declared = draw(st.one_of(st.none(), st.none(), _count))
    return _with_body(b"MPUB %s\n" % (topic,), payload, declared)


@st.composite
def _sub(draw: Any) -> bytes:
    return b"SUB %s %s\n" % (_latin(draw(_topic)), _latin(draw(_channel)))


@st.composite
def _simple(draw: Any) -> bytes:
    which = draw(st.sampled_from(["RDY", "FIN", "REQ", "TOUCH", "CLS", "NOP"]))
    if which == "RDY":
        return b"RDY %s\n" % (str(draw(_count)).encode(),)
    if which in ("FIN", "TOUCH"):
        return b"%s %s\n" % (which.encode(), draw(_message_id))
    if which == "REQ":
        return b"REQ %s %d\n" % (draw(_message_id), draw(_count))
    return which.encode() + b"\n"


@st.composite
def _auth(draw: Any) -> bytes:
    return _with_body(b"AUTH\n", draw(st.binary(max_size=40)))


@st.composite
def _garbage(draw: Any) -> bytes:
    kind = draw(st.integers(0, 4))
    if kind == 0:
        return draw(st.binary(min_size=1, max_size=80))
    if kind == 1:
        return draw(st.binary(max_size=40).filter(lambda raw: b"\n" not in raw)) + b"\n"
    if kind == 2:  # a known command, mangled: case, spacing, argument count
        name = draw(st.sampled_from(
            [b"pub", b"Sub", b"PUB", b"SUB", b"MPUB", b"DPUB", b"RDY", b"FIN", b"REQ",
             b"TOUCH", b"IDENTIFY", b"AUTH", b"CLS", b"NOP"]))
        args = draw(st.lists(st.binary(max_size=10).filter(lambda raw: b"\n" not in raw), max_size=4))
        separator = draw(st.sampled_from([b" ", b"  ", b"\t"]))
        end = draw(st.sampled_from([b"\n", b"\r\n", b" \n"]))
        return separator.join([name] + args) + end
    if kind == 3:  # a line far longer than any command
        return b"PUB " + b"x" * draw(st.integers(100, 5000)) + b"\n"
    return b"\n" * draw(st.integers(1, 3))


@st.composite
def _valid(draw: Any) -> bytes:
    """A well-formed command nsqd accepts (or refuses without closing the connection)."""
    which = draw(st.integers(0, 9))
    topic = draw(_valid_topic).encode()
    if which == 0:
        return _with_body(b"PUB %s\n" % (topic,), draw(st.binary(min_size=1, max_size=200)))
    if which == 1:
        bodies = draw(st.lists(st.binary(min_size=1, max_size=100), min_size=1, max_size=5))
        payload = _SIZE.pack(len(bodies)) + b"".join(_SIZE.pack(len(body)) + body for body in bodies)
        return _with_body(b"MPUB %s\n" % (topic,), payload)
    if which == 2:
        delay = draw(st.integers(0, 3000))
        return _with_body(b"DPUB %s %d\n" % (topic, delay), draw(st.binary(min_size=1, max_size=100)))
    if which == 3:
        return b"SUB %s %s\n" % (topic, draw(_valid_channel).encode())
    if which == 4:
        return b"RDY %d\n" % (draw(st.integers(0, 200)),)
    if which == 5:
        verb = draw(st.sampled_from([b"FIN", b"TOUCH"]))
        return b"%s %s\n" % (verb, draw(st.text("0123456789abcdef", min_size=16, max_size=16)).encode())
    if which == 6:
        msg_id = draw(st.text("0123456789abcdef", min_size=16, max_size=16)).encode()
        return b"REQ %s %d\n" % (msg_id, draw(st.integers(0, 5000)))
    if which == 7:
        fields = draw(st.fixed_dictionaries({}, optional={
            "client_id": st.text(max_size=10),
            "hostname": st.text(max_size=10),
            "heartbeat_interval": st.integers(1000, 60000),
            "feature_negotiation": st.booleans(),
            "output_buffer_size": st.integers(64, 65536),
            "output_buffer_timeout": st.integers(1, 1000),
            "snappy": st.booleans(),
            "deflate": st.booleans(),
            "deflate_level": st.integers(1, 9),
            "sample_rate": st.integers(0, 99),
            "msg_timeout": st.integers(1000, 60000),
            "user_agent": st.text(max_size=10),
        }))
        return _with_body(b"IDENTIFY\n", json.dumps(fields).encode())
    if which == 8:
        return b"NOP\n"
    return b"CLS\n"


def command() -> Any:
    """A strategy for one V2 command (a "frame" of the fuzz counts): well-formed half the time."""
    return st.one_of(
        _valid(), _valid(), _valid(), _valid(), _valid(), _valid(), _valid(), _valid(), _valid(), _valid(),
        _pub(), _pub(), _mpub(), _dpub(), _sub(), _simple(), _simple(), _identify(),
        _auth(), _garbage(),
    )


#: Magics a session may open with: mostly the right one.
MAGICS = [b"  V2"] * 54 + [b"  V1", b"V2  ", b"", b" ", b"\x00\x00\x00\x00", b"GET / HTTP/1.1\r\n\r\n"]


def command_pool(size: int, seed_value: int) -> List[bytes]:
    """
    ``size`` commands drawn by Hypothesis with seed ``seed_value`` (lists of
    :data:`_PER_EXAMPLE` at a time): the same commands for the same
    arguments on every run (no example database, no shrinking, no deadline).
    """
    drawn: List[bytes] = []
    examples = max(1, -(-size // _PER_EXAMPLE))

    @seed(seed_value)
    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        derandomize=False,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )
    @given(st.lists(command(), min_size=_PER_EXAMPLE, max_size=_PER_EXAMPLE))
    def collect(commands: List[bytes]) -> None:
        drawn.extend(commands)

    collect()
    return drawn[:size]


#: Commands drawn per Hypothesis example (one example costs far more than a draw).
_PER_EXAMPLE = 25


class FrameBatches:
    """
    Batches of sessions made of the commands of a pool: a batch is 1 to
    ``max_sessions`` sessions, a session (what one connection sends) a magic
    (mostly the right one) and 1 to ``max_commands`` commands of the pool,
    one session in ten cut short at a random byte.  ``random.Random(seed)``
    picks, so the same arguments give the same batches.

    Each call returns ``(bytes, command count)`` pairs of one batch.
    """

    def __init__(self, pool: List[bytes], seed_value: int, max_sessions: int = 4, max_commands: int = 12) -> None:
        if not pool:
            raise ValueError("an empty pool of commands")
        self.pool = pool
        self.random = random.Random(seed_value)
        self.max_sessions = max_sessions
        self.max_commands = max_commands

    def __call__(self) -> List[Tuple[bytes, int]]:
        pick = self.random
        sessions = []
        for _ in range(pick.randint(1, self.max_sessions)):
            count = pick.randint(1, self.max_commands)
            data = pick.choice(MAGICS) + b"".join(pick.choice(self.pool) for _ in range(count))
            if pick.randrange(10) == 0:
                data = data[: pick.randrange(len(data) + 1)]
            sessions.append((data, count))
        return sessions
