"""
The compiled record encoders (``txnsq/storage/_log_format.c``) against the
pure-Python ones they accelerate: the same bytes for any records, the same
errors for bad ones.  Where the extension is not built (PyPy, no C
compiler at install) the tests that need it are skipped and one test says
which encoder is in use, so that CPython without it fails loudly in CI.
"""

from __future__ import annotations

import os
import platform
import struct
import zlib
from typing import List, Tuple

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from txnsq.storage import log_format

_compiled = log_format.compiled

_ids = st.integers(min_value=0, max_value=2**64 - 1)
_bodies = st.binary(max_size=300)
_flags = st.integers(min_value=-(2**31), max_value=2**31 - 1)


def _needs_compiled(case: SynchronousTestCase) -> None:
    if _compiled is None:
        case.skipTest("the compiled encoders are not built here")


class CompiledEncoderPresenceTests(SynchronousTestCase):
    """Which encoder runs."""

    def test_built_on_cpython(self) -> None:
        """
        On CPython (unless ``TXNSQ_NO_EXTENSIONS`` is set) the compiled
        encoders are built and used; on PyPy the pure Python runs.
        """
        if platform.python_implementation() != "CPython" or os.environ.get("TXNSQ_NO_EXTENSIONS"):
            self.assertIsNone(_compiled)
            self.assertIs(log_format.encode_batch, log_format.pure_encode_batch)
            return
        self.assertIsNotNone(_compiled)
        self.assertIs(log_format.encode_batch, _compiled.encode_batch)
        self.assertIs(log_format.encode_id_batch, _compiled.encode_id_batch)


class EncodeBatchTests(SynchronousTestCase):
    """``encode_batch``: compiled and pure, byte for byte."""

    def setUp(self) -> None:
        _needs_compiled(self)

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.tuples(st.binary(min_size=8, max_size=8), _flags, _bodies), max_size=40))
    def test_same_bytes(self, records: List[Tuple[bytes, int, bytes]]) -> None:
        """Any records encode to the same bytes."""
        self.assertEqual(_compiled.encode_batch(records), log_format.pure_encode_batch(records))

    def test_checksum(self) -> None:
        """A record's checksum is CRC32(data) & 0x7fffffff, for lengths around 8-byte steps."""
        for size in range(0, 70):
            data = bytes(range(size))
            encoded = _compiled.encode_batch([(b"\x00" * 8, 0, data)])
            length, checksum = struct.unpack_from(">ii", encoded)
            self.assertEqual((length, checksum), (size, zlib.crc32(data) & 0x7FFFFFFF))

    def test_unaligned_data(self) -> None:
        """Data starting at any alignment (a memoryview slice) gives the same bytes."""
        buffer = os.urandom(200)
        for start in range(9):
            records = [(b"12345678", 3, memoryview(buffer)[start : start + 100])]
            self.assertEqual(
                _compiled.encode_batch(records),
                log_format.pure_encode_batch([(b"12345678", 3, buffer[start : start + 100])]),
            )

    def test_bad_id(self) -> None:
        """An id that is not 8 bytes is a struct.error naming its length, as in pure Python."""
        records = [(b"12345678", 0, b"x"), (b"1234567", 0, b"y")]
        for encode in (_compiled.encode_batch, log_format.pure_encode_batch):
            with self.assertRaises(struct.error) as caught:
                encode(records)
            self.assertEqual(str(caught.exception), "a message id is 8 bytes, not 7")

    def test_bad_flag(self) -> None:
        """A flag beyond int32 is a struct.error, as in pure Python."""
        for encode in (_compiled.encode_batch, log_format.pure_encode_batch):
            self.assertRaises(struct.error, encode, [(b"12345678", 2**31, b"x")])

    def test_not_a_record(self) -> None:
        """An item that is not a 3-tuple is refused."""
        self.assertRaises(ValueError, _compiled.encode_batch, [(b"12345678", 0)])
        self.assertRaises(TypeError, _compiled.encode_batch, [42])
        self.assertRaises(TypeError, _compiled.encode_batch, 42)

    def test_empty(self) -> None:
        """No records, no bytes."""
        self.assertEqual(_compiled.encode_batch([]), b"")


class EncodeIdBatchTests(SynchronousTestCase):
    """``encode_id_batch``: compiled and pure, byte for byte."""

    def setUp(self) -> None:
        _needs_compiled(self)

    @settings(max_examples=300, deadline=None)
    @given(st.lists(st.tuples(_ids, _bodies), max_size=40), _flags)
    def test_same_bytes(self, items: List[Tuple[int, bytes]], flag: int) -> None:
        """Any ids, flag and bodies encode to the same bytes."""
        ids = [item[0] for item in items]
        bodies = [item[1] for item in items]
        self.assertEqual(
            _compiled.encode_id_batch(ids, flag, bodies),
            log_format.pure_encode_id_batch(ids, flag, bodies),
        )

    def test_same_as_encode_batch(self) -> None:
        """The records are encode_batch's, with each id's 8 big-endian bytes."""
        ids = [0, 1, 2**64 - 1]
        bodies = [b"", b"a", b"xyz" * 50]
        records = [(struct.pack(">Q", i), 0, b) for i, b in zip(ids, bodies)]
        for encode in (_compiled.encode_id_batch, log_format.pure_encode_id_batch):
            self.assertEqual(encode(ids, 0, bodies), log_format.pure_encode_batch(records))

    def test_bad_id(self) -> None:
        """A negative id, or one not below 2**64, is a struct.error."""
        for encode in (_compiled.encode_id_batch, log_format.pure_encode_id_batch):
            for bad in (-1, 2**64):
                with self.assertRaises(struct.error) as caught:
                    encode([bad], 0, [b"x"])
                self.assertEqual(str(caught.exception), "a message id is below 2**64")

    def test_count_mismatch(self) -> None:
        """Not as many ids as bodies is a ValueError."""
        for encode in (_compiled.encode_id_batch, log_format.pure_encode_id_batch):
            self.assertRaises(ValueError, encode, [1, 2], 0, [b"x"])


