"""
The compiled V2 command parser (``txnsq/protocol/_v2.c`` under
:class:`txnsq.protocol.v2.CompiledV2CommandParser`) against the pure one it
accelerates: the same command streams, cut anywhere, give the same
commands, FIN runs, errors (code and text), held commands and parser state.
The streams are random (hypothesis), the fuzz suite's command pool, and
the bytes of every recorded conformance case.

Where the extension is not built (PyPy, no C compiler at install,
``TXNSQ_NO_EXTENSIONS``) the comparisons are skipped and one test says
which parser is in use, so that CPython without it fails loudly in CI.
"""

from __future__ import annotations

import os
import platform
import struct
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, Type

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from tests.integration.conformance import load_fixture, send_bytes
from tests.integration.v2_strategies import command, command_pool
from txnsq.protocol import v2
from txnsq.protocol.errors import LineTooLong, ProtocolError, protocol_error

Outcome = Tuple[Any, ...]

_ID = st.binary(min_size=16, max_size=16).filter(lambda data: b" " not in data and b"\n" not in data)
_TOPIC = st.sampled_from([b"t", b"topic", b"a.b_c-d", b"t#ephemeral", b"bad topic!", b"", b"x" * 65])


def _size(value: int) -> bytes:
    return struct.pack(">i", value)


@st.composite
def _hot_command(draw: Callable[..., Any]) -> bytes:
    """One of the commands the compiled kernels handle, well-formed or not."""
    kind = draw(st.sampled_from(["fin", "fin", "fin", "pub", "mpub", "mpub", "line", "raw"]))
    if kind == "fin":
        variant = draw(st.sampled_from(["plain", "plain", "crlf", "short", "space", "cr_in_id", "extra"]))
        msg_id = draw(_ID)
        if variant == "crlf":
            return b"FIN " + msg_id + b"\r\n"
        if variant == "short":
            return b"FIN " + msg_id[:15] + b"\n"
        if variant == "space":
            return b"FIN " + msg_id[:7] + b" " + msg_id[8:] + b"\n"
        if variant == "cr_in_id":
            return b"FIN " + msg_id[:15] + b"\r\n"
        if variant == "extra":
            return b"FIN " + msg_id + b" x\n"
        return b"FIN " + msg_id + b"\n"
    if kind == "pub":
        body = draw(st.binary(max_size=40))
        declared = draw(st.one_of(st.just(len(body)), st.integers(-3, 60)))
        return b"PUB " + draw(_TOPIC) + b"\n" + _size(declared) + body
    if kind == "mpub":
        bodies = draw(st.lists(st.binary(max_size=30), max_size=8))
        sizes = [draw(st.one_of(st.just(len(body)), st.just(len(body)), st.integers(-2, 40))) for body in bodies]
        payload = b"".join(_size(size) + body for size, body in zip(sizes, bodies))
        count = draw(st.one_of(st.just(len(bodies)), st.integers(-1, 12)))
        declared = draw(st.one_of(st.just(4 + len(payload)), st.integers(-1, 400)))
        return b"MPUB " + draw(_TOPIC) + b"\n" + _size(declared) + _size(count) + payload
    if kind == "line":
        words = draw(st.lists(st.sampled_from([b"RDY", b"REQ", b"TOUCH", b"NOP", b"SUB", b"", b"1", b"a b"]), max_size=4))
        ending = draw(st.sampled_from([b"\n", b"\r\n", b" \n", b"\r\r\n"]))
        return b" ".join(words) + ending
    return draw(st.binary(max_size=30))


_streams = st.lists(st.one_of(_hot_command(), command()), min_size=1, max_size=25)


