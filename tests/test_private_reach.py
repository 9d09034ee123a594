"""
Tests that txnsq's modules touch each other only through public names
(docs/STYLE.md, convention 7): an AST walk over txnsq/ finds every
attribute use ``X._name`` (read, written, deleted or called, and
``getattr(X, "_name")`` and its kin with a literal name) where ``X`` is
not ``self``, ``cls`` or ``super()``.  Not counted: dunder names, a class's
own names used through the class inside its body (``Foo._CACHE`` in class
``Foo``), and the public API of ``collections.namedtuple`` that happens to
start with an underscore (``_replace``, ``_asdict``, ...).

What is left must be a named exception in :data:`ALLOWED`, with the reason:
ten at most in all of txnsq/.  An entry that matches no reach any more
fails the test, so that the list only shrinks.

The source is read, not executed.
"""

from __future__ import annotations

import ast
import os
from typing import Dict, Iterator, List, Tuple

from twisted.trial.unittest import SynchronousTestCase

import txnsq

_PACKAGE_DIR = os.path.dirname(os.path.abspath(txnsq.__file__))
_ROOT = os.path.dirname(_PACKAGE_DIR)

#: The most named exceptions issue 30 allows.
MAX_ALLOWED = 10

#: Reaches kept on purpose: ``"path:function:attribute"`` (the path from the
#: repository root, the enclosing class and function names as a dotted
#: qualified name, ``<module>`` at module level) -> why.
ALLOWED: Dict[str, str] = {
    "txnsq/client/aio.py:_LoopReactor.release:_stopThreadPool": (
        "Twisted has no public way to stop a reactor's thread pool short of "
        "stopping the reactor, which never stops under asyncio.run; this is "
        "what the reactor's own shutdown trigger calls"
    ),
    "txnsq/http/profiles.py:_thread_frames:_current_frames": (
        "sys._current_frames is the standard library's documented (if "
        "underscored) way to read every thread's stack, which /debug/pprof "
        "shows as Go shows goroutines"
    ),
}

#: ``collections.namedtuple``'s public names that start with an underscore
#: (so that they cannot clash with field names).
NAMEDTUPLE_API = frozenset({"_asdict", "_field_defaults", "_fields", "_make", "_replace"})

#: Calls that name an attribute by a string.
_BY_NAME = frozenset({"getattr", "setattr", "hasattr", "delattr"})


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


class Reach:
    """One use of another object's private name."""

    def __init__(self, path: str, scope: str, attribute: str, line: int, source: str) -> None:
        self.path = path
        self.scope = scope
        self.attribute = attribute
        self.line = line
        self.source = source

    @property
    def key(self) -> str:
        """``path:scope:attribute``: what :data:`ALLOWED` names (no line: robust to moves)."""
        return "%s:%s:%s" % (self.path, self.scope, self.attribute)

    def __repr__(self) -> str:
        return "%s:%d: %s (%s)" % (self.path, self.line, self.source, self.key)


