"""
Tests for txnsq.protocol.compression: snappy framing-format and raw deflate
stream codecs.

Chunks are also built and checked by hand here, with a table CRC-32C, so
that the codec is held to the framing spec and not only to python-snappy.
"""

from __future__ import annotations

import io
import random
import struct
import zlib
from typing import Iterable, List, Tuple

import snappy
from twisted.trial.unittest import SynchronousTestCase

from txnsq.protocol import compression
from txnsq.protocol.compression import (
    MAX_BLOCK_SIZE,
    CompressionError,
    Decoder,
    DeflateDecoder,
    DeflateEncoder,
    Encoder,
    SnappyDecoder,
    SnappyEncoder,
)

IDENTIFIER = b"\xff\x06\x00\x00sNaPpY"

# Sizes around the 64 KiB chunk limit, and well past it.
SIZES = [0, 1, 100, MAX_BLOCK_SIZE - 1, MAX_BLOCK_SIZE, MAX_BLOCK_SIZE + 1, 2 * MAX_BLOCK_SIZE, 1024 * 1024]


def _crc_table() -> List[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), bit by table, independent of any library."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    """The framing format's masked checksum of ``data``."""
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def chunk(kind: int, body: bytes) -> bytes:
    """A chunk of type ``kind`` with ``body`` after its header."""
    return struct.pack("<I", kind | len(body) << 8) + body


def uncompressed_chunk(data: bytes, crc: int = -1) -> bytes:
    """An uncompressed data chunk of ``data`` (with a correct checksum unless given)."""
    if crc < 0:
        crc = masked_crc(data)
    return chunk(0x01, struct.pack("<I", crc) + data)


def compressed_chunk(data: bytes) -> bytes:
    """A compressed data chunk of ``data`` with a correct checksum."""
    return chunk(0x00, struct.pack("<I", masked_crc(data)) + snappy.compress(data))


def parse_chunks(stream: bytes) -> List[Tuple[int, bytes]]:
    """Split a framed stream into ``(type, body)`` pairs; it must end on a chunk."""
    chunks = []
    pos = 0
    while pos < len(stream):
        (header,) = struct.unpack_from("<I", stream, pos)
        end = pos + 4 + (header >> 8)
        assert end <= len(stream), "truncated chunk"
        chunks.append((header & 0xFF, stream[pos + 4 : end]))
        pos = end
    return chunks