class _Driver:
    """Feeds one parser and records everything it gives back."""

    def __init__(self, cls: Type[v2.PureV2CommandParser], limits: Tuple[int, int, int], holds: List[int]) -> None:
        self._holds: Iterator[int] = iter(holds)
        self.parser = cls(*limits, precheck=self._precheck)
        self.outcomes: List[Outcome] = []

    def _precheck(self, name: bytes, params: List[bytes]) -> Optional[bool]:
        """Lets most commands on; holds or refuses some, as drawn."""
        decision = next(self._holds, 0)
        self.outcomes.append(("precheck", name, list(params)))
        if decision == 1:
            return False
        if decision == 2:
            raise protocol_error("E_UNAUTHORIZED", "refused by the test")
        return None

    def feed(self, data: bytes, fins_first: bool) -> None:
        parser = self.parser
        parser.feed(data)
        try:
            while True:
                if fins_first:
                    ids = parser.next_fin_ids()
                    if ids:
                        self.outcomes.append(("fins", ids))
                        continue
                found = parser.next_command()
                if found is None:
                    break
                self.outcomes.append(("command", found.name, found.params, found.body, found.defer_ms))
        except ProtocolError as error:
            self.outcomes.append(("error", error.frame_data(), error.fatal))
        except LineTooLong as error:
            self.outcomes.append(("too long", str(error)))
        self.outcomes.append(("state", parser.dead, parser.buffered()))

    def finish(self) -> None:
        error = self.parser.eof_error()
        self.outcomes.append(("eof", None if error is None else error.frame_data()))


def _needs_compiled(case: SynchronousTestCase) -> None:
    if v2.compiled is None:
        case.skipTest("the compiled parser is not built here")


def _run(
    cls: Type[v2.PureV2CommandParser],
    chunks: List[bytes],
    limits: Tuple[int, int, int] = (1048576, 5242880, 3600000),
    holds: Optional[List[int]] = None,
    fins_first: bool = True,
) -> List[Outcome]:
    driver = _Driver(cls, limits, holds or [])
    for chunk in chunks:
        driver.feed(chunk, fins_first)
    driver.finish()
    return driver.outcomes


def _cut(data: bytes, cuts: List[int]) -> List[bytes]:
    """``data`` split at the given offsets (taken modulo its length)."""
    points = sorted({cut % (len(data) + 1) for cut in cuts} | {0, len(data)})
    return [data[start:stop] for start, stop in zip(points, points[1:])] or [b""]


class CompiledParserPresenceTests(SynchronousTestCase):
    """Which parser runs."""

    def test_built_on_cpython(self) -> None:
        """
        On CPython (unless ``TXNSQ_NO_EXTENSIONS`` is set) the compiled
        parser is built and is ``V2CommandParser``; elsewhere the pure one is.
        """
        if platform.python_implementation() != "CPython" or os.environ.get("TXNSQ_NO_EXTENSIONS"):
            self.assertIsNone(v2.compiled)
            self.assertIs(v2.V2CommandParser, v2.PureV2CommandParser)
            return
        self.assertIsNotNone(v2.compiled)
        self.assertIs(v2.V2CommandParser, v2.CompiledV2CommandParser)
        self.assertTrue(issubclass(v2.CompiledV2CommandParser, v2.PureV2CommandParser))


