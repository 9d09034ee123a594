# -*- test-case-name: tests.test_protocol_compression -*-
"""
Stream codecs for NSQ's connection compression, both directions (sans-IO).

After IDENTIFY negotiates ``snappy`` or ``deflate``, Go nsqd wraps the
connection (``client_v2.go`` ``UpgradeSnappy`` / ``UpgradeDeflate``):

- snappy: ``github.com/golang/snappy`` ``NewBufferedWriter`` / ``NewReader``,
  i.e. the snappy *framing* format: a stream identifier chunk, then
  compressed (``0x00``) or uncompressed (``0x01``) data chunks of at most
  65536 uncompressed bytes, each led by the masked CRC-32C of its
  uncompressed bytes; padding (``0xfe``) and skippable (``0x80``-``0xfd``)
  chunks are ignored.
- deflate: ``compress/flate`` raw DEFLATE (no zlib header) at level 1..9,
  every write ended by a sync flush so the peer can decode it at once.

An :class:`Encoder` turns one write into the bytes to send; a
:class:`Decoder` turns received bytes into the plain bytes now available,
keeping incomplete input for the next call. Decoders bound memory: a snappy
chunk never declares more than 65536 bytes, ``decode`` refuses to return more
than ``max_output`` bytes, and ``decode_iter`` yields pieces of at most
``chunk`` bytes however much the input expands (decompression bombs).
Any corrupt input raises :class:`CompressionError`, after which the decoder
refuses all further input.
"""

from __future__ import annotations

import struct
import zlib
from importlib.util import find_spec
from typing import Any, Callable, Iterator, List, Optional, Protocol, Tuple, Type, Union, runtime_checkable

__all__ = [
    "DEFAULT_MAX_OUTPUT",
    "MAX_BLOCK_SIZE",
    "CompressionError",
    "Decoder",
    "DeflateDecoder",
    "DeflateEncoder",
    "Encoder",
    "SnappyDecoder",
    "SnappyEncoder",
]

#: Most uncompressed bytes one snappy chunk may carry (the framing spec's
#: limit, Go's ``maxBlockSize``); also the default ``decode_iter`` piece.
MAX_BLOCK_SIZE = 65536

#: Default bound on what one ``decode`` call may return.
DEFAULT_MAX_OUTPUT = 16 * 1024 * 1024

# Go's maxEncodedLenOfMaxBlockSize (snappy's MaxEncodedLen(65536)) plus the
# checksum: a longer compressed chunk can only be an attack or garbage.
_MAX_COMPRESSED_CHUNK = 32 + MAX_BLOCK_SIZE + MAX_BLOCK_SIZE // 6 + 4
_MAX_UNCOMPRESSED_CHUNK = MAX_BLOCK_SIZE + 4

_CHUNK_STREAM_IDENTIFIER = 0xFF
_STREAM_MAGIC = b"sNaPpY"
_STREAM_IDENTIFIER = b"\xff\x06\x00\x00" + _STREAM_MAGIC

# A chunk header is one little-endian u32: type in the low byte, then a
# 24-bit length of what follows.
_unpack_chunk_header = struct.Struct("<I").unpack_from


class CompressionError(ValueError):
    """The received bytes are not a valid snappy-framed or deflate stream."""


@runtime_checkable
class Encoder(Protocol):
    """Compresses one direction of a connection."""

    def encode(self, data: bytes) -> bytes:
        """
        The bytes to send for ``data``; the peer can decode all of ``data``
        from everything sent so far. Empty ``data`` gives ``b""``.
        """


@runtime_checkable
class Decoder(Protocol):
    """Decompresses one direction of a connection, incrementally."""

    def decode(self, data: bytes) -> bytes:
        """
        Add received bytes; return the plain bytes they complete (possibly
        ``b""``), keeping any incomplete tail for the next call.

        :raises CompressionError: corrupt input, or more than the decoder's
            ``max_output`` bytes from this one call.
        """

    def decode_iter(self, data: bytes, chunk: int = MAX_BLOCK_SIZE) -> Iterator[bytes]:
        """
        Like :meth:`decode`, as non-empty pieces of at most ``chunk`` bytes,
        so that memory stays bounded however much ``data`` expands. Exhaust
        the iterator before the next call.

        :raises CompressionError: corrupt input (possibly after some pieces).
        """


# python-snappy (and cramjam under it) is imported by the first snappy
# codec: most connections never negotiate snappy, and a process that never
# sees one (nsqd with no snappy client) is spared its native libraries.
_snappy: Any = None
_cramjam_snappy: Any = None
_framed_errors: Tuple[Type[BaseException], ...] = ()


