"""
Tests for txnsq.protocol.errors: client errors with Go nsqd's codes, texts
and fatality, and Go's ``%q`` quoting.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from txnsq.protocol.errors import (
    NON_FATAL_CODES,
    LineTooLong,
    ProtocolError,
    go_quote,
    protocol_error,
)


class ProtocolErrorTests(SynchronousTestCase):
    """ProtocolError carries the code, the text and the exact frame bytes."""

    def test_str(self) -> None:
        """str() is the code, a space and the description, as Go's Error()."""
        error = ProtocolError("E_INVALID", "invalid command FOO")
        self.assertEqual(str(error), "E_INVALID invalid command FOO")
        self.assertEqual(error.code, "E_INVALID")
        self.assertEqual(error.description, "invalid command FOO")

    def test_frame_data(self) -> None:
        """frame_data() is the UTF-8 bytes of the code and description."""
        error = ProtocolError("E_BAD_TOPIC", 'SUB topic name "bad!topic" is not valid')
        self.assertEqual(error.frame_data(), b'E_BAD_TOPIC SUB topic name "bad!topic" is not valid')

    def test_bytes_description_kept_exactly(self) -> None:
        """A bytes description (raw client bytes) goes into the frame unchanged."""
        error = ProtocolError("E_INVALID", b"invalid command \x00\x00\x00\x03two\xffNOP")
        self.assertEqual(error.frame_data(), b"E_INVALID invalid command \x00\x00\x00\x03two\xffNOP")
        self.assertEqual(error.description, "invalid command \x00\x00\x00\x03two\\xffNOP")
        self.assertEqual(str(error), "E_INVALID " + error.description)

    def test_empty_description(self) -> None:
        """An empty description still has the separating space (Go's text)."""
        self.assertEqual(ProtocolError("E_INVALID", b"").frame_data(), b"E_INVALID ")

    def test_fatal_default(self) -> None:
        """A ProtocolError is fatal unless told otherwise."""
        self.assertTrue(ProtocolError("E_INVALID", "x").fatal)
        self.assertFalse(ProtocolError("E_FIN_FAILED", "x", fatal=False).fatal)

    def test_is_exception(self) -> None:
        """ProtocolError can be raised and caught."""
        with self.assertRaises(ProtocolError) as caught:
            raise protocol_error("E_BAD_BODY", "IDENTIFY invalid body size 0")
        self.assertEqual(caught.exception.frame_data(), b"E_BAD_BODY IDENTIFY invalid body size 0")

    def test_repr(self) -> None:
        """repr() names the code, the text and the fatality."""
        self.assertEqual(
            repr(ProtocolError("E_INVALID", "x")),
            "ProtocolError('E_INVALID', 'x', fatal=True)",
        )


class ProtocolErrorHelperTests(SynchronousTestCase):
    """protocol_error picks fatality by code, as Go's two error types do."""

    def test_non_fatal_codes(self) -> None:
        """Only E_FIN_FAILED, E_REQ_FAILED and E_TOUCH_FAILED are not fatal."""
        self.assertEqual(NON_FATAL_CODES, frozenset(["E_FIN_FAILED", "E_REQ_FAILED", "E_TOUCH_FAILED"]))
        for code in NON_FATAL_CODES:
            self.assertFalse(protocol_error(code, "failed").fatal)

    def test_fatal_codes(self) -> None:
        """Every other code is fatal."""
        for code in [
            "E_INVALID",
            "E_BAD_BODY",
            "E_BAD_TOPIC",
            "E_BAD_CHANNEL",
            "E_BAD_MESSAGE",
            "E_PUB_FAILED",
            "E_MPUB_FAILED",
            "E_DPUB_FAILED",
            "E_IDENTIFY_FAILED",
            "E_AUTH_FAILED",
            "E_AUTH_FIRST",
            "E_AUTH_DISABLED",
            "E_UNAUTHORIZED",
            "E_SUB_FAILED",
        ]:
            self.assertTrue(protocol_error(code, "x").fatal, code)

    def test_bytes_description(self) -> None:
        """protocol_error accepts a bytes description."""
        error = protocol_error("E_FIN_FAILED", b"FIN 0123456789abcdef failed ID not in flight")
        self.assertEqual(error.frame_data(), b"E_FIN_FAILED FIN 0123456789abcdef failed ID not in flight")
        self.assertFalse(error.fatal)