class FrameRecordsTests(SynchronousTestCase):
    """``frame_records``: compiled and pure, the same answer for any bytes."""

    def setUp(self) -> None:
        _needs_compiled(self)

    @settings(max_examples=300, deadline=None)
    @given(
        st.lists(st.tuples(st.binary(min_size=8, max_size=8), _flags, _bodies), max_size=30),
        st.lists(st.tuples(st.integers(min_value=0), st.integers(min_value=1, max_value=255)), max_size=3),
        st.integers(min_value=0, max_value=20),
    )
    def test_same_answer(self, records: List[Tuple[bytes, int, bytes]], flips: List[Tuple[int, int]], cut: int) -> None:
        """Records, with bytes flipped and the end cut short or not, are framed (or refused at the same record) alike."""
        data = bytearray(log_format.pure_encode_batch(records))
        for at, mask in flips:
            if data:
                data[at % len(data)] ^= mask
        data = data[: max(0, len(data) - cut)]
        self.assertEqual(_compiled.frame_records(bytes(data)), log_format.pure_frame_records(bytes(data)))

    def test_frames_records(self) -> None:
        """Whole records give their starts and data lengths, and no error."""
        import array

        data = log_format.encode_batch([(b"12345678", 0, b"a" * 5), (b"12345678", 1, b""), (b"12345678", 0, b"bc")])
        for frame in (_compiled.frame_records, log_format.pure_frame_records):
            starts, lengths, error = frame(memoryview(data))
            self.assertEqual((list(array.array("q", starts)), list(array.array("q", lengths)), error), ([0, 25, 45], [5, 0, 2], None))

    def test_errors(self) -> None:
        """A cut header, a cut record and a bad checksum are named with the bad record's position."""
        data = log_format.encode_batch([(b"12345678", 0, b"abc"), (b"12345678", 0, b"defg")])
        flipped = bytearray(data)
        flipped[-1] ^= 1
        for frame in (_compiled.frame_records, log_format.pure_frame_records):
            self.assertEqual(frame(data[:30])[2], (23, "record header cut short"))
            self.assertEqual(frame(data[:-1])[2], (23, "record cut short (data length 4)"))
            self.assertEqual(frame(bytes(flipped)), (b"", b"", (23, "checksum mismatch")))


class CheckRecordsTests(SynchronousTestCase):
    """``check_records``: compiled and pure, the same answer for any bytes and bounds."""

    def setUp(self) -> None:
        _needs_compiled(self)

    def test_in_use(self) -> None:
        """The compiled check is the one reads use."""
        self.assertIs(log_format.check_records, _compiled.check_records)

    @settings(max_examples=300, deadline=None)
    @given(
        st.lists(st.tuples(st.binary(min_size=8, max_size=8), _flags, _bodies), max_size=30),
        st.lists(st.tuples(st.integers(min_value=0), st.integers(min_value=1, max_value=255)), max_size=3),
        st.integers(min_value=0, max_value=20),
        st.integers(min_value=-5, max_value=60),
        st.integers(min_value=-5, max_value=9000),
    )
    def test_same_answer(
        self, records: List[Tuple[bytes, int, bytes]], flips: List[Tuple[int, int]], cut: int, start: int, end: int
    ) -> None:
        """Records, flipped, cut short, checked between any bounds, give the same position and problem."""
        data = bytearray(log_format.pure_encode_batch(records))
        for at, mask in flips:
            if data:
                data[at % len(data)] ^= mask
        data = bytes(data[: max(0, len(data) - cut)])
        for bounds in ((0, len(data)), (start, end)):
            self.assertEqual(_compiled.check_records(data, *bounds), log_format.pure_check_records(data, *bounds))
            self.assertEqual(
                _compiled.check_records(memoryview(data), *bounds), log_format.pure_check_records(memoryview(data), *bounds)
            )

    def test_errors(self) -> None:
        """A cut header, a cut record and a bad checksum are named with the bad record's position."""
        data = log_format.encode_batch([(b"12345678", 0, b"abc"), (b"12345678", 0, b"defg")])
        flipped = bytearray(data)
        flipped[-1] ^= 1
        for check in (_compiled.check_records, log_format.pure_check_records):
            self.assertEqual(check(data, 0, len(data)), (47, None))
            self.assertEqual(check(data, 23, len(data)), (47, None))
            self.assertEqual(check(data, 0, 30), (23, "record header cut short"))
            self.assertEqual(check(data, 0, 46), (23, "record cut short (data length 4)"))
            self.assertEqual(check(bytes(flipped), 0, 47), (23, "checksum mismatch"))
            self.assertEqual(check(data, 1, 47)[0], 1)
            self.assertEqual(check(data, 50, 100), (50, None))
            self.assertEqual(check(b"", 0, 0), (0, None))

    def test_bad_arguments(self) -> None:
        """Not three arguments, or bounds that are not integers, are refused."""
        self.assertRaises(TypeError, _compiled.check_records, b"")
        self.assertRaises(TypeError, _compiled.check_records, b"", 0, "1")
        self.assertRaises(TypeError, _compiled.check_records, 42, 0, 1)