def _load_snappy() -> None:
    """Import python-snappy (and cramjam's framed decoder) once."""
    global _snappy, _cramjam_snappy, _framed_errors
    if _snappy is not None:
        return
    import snappy

    errors: List[Type[BaseException]] = [snappy.UncompressError, ValueError, OSError]
    try:
        from cramjam import DecompressionError
        from cramjam import snappy as cramjam_snappy
    except ImportError:  # pragma: no cover - python-snappy < 0.7
        pass
    else:
        _cramjam_snappy = cramjam_snappy
        errors.insert(0, DecompressionError)
    _framed_errors = tuple(errors)
    _snappy = snappy


def _decompress_framed_cramjam(framed: bytes) -> bytes:
    return bytes(_cramjam_snappy.decompress(framed))


def _decompress_framed_stream(framed: bytes) -> bytes:
    return bytes(_snappy.StreamDecompressor().decompress(framed))


# python-snappy >= 0.7 is built on cramjam; calling its framed decoder
# directly skips python-snappy's own Python walk over the chunks, which
# has already been done here (about 3x faster on many small chunks).
_decompress_framed: Callable[[bytes], bytes] = (
    _decompress_framed_cramjam if find_spec("cramjam") is not None else _decompress_framed_stream
)


def _check_chunk_piece(chunk: int) -> None:
    if chunk < 1:
        raise ValueError("chunk must be at least 1, not %d" % (chunk,))


class SnappyEncoder:
    """
    Snappy framing-format encoder (Go's ``snappy.NewBufferedWriter`` with a
    ``Flush`` after each write): the stream identifier before the first
    data, then one or more data chunks per :meth:`encode`.
    """

    __slots__ = ("_compressor",)

    def __init__(self) -> None:
        # python-snappy's StreamCompressor writes the identifier once, splits
        # at 65536 bytes, checksums, and sends a chunk uncompressed when
        # snappy does not shrink it: exactly the framing format.
        _load_snappy()
        self._compressor = _snappy.StreamCompressor()

    def encode(self, data: bytes) -> bytes:
        """Framed chunks carrying ``data``; ``b""`` for empty ``data``."""
        if not data:
            return b""
        return self._compressor.add_chunk(data)


