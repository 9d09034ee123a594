# -*- test-case-name: tests.test_protocol_go_regexp -*-
"""
Go's regular expressions (RE2 syntax) run by Python's ``re``.

NSQ auth servers answer with Go ``regexp`` patterns for topics and channels
(``internal/auth``); :func:`compile_go_regexp` translates such a pattern
into a Python pattern that accepts the same strings, and refuses what Go
refuses (back-references, lookarounds, ...) so that a pattern valid for
one nsqd is valid for the other.  Sans-IO: no Twisted here.
"""

from __future__ import annotations

import re
from typing import Dict, List, Pattern, Tuple

__all__ = ["GoRegexpError", "compile_go_regexp"]


class GoRegexpError(ValueError):
    """A pattern Go's ``regexp.Compile`` refuses (or this translation cannot run)."""


_GO_REPEAT = re.compile(r"\{(\d+)(,(\d*))?\}")
_GO_CAPTURE_NAME = re.compile(r"[A-Za-z0-9_]+\Z")
_GO_MAX_REPEAT = 1000
_OCTAL = "01234567"
_HEX = "0123456789abcdefABCDEF"

# RE2's ASCII classes, as the inside of a Python character class.
_POSIX_CLASSES: Dict[str, str] = {
    "alnum": "0-9A-Za-z",
    "alpha": "A-Za-z",
    "ascii": "\\x00-\\x7f",
    "blank": "\\t ",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "space": "\\t\\n\\v\\f\\r ",
    "upper": "A-Z",
    "word": "0-9A-Za-z_",
    "xdigit": "0-9A-Fa-f",
}
# RE2's \s is [\t\n\f\r ]; Python's ASCII \s also matches \v.
_GO_SPACE = "\\t\\n\\f\\r "


def _go_error(code: str, expr: str) -> GoRegexpError:
    return GoRegexpError("error parsing regexp: %s: `%s`" % (code, expr))


