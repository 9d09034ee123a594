"""
The compiled record framing of the disk queue
(``txnsq/storage/_diskqueue_format.c``) against the pure-Python functions
it accelerates: the same bytes and records for any input, well-formed,
truncated or malformed, and the same errors (type and text) for bad
arguments.  Where the extension is not built (PyPy, no C compiler at
install) the comparisons are skipped and one test says which functions are
in use, so that CPython without them fails loudly in CI.
"""

from __future__ import annotations

import os
import platform
import struct
from typing import Any, Callable, List, Tuple

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from txnsq.storage import diskqueue_format
from txnsq.storage.diskqueue_format import MIN_MESSAGE_SIZE

_compiled = diskqueue_format.compiled

_LENGTH = struct.Struct(">I")


def _outcome(function: Callable[..., Any], *args: Any) -> Tuple[str, Any]:
    """What a call returns, or the type and text of what it raises."""
    try:
        return ("value", function(*args))
    except Exception as error:  # the comparison is the point
        return (type(error).__name__, str(error))


def _needs_compiled(case: SynchronousTestCase) -> None:
    if _compiled is None:
        case.skipTest("the compiled record framing is not built here")


@st.composite
def _segment(draw: Callable[..., Any]) -> bytes:
    """
    Bytes as a segment holds them: records of lengths near and outside the
    limits the tests use, sometimes a lying length prefix, garbage, or a
    cut at any point.
    """
    parts: List[bytes] = []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["record", "record", "record", "length", "garbage"]))
        if kind == "record":
            data = draw(st.binary(min_size=0, max_size=60))
            parts.append(_LENGTH.pack(len(data)) + data)
        elif kind == "length":
            length = draw(
                st.one_of(
                    st.integers(0, 80),
                    st.just(2**32 - 1),
                    st.just(2**31),
                    st.integers(0, 2**32 - 1),
                )
            )
            parts.append(_LENGTH.pack(length) + draw(st.binary(max_size=40)))
        else:
            parts.append(draw(st.binary(max_size=10)))
    data = b"".join(parts)
    if data and draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    return data


_offsets = st.one_of(st.integers(-3, 120), st.just(2**62), st.just(-(2**62)))


class CompiledFramingPresenceTests(SynchronousTestCase):
    """Which functions run."""

    def test_built_on_cpython(self) -> None:
        """
        On CPython (unless ``TXNSQ_NO_EXTENSIONS`` is set) the compiled
        functions are built and used; on PyPy the pure Python runs.
        """
        if platform.python_implementation() != "CPython" or os.environ.get("TXNSQ_NO_EXTENSIONS"):
            self.assertIsNone(_compiled)
            self.assertIs(diskqueue_format.append_record, diskqueue_format.pure_append_record)
            self.assertIs(diskqueue_format.split_records, diskqueue_format.pure_split_records)
            return
        self.assertIsNotNone(_compiled)
        self.assertIs(diskqueue_format.append_record, _compiled.append_record)
        self.assertIs(diskqueue_format.split_records, _compiled.split_records)


class PureFramingTests(SynchronousTestCase):
    """The reference functions, on whichever path runs."""

    def test_round_trip(self) -> None:
        """Records appended one by one are split back into the same messages."""
        messages = [b"m" * MIN_MESSAGE_SIZE, b"n" * 100, b"o" * 27]
        pending = bytearray()
        sizes = [diskqueue_format.append_record(pending, data) for data in messages]
        self.assertEqual(sizes, [30, 134, 165])
        self.assertEqual(
            diskqueue_format.split_records(bytes(pending), 0, len(pending), MIN_MESSAGE_SIZE, 1000),
            (messages, len(pending)),
        )

    def test_stops_before_a_bad_record(self) -> None:
        """A length out of range, a record cut by ``stop`` or by the end stops the run before it."""
        good = _LENGTH.pack(30) + b"g" * 30
        for data in (
            good + _LENGTH.pack(3) + b"abc" + good,
            good + _LENGTH.pack(2000) + b"x" * 2000 + good,
            good + _LENGTH.pack(30) + b"short",
            good + b"\x00\x00",
        ):
            self.assertEqual(
                diskqueue_format.split_records(data, 0, len(data), MIN_MESSAGE_SIZE, 1000),
                ([b"g" * 30], 34),
            )
        data = good + good
        self.assertEqual(
            diskqueue_format.split_records(data, 0, 67, MIN_MESSAGE_SIZE, 1000),
            ([b"g" * 30], 34),
        )
        self.assertEqual(diskqueue_format.split_records(data, 34, 68, MIN_MESSAGE_SIZE, 1000), ([b"g" * 30], 68))

    def test_negative_start(self) -> None:
        """A negative start is refused."""
        self.assertRaises(ValueError, diskqueue_format.split_records, b"", -1, 0, 0, 10)