class _ReachFinder(ast.NodeVisitor):
    """Collects the reaches of one module."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.scopes: List[str] = []
        self.classes: List[str] = []
        self.found: List[Reach] = []

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scopes.append(node.name)
        self.classes.append(node.name)
        self.generic_visit(node)
        self.classes.pop()
        self.scopes.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self.scopes.append(node.name)
        self.generic_visit(node)
        self.scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_Attribute(self, node: ast.Attribute) -> None:
        self._check(node.value, node.attr, node)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        function = node.func
        if (
            isinstance(function, ast.Name)
            and function.id in _BY_NAME
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            self._check(node.args[0], node.args[1].value, node)
        self.generic_visit(node)

    def _check(self, receiver: ast.expr, name: str, node: ast.AST) -> None:
        if not _private(name) or name in NAMEDTUPLE_API or self._own(receiver):
            return
        self.found.append(
            Reach(
                self.path,
                ".".join(self.scopes) or "<module>",
                name,
                getattr(node, "lineno", 0),
                ast.unparse(node),
            )
        )

    def _own(self, receiver: ast.expr) -> bool:
        """``self``, ``cls``, ``super()``, or the name of a class being defined."""
        if isinstance(receiver, ast.Name):
            return receiver.id in ("self", "cls") or receiver.id in self.classes
        return (
            isinstance(receiver, ast.Call)
            and isinstance(receiver.func, ast.Name)
            and receiver.func.id == "super"
        )


def find_reaches(path: str, source: str) -> List[Reach]:
    """The reaches in ``source`` (a module whose path is ``path``)."""
    finder = _ReachFinder(path)
    finder.visit(ast.parse(source, path))
    return finder.found


def _sources() -> Iterator[Tuple[str, str]]:
    """Every module of txnsq: its path from the repository root, its source."""
    for root, dirs, files in os.walk(_PACKAGE_DIR):
        dirs.sort()
        for filename in sorted(files):
            if filename.endswith(".py"):
                path = os.path.join(root, filename)
                with open(path, encoding="utf-8") as source:
                    yield os.path.relpath(path, _ROOT).replace(os.sep, "/"), source.read()


_found: List[List[Reach]] = []


def package_reaches() -> List[Reach]:
    """Every reach in txnsq/, read once per test run."""
    if not _found:
        _found.append([reach for path, source in _sources() for reach in find_reaches(path, source)])
    return _found[0]


class PrivateReachTests(SynchronousTestCase):
    """Modules use each other's public names only, but for a few named exceptions."""

    def setUp(self) -> None:
        self.reaches = package_reaches()

    def test_every_reach_is_named(self) -> None:
        """Every use of another object's private name in txnsq/ is a named exception."""
        self.assertEqual([reach for reach in self.reaches if reach.key not in ALLOWED], [])

    def test_few_exceptions(self) -> None:
        """At most ten exceptions are allowed in all of txnsq/."""
        self.assertLessEqual(len(ALLOWED), MAX_ALLOWED)

    def test_exceptions_are_explained(self) -> None:
        """Every allowed reach says why it is kept."""
        self.assertEqual([key for key, why in ALLOWED.items() if len(why.split()) < 5], [])

    def test_no_stale_exception(self) -> None:
        """Every exception still matches a reach (the list only shrinks)."""
        found = {reach.key for reach in self.reaches}
        self.assertEqual(sorted(set(ALLOWED) - found), [])

    def test_namedtuple_names_are_not_ours(self) -> None:
        """No txnsq class defines a name of namedtuple's API, which the check lets through."""
        defined = []
        for path, source in _sources():
            for node in ast.walk(ast.parse(source, path)):
                if not isinstance(node, ast.ClassDef):
                    continue
                for member in ast.walk(node):
                    if isinstance(member, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        name = member.name
                    elif isinstance(member, ast.Name) and isinstance(member.ctx, ast.Store):
                        name = member.id
                    elif isinstance(member, ast.Attribute) and isinstance(member.ctx, ast.Store):
                        name = member.attr
                    else:
                        continue
                    if name in NAMEDTUPLE_API:
                        defined.append("%s:%d %s.%s" % (path, member.lineno, node.name, name))
        self.assertEqual(defined, [])


_SAMPLE = '''
import sys

frames = sys._current_frames()

class Foo:
    _CACHE = {}

    def method(self, other):
        self._mine = other._theirs
        other._state = 1
        other._close()
        super()._base()
        Foo._CACHE.clear()
        other.__class__
        return getattr(other, "_hidden", None)

    @classmethod
    def make(cls):
        return cls._CACHE

def helper(point):
    Foo._CACHE.clear()
    return point._replace(x=1)
'''


class FinderTests(SynchronousTestCase):
    """The walk sees what it should (so that the check can fail), and only that."""

    def test_sample(self) -> None:
        """Reads, writes, calls and getattr of others' private names are found; self, cls, super(), a class's own names inside it, dunders and namedtuple's API are not."""
        found = [(reach.scope, reach.attribute) for reach in find_reaches("sample.py", _SAMPLE)]
        self.assertEqual(
            found,
            [
                ("<module>", "_current_frames"),
                ("Foo.method", "_theirs"),
                ("Foo.method", "_state"),
                ("Foo.method", "_close"),
                ("Foo.method", "_hidden"),
                ("helper", "_CACHE"),
            ],
        )

    def test_key_has_no_line(self) -> None:
        """A reach's key names the module, the enclosing function and the attribute, not the line."""
        [reach] = find_reaches("m.py", "\n\ndef f(x):\n    return x._y\n")
        self.assertEqual(reach.key, "m.py:f:_y")
        self.assertEqual(reach.line, 4)

