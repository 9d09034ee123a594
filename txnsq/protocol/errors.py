# -*- test-case-name: tests.test_protocol_errors -*-
"""
NSQ's client errors (``E_*`` codes and their texts) and Go's ``%q`` quoting.

Go nsqd answers a bad command with an error frame whose data is
``CODE + " " + description``; the description is byte-exact Go formatting,
and may contain raw bytes the client sent (``invalid command \\x00...``).
:class:`ProtocolError` therefore keeps the exact frame bytes next to a
printable text form.
"""

from __future__ import annotations

from typing import FrozenSet, Union

__all__ = [
    "NON_FATAL_CODES",
    "LineTooLong",
    "ProtocolError",
    "go_quote",
    "protocol_error",
]

#: The only codes after which Go nsqd keeps the connection open (its
#: ``NewClientErr``; every other error is a ``NewFatalClientErr``).
NON_FATAL_CODES: FrozenSet[str] = frozenset(["E_FIN_FAILED", "E_REQ_FAILED", "E_TOUCH_FAILED"])


def _to_bytes(text: str) -> bytes:
    """
    UTF-8 bytes of ``text``, giving back the original bytes of lone
    surrogates made by a ``surrogateescape`` decode.
    """
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        # Surrogates outside the escape range: keep them as (invalid)
        # three-byte sequences, which is what Go would hold for such input.
        return text.encode("utf-8", "surrogatepass")


class ProtocolError(Exception):
    """
    A client error with Go nsqd's code and text.

    :ivar code: the error code, e.g. ``"E_INVALID"``.
    :ivar description: the text after the code, as ``str`` (bytes that are
        not UTF-8 are shown as ``\\xNN``); the exact bytes are in
        :meth:`frame_data`.
    :ivar fatal: whether the server closes the connection after sending it.

    ``str(error) == error.code + " " + error.description``.
    """

    def __init__(self, code: str, description: Union[str, bytes], fatal: bool = True) -> None:
        """
        :param description: the text; ``bytes`` are kept exactly (raw client
            bytes in Go's ``%s`` formatting), ``str`` is encoded as UTF-8.
        """
        if isinstance(description, (bytes, bytearray)):
            raw = bytes(description)
            text = raw.decode("utf-8", "backslashreplace")
        else:
            text = description
            raw = _to_bytes(description)
        self.code = code
        self.description = text
        self.fatal = fatal
        self._data = code.encode("ascii") + b" " + raw
        Exception.__init__(self, code + " " + text)

    def __str__(self) -> str:
        return self.code + " " + self.description

    def __repr__(self) -> str:
        return "ProtocolError(%r, %r, fatal=%r)" % (self.code, self.description, self.fatal)

    def frame_data(self) -> bytes:
        """The data of the error frame Go sends: ``CODE description`` bytes."""
        return self._data


def protocol_error(code: str, description: Union[str, bytes]) -> ProtocolError:
    """
    A :class:`ProtocolError` whose ``fatal`` follows Go nsqd: every code is
    fatal except those in :data:`NON_FATAL_CODES`.
    """
    return ProtocolError(code, description, code not in NON_FATAL_CODES)


class LineTooLong(Exception):
    """
    A command line did not fit Go nsqd's 16 KiB read buffer.

    Go's ``bufio.Reader.ReadSlice`` fails with ``ErrBufferFull`` and nsqd
    closes the connection without sending an error frame; so must we.
    """


_LOWER_HEX = "0123456789abcdef"
_SIMPLE_ESCAPES = {
    0x07: "\\a",
    0x08: "\\b",
    0x0C: "\\f",
    0x0A: "\\n",
    0x0D: "\\r",
    0x09: "\\t",
    0x0B: "\\v",
}


def _escape_rune(char: str) -> str:
    """One decoded character as Go's ``strconv.Quote`` writes it."""
    if char == '"' or char == "\\":
        return "\\" + char
    if char.isprintable():
        # Python's "printable" (not categories C* or Z* except the space)
        # is Go's unicode.IsPrint (L, M, N, P, S and U+0020).
        return char
    point = ord(char)
    simple = _SIMPLE_ESCAPES.get(point)
    if simple is not None:
        return simple
    if point < 0x20 or point == 0x7F:
        return "\\x" + _LOWER_HEX[point >> 4] + _LOWER_HEX[point & 0xF]
    if point < 0x10000:
        return "\\u%04x" % (point,)
    return "\\U%08x" % (point,)


def _utf8_length(lead: int) -> int:
    """The length of the UTF-8 sequence a lead byte announces (0: invalid)."""
    if 0xC2 <= lead <= 0xDF:
        return 2
    if 0xE0 <= lead <= 0xEF:
        return 3
    if 0xF0 <= lead <= 0xF4:
        return 4
    return 0


def go_quote(value: Union[str, bytes]) -> str:
    """
    ``value`` quoted as Go's ``strconv.Quote`` (``fmt``'s ``%q``) does.

    Bytes are taken as Go takes a string: valid UTF-8 sequences are
    characters (printable ones kept, others escaped as ``\\n``, ``\\x01``,
    ``\\u00a0``, ``\\U0001f600``), every byte of an invalid sequence is
    ``\\xNN``.  A ``str`` is first encoded to UTF-8 (lone surrogates from a
    ``surrogateescape`` decode become their original bytes again).
    """
    data = _to_bytes(value) if isinstance(value, str) else bytes(value)
    out = ['"']
    append = out.append
    index = 0
    length = len(data)
    while index < length:
        byte = data[index]
        if byte < 0x80:
            if 0x20 <= byte < 0x7F and byte != 0x22 and byte != 0x5C:
                append(chr(byte))
            else:
                append(_escape_rune(chr(byte)))
            index += 1
            continue
        width = _utf8_length(byte)
        char = None
        if width:
            try:
                # Python's strict decoder refuses what Go's DecodeRune
                # refuses: overlong forms, surrogates, > U+10FFFF.
                char = data[index : index + width].decode("utf-8")
            except UnicodeDecodeError:
                char = None
        if char is None:
            append("\\x" + _LOWER_HEX[byte >> 4] + _LOWER_HEX[byte & 0xF])
            index += 1
            continue
        append(_escape_rune(char))
        index += width
    append('"')
    return "".join(out)