def sample(size: int, seed: int = 0) -> bytes:
    """``size`` bytes that are partly compressible, partly random."""
    rng = random.Random(seed)
    text = b"PUB topic\n" + bytes(rng.getrandbits(8) for _ in range(64))
    data = (text * (size // len(text) + 1))[: size // 2]
    return data + rng.randbytes(size - len(data))


def feed_bytewise(decoder: Decoder, data: bytes) -> bytes:
    """Feed ``data`` one byte at a time, joining the output."""
    return b"".join(decoder.decode(data[i : i + 1]) for i in range(len(data)))


def deflate_bomb(size: int) -> bytes:
    """``size`` zero bytes, raw-deflated at level 9 and sync-flushed."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    return compressor.compress(b"\x00" * size) + compressor.flush(zlib.Z_SYNC_FLUSH)


class Crc32cTests(SynchronousTestCase):
    """The tests' own CRC-32C is the Castagnoli one."""

    def test_check_value(self) -> None:
        """CRC-32C of "123456789" is 0xE3069283 (RFC 3720's check value)."""
        self.assertEqual(crc32c(b"123456789"), 0xE3069283)


class InterfaceTests(SynchronousTestCase):
    """Every codec satisfies the common Encoder / Decoder protocols."""

    def test_protocols(self) -> None:
        """Both encoders are Encoders and both decoders are Decoders."""
        for encoder in (SnappyEncoder(), DeflateEncoder(6)):
            self.assertIsInstance(encoder, Encoder)
        for decoder in (SnappyDecoder(), DeflateDecoder(1024)):
            self.assertIsInstance(decoder, Decoder)

    def test_compression_error_is_value_error(self) -> None:
        """CompressionError is a ValueError."""
        self.assertTrue(issubclass(CompressionError, ValueError))

    def test_decode_iter_chunk_positive(self) -> None:
        """A decode_iter piece size below 1 is refused with ValueError."""
        for decoder in (SnappyDecoder(), DeflateDecoder()):
            self.assertRaises(ValueError, decoder.decode_iter, b"", 0)


class SnappyEncoderTests(SynchronousTestCase):
    """SnappyEncoder writes the snappy framing format."""

    def test_empty(self) -> None:
        """Encoding nothing writes nothing, not even the stream identifier."""
        encoder = SnappyEncoder()
        self.assertEqual(encoder.encode(b""), b"")
        self.assertTrue(encoder.encode(b"x").startswith(IDENTIFIER))

    def test_identifier_once(self) -> None:
        """The stream identifier opens the first write only."""
        encoder = SnappyEncoder()
        first = encoder.encode(b"hello")
        second = encoder.encode(b"hello")
        self.assertTrue(first.startswith(IDENTIFIER))
        self.assertEqual(first[len(IDENTIFIER) :], second)
        self.assertEqual([kind for kind, _ in parse_chunks(first)], [0xFF, 0x01])

    def test_chunks_follow_spec(self) -> None:
        """Each write is whole data chunks of at most 64 KiB with correct masked CRC-32C."""
        encoder = SnappyEncoder()
        encoder.encode(b"start")
        for size in SIZES[1:]:
            data = sample(size, seed=size)
            decoded = []
            for kind, body in parse_chunks(encoder.encode(data)):
                self.assertIn(kind, (0x00, 0x01))
                block = body[4:] if kind == 0x01 else snappy.uncompress(body[4:])
                self.assertLessEqual(len(block), MAX_BLOCK_SIZE)
                self.assertEqual(struct.unpack("<I", body[:4])[0], masked_crc(block))
                decoded.append(block)
            self.assertEqual(b"".join(decoded), data)

    def test_compressible_data_shrinks(self) -> None:
        """Compressible data is sent in compressed chunks."""
        out = SnappyEncoder().encode(b"a" * 100000)
        self.assertLess(len(out), 10000)
        self.assertEqual({kind for kind, _ in parse_chunks(out)}, {0xFF, 0x00})

    def test_python_snappy_decodes(self) -> None:
        """python-snappy's StreamDecompressor reads what SnappyEncoder writes."""
        encoder = SnappyEncoder()
        decompressor = snappy.StreamDecompressor()
        for size in SIZES:
            data = sample(size, seed=size)
            self.assertEqual(decompressor.decompress(encoder.encode(data)), data)
        out = io.BytesIO()
        data = sample(300000)
        snappy.stream_decompress(io.BytesIO(SnappyEncoder().encode(data)), out)
        self.assertEqual(out.getvalue(), data)


class SnappyDecoderTests(SynchronousTestCase):
    """SnappyDecoder reads the snappy framing format incrementally and strictly."""

    def assertCorrupt(self, decoder: SnappyDecoder, data: bytes, text: str) -> None:
        """Decoding ``data`` raises CompressionError mentioning ``text``, then again for any input."""
        error = self.assertRaises(CompressionError, decoder.decode, data)
        self.assertIn(text, str(error))
        self.assertRaises(CompressionError, decoder.decode, b"")

    def test_round_trip(self) -> None:
        """Whatever SnappyEncoder writes decodes to the same bytes, write by write."""
        encoder = SnappyEncoder()
        decoder = SnappyDecoder()
        for size in SIZES:
            data = sample(size, seed=size)
            self.assertEqual(decoder.decode(encoder.encode(data)), data)
        self.assertEqual(decoder.buffered(), 0)

    def test_random_binary(self) -> None:
        """Random writes of random bytes survive the round trip in any split."""
        rng = random.Random(7)
        encoder = SnappyEncoder()
        writes = [rng.randbytes(rng.randrange(0, 3000)) for _ in range(50)]
        stream = b"".join(encoder.encode(write) for write in writes)
        decoder = SnappyDecoder()
        out = []
        pos = 0
        while pos < len(stream):
            step = rng.randrange(1, 2000)
            out.append(decoder.decode(stream[pos : pos + step]))
            pos += step
        self.assertEqual(b"".join(out), b"".join(writes))

    def test_bytewise(self) -> None:
        """Fed one byte at a time, the decoder waits for each whole chunk."""
        data = sample(3 * MAX_BLOCK_SIZE + 5)
        stream = SnappyEncoder().encode(data)
        self.assertEqual(feed_bytewise(SnappyDecoder(), stream), data)

    def test_truncated_waits(self) -> None:
        """A partial chunk gives no output and no error until the rest arrives."""
        stream = SnappyEncoder().encode(b"hello world" * 100)
        decoder = SnappyDecoder()
        self.assertEqual(decoder.decode(stream[:-1]), b"")
        self.assertEqual(decoder.buffered(), len(stream) - len(IDENTIFIER) - 1)
        self.assertEqual(decoder.decode(stream[-1:]), b"hello world" * 100)
        self.assertEqual(decoder.buffered(), 0)

    def test_python_snappy_encoded(self) -> None:
        """What python-snappy's StreamCompressor writes decodes."""
        compressor = snappy.StreamCompressor()
        decoder = SnappyDecoder()
        for size in SIZES:
            data = sample(size, seed=size)
            self.assertEqual(decoder.decode(compressor.add_chunk(data)), data)
        out = io.BytesIO()
        data = sample(300000)
        snappy.stream_compress(io.BytesIO(data), out)
        self.assertEqual(SnappyDecoder().decode(out.getvalue()), data)

    def test_hand_built_chunks(self) -> None:
        """Chunks built from the spec decode: compressed, uncompressed, empty."""
        stream = (
            IDENTIFIER
            + uncompressed_chunk(b"plain ")
            + compressed_chunk(b"squeezed " * 10)
            + uncompressed_chunk(b"")
            + uncompressed_chunk(b"x" * MAX_BLOCK_SIZE)
            + compressed_chunk(b"y" * MAX_BLOCK_SIZE)
        )
        self.assertEqual(
            SnappyDecoder().decode(stream),
            b"plain " + b"squeezed " * 10 + b"x" * MAX_BLOCK_SIZE + b"y" * MAX_BLOCK_SIZE,
        )

    def test_padding_and_skippable(self) -> None:
        """Padding and skippable chunks are ignored, even large ones, without buffering them."""
        big_skippable = chunk(0x80, b"s" * 1000000)
        stream = (
            IDENTIFIER
            + chunk(0xFE, b"\x00" * 10)
            + uncompressed_chunk(b"a")
            + big_skippable
            + chunk(0xFD, b"")
            + uncompressed_chunk(b"b")
        )
        decoder = SnappyDecoder()
        out = []
        for pos in range(0, len(stream), 1000):
            out.append(decoder.decode(stream[pos : pos + 1000]))
            self.assertLess(decoder.buffered(), 1000)
        self.assertEqual(b"".join(out), b"ab")

    def test_repeated_identifier(self) -> None:
        """Concatenated streams, each with its identifier, decode as one."""
        stream = SnappyEncoder().encode(b"one") + SnappyEncoder().encode(b"two")
        self.assertEqual(SnappyDecoder().decode(stream), b"onetwo")

    def test_corrupt_crc(self) -> None:
        """A checksum that does not match the data is refused."""
        good = uncompressed_chunk(b"payload")
        bad = uncompressed_chunk(b"payload", masked_crc(b"payload") ^ 1)
        self.assertEqual(SnappyDecoder().decode(IDENTIFIER + good), b"payload")
        self.assertCorrupt(SnappyDecoder(), IDENTIFIER + bad, "checksum")

    def test_corrupt_crc_compressed(self) -> None:
        """A flipped bit in an encoder's compressed chunk is refused."""
        stream = bytearray(SnappyEncoder().encode(b"abc" * 1000))
        stream[-2] ^= 0x01
        self.assertRaises(CompressionError, SnappyDecoder().decode, bytes(stream))

    def test_corrupt_empty_chunk_crc_in_decode_iter(self) -> None:
        """decode_iter checks the checksum of an empty chunk too."""
        decoder = SnappyDecoder()
        pieces = decoder.decode_iter(IDENTIFIER + uncompressed_chunk(b"", 1))
        self.assertRaises(CompressionError, list, pieces)

    def test_corrupt_block(self) -> None:
        """A compressed chunk whose snappy block is garbage is refused."""
        body = struct.pack("<I", masked_crc(b"abc")) + b"\x03\xff\xff\xff"
        self.assertRaises(CompressionError, SnappyDecoder().decode, IDENTIFIER + chunk(0x00, body))

    def test_reserved_chunk_types(self) -> None:
        """Reserved unskippable chunk types 0x02-0x7f are refused."""
        for kind in (0x02, 0x42, 0x7F):
            self.assertCorrupt(SnappyDecoder(), IDENTIFIER + chunk(kind, b"data"), "0x%02x" % (kind,))

    def test_bad_type_refused_from_header(self) -> None:
        """A bad chunk type is refused as soon as its header arrives."""
        self.assertCorrupt(SnappyDecoder(), IDENTIFIER + b"\x05\xff\xff\xff", "0x05")

    def test_must_start_with_identifier(self) -> None:
        """Data or padding before the stream identifier is refused."""
        self.assertCorrupt(SnappyDecoder(), uncompressed_chunk(b"x"), "stream identifier")
        self.assertCorrupt(SnappyDecoder(), chunk(0xFE, b""), "stream identifier")

    def test_bad_identifier(self) -> None:
        """A stream identifier of the wrong length or text is refused."""
        self.assertCorrupt(SnappyDecoder(), chunk(0xFF, b"sNaPpYx"), "identifier")
        self.assertCorrupt(SnappyDecoder(), chunk(0xFF, b"SnApPy"), "identifier")

    def test_oversize_chunk_length(self) -> None:
        """A chunk longer than any valid one is refused from its header, before its data."""
        compressed = struct.pack("<I", 0x00 | (76494 + 1) << 8)
        uncompressed = struct.pack("<I", 0x01 | (MAX_BLOCK_SIZE + 5) << 8)
        self.assertCorrupt(SnappyDecoder(), IDENTIFIER + compressed, "too long")
        self.assertCorrupt(SnappyDecoder(), IDENTIFIER + uncompressed, "too long")

    def test_largest_chunk_lengths(self) -> None:
        """The longest valid chunk lengths are waited for, not refused."""
        decoder = SnappyDecoder()
        self.assertEqual(decoder.decode(IDENTIFIER + struct.pack("<I", 0x01 | (MAX_BLOCK_SIZE + 4) << 8)), b"")
        decoder = SnappyDecoder()
        self.assertEqual(decoder.decode(IDENTIFIER + struct.pack("<I", 0x00 | 76494 << 8)), b"")

    def test_short_chunks(self) -> None:
        """Data chunks too short to hold a checksum (and a block) are refused."""
        self.assertCorrupt(SnappyDecoder(), IDENTIFIER + chunk(0x01, b"abc"), "too short")
        self.assertCorrupt(SnappyDecoder(), IDENTIFIER + chunk(0x00, b"abcd"), "too short")

    def test_oversize_decoded_length(self) -> None:
        """A compressed chunk that would decode to more than 64 KiB is refused."""
        data = b"z" * (MAX_BLOCK_SIZE + 1)
        body = struct.pack("<I", masked_crc(data)) + snappy.compress(data)
        self.assertCorrupt(SnappyDecoder(), IDENTIFIER + chunk(0x00, body), "65537")

    def test_bad_decoded_length(self) -> None:
        """A compressed chunk whose length varint does not end is refused."""
        body = b"\x00\x00\x00\x00" + b"\xff" * 6
        self.assertCorrupt(SnappyDecoder(), IDENTIFIER + chunk(0x00, body), "decoded length")

    def test_max_output(self) -> None:
        """decode refuses to return more than max_output bytes from one call."""
        stream = SnappyEncoder().encode(b"q" * 5000)
        self.assertEqual(SnappyDecoder(max_output=5000).decode(stream), b"q" * 5000)
        self.assertCorrupt(SnappyDecoder(max_output=4999), stream, "max_output")

    def test_decode_iter_bounded(self) -> None:
        """decode_iter yields pieces of at most ``chunk`` bytes that join to the data."""
        data = sample(1024 * 1024)
        stream = SnappyEncoder().encode(data)
        for size in (MAX_BLOCK_SIZE, 1000, 100000):
            pieces = list(SnappyDecoder(max_output=1).decode_iter(stream, size))
            self.assertLessEqual(max(len(piece) for piece in pieces), size)
            self.assertNotIn(b"", pieces)
            self.assertEqual(b"".join(pieces), data)

    def test_decode_iter_incremental(self) -> None:
        """decode_iter keeps incomplete chunks for the next call, like decode."""
        data = sample(200000)
        stream = SnappyEncoder().encode(data)
        decoder = SnappyDecoder()
        out: List[bytes] = []
        for pos in range(0, len(stream), 777):
            out.extend(decoder.decode_iter(stream[pos : pos + 777], 4096))
        self.assertEqual(b"".join(out), data)

    def test_python_snappy_backend(self) -> None:
        """With python-snappy's own stream decoder as back end the decoder behaves the same."""
        self.patch(compression, "_decompress_framed", compression._decompress_framed_stream)
        data = sample(200000)
        self.assertEqual(SnappyDecoder().decode(SnappyEncoder().encode(data)), data)
        bad = uncompressed_chunk(b"payload", 12345)
        self.assertRaises(CompressionError, SnappyDecoder().decode, IDENTIFIER + bad)


class DeflateEncoderTests(SynchronousTestCase):
    """DeflateEncoder writes sync-flushed raw DEFLATE."""

    def test_levels(self) -> None:
        """Levels 1 to 9 are accepted, others refused with ValueError."""
        for level in range(1, 10):
            self.assertEqual(DeflateEncoder(level).level, level)
        for level in (-1, 0, 10):
            self.assertRaises(ValueError, DeflateEncoder, level)

    def test_sync_flush(self) -> None:
        """Each write ends on a sync-flush marker and decodes by itself with raw zlib."""
        encoder = DeflateEncoder(6)
        inflater = zlib.decompressobj(-15)
        for size in SIZES[1:]:
            data = sample(size, seed=size)
            out = encoder.encode(data)
            self.assertTrue(out.endswith(b"\x00\x00\xff\xff"))
            self.assertEqual(inflater.decompress(out), data)

    def test_empty(self) -> None:
        """Encoding nothing writes nothing."""
        self.assertEqual(DeflateEncoder(1).encode(b""), b"")


class DeflateDecoderTests(SynchronousTestCase):
    """DeflateDecoder reads raw DEFLATE incrementally, with bounded output."""

    def test_round_trip(self) -> None:
        """Whatever DeflateEncoder writes decodes to the same bytes, write by write, at any level."""
        for level in (1, 6, 9):
            encoder = DeflateEncoder(level)
            decoder = DeflateDecoder(max_output=2 * 1024 * 1024)
            for size in SIZES:
                data = sample(size, seed=size)
                self.assertEqual(decoder.decode(encoder.encode(data)), data)

    def test_zlib_encoded(self) -> None:
        """Sync-flushed raw DEFLATE from zlib (as Go's flate writes) decodes."""
        compressor = zlib.compressobj(5, zlib.DEFLATED, -15)
        decoder = DeflateDecoder()
        for size in SIZES:
            data = sample(size, seed=size)
            self.assertEqual(decoder.decode(compressor.compress(data) + compressor.flush(zlib.Z_SYNC_FLUSH)), data)

    def test_random_binary_bytewise(self) -> None:
        """Random bytes survive the round trip fed one byte at a time."""
        rng = random.Random(3)
        data = rng.randbytes(20000) + b"\x00" * 20000
        self.assertEqual(feed_bytewise(DeflateDecoder(), DeflateEncoder(6).encode(data)), data)

    def test_truncated_waits(self) -> None:
        """A partial stream gives what it can and the rest once it arrives."""
        data = sample(50000)
        stream = DeflateEncoder(6).encode(data)
        decoder = DeflateDecoder()
        head = decoder.decode(stream[: len(stream) // 2])
        self.assertTrue(data.startswith(head))
        self.assertEqual(head + decoder.decode(stream[len(stream) // 2 :]), data)

    def test_corrupt(self) -> None:
        """Invalid DEFLATE data raises CompressionError, then again for any input."""
        decoder = DeflateDecoder()
        error = self.assertRaises(CompressionError, decoder.decode, b"\xff\xff\xff\xff")
        self.assertIn("corrupt", str(error))
        self.assertRaises(CompressionError, decoder.decode, DeflateEncoder(1).encode(b"x"))

    def test_corrupt_decode_iter(self) -> None:
        """decode_iter raises CompressionError on invalid data."""
        decoder = DeflateDecoder()
        self.assertRaises(CompressionError, list, decoder.decode_iter(b"\xff\xff\xff\xff"))
        self.assertRaises(CompressionError, decoder.decode_iter, b"")

    def test_data_after_end(self) -> None:
        """Bytes after the stream's final block are refused."""
        compressor = zlib.compressobj(6, zlib.DEFLATED, -15)
        final = compressor.compress(b"last") + compressor.flush()
        decoder = DeflateDecoder()
        self.assertEqual(decoder.decode(final), b"last")
        self.assertRaises(CompressionError, decoder.decode, b"more")
        self.assertRaises(CompressionError, DeflateDecoder().decode, final + b"x")
        self.assertRaises(CompressionError, list, DeflateDecoder().decode_iter(final + b"x"))

    def test_max_output(self) -> None:
        """decode returns up to max_output bytes from one call and refuses more."""
        stream = DeflateEncoder(6).encode(b"q" * 5000)
        self.assertEqual(DeflateDecoder(max_output=5000).decode(stream), b"q" * 5000)
        error = self.assertRaises(CompressionError, DeflateDecoder(max_output=4999).decode, stream)
        self.assertIn("max_output", str(error))

    def test_bomb_decode(self) -> None:
        """10 MB of compressed zeros exceed a 1 MiB max_output in one decode call."""
        self.assertRaises(CompressionError, DeflateDecoder(max_output=1024 * 1024).decode, deflate_bomb(10**7))

    def test_bomb_decode_iter(self) -> None:
        """decode_iter turns 10 MB of compressed zeros into pieces of at most the chunk size."""
        bomb = deflate_bomb(10**7)
        self.assertLess(len(bomb), 20000)
        decoder = DeflateDecoder(max_output=1)
        total = 0
        for piece in decoder.decode_iter(bomb):
            self.assertTrue(0 < len(piece) <= MAX_BLOCK_SIZE)
            self.assertEqual(piece.count(0), len(piece))
            total += len(piece)
        self.assertEqual(total, 10**7)
        self.assertEqual(list(decoder.decode_iter(DeflateEncoder(1).encode(b"next"), 3)), [b"nex", b"t"])

    def test_decode_iter_exact_pieces(self) -> None:
        """Output that ends exactly on a piece boundary is complete, with no empty piece."""
        data = sample(4096 * 8)
        pieces = list(DeflateDecoder().decode_iter(DeflateEncoder(6).encode(data), 4096))
        self.assertEqual([len(piece) for piece in pieces], [4096] * 8)
        self.assertEqual(b"".join(pieces), data)


def _writes(encoder: Encoder, decoder: Decoder, writes: Iterable[bytes]) -> bytes:
    return b"".join(decoder.decode(encoder.encode(write)) for write in writes)


class PairTests(SynchronousTestCase):
    """An encoder and a decoder of the same kind form a byte pipe."""

    def test_many_small_writes(self) -> None:
        """Many small writes arrive intact through either codec."""
        writes = [b"%d" % (i,) * (i % 50) for i in range(2000)]
        for encoder, decoder in ((SnappyEncoder(), SnappyDecoder()), (DeflateEncoder(6), DeflateDecoder())):
            self.assertEqual(_writes(encoder, decoder, writes), b"".join(writes))