class SnappyDecoder:
    """
    Incremental snappy framing-format decoder (Go's ``snappy.NewReader``).

    The stream must start with the stream identifier chunk; every data chunk
    has its CRC-32C checked and may carry at most 65536 bytes; a chunk whose
    length field exceeds what a valid chunk can need is refused before it is
    buffered, so at most one chunk (about 75 KiB) of input is ever held.
    Padding and skippable chunks are discarded as they arrive.
    """

    __slots__ = ("max_output", "_buffer", "_need", "_skip", "_started", "_error")

    def __init__(self, max_output: int = DEFAULT_MAX_OUTPUT) -> None:
        """
        :param max_output: most bytes one :meth:`decode` call may return.
        """
        _load_snappy()
        self.max_output = max_output
        self._buffer = bytearray()
        # Bytes the buffer must hold before scanning it can make progress.
        self._need = 4
        # Bytes of a padding or skippable chunk still to be discarded.
        self._skip = 0
        self._started = False
        self._error: Optional[CompressionError] = None

    def _fail(self, message: str) -> CompressionError:
        self._error = CompressionError("snappy: " + message)
        self._buffer = bytearray()
        return self._error

    def _take(self, data: bytes) -> Tuple[Union[bytes, bytearray], List[Tuple[int, int, int]]]:
        """
        Consume ``data``: check the framing of every chunk it completes and
        keep the incomplete tail.

        :return: the bytes holding the complete data chunks, and the
            ``(start, stop, decoded size)`` of each, in order.
        """
        if self._error is not None:
            raise self._error
        if self._skip:
            if len(data) <= self._skip:
                self._skip -= len(data)
                return b"", []
            data = data[self._skip :]
            self._skip = 0
        source: Union[bytes, bytearray]
        if self._buffer:
            self._buffer += data
            if len(self._buffer) < self._need:
                return b"", []
            source = self._buffer
        else:
            source = data
        spans: List[Tuple[int, int, int]] = []
        add_span = spans.append
        started = self._started
        pos = 0
        end = len(source)
        need = 4
        while end - pos >= 4:
            (header,) = _unpack_chunk_header(source, pos)
            kind = header & 0xFF
            length = header >> 8
            stop = pos + 4 + length
            # The two data chunk types first, with their bounds in one
            # comparison each: this loop runs once per chunk.
            if kind == 0x00:  # compressed data
                if not 4 < length <= _MAX_COMPRESSED_CHUNK or not started:
                    raise self._bad_data_chunk(kind, length, started)
                if stop > end:
                    need = stop - pos
                    break
                size = source[pos + 8]
                if size >= 0x80:
                    # Blocks of 128 bytes and more: a longer varint.
                    size = self._decoded_length(source, pos + 8, stop)
                add_span((pos, stop, size))
            elif kind == 0x01:  # uncompressed data
                if not 4 <= length <= _MAX_UNCOMPRESSED_CHUNK or not started:
                    raise self._bad_data_chunk(kind, length, started)
                if stop > end:
                    need = stop - pos
                    break
                add_span((pos, stop, length - 4))
            elif kind == _CHUNK_STREAM_IDENTIFIER:
                if length != len(_STREAM_MAGIC):
                    raise self._fail("stream identifier chunk of %d bytes" % (length,))
                if stop > end:
                    need = stop - pos
                    break
                if source[pos + 4 : stop] != _STREAM_MAGIC:
                    raise self._fail("bad stream identifier %r" % (bytes(source[pos + 4 : stop]),))
                started = True
            elif kind >= 0x80:
                # Padding (0xfe) and reserved skippable chunks (0x80-0xfd)
                # may be up to 16 MiB: discard them as they stream past.
                if not started:
                    raise self._fail("stream does not start with the stream identifier")
                if stop > end:
                    self._skip = stop - end
                    pos = end
                    break
            else:
                raise self._fail("reserved unskippable chunk type 0x%02x" % (kind,))
            pos = stop
        self._started = started
        self._need = need
        # A fresh buffer for the tail: ``source`` must stay intact for the
        # spans, and a tail is at most one chunk.
        self._buffer = bytearray(source[pos:]) if pos < end else bytearray()
        return source, spans

    def _bad_data_chunk(self, kind: int, length: int, started: bool) -> CompressionError:
        if not started:
            return self._fail("stream does not start with the stream identifier")
        name = "compressed" if kind == 0x00 else "uncompressed"
        if length <= 4:
            return self._fail("%s chunk of %d bytes is too short" % (name, length))
        return self._fail("%s chunk of %d bytes is too long" % (name, length))

    def buffered(self) -> int:
        """How many bytes of an incomplete chunk are held."""
        return len(self._buffer)

    def _decoded_length(self, source: Union[bytes, bytearray], start: int, stop: int) -> int:
        """The uvarint decoded length opening a compressed chunk's block."""
        result = 0
        shift = 0
        for index in range(start, min(stop, start + 5)):
            byte = source[index]
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                if result > MAX_BLOCK_SIZE:
                    raise self._fail("chunk decodes to %d bytes, more than %d" % (result, MAX_BLOCK_SIZE))
                return result
            shift += 7
        raise self._fail("bad decoded length in compressed chunk")

    def _inflate(self, framed: bytes, size: int) -> bytes:
        """Check and decompress ``framed`` (identifier + data chunks)."""
        try:
            out = _decompress_framed(framed)
        except _framed_errors as exc:
            raise self._fail("corrupt chunk (%s)" % (exc,)) from None
        if len(out) != size:
            raise self._fail("chunks decoded to %d bytes, declared %d" % (len(out), size))
        return out

    def decode(self, data: bytes) -> bytes:
        """
        Add received bytes; return the plain bytes of every data chunk they
        complete.

        :raises CompressionError: bad framing, a checksum mismatch, a chunk
            declaring more than 65536 bytes, or more than ``max_output``
            bytes completed by this call.
        """
        source, spans = self._take(data)
        if not spans:
            return b""
        total = 0
        for span in spans:
            total += span[2]
        if total > self.max_output:
            raise self._fail("%d bytes in one read, more than max_output %d" % (total, self.max_output))
        return self._inflate(_frame(source, spans), total)

    def decode_iter(self, data: bytes, chunk: int = MAX_BLOCK_SIZE) -> Iterator[bytes]:
        """
        Like :meth:`decode`, as pieces of at most ``chunk`` bytes. Framing
        errors raise at once; checksum errors when the bad chunk's piece is
        reached.
        """
        _check_chunk_piece(chunk)
        source, spans = self._take(data)
        # Group chunks into pieces now, so that ``source`` may be released
        # and the decoder's state no longer depends on the iterator.
        groups: List[Tuple[bytes, int]] = []
        group: List[Tuple[int, int, int]] = []
        group_size = 0
        for span in spans:
            if group and group_size + span[2] > chunk:
                groups.append((_frame(source, group), group_size))
                group = []
                group_size = 0
            group.append(span)
            group_size += span[2]
        if group:
            groups.append((_frame(source, group), group_size))
        return self._pieces(groups, chunk)

    def _pieces(self, groups: List[Tuple[bytes, int]], chunk: int) -> Iterator[bytes]:
        for framed, size in groups:
            # Empty chunks still have their checksums checked.
            out = self._inflate(framed, size)
            if not size:
                continue
            if size <= chunk:
                yield out
            else:
                # One chunk larger than the piece size.
                view = memoryview(out)
                for start in range(0, size, chunk):
                    yield bytes(view[start : start + chunk])


