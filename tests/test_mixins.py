"""
Tests that txnsq's classes are composed of parts rather than assembled
from mixins that share the host's state (docs/STYLE.md, convention 7;
issue 30): no class has more than two bases of our own, and no class
redeclares, in an ``if TYPE_CHECKING:`` block of its body, the
attributes and methods a host class is meant to provide.

The source is read, not executed.
"""

from __future__ import annotations

import ast
import os
from typing import Dict, Iterator, List, Set, Tuple

from twisted.trial.unittest import SynchronousTestCase

import txnsq

_PACKAGE_DIR = os.path.dirname(os.path.abspath(txnsq.__file__))
_ROOT = os.path.dirname(_PACKAGE_DIR)

#: The most bases of our own a class may have.
MAX_OWN_BASES = 2

def _sources() -> Iterator[Tuple[str, ast.Module]]:
    """Every module of txnsq: its path from the repository root, its tree."""
    for root, dirs, files in os.walk(_PACKAGE_DIR):
        dirs.sort()
        for filename in sorted(files):
            if filename.endswith(".py"):
                path = os.path.join(root, filename)
                with open(path, encoding="utf-8") as source:
                    tree = ast.parse(source.read(), path)
                yield os.path.relpath(path, _ROOT).replace(os.sep, "/"), tree


def _own_names(tree: ast.Module) -> Set[str]:
    """The names a module binds to txnsq classes: those it defines and those it imports from txnsq."""
    names = {node.name for node in tree.body if isinstance(node, ast.ClassDef)}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("txnsq") and not node.level:
            names.update(alias.asname or alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level:
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def _structural(tree: ast.Module) -> Set[str]:
    """The classes of a module that are ``typing.Protocol``\\s (types, not mixins)."""
    return {
        node.name
        for node in tree.body
        if isinstance(node, ast.ClassDef) and any(ast.unparse(base) in ("Protocol", "typing.Protocol") for base in node.bases)
    }


def own_bases() -> Dict[str, List[str]]:
    """``"path:class"`` -> its bases of our own (txnsq classes, typing Protocols aside), for every class."""
    structural: Set[str] = set()
    trees = list(_sources())
    for _, tree in trees:
        structural |= _structural(tree)
    found: Dict[str, List[str]] = {}
    for path, tree in trees:
        own = _own_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                names = [ast.unparse(base) for base in node.bases]
                found["%s:%s" % (path, node.name)] = [
                    name for name in names if name in own and name not in structural
                ]
    return found


def host_declarations() -> Dict[str, List[str]]:
    """``"path:class"`` -> what its body's ``if TYPE_CHECKING:`` blocks declare, for classes that have one."""
    found: Dict[str, List[str]] = {}
    for path, tree in _sources():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            declared = []
            for statement in node.body:
                if isinstance(statement, ast.If) and "TYPE_CHECKING" in ast.unparse(statement.test):
                    for inner in statement.body:
                        if isinstance(inner, ast.AnnAssign):
                            declared.append(ast.unparse(inner.target))
                        elif isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)):
                            declared.append(inner.name + "()")
            if declared:
                found["%s:%s" % (path, node.name)] = declared
    return found


class MixinTests(SynchronousTestCase):
    """Classes are composed of parts, not assembled from mixins sharing a host's state."""

    def test_few_own_bases(self) -> None:
        """No class has more than two bases of our own (the mirror's pending ones aside)."""
        wrong = {
            key: bases
            for key, bases in own_bases().items()
            if len(bases) > MAX_OWN_BASES
        }
        self.assertEqual(wrong, {})

    def test_no_host_redeclared(self) -> None:
        """No class declares its host's attributes in an ``if TYPE_CHECKING:`` block."""
        self.assertEqual(host_declarations(), {})

    def test_sees_bases(self) -> None:
        """The walk finds a class's bases of our own (so that the check can fail)."""
        self.assertEqual(
            own_bases()["txnsq/nsqadmin/app.py:NSQAdminApp"], ["APIHandlers", "PageHandlers"]
        )
        # A typing.Protocol is a type, not a mixin.
        self.assertEqual(own_bases()["txnsq/client/consumer.py:ConsumerConnection"], [])