class SameStreamTests(SynchronousTestCase):
    """Random command streams through both parsers."""

    def setUp(self) -> None:
        _needs_compiled(self)

    def assertSame(self, chunks: List[bytes], **kwargs: Any) -> None:
        pure = _run(v2.PureV2CommandParser, chunks, **kwargs)
        compiled = _run(v2.CompiledV2CommandParser, chunks, **kwargs)
        self.assertEqual(compiled, pure)

    @settings(max_examples=400, deadline=None)
    @given(_streams, st.lists(st.integers(0, 10000), max_size=12), st.booleans())
    def test_same_outcomes(self, commands: List[bytes], cuts: List[int], fins_first: bool) -> None:
        """Any stream, cut anywhere, gives the same commands, FIN runs, errors and state."""
        self.assertSame(_cut(b"".join(commands), cuts), fins_first=fins_first)

    @settings(max_examples=200, deadline=None)
    @given(
        _streams,
        st.lists(st.integers(0, 10000), max_size=12),
        st.integers(1, 64),
        st.integers(-8, 300),
        st.integers(0, 5000),
        st.lists(st.sampled_from([0, 0, 0, 1, 2]), max_size=30),
    )
    def test_same_outcomes_small_limits(
        self,
        commands: List[bytes],
        cuts: List[int],
        max_msg: int,
        max_body: int,
        max_req: int,
        holds: List[int],
    ) -> None:
        """Small size limits and prechecks that hold or refuse give the same outcomes."""
        self.assertSame(_cut(b"".join(commands), cuts), limits=(max_msg, max_body, max_req), holds=holds)

    def test_bytewise(self) -> None:
        """A stream of hot-path commands fed one byte at a time gives the same outcomes."""
        body = b"m" * 30
        mpub = b"MPUB t\n" + _size(4 + 3 * 34) + _size(3) + (_size(30) + body) * 3
        data = b"FIN 0123456789abcdef\n" * 3 + b"PUB t\n" + _size(30) + body + mpub + b"RDY 10\r\n"
        self.assertSame([data[index : index + 1] for index in range(len(data))])

    def test_fin_lines(self) -> None:
        """FIN lines the FIN run takes and those it leaves to next_command, in every mix."""
        lines = [
            b"FIN 0123456789abcdef\n",
            b"FIN 0123456789abcdef\r\n",
            b"FIN 0123456789abcde\r\n",
            b"FIN 0123456 89abcdef\n",
            b"FIN 0123456789abcdef x\n",
            b"FIN 0123456789abcde\n",
            b"FIN  0123456789abcde\n",
            b"FIX 0123456789abcdef\n",
        ]
        for first in lines:
            for second in lines:
                data = first + second + lines[0]
                self.assertSame([data])
                self.assertSame([data[:25], data[25:]])

    def test_large_bodies(self) -> None:
        """Bodies above the parser's copy threshold, arriving in pieces, come out the same."""
        body = bytes(range(256)) * 40
        mpub = b"MPUB t\n" + _size(4 + 2 * (4 + len(body))) + _size(2) + (_size(len(body)) + body) * 2
        data = b"PUB t\n" + _size(len(body)) + body + mpub
        self.assertSame(_cut(data, list(range(0, len(data), 997))))

    def test_long_lines(self) -> None:
        """The 16 KiB line limit is found at the same byte."""
        for length in (v2.MAX_LINE_LENGTH - 2, v2.MAX_LINE_LENGTH - 1, v2.MAX_LINE_LENGTH):
            data = b"NOP" + b"x" * (length - 3) + b"\n"
            self.assertSame([data])
            self.assertSame(_cut(data, [4000, 8000, 16000]))

    def test_mpub_errors(self) -> None:
        """MPUB's message size errors name the same message index and sizes."""
        for size in (0, -1, 1048577):
            data = b"MPUB t\n" + _size(100) + _size(3) + _size(1) + b"a" + _size(size) + b"b"
            self.assertSame([data])


class FuzzPoolTests(SynchronousTestCase):
    """The fuzz suite's command pool through both parsers."""

    def setUp(self) -> None:
        _needs_compiled(self)

    def test_pool(self) -> None:
        """The pool's commands, in runs cut at varying points, give the same outcomes."""
        pool = command_pool(1000, 23)
        for start in range(0, len(pool), 50):
            data = b"".join(pool[start : start + 50])
            cuts = list(range(start % 7 + 1, len(data), 41 + start % 13))
            pure = _run(v2.PureV2CommandParser, _cut(data, cuts))
            compiled = _run(v2.CompiledV2CommandParser, _cut(data, cuts))
            self.assertEqual(compiled, pure, start)


class ConformanceBytesTests(SynchronousTestCase):
    """The bytes every recorded conformance case sends, through both parsers."""

    def setUp(self) -> None:
        _needs_compiled(self)

    def test_recorded_cases(self) -> None:
        """Each connection's bytes of each case, whole and byte by byte, give the same outcomes."""
        checked = 0
        for fixture in ("tcp_v2.json", "tcp_v2_check_order.json"):
            for case in load_fixture(fixture)["cases"]:
                sent: Dict[Any, List[bytes]] = {}
                for step in case["steps"]:
                    if "send" in step:
                        # Placeholders of template sends stay as their text.
                        sent.setdefault(step.get("conn"), []).append(send_bytes(step["send"]))
                for chunks in sent.values():
                    stream = b"".join(chunks)
                    if not stream.startswith(b"  V2"):
                        continue
                    stream = stream[4:]
                    ways = [[stream]]
                    if len(stream) < 4096:
                        ways.append([stream[i : i + 1] for i in range(len(stream))])
                    for pieces in ways:
                        self.assertEqual(
                            _run(v2.CompiledV2CommandParser, pieces),
                            _run(v2.PureV2CommandParser, pieces),
                            case["name"],
                        )
                    checked += 1
        self.assertGreater(checked, 50)
