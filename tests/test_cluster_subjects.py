"""Tests for :mod:`txnsq.cluster.subjects`: NATS subject matching."""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from txnsq.cluster.subjects import is_literal, subject_matches, valid_subject


class SubjectMatchTests(SynchronousTestCase):
    """subject_matches follows NATS' wildcard rules."""

    def test_literal(self) -> None:
        """A literal pattern matches only the same subject."""
        self.assertTrue(subject_matches("a.b", "a.b"))
        self.assertFalse(subject_matches("a.b", "a.b.c"))
        self.assertFalse(subject_matches("a.b", "a"))

    def test_star(self) -> None:
        """``*`` matches exactly one token."""
        self.assertTrue(subject_matches("a.*", "a.b"))
        self.assertTrue(subject_matches("*.b", "a.b"))
        self.assertFalse(subject_matches("a.*", "a.b.c"))
        self.assertFalse(subject_matches("a.*", "a"))

    def test_full_wildcard(self) -> None:
        """``>`` matches one or more trailing tokens."""
        self.assertTrue(subject_matches("nsq.>", "nsq.orders"))
        self.assertTrue(subject_matches("nsq.>", "nsq.orders.eu"))
        self.assertFalse(subject_matches("nsq.>", "nsq"))
        self.assertTrue(subject_matches(">", "x"))
        self.assertTrue(subject_matches("*.>", "a.b"))
        self.assertFalse(subject_matches("*.>", "a"))

    def test_wildcard_characters_inside_tokens(self) -> None:
        """``*`` or ``>`` inside a longer token is a literal character."""
        self.assertFalse(subject_matches("a.b*", "a.bc"))
        self.assertTrue(is_literal("a.b*"))
        self.assertFalse(is_literal("a.*"))

    def test_valid_subject(self) -> None:
        """Empty tokens, spaces and a non-final ``>`` are invalid."""
        self.assertTrue(valid_subject("nsq.>"))
        self.assertFalse(valid_subject("nsq.>", wildcards=False))
        self.assertFalse(valid_subject("a..b"))
        self.assertFalse(valid_subject("a b"))
        self.assertFalse(valid_subject(">.a"))
        self.assertFalse(valid_subject(""))
