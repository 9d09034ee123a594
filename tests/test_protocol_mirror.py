"""Tests for :mod:`txnsq.protocol.mirror`: the records mirrored topics exchange."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from txnsq.protocol.message import encode_message

from txnsq.protocol.mirror import (
    OP_ANSWER_END,
    OP_FINISHED_APART,
    OP_GROUP,
    OP_LIST_END,
    OP_TAKEN,
    OP_CHANNEL_CREATE,
    OP_FIN,
    OP_MESSAGES,
    MirrorDecodeError,
    PackedItems,
    RecordBuilder,
    decode_ack,
    decode_delay_item,
    decode_records,
    encode_ack,
    encode_delay_item,
)


class RecordBuilderTests(SynchronousTestCase):
    """Building and decoding data payloads."""

    def test_round_trip(self) -> None:
        """Records come back in order with their topic, channel and items."""
        builder = RecordBuilder()
        builder.add_one(OP_MESSAGES, "t", "", b"m1")
        builder.add(OP_CHANNEL_CREATE, "t", "c", [])
        builder.add_one(OP_FIN, "t", "c", b"0" * 16)
        seq, records = decode_records(builder.encode(7))
        self.assertEqual(seq, 7)
        self.assertEqual(
            records,
            [
                (OP_MESSAGES, "t", "", [b"m1"]),
                (OP_CHANNEL_CREATE, "t", "c", []),
                (OP_FIN, "t", "c", [b"0" * 16]),
            ],
        )
        self.assertFalse(builder)

    def test_runs_merged(self) -> None:
        """Consecutive records of one op, topic and channel are one record."""
        builder = RecordBuilder()
        builder.add_one(OP_MESSAGES, "t", "", b"a")
        builder.add(OP_MESSAGES, "t", "", [b"b", b"c"])
        builder.add_one(OP_MESSAGES, "u", "", b"d")
        _, records = decode_records(builder.encode(1))
        self.assertEqual(
            records, [(OP_MESSAGES, "t", "", [b"a", b"b", b"c"]), (OP_MESSAGES, "u", "", [b"d"])]
        )
        self.assertEqual(builder.count, 0)

    def test_truncated(self) -> None:
        """A payload cut short, or naming an unknown op, is MirrorDecodeError."""
        builder = RecordBuilder()
        builder.add_one(OP_MESSAGES, "t", "", b"message")
        payload = builder.encode(1)
        for cut in range(1, len(payload)):
            if cut == 8:
                continue  # the sequence number alone: no records
            self.assertRaises(MirrorDecodeError, decode_records, payload[:cut])
        self.assertRaises(MirrorDecodeError, decode_records, payload[:8] + b"Z" + payload[9:])

    def test_ack(self) -> None:
        """An ack is the 8-byte sequence number; other sizes are refused."""
        self.assertEqual(decode_ack(encode_ack(12345)), 12345)
        self.assertRaises(MirrorDecodeError, decode_ack, b"123")

    def test_delay_item(self) -> None:
        """A delayed item carries its delay in ms before the data."""
        self.assertEqual(decode_delay_item(encode_delay_item(1500, b"x")), (1500, b"x"))
        self.assertRaises(MirrorDecodeError, decode_delay_item, b"12")


class ExchangeRecordTests(SynchronousTestCase):
    """The fail-back exchange's records use the data payload's layout."""

    def test_exchange_round_trip(self) -> None:
        """G, T, Y, A and K records decode as sent."""
        builder = RecordBuilder()
        builder.add(OP_GROUP, "", "", [b"epoch1"])
        builder.add(OP_TAKEN, "t", "c", [b"1" * 16, b"2" * 16])
        builder.add(OP_LIST_END, "", "", [])
        builder.add(OP_FINISHED_APART, "t", "c", [b"1" * 16])
        builder.add(OP_ANSWER_END, "", "", [])
        seq, records = decode_records(builder.encode(0))
        self.assertEqual(seq, 0)
        self.assertEqual(
            [op for op, _, _, _ in records],
            [OP_GROUP, OP_TAKEN, OP_LIST_END, OP_FINISHED_APART, OP_ANSWER_END],
        )
        self.assertEqual(records[1], (OP_TAKEN, "t", "c", [b"1" * 16, b"2" * 16]))


class PackedItemsTests(SynchronousTestCase):
    """Records decoded with their items left in the payload."""

    def encoded(self) -> bytes:
        builder = RecordBuilder()
        # Fixed layout (one size), then sizes that differ, then none.
        same = [encode_message(1, 0, b"%016d" % (n,), b"x" * 5) for n in range(3)]
        mixed = [encode_message(1, 0, b"%016d" % (n,), b"y" * n) for n in range(4)]
        builder.add(OP_MESSAGES, "t", "", same)
        builder.add(OP_MESSAGES, "u", "c", mixed)
        builder.add(OP_FIN, "t", "c", [b"%016d" % (n,) for n in range(2)])
        builder.add(OP_CHANNEL_CREATE, "t", "d", [])
        builder.add(OP_MESSAGES, "v", "", [b"", b""])
        return builder.encode(3)

    def test_same_as_lists(self) -> None:
        """Unpacked, the items are those a plain decode gives, in order."""
        payload = self.encoded()
        seq, plain = decode_records(payload)
        packed_seq, packed = decode_records(payload, packed=True)
        self.assertEqual(packed_seq, seq)
        self.assertEqual(len(packed), len(plain))
        for (op, topic, channel, items), found in zip(plain, packed):
            self.assertEqual(found[:3], (op, topic, channel))
            self.assertEqual(len(found[3]), len(items))
            self.assertEqual(list(found[3]), items)
            if items:
                self.assertIsInstance(found[3], PackedItems)
                self.assertEqual(found[3][-1], items[-1])
                self.assertEqual(list(found[3][1:]), items[1:])
                self.assertEqual(found[3].size(), sum(map(len, items)))

    def test_message_ids(self) -> None:
        """message_ids gives each message's id, whether the messages are of one size or not."""
        _, records = decode_records(self.encoded(), packed=True)
        for index in (0, 1):
            items = records[index][3]
            assert isinstance(items, PackedItems)
            self.assertEqual(list(items.message_ids()), [data[10:26] for data in items])
        self.assertEqual(
            list(records[1][3].message_ids()),  # type: ignore[attr-defined]
            [b"%016d" % (n,) for n in range(4)],
        )

    def test_truncated(self) -> None:
        """Packed decoding refuses what a plain decode refuses (items past the end)."""
        payload = self.encoded()
        refused = 0
        for cut in range(9, len(payload)):
            try:
                decode_records(payload[:cut])
            except MirrorDecodeError:
                refused += 1
                self.assertRaises(MirrorDecodeError, decode_records, payload[:cut], True)
            else:
                # Cut at a record's end: the records before it.
                decode_records(payload[:cut], True)
        self.assertGreater(refused, len(payload) - 20)