def _frame(source: Union[bytes, bytearray], spans: List[Tuple[int, int, int]]) -> bytes:
    """A framed stream of the given chunks of ``source``, adjacent ones joined."""
    view = memoryview(source)
    pieces: List[Union[bytes, memoryview]] = [_STREAM_IDENTIFIER]
    start, stop, _ = spans[0]
    for span in spans[1:]:
        if span[0] != stop:
            pieces.append(view[start:stop])
            start = span[0]
        stop = span[1]
    pieces.append(view[start:stop])
    return b"".join(pieces)


class DeflateEncoder:
    """
    Raw DEFLATE encoder (Go's ``flate.NewWriter`` with a ``Flush`` after
    each write): every :meth:`encode` ends with a sync flush.
    """

    __slots__ = ("level", "_compressor")

    def __init__(self, level: int = 6) -> None:
        """
        :param level: 1 (fastest) to 9 (smallest); nsqd's default is 6.
        :raises ValueError: ``level`` outside 1..9.
        """
        if not 1 <= level <= 9:
            raise ValueError("deflate level must be 1 to 9, not %d" % (level,))
        self.level = level
        self._compressor = zlib.compressobj(level, zlib.DEFLATED, -15)

    def encode(self, data: bytes) -> bytes:
        """Compressed ``data`` up to a byte boundary; ``b""`` for empty ``data``."""
        if not data:
            return b""
        compressor = self._compressor
        return compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)


class DeflateDecoder:
    """
    Incremental raw DEFLATE decoder (Go's ``flate.NewReader``). Data after
    the final block of the stream is an error, as the stream is the whole
    rest of the connection.
    """

    __slots__ = ("max_output", "_inflater", "_error")

    def __init__(self, max_output: int = DEFAULT_MAX_OUTPUT) -> None:
        """
        :param max_output: most bytes one :meth:`decode` call may return;
            deflate expands up to about 1000 times, so a server should rather
            use :meth:`decode_iter`.
        """
        self.max_output = max_output
        self._inflater = zlib.decompressobj(-15)
        self._error: Optional[CompressionError] = None

    def _fail(self, message: str) -> CompressionError:
        self._error = CompressionError("deflate: " + message)
        return self._error

    def _check_end(self) -> None:
        if self._inflater.unused_data:
            raise self._fail("data after the end of the stream")

    def decode(self, data: bytes) -> bytes:
        """
        Add received bytes; return all the plain bytes they make available.

        :raises CompressionError: corrupt data, data after the final block,
            or more than ``max_output`` bytes from this call.
        """
        if self._error is not None:
            raise self._error
        limit = self.max_output
        try:
            # Asking for one byte more than allowed tells "exactly at the
            # limit" from "over it" without inflating any further.
            out = self._inflater.decompress(data, limit + 1)
        except zlib.error as exc:
            raise self._fail("corrupt data (%s)" % (exc,)) from None
        if len(out) > limit:
            raise self._fail("more than max_output %d bytes in one read" % (limit,))
        self._check_end()
        return out

    def decode_iter(self, data: bytes, chunk: int = MAX_BLOCK_SIZE) -> Iterator[bytes]:
        """
        Like :meth:`decode`, as pieces of at most ``chunk`` bytes, inflating
        only as the iterator is advanced.
        """
        _check_chunk_piece(chunk)
        if self._error is not None:
            raise self._error
        return self._pieces(data, chunk)

    def _pieces(self, data: bytes, chunk: int) -> Iterator[bytes]:
        inflater = self._inflater
        while True:
            try:
                out = inflater.decompress(data, chunk)
            except zlib.error as exc:
                raise self._fail("corrupt data (%s)" % (exc,)) from None
            if out:
                yield out
            data = inflater.unconsumed_tail
            # A full piece may leave output pending inside zlib even when
            # all input is consumed: ask again until a short piece.
            if not data and len(out) < chunk:
                break
        self._check_end()
