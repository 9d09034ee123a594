"""
The compiled message encoders (``txnsq/protocol/_message.c``) against the
pure-Python ones they accelerate: the same bytes for any message, the same
errors (type and text) for bad arguments.  Skipped where the extension is
not built; one test says which encoders are in use.
"""

from __future__ import annotations

import os
import platform
from typing import Any, Callable, Tuple

from hypothesis import given, settings
from hypothesis import strategies as st
from twisted.trial.unittest import SynchronousTestCase

from txnsq.protocol import message

_compiled = message.compiled

_timestamps = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.just(1_700_000_000_000_000_000),
)
_attempts = st.one_of(st.integers(min_value=0, max_value=65535), st.integers(min_value=-5, max_value=70000))
_ids = st.one_of(st.binary(min_size=16, max_size=16), st.binary(max_size=20))
_bodies = st.binary(max_size=300)
# Arguments of other types, to check the errors.
_odd = st.sampled_from([None, 1.5, "text", bytearray(b"0123456789abcdef"), memoryview(b"0123456789abcdef"), True])


def _outcome(function: Callable[..., Any], *args: Any) -> Tuple[str, Any]:
    """What a call returns, or the type and text of what it raises."""
    try:
        return ("value", function(*args))
    except Exception as error:  # the comparison is the point
        return (type(error).__name__, str(error))


def _needs_compiled(case: SynchronousTestCase) -> None:
    if _compiled is None:
        case.skipTest("the compiled message encoders are not built here")


class CompiledMessagePresenceTests(SynchronousTestCase):
    """Which encoders run."""

    def test_built_on_cpython(self) -> None:
        """On CPython (unless ``TXNSQ_NO_EXTENSIONS`` is set) the compiled encoders are used."""
        if platform.python_implementation() != "CPython" or os.environ.get("TXNSQ_NO_EXTENSIONS"):
            self.assertIsNone(_compiled)
            self.assertIs(message.encode_message, message.pure_encode_message)
            self.assertIs(message.with_attempts, message.pure_with_attempts)
            self.assertIs(message.message_frame, message.pure_message_frame)
            return
        self.assertIs(message.encode_message, _compiled.encode_message)
        self.assertIs(message.with_attempts, _compiled.with_attempts)
        self.assertIs(message.message_frame, _compiled.message_frame)


class EncodeMessageTests(SynchronousTestCase):
    """``encode_message``: compiled and pure, byte for byte and error for error."""

    def setUp(self) -> None:
        _needs_compiled(self)

    @settings(max_examples=500, deadline=None)
    @given(_timestamps, _attempts, _ids, _bodies)
    def test_same_outcome(self, timestamp: int, attempts: int, msg_id: bytes, body: bytes) -> None:
        """Any timestamp, attempts, id and body give the same bytes or the same error."""
        self.assertEqual(
            _outcome(_compiled.encode_message, timestamp, attempts, msg_id, body),
            _outcome(message.pure_encode_message, timestamp, attempts, msg_id, body),
        )

    @settings(max_examples=200, deadline=None)
    @given(st.tuples(st.one_of(_timestamps, _odd), st.one_of(_attempts, _odd), st.one_of(_ids, _odd), st.one_of(_bodies, _odd)))
    def test_odd_arguments(self, args: Tuple[Any, Any, Any, Any]) -> None:
        """Arguments of other types give the pure function's result or error."""
        self.assertEqual(_outcome(_compiled.encode_message, *args), _outcome(message.pure_encode_message, *args))

    def test_argument_count(self) -> None:
        """A wrong number of arguments is the pure function's TypeError."""
        self.assertEqual(
            _outcome(_compiled.encode_message, 1, 2, b"0123456789abcdef"),
            _outcome(message.pure_encode_message, 1, 2, b"0123456789abcdef"),
        )

    def test_round_trip(self) -> None:
        """What it encodes decodes to the same fields."""
        data = _compiled.encode_message(-1, 65535, b"0123456789abcdef", b"body")
        self.assertEqual(message.decode_message(data), (-1, 65535, b"0123456789abcdef", b"body"))


class WithAttemptsTests(SynchronousTestCase):
    """``with_attempts``: compiled and pure, byte for byte and error for error."""

    def setUp(self) -> None:
        _needs_compiled(self)

    @settings(max_examples=500, deadline=None)
    @given(st.binary(max_size=60), _attempts)
    def test_same_outcome(self, data: bytes, attempts: int) -> None:
        """Any payload (short ones too) and attempts give the same bytes or the same error."""
        self.assertEqual(
            _outcome(_compiled.with_attempts, data, attempts),
            _outcome(message.pure_with_attempts, data, attempts),
        )

    @settings(max_examples=100, deadline=None)
    @given(st.one_of(st.binary(max_size=40), _odd), st.one_of(_attempts, _odd))
    def test_odd_arguments(self, data: Any, attempts: Any) -> None:
        """Arguments of other types give the pure function's result or error."""
        self.assertEqual(
            _outcome(_compiled.with_attempts, data, attempts),
            _outcome(message.pure_with_attempts, data, attempts),
        )

    def test_copy(self) -> None:
        """The payload it is given is not changed."""
        data = bytes(range(40))
        changed = _compiled.with_attempts(data, 513)
        self.assertEqual(data, bytes(range(40)))
        self.assertEqual(changed[8:10], b"\x02\x01")
        self.assertEqual(changed[:8] + changed[10:], data[:8] + data[10:])


class MessageFrameTests(SynchronousTestCase):
    """``message_frame``: compiled and pure, byte for byte and error for error."""

    def setUp(self) -> None:
        _needs_compiled(self)

    @settings(max_examples=500, deadline=None)
    @given(st.binary(max_size=400))
    def test_same_outcome(self, data: bytes) -> None:
        """Any payload gives the same frame."""
        self.assertEqual(_outcome(_compiled.message_frame, data), _outcome(message.pure_message_frame, data))

    @settings(max_examples=50, deadline=None)
    @given(_odd)
    def test_odd_arguments(self, data: Any) -> None:
        """Arguments of other types give the pure function's result or error."""
        self.assertEqual(_outcome(_compiled.message_frame, data), _outcome(message.pure_message_frame, data))

    def test_argument_count(self) -> None:
        """A wrong argument count is the pure function's TypeError."""
        self.assertEqual(_outcome(_compiled.message_frame), _outcome(message.pure_message_frame))
        self.assertEqual(_outcome(_compiled.message_frame, b"a", b"b"), _outcome(message.pure_message_frame, b"a", b"b"))

    def test_frame(self) -> None:
        """The frame is the size (payload + 4), frame type 2, then the payload."""
        payload = message.encode_message(1_700_000_000_000_000_000, 1, b"0123456789abcdef", b"hello")
        self.assertEqual(_compiled.message_frame(payload), (len(payload) + 4).to_bytes(4, "big") + b"\x00\x00\x00\x02" + payload)