class _GoRegexpTranslator:
    """
    One pass over an RE2 pattern, writing the Python pattern that matches
    the same strings (see :func:`compile_go_regexp`).
    """

    def __init__(self, pattern: str) -> None:
        self.pattern = pattern
        self.out: List[str] = []
        # One entry per open group: the scoped-flag groups ("(?i:") opened
        # inside it by a Go "(?i)", closed at "|" and ")" and reopened
        # after "|" -- Go's flags last to the end of the enclosing group.
        self.scopes: List[List[str]] = [[]]
        # 0: no repetition just written; 1: a greedy one (a "?" may follow
        # to make it lazy); 2: a lazy one.
        self.repeated = 0

    def translate(self) -> str:
        pattern = self.pattern
        index = 0
        while index < len(pattern):
            char = pattern[index]
            if char == "\\":
                text, index = self._escape(index, in_class=False)
                self.out.append(text)
                self.repeated = 0
            elif char == "[":
                text, index = self._char_class(index)
                self.out.append(text)
                self.repeated = 0
            elif char == "(":
                index = self._open_group(index)
            elif char == ")":
                if len(self.scopes) == 1:
                    raise _go_error("unexpected )", pattern)
                opened = self.scopes.pop()
                self.out.append(")" * len(opened) + ")")
                self.repeated = 0
                index += 1
            elif char == "|":
                opened = self.scopes[-1]
                self.out.append(")" * len(opened) + "|" + "".join(opened))
                self.repeated = 0
                index += 1
            elif char in "*+?":
                self._repeat(char, char)
                index += 1
            elif char == "{":
                match = _GO_REPEAT.match(pattern, index)
                if match is None:
                    # Go takes a "{" that starts no repetition literally;
                    # Python would read "{,5}" as one.
                    self.out.append("\\{")
                    self.repeated = 0
                else:
                    low = int(match.group(1))
                    high = low if match.group(2) is None else (
                        int(match.group(3)) if match.group(3) else -1
                    )
                    if (
                        low > _GO_MAX_REPEAT
                        or high > _GO_MAX_REPEAT
                        or (high >= 0 and high < low)
                    ):
                        raise _go_error("invalid repeat count", match.group())
                    self._repeat(match.group(), match.group())
                    index = match.end()
                    continue
                index += 1
            elif char == "}":
                self.out.append("\\}")
                self.repeated = 0
                index += 1
            else:
                self.out.append(char)
                self.repeated = 0
                index += 1
        if len(self.scopes) > 1:
            raise _go_error("missing closing )", pattern)
        self.out.append(")" * len(self.scopes[0]))
        return "".join(self.out)

    def _repeat(self, operator: str, text: str) -> None:
        if self.repeated == 1 and operator == "?":
            self.out.append("?")
            self.repeated = 2
            return
        if self.repeated:
            # Go refuses "a**" and "a*+"; Python 3.11 reads the latter as
            # a possessive repetition, which may match differently.
            raise _go_error("invalid nested repetition operator", operator)
        self.out.append(text)
        self.repeated = 1

    def _open_group(self, index: int) -> int:
        pattern = self.pattern
        self.repeated = 0
        if not pattern.startswith("(?", index):
            self.out.append("(")
            self.scopes.append([])
            return index + 1
        rest = index + 2
        if pattern.startswith("P<", rest) or (
            pattern.startswith("<", rest)
            and not pattern.startswith("<=", rest)
            and not pattern.startswith("<!", rest)
        ):
            start = rest + (2 if pattern[rest] == "P" else 1)
            end = pattern.find(">", start)
            if end == -1:
                raise _go_error("invalid named capture", pattern[index:])
            name = pattern[start:end]
            if not _GO_CAPTURE_NAME.match(name):
                raise _go_error("invalid named capture", pattern[index : end + 1])
            self.out.append("(?P<%s>" % (name,))
            self.scopes.append([])
            return end + 1
        if pattern.startswith("P", rest):
            # (?P=name) and (?P>name): Python back-references and calls.
            raise _go_error("invalid named capture", pattern[index : rest + 2])
        on: List[str] = []
        off: List[str] = []
        negated = False
        saw_flag = False
        cursor = rest
        while cursor < len(pattern):
            char = pattern[cursor]
            if char in "imsU":
                (off if negated else on).append(char)
                saw_flag = True
            elif char == "-" and not negated:
                negated = True
                saw_flag = False
            elif char in ":)" and (saw_flag or not negated):
                break
            else:
                # Lookarounds, comments, conditionals, atomic groups,
                # Python's other flags: none of them is RE2.
                raise _go_error(
                    "invalid or unsupported Perl syntax", pattern[index : cursor + 1]
                )
            cursor += 1
        else:
            raise _go_error("missing closing )", pattern[index:])
        # Laziness never changes whether a search finds a match, so Go's U
        # (ungreedy) flag can be dropped; a flag both set and cleared ends
        # cleared, as in Go.
        flags_on = "".join(sorted(set(on) - set(off) - {"U"}))
        flags_off = "".join(sorted(set(off) - {"U"}))
        scoped = "(?" + flags_on + ("-" + flags_off if flags_off else "") + ":"
        if pattern[cursor] == ":":
            self.out.append(scoped)
            self.scopes.append([])
        elif flags_on or flags_off:
            # Python allows global flags only at the very start; a scoped
            # group that lasts to the end of the enclosing group is Go's
            # meaning anywhere.
            self.out.append(scoped)
            self.scopes[-1].append(scoped)
        return cursor + 1

    def _escape(self, index: int, in_class: bool) -> Tuple[str, int]:
        pattern = self.pattern
        if index + 1 >= len(pattern):
            raise _go_error("trailing backslash at end of expression", "")
        char = pattern[index + 1]
        after = index + 2
        if char in "1234567" and not (after < len(pattern) and pattern[after] in _OCTAL):
            # A single digit is a back-reference, which RE2 does not have.
            raise _go_error("invalid escape sequence", pattern[index:after])
        if char in _OCTAL:
            value = int(char)
            for _ in range(2):
                if after < len(pattern) and pattern[after] in _OCTAL:
                    value = value * 8 + int(pattern[after])
                    after += 1
            return re.escape(chr(value)), after
        if char == "x":
            if pattern.startswith("{", after):
                end = pattern.find("}", after)
                digits = pattern[after + 1 : end] if end != -1 else ""
                if not digits or any(d not in _HEX for d in digits) or int(digits, 16) > 0x10FFFF:
                    raise _go_error(
                        "invalid escape sequence",
                        pattern[index : end + 1 if end != -1 else len(pattern)],
                    )
                return re.escape(chr(int(digits, 16))), end + 1
            digits = pattern[after : after + 2]
            if len(digits) != 2 or any(d not in _HEX for d in digits):
                raise _go_error("invalid escape sequence", pattern[index : after + 2])
            return re.escape(chr(int(digits, 16))), after + 2
        if char in "afnrtvdDwW":
            return "\\" + char, after
        if char == "s":
            return (_GO_SPACE if in_class else "[" + _GO_SPACE + "]"), after
        if char == "S":
            # Inside a class Python's \S differs from Go's only on \v.
            return ("\\S" if in_class else "[^" + _GO_SPACE + "]"), after
        if char in "pP":
            raise _go_error(
                "invalid escape sequence (Unicode classes are not supported)",
                pattern[index:after],
            )
        if not in_class:
            if char in "AbB":
                return "\\" + char, after
            if char == "z":
                return "\\Z", after
            if char == "Q":
                end = pattern.find("\\E", after)
                if end == -1:
                    return re.escape(pattern[after:]), len(pattern)
                return re.escape(pattern[after:end]), end + 2
        if ord(char) < 0x80 and not char.isalnum():
            return "\\" + char, after
        raise _go_error("invalid escape sequence", pattern[index:after])

    def _char_class(self, index: int) -> Tuple[str, int]:
        pattern = self.pattern
        out = ["["]
        cursor = index + 1
        if pattern.startswith("^", cursor):
            out.append("^")
            cursor += 1
        first = True
        while True:
            if cursor >= len(pattern):
                raise _go_error("missing closing ]", pattern[index:])
            char = pattern[cursor]
            if char == "]" and not first:
                out.append("]")
                return "".join(out), cursor + 1
            first = False
            if pattern.startswith("[:", cursor):
                end = pattern.find(":]", cursor + 2)
                if end != -1:
                    name = pattern[cursor + 2 : end]
                    posix = _POSIX_CLASSES.get(name)
                    if posix is None and name[1:] in _POSIX_CLASSES and name[0] == "^":
                        # Valid in Go, but a Python class cannot hold the
                        # complement of a class next to other members.
                        raise _go_error(
                            "invalid character class range (negated POSIX classes"
                            " are not supported)",
                            pattern[cursor : end + 2],
                        )
                    if posix is None:
                        raise _go_error(
                            "invalid character class range", pattern[cursor : end + 2]
                        )
                    out.append(posix)
                    cursor = end + 2
                    continue
            if char == "\\":
                text, cursor = self._escape(cursor, in_class=True)
                out.append(text)
                continue
            if char in "[&~|":
                # Literal in Go; Python warns about future set operations.
                out.append("\\" + char)
            else:
                out.append(char)
            cursor += 1


