"""
Tests for txnsq.protocol.names: Go nsqd's topic and channel name rules.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from txnsq.protocol.names import (
    MAX_NAME_LENGTH,
    is_ephemeral,
    is_valid_channel_name,
    is_valid_name,
    is_valid_topic_name,
)


class ValidNameTests(SynchronousTestCase):
    """Names are 1-64 bytes of [.a-zA-Z0-9_-], optionally ending in #ephemeral."""

    def test_valid(self) -> None:
        """Letters, digits, dot, underscore and dash are allowed."""
        for name in ["t", "topic", "a.b_c-d", "ABC123", "-", ".", "_", "0"]:
            self.assertTrue(is_valid_topic_name(name), name)
            self.assertTrue(is_valid_channel_name(name), name)

    def test_invalid_characters(self) -> None:
        """Other characters make the name invalid."""
        for name in ["bad!topic", "bad/channel", "a b", "a:b", "a\tb", "caf\u00e9", "a#b", "#ephemeral", ""]:
            self.assertFalse(is_valid_topic_name(name), repr(name))
            self.assertFalse(is_valid_channel_name(name), repr(name))

    def test_length_limit(self) -> None:
        """64 characters are allowed, 65 are not."""
        self.assertEqual(MAX_NAME_LENGTH, 64)
        self.assertTrue(is_valid_topic_name("a" * 64))
        self.assertFalse(is_valid_topic_name("a" * 65))

    def test_ephemeral_counts_towards_length(self) -> None:
        """The #ephemeral suffix is part of the 64 characters."""
        self.assertTrue(is_valid_channel_name("a" * 54 + "#ephemeral"))
        self.assertFalse(is_valid_channel_name("a" * 55 + "#ephemeral"))

    def test_ephemeral_suffix(self) -> None:
        """#ephemeral is valid only as the suffix of a non-empty name."""
        self.assertTrue(is_valid_topic_name("t#ephemeral"))
        self.assertTrue(is_valid_channel_name("c#ephemeral"))
        self.assertFalse(is_valid_topic_name("t#ephemeralx"))
        self.assertFalse(is_valid_topic_name("t#ephemeral#ephemeral"))
        self.assertFalse(is_valid_topic_name("t#Ephemeral"))

    def test_trailing_newline(self) -> None:
        """A trailing newline is not ignored (Go's $ is the end of the text)."""
        self.assertFalse(is_valid_topic_name("topic\n"))
        self.assertFalse(is_valid_name(b"topic\n"))

    def test_bytes(self) -> None:
        """Names may be given as bytes, as they come off the wire."""
        self.assertTrue(is_valid_name(b"topic#ephemeral"))
        self.assertFalse(is_valid_name(b"bad\xff"))
        self.assertFalse(is_valid_name(b""))


class EphemeralTests(SynchronousTestCase):
    """is_ephemeral recognises the #ephemeral suffix."""

    def test_suffix(self) -> None:
        """Names ending in #ephemeral are ephemeral, others are not."""
        self.assertTrue(is_ephemeral("t#ephemeral"))
        self.assertTrue(is_ephemeral(b"c#ephemeral"))
        self.assertFalse(is_ephemeral("t"))
        self.assertFalse(is_ephemeral("t#ephemeralx"))
        self.assertFalse(is_ephemeral(b"ephemeral"))
