"""Tests for txnsq.protocol.go_regexp: Go (RE2) patterns run by Python's re."""

from __future__ import annotations

from typing import List

from twisted.trial.unittest import SynchronousTestCase

from txnsq.protocol.go_regexp import GoRegexpError, compile_go_regexp


class GoRegexpTests(SynchronousTestCase):
    """compile_go_regexp matches what Go's regexp matches."""

    def assertMatches(self, pattern: str, matching: List[str], other: List[str]) -> None:
        compiled = compile_go_regexp(pattern)
        for text in matching:
            self.assertIsNotNone(compiled.search(text), (pattern, text))
        for text in other:
            self.assertIsNone(compiled.search(text), (pattern, text))

    def test_unanchoredSearch(self) -> None:
        """A pattern matches anywhere in the name, as Go's MatchString."""
        self.assertMatches("foo", ["foo", "xfoox", "afoo"], ["fo", "bar"])

    def test_anchors(self) -> None:
        """^ and $ (and Go's \\z) anchor the match to the whole name."""
        self.assertMatches("^foo$", ["foo"], ["xfoo", "foox"])
        self.assertMatches("^foo\\z", ["foo"], ["foox"])
        self.assertMatches("\\Afoo", ["foo"], ["xfoo"])

    def test_emptyPatternMatchesEverything(self) -> None:
        """The empty pattern matches every name, the empty one included."""
        self.assertMatches("", ["", "anything"], [])

    def test_flagsMidPattern(self) -> None:
        """A (?i) after the start applies to the rest of its group, across |."""
        self.assertMatches("^a(?i)b$|^c$", ["aB", "ab", "C"], ["AB"])
        self.assertMatches("^(a(?i)b|c)d$", ["aBd", "Cd"], ["CD", "ABd"])
        self.assertMatches("(?i)^TOPIC$", ["topic", "Topic"], ["topics"])

    def test_scopedAndClearedFlags(self) -> None:
        """(?i:...) and (?-i) scope case folding as in Go; U is accepted."""
        self.assertMatches("^(?i:a)b$", ["Ab"], ["AB"])
        self.assertMatches("(?i)^a(?-i)b$", ["Ab"], ["AB"])
        self.assertMatches("(?U)^a+$", ["aaa"], ["b"])
        self.assertMatches("(?)^a$", ["a"], ["b"])

    def test_posixClasses(self) -> None:
        """RE2's [[:name:]] classes are their ASCII sets."""
        self.assertMatches("^[[:alpha:]_]+$", ["ab_C"], ["a1"])
        self.assertMatches("^[^[:digit:]]+$", ["ab"], ["a1"])
        self.assertMatches("^[[:punct:]]$", ["!", "[", "]", "`", "~"], ["a", " "])
        self.assertMatches("^[[:word:]]+$", ["a_1"], ["a-1"])

    def test_escapes(self) -> None:
        """\\Q...\\E, \\x{...}, octal and \\s read as Go reads them."""
        self.assertMatches("^\\Qa.b\\E$", ["a.b"], ["axb"])
        self.assertMatches("^\\x{41}\\x42$", ["AB"], ["ab"])
        self.assertMatches("^\\101$", ["A"], ["a"])
        self.assertMatches("^\\s$", [" ", "\t"], ["\v"])
        self.assertMatches("^\\d+$", ["123"], ["\u0661"])

    def test_literalBrace(self) -> None:
        """A { that starts no repetition is literal ({,5} is not a repeat in Go)."""
        self.assertMatches("^a{,5}$", ["a{,5}"], ["aaa"])
        self.assertMatches("^a{2}$", ["aa"], ["a"])

    def test_namedGroups(self) -> None:
        """Both (?P<name>...) and Go 1.22's (?<name>...) are groups."""
        self.assertMatches("^(?P<t>a)(?<u>b)$", ["ab"], ["a"])

    def test_refusedLikeGo(self) -> None:
        """Python-only syntax is refused with Go's error text."""
        cases = {
            "(a": "missing closing ): `(a`",
            "a)": "unexpected ): `a)`",
            "[a": "missing closing ]: `[a`",
            "\\1": "invalid escape sequence: `\\1`",
            "(?=a)": "invalid or unsupported Perl syntax: `(?=`",
            "(?<!a)b": "invalid or unsupported Perl syntax: `(?<`",
            "(?#x)": "invalid or unsupported Perl syntax: `(?#`",
            "(?x)a": "invalid or unsupported Perl syntax: `(?x`",
            "(?P=n)": "invalid named capture: `(?P=`",
            "a**": "invalid nested repetition operator: `*`",
            "a*+": "invalid nested repetition operator: `+`",
            "a{1001}": "invalid repeat count: `{1001}`",
            "\\Z": "invalid escape sequence: `\\Z`",
            "[\\b]": "invalid escape sequence: `\\b`",
            "[[:foo:]]": "invalid character class range: `[:foo:]`",
            "\\": "trailing backslash at end of expression: ``",
        }
        for pattern, message in cases.items():
            error = self.assertRaises(GoRegexpError, compile_go_regexp, pattern)
            self.assertEqual(str(error), "error parsing regexp: " + message, pattern)

    def test_unsupportedFailsClosed(self) -> None:
        """RE2 syntax Python cannot run is refused rather than guessed at."""
        for pattern in ["\\pL", "\\p{Greek}", "[[:^alpha:]]", "\\C"]:
            self.assertRaises(GoRegexpError, compile_go_regexp, pattern)
