"""
Classes of txnsq are composed of parts that talk through objects passed
in, not assembled from mixins that share one object's private state
(STYLE.md, convention 7): no class of txnsq has more than two of txnsq's
own classes among its bases.  Read from the source, not executed.
"""

from __future__ import annotations

import ast
import os
from typing import Dict, List, Set

from twisted.trial.unittest import SynchronousTestCase

from tests.test_layering import import_graph

#: The most of txnsq's own classes a class of txnsq may have as bases.
MAX_OWN_BASES = 2


def own_bases(tree: ast.Module, module: str, classes: Dict[str, Set[str]]) -> Dict[str, List[str]]:
    """
    For each class of ``tree`` (module ``module``), its bases that are
    classes of txnsq: defined in the module, or imported by name from the
    txnsq module that defines them (``classes``: each module's classes).
    """
    local = classes.get(module, set())
    imported: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("txnsq"):
            for alias in node.names:
                if alias.name in classes.get(node.module, ()):
                    imported.add(alias.asname or alias.name)
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            found[node.name] = [
                base.id
                for base in node.bases
                if isinstance(base, ast.Name) and (base.id in local or base.id in imported)
            ]
    return found


def assembled(paths: Dict[str, str]) -> List[str]:
    """``module.Class: bases`` for each class with more than MAX_OWN_BASES of txnsq's classes as bases."""
    trees = {}
    for name, path in paths.items():
        with open(path, "rb") as source:
            trees[name] = ast.parse(source.read(), path)
    classes = {
        name: {node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}
        for name, tree in trees.items()
    }
    wrong = []
    for name, tree in sorted(trees.items()):
        for cls, bases in sorted(own_bases(tree, name, classes).items()):
            if len(bases) > MAX_OWN_BASES:
                wrong.append("%s.%s: %s" % (name, cls, ", ".join(bases)))
    return wrong


class CompositionTests(SynchronousTestCase):
    """No class of txnsq is assembled from more than two of its own classes."""

    def test_few_own_bases(self) -> None:
        """Every class of txnsq has at most two of txnsq's own classes as bases."""
        self.assertEqual(assembled(import_graph().paths), [])

    def test_found(self) -> None:
        """A class with three of txnsq's classes as bases, defined or imported, is found (so that the check can fail)."""
        directory = self.mktemp()
        os.makedirs(directory)
        first = os.path.join(directory, "first.py")
        second = os.path.join(directory, "second.py")
        with open(first, "w") as source:
            source.write("class A: pass\nclass B: pass\n")
        with open(second, "w") as source:
            source.write(
                "from txnsq.first import A, B\nfrom twisted.internet.protocol import Protocol\n"
                "class C: pass\nclass Many(A, B, C, Protocol): pass\nclass Two(A, C, Protocol): pass\n"
            )
        self.assertEqual(
            assembled({"txnsq.first": first, "txnsq.second": second}), ["txnsq.second.Many: A, B, C"]
        )