class LineTooLongTests(SynchronousTestCase):
    """LineTooLong is not a ProtocolError: it is answered by closing."""

    def test_not_protocol_error(self) -> None:
        """Catching ProtocolError does not catch LineTooLong."""
        self.assertFalse(issubclass(LineTooLong, ProtocolError))
        self.assertTrue(issubclass(LineTooLong, Exception))


class GoQuoteTests(SynchronousTestCase):
    """go_quote is Go's strconv.Quote (fmt's %q)."""

    def test_plain(self) -> None:
        """Printable ASCII is kept inside double quotes."""
        self.assertEqual(go_quote(b"bad!topic"), '"bad!topic"')
        self.assertEqual(go_quote(b""), '""')
        self.assertEqual(go_quote(b"a b~"), '"a b~"')

    def test_str_input(self) -> None:
        """A str is quoted as its UTF-8 bytes."""
        self.assertEqual(go_quote("bad/channel"), '"bad/channel"')
        self.assertEqual(go_quote("caf\u00e9"), '"caf\u00e9"')

    def test_quote_and_backslash(self) -> None:
        """Double quotes and backslashes are escaped; single quotes are not."""
        self.assertEqual(go_quote(b'a"b\\c\'d'), '"a\\"b\\\\c\'d"')

    def test_short_escapes(self) -> None:
        """\\a \\b \\f \\n \\r \\t \\v have their short escapes."""
        self.assertEqual(go_quote(b"\x07\x08\x0c\n\r\t\x0b"), '"\\a\\b\\f\\n\\r\\t\\v"')

    def test_control_bytes(self) -> None:
        """Other control bytes and DEL are \\xNN, lower-case hex."""
        self.assertEqual(go_quote(b"\x00\x01\x1f\x7f"), '"\\x00\\x01\\x1f\\x7f"')

    def test_invalid_utf8(self) -> None:
        """Every byte of an invalid UTF-8 sequence is \\xNN."""
        self.assertEqual(go_quote(b"\xff\xfe"), '"\\xff\\xfe"')
        # A lone continuation byte, a truncated sequence.
        self.assertEqual(go_quote(b"\x80a\xe2\x82"), '"\\x80a\\xe2\\x82"')

    def test_overlong_and_surrogates(self) -> None:
        """Overlong forms, encoded surrogates and code points above U+10FFFF are invalid."""
        self.assertEqual(go_quote(b"\xc0\x80"), '"\\xc0\\x80"')
        self.assertEqual(go_quote(b"\xed\xa0\x80"), '"\\xed\\xa0\\x80"')
        self.assertEqual(go_quote(b"\xf4\x90\x80\x80"), '"\\xf4\\x90\\x80\\x80"')

    def test_printable_unicode_kept(self) -> None:
        """Printable non-ASCII characters are written as themselves."""
        self.assertEqual(go_quote("h\u00e9llo \u4e16\u754c \U0001f600".encode("utf-8")), '"h\u00e9llo \u4e16\u754c \U0001f600"')
        # U+FFFD spelled correctly is a printable character.
        self.assertEqual(go_quote(b"\xef\xbf\xbd"), '"\ufffd"')

    def test_non_printable_unicode(self) -> None:
        """Non-printable characters are \\uXXXX, or \\UXXXXXXXX above the BMP."""
        self.assertEqual(go_quote("\u00a0".encode("utf-8")), '"\\u00a0"')
        self.assertEqual(go_quote("\u200b".encode("utf-8")), '"\\u200b"')
        self.assertEqual(go_quote("\u2028".encode("utf-8")), '"\\u2028"')
        self.assertEqual(go_quote("\ue000".encode("utf-8")), '"\\ue000"')
        self.assertEqual(go_quote("\U0010ffff".encode("utf-8")), '"\\U0010ffff"')

    def test_surrogateescape_str(self) -> None:
        """A str decoded with surrogateescape is quoted as the original bytes."""
        raw = b"t\xff\x00"
        self.assertEqual(go_quote(raw.decode("utf-8", "surrogateescape")), '"t\\xff\\x00"')

    def test_fixture_texts(self) -> None:
        """The names in the recorded SUB/PUB errors quote as Go quoted them."""
        self.assertEqual(go_quote(b"t#ephemeralx"), '"t#ephemeralx"')
        self.assertEqual(go_quote(b"a" * 65), '"' + "a" * 65 + '"')