class SplitRecordsTests(SynchronousTestCase):
    """``split_records``: compiled and pure, record for record."""

    def setUp(self) -> None:
        _needs_compiled(self)

    def _same(self, *args: Any) -> None:
        self.assertEqual(
            _outcome(_compiled.split_records, *args),
            _outcome(diskqueue_format.pure_split_records, *args),
        )

    @settings(max_examples=500, deadline=None)
    @given(
        _segment(),
        _offsets,
        _offsets,
        st.sampled_from([0, 1, 4, MIN_MESSAGE_SIZE, 30]),
        st.sampled_from([0, 26, 40, 60, 2**32 - 1, 2**40]),
    )
    def test_same_records(self, data: bytes, start: int, stop: int, min_size: int, max_size: int) -> None:
        """Any bytes, offsets and limits give the same records and end offset (or the same error)."""
        self._same(data, start, stop, min_size, max_size)

    @settings(max_examples=200, deadline=None)
    @given(_segment(), st.integers(0, 40))
    def test_same_from_every_cut(self, data: bytes, start: int) -> None:
        """From any start, up to every stop, the same records."""
        for stop in range(len(data) + 6):
            self._same(data, start, stop, 0, 60)

    def test_whole_segment(self) -> None:
        """A 64 KiB read-ahead of 100-byte messages splits the same, cut at its end."""
        record = _LENGTH.pack(126) + bytes(range(126))
        data = (record * 600)[: 64 * 1024]
        records, end = _compiled.split_records(data, 0, 10**9, MIN_MESSAGE_SIZE, 1024 * 1024)
        self.assertEqual(len(records), (64 * 1024) // 130)
        self.assertEqual(end, len(records) * 130)
        self._same(data, 0, 10**9, MIN_MESSAGE_SIZE, 1024 * 1024)

    def test_odd_arguments(self) -> None:
        """Arguments of other types give what the pure function gives (values or errors)."""
        data = _LENGTH.pack(30) + b"x" * 30
        cases = [
            (bytearray(data), 0, 100, 0, 100),
            (memoryview(data), 0, 100, 0, 100),
            ("text", 0, 100, 0, 100),
            (None, 0, 100, 0, 100),
            (data, True, 100, 0, 100),
            (data, 0, 100.5, 0, 100),
            (data, 0, None, 0, 100),
            (data, 2**70, 100, 0, 100),
            (data, -(2**70), 100, 0, 100),
            (data, 0, 2**70, 0, 2**70),
            (data, 0, -(2**70), -(2**70), 100),
            (data, -1, 100, 0, 100),
            (data, 0, 100, 0),
            (data, 0, 100, 0, 100, 7),
        ]
        for args in cases:
            self._same(*args)


class AppendRecordTests(SynchronousTestCase):
    """``append_record``: compiled and pure, byte for byte."""

    def setUp(self) -> None:
        _needs_compiled(self)

    @settings(max_examples=300, deadline=None)
    @given(st.binary(max_size=40), st.lists(st.binary(max_size=300), max_size=20))
    def test_same_bytes(self, start: bytes, messages: List[bytes]) -> None:
        """Any messages appended to any buffer give the same bytes and sizes."""
        compiled, pure = bytearray(start), bytearray(start)
        for data in messages:
            self.assertEqual(
                _compiled.append_record(compiled, data),
                diskqueue_format.pure_append_record(pure, data),
            )
            self.assertEqual(compiled, pure)

    def test_exported_buffer(self) -> None:
        """A buffer with a live export is not resized: the same error, nothing appended."""
        compiled, pure = bytearray(b"ab"), bytearray(b"ab")
        with memoryview(compiled), memoryview(pure):
            self.assertEqual(
                _outcome(_compiled.append_record, compiled, b"x" * 30),
                _outcome(diskqueue_format.pure_append_record, pure, b"x" * 30),
            )
        self.assertEqual(compiled, bytearray(b"ab"))
        self.assertEqual(pure, bytearray(b"ab"))

    def test_odd_arguments(self) -> None:
        """Arguments of other types give what the pure function gives (values or errors)."""
        cases: List[Tuple[Any, ...]] = [
            (bytearray(), bytearray(b"data")),
            (bytearray(), memoryview(b"data")),
            (bytearray(), "text"),
            (bytearray(), None),
            (b"immutable", b"data"),
            (None, b"data"),
            (bytearray(),),
            (bytearray(), b"a", b"b"),
        ]
        for args in cases:
            compiled_args = tuple(bytearray(arg) if isinstance(arg, bytearray) else arg for arg in args)
            pure_args = tuple(bytearray(arg) if isinstance(arg, bytearray) else arg for arg in args)
            self.assertEqual(
                _outcome(_compiled.append_record, *compiled_args),
                _outcome(diskqueue_format.pure_append_record, *pure_args),
            )
            self.assertEqual(compiled_args, pure_args)


@st.composite
def _queue_story(draw: Callable[..., Any]) -> Tuple[List[Tuple[Any, ...]], Tuple[Any, ...]]:
    """
    Steps on a live disk queue (puts of messages, alone or in runs, some
    too long to be read back; reads; ends of reactor turns), then damage
    done to one of its segment files while it is closed.
    """
    steps: List[Tuple[Any, ...]] = []
    serial = 0
    for _ in range(draw(st.integers(1, 40))):
        kind = draw(st.sampled_from(["put", "put", "put", "put_many", "read", "turn"]))
        if kind in ("put", "put_many"):
            messages = []
            for _ in range(1 if kind == "put" else draw(st.integers(0, 12))):
                size = draw(st.one_of(st.integers(0, 50), st.just(90)))
                messages.append(b"%06d" % (serial,) + b"m" * (MIN_MESSAGE_SIZE - 6 + size))
                serial += 1
            steps.append((kind, messages))
        else:
            steps.append((kind,))
    damage = draw(
        st.one_of(
            st.just(("none",)),
            st.tuples(st.just("cut"), st.integers(0, 5), st.integers(0, 400)),
            st.tuples(st.just("overwrite"), st.integers(0, 5), st.integers(0, 400), st.binary(min_size=1, max_size=4)),
        )
    )
    return steps, damage


class AppendRecordsTests(SynchronousTestCase):
    """``append_records``: compiled and pure, byte for byte."""

    def setUp(self) -> None:
        _needs_compiled(self)

    def _same(self, start: bytes, messages: List[Any], *args: Any) -> None:
        compiled, pure = bytearray(start), bytearray(start)
        self.assertEqual(
            _outcome(_compiled.append_records, compiled, messages, *args),
            _outcome(diskqueue_format.pure_append_records, pure, messages, *args),
        )
        self.assertEqual(compiled, pure)

    @settings(max_examples=500, deadline=None)
    @given(
        st.binary(max_size=40),
        st.lists(st.binary(max_size=120), max_size=20),
        st.integers(-2, 25),
        st.one_of(st.integers(-5, 600), st.just(2**62)),
        st.one_of(st.integers(0, 700), st.just(2**62)),
        st.one_of(st.integers(0, 900), st.just(2**62)),
    )
    def test_same_bytes(
        self, start: bytes, messages: List[bytes], index: int, write_pos: int, max_bytes: int, flush_bytes: int
    ) -> None:
        """Any run, position and limits give the same bytes, index and position."""
        self._same(start, messages, index, write_pos, max_bytes, flush_bytes)

    @settings(max_examples=200, deadline=None)
    @given(
        st.lists(
            st.one_of(st.binary(max_size=30), st.sampled_from(["text", None, bytearray(b"ba"), memoryview(b"mv"), 7])),
            max_size=8,
        ),
        st.integers(0, 9),
    )
    def test_odd_messages(self, messages: List[Any], index: int) -> None:
        """Messages that are not bytes give what the pure function gives (framed, or the same error)."""
        self._same(b"", messages, index, 0, 10**6, 10**6)

    def test_odd_arguments(self) -> None:
        """Arguments of other types give what the pure function gives (values or errors)."""
        runs: List[Tuple[Any, ...]] = [
            ((b"a" * 30,), 0, 0, 100, 100),
            ([b"a" * 30], True, 0, 100, 100),
            ([b"a" * 30], 0, 2**70, 100, 100),
            ([b"a" * 30], 0, 0, 2**70, 100),
            ([b"a" * 30], 0, 0, 100, 2.5),
            ([b"a" * 30], 0, 0, 100),
            (None, 0, 0, 100, 100),
        ]
        for args in runs:
            self._same(b"", *args)
        for pending in (b"bytes", None):
            self.assertEqual(
                _outcome(_compiled.append_records, pending, [b"a" * 30], 0, 0, 100, 100),
                _outcome(diskqueue_format.pure_append_records, pending, [b"a" * 30], 0, 0, 100, 100),
            )

    def test_exported_buffer(self) -> None:
        """A buffer with a live export is not resized: the same error, nothing framed."""
        compiled, pure = bytearray(b"ab"), bytearray(b"ab")
        with memoryview(compiled), memoryview(pure):
            self.assertEqual(
                _outcome(_compiled.append_records, compiled, [b"x" * 30], 0, 0, 100, 100),
                _outcome(diskqueue_format.pure_append_records, pure, [b"x" * 30], 0, 0, 100, 100),
            )
        self.assertEqual((compiled, pure), (bytearray(b"ab"), bytearray(b"ab")))


class DiskQueueBothPathsTests(SynchronousTestCase):
    """A disk queue run with the compiled framing and with the pure one."""

    def _replay(
        self,
        framing: Tuple[Any, Any, Any],
        steps: List[Tuple[Any, ...]],
        damage: Tuple[Any, ...],
        runs: bool = True,
    ) -> List[Any]:
        """
        What a queue answered at each step, and the files it left, with
        ``framing`` (``append_record``, ``append_records``,
        ``split_records``) patched in; runs of messages put with
        ``put_many``, or (``runs=False``) one ``put`` each.
        """
        from twisted.internet.task import Clock

        from txnsq.storage import disk

        self.patch(disk, "append_record", framing[0])
        self.patch(disk, "append_records", framing[1])
        self.patch(disk, "split_records", framing[2])
        # Small enough that runs are cut by the write size too.
        self.patch(disk, "FLUSH_BYTES", 200)
        directory = self.mktemp()
        os.makedirs(directory)
        clock = Clock()

        def open_queue() -> disk.DiskQueue:
            return disk.DiskQueue(
                "t:c",
                directory,
                clock,
                mem_limit=0,
                max_bytes_per_file=300,
                max_msg_size=MIN_MESSAGE_SIZE + 60,
                sync_every=3,
                sync_timeout=2.0,
            )

        seen: List[Any] = []
        queue = open_queue()
        for step in steps:
            if step[0] == "put_many" and runs:
                queue.put_many(step[1])
            elif step[0] in ("put", "put_many"):
                for data in step[1]:
                    queue.put(data)
            elif step[0] == "read":
                seen.append(queue.read())
            else:
                clock.advance(0)
            seen.append((queue.depth(), queue.state()))
        queue.close()
        segments = sorted(name for name in os.listdir(directory) if name.endswith(".dat") and ".diskqueue.0" in name)
        if damage[0] != "none" and segments:
            path = os.path.join(directory, segments[damage[1] % len(segments)])
            with open(path, "rb") as segment:
                data = bytearray(segment.read())
            if damage[0] == "cut":
                data = data[: damage[2] % (len(data) + 1)]
            elif data:
                at = damage[2] % len(data)
                data[at : at + len(damage[3])] = damage[3]
            with open(path, "wb") as segment:
                segment.write(bytes(data))
        queue = open_queue()
        while True:
            data = queue.read()
            seen.append((data, queue.depth(), queue.state()))
            if data is None:
                break
            clock.advance(0)
        queue.close()
        seen.append(sorted(os.listdir(directory)))
        return seen

    @settings(max_examples=60, deadline=None)
    @given(_queue_story())
    def test_same_reads(self, story: Tuple[List[Tuple[Any, ...]], Tuple[Any, ...]]) -> None:
        """
        The same messages come back, with the same depths, positions and
        files (``.bad`` ones included) after any damage to a segment.
        """
        _needs_compiled(self)
        steps, damage = story
        compiled = self._replay(_COMPILED_FRAMING, steps, damage)
        pure = self._replay(_PURE_FRAMING, steps, damage)
        self.assertEqual(compiled, pure)

    @settings(max_examples=60, deadline=None)
    @given(_queue_story())
    def test_runs_are_puts(self, story: Tuple[List[Tuple[Any, ...]], Tuple[Any, ...]]) -> None:
        """
        ``put_many`` of a run answers and writes what a ``put`` of each
        does, with either framing (the pure one only, where the compiled
        one is not built).
        """
        steps, damage = story
        for framing in (_COMPILED_FRAMING, _PURE_FRAMING):
            self.assertEqual(
                self._replay(framing, steps, damage),
                self._replay(framing, steps, damage, runs=False),
            )


_PURE_FRAMING = (
    diskqueue_format.pure_append_record,
    diskqueue_format.pure_append_records,
    diskqueue_format.pure_split_records,
)
_COMPILED_FRAMING = (
    (_compiled.append_record, _compiled.append_records, _compiled.split_records) if _compiled is not None else _PURE_FRAMING
)