def compile_go_regexp(pattern: str) -> Pattern[str]:
    """
    Compile an RE2 (Go ``regexp``) pattern into a Python pattern that
    matches the same strings with ``re.Pattern.search`` (Go's
    ``MatchString`` is an unanchored search too).

    Translated: ``\\z`` (Python's ``\\Z``), ``\\Q...\\E``, ``\\x{...}``,
    octal escapes, POSIX classes (``[[:alpha:]]``), ``(?<name>...)``, flag
    groups anywhere in the pattern (``a(?i)b``, which Python allows only at
    the start), Go's ``U`` flag (dropped: laziness cannot change whether a
    search matches), a literal ``{`` that starts no repetition, and ``\\s``
    (RE2's has no ``\\v``).  The pattern is compiled with ``re.ASCII``,
    since RE2's ``\\d``, ``\\w``, ``\\s`` and ``\\b`` are ASCII.

    Refused, as Go refuses them: back-references, lookarounds, atomic and
    possessive forms, conditionals, comments, flags other than ``imsU``,
    nested repetitions, repeat counts over 1000.

    Refused although Go accepts them (the check fails closed): Unicode
    classes (``\\pL``, ``\\p{Greek}``), negated POSIX classes
    (``[[:^alpha:]]``), ``\\C`` and capture names that are not Python
    identifiers.  Left as Python has them: ``$`` without ``(?m)`` also
    matches before a final newline, and ``(?i)`` folds ASCII letters only.
    Neither matters for NSQ topic and channel names, which are ASCII with
    no newline.

    :raises GoRegexpError: for a pattern refused as above, or one Python
        cannot compile; the text starts ``error parsing regexp:`` as Go's.
    """
    translated = _GoRegexpTranslator(pattern).translate()
    try:
        return re.compile(translated, re.ASCII)
    except re.error as error:
        raise GoRegexpError("error parsing regexp: %s: `%s`" % (error.msg, pattern))
