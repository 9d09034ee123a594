"""
Tests of the import picture (the layers of docs/design.md): the sans-IO
protocol package imports no Twisted and nothing of txnsq outside itself,
and neither the broker core nor storage reaches the command line or an
adapter, directly or through what they import.  Imports are read from the source (every
``import`` statement, those inside functions included), not executed.
"""

from __future__ import annotations

import ast
import os
from typing import Dict, Iterable, List, Set

from twisted.trial.unittest import SynchronousTestCase

import txnsq

_PACKAGE_DIR = os.path.dirname(os.path.abspath(txnsq.__file__))

#: The broker core (the "core" layer of docs/design.md): plain objects, no IO.
CORE = [
    "txnsq.nsqd.broker",
    "txnsq.nsqd.channel",
    "txnsq.nsqd.data_path_lock",
    "txnsq.nsqd.guid",
    "txnsq.nsqd.memstats",
    "txnsq.nsqd.metadata",
    "txnsq.nsqd.metadata_format",
    "txnsq.nsqd.options",
    "txnsq.nsqd.quantile",
    "txnsq.nsqd.retention",
    "txnsq.nsqd.stats",
    "txnsq.nsqd.stats_text",
    "txnsq.nsqd.topic",
    "txnsq.mirror.recorder",
    "txnsq.mirror.snapshot",
    "txnsq.mirror.standby",
]

#: What the core and storage must never import: the command line, the
#: Twisted adapters of every daemon, the clients, the tools.
FORBIDDEN = [
    "txnsq.cli",
    "txnsq.daemon",
    "txnsq.client",
    "txnsq.cluster",
    "txnsq.http",
    "txnsq.metaq",
    "txnsq.mirror",
    "txnsq.nsqadmin",
    "txnsq.nsqlookupd",
    "txnsq.spark",
    "txnsq.testing",
    "txnsq.tools",
    "txnsq.nsqd.auth",
    "txnsq.nsqd.flags",
    "txnsq.nsqd.http",
    "txnsq.nsqd.listener",
    "txnsq.nsqd.lookup",
    "txnsq.nsqd.lookup_peer",
    "txnsq.nsqd.script",
    "txnsq.nsqd.service",
    "txnsq.nsqd.statsd",
    "txnsq.nsqd.tap",
    "txnsq.nsqd.tcp",
]

#: Modules inside a forbidden package that the core may import: they hold
#: no IO and no CLI (the chains through them are still followed).
#: ``txnsq.cluster.options`` checks the cluster settings for
#: ``NSQDOptions.validate``; the mirror's core modules (the recorder a
#: mirrored topic feeds, the standby's copy, the snapshots) are in CORE
#: themselves, while the rest of ``txnsq.mirror`` runs on Twisted and the
#: routes.
ALLOWED = ["txnsq.cluster.options"] + [name for name in CORE if name.startswith("txnsq.mirror.")]

#: Modules outside txnsq.protocol that the protocol may import: the loader
#: of the compiled speed-ups, which imports only the standard library (its
#: compiled modules it finds by name, at run time).
PROTOCOL_MAY_IMPORT = ["txnsq.speedups"]


def _module_name(path: str) -> str:
    relative = os.path.relpath(path, os.path.dirname(_PACKAGE_DIR))
    name = relative[: -len(".py")].replace(os.sep, ".")
    return name[: -len(".__init__")] if name.endswith(".__init__") else name


def _modules() -> Dict[str, str]:
    """Every module of the txnsq package: name to source path."""
    found = {}
    for root, _, files in os.walk(_PACKAGE_DIR):
        for filename in files:
            if filename.endswith(".py"):
                path = os.path.join(root, filename)
                found[_module_name(path)] = path
    return found


def _statements(body: List[ast.stmt]) -> Iterable[ast.stmt]:
    """Every statement of ``body``, nested ones included (imports are statements; expressions are skipped)."""
    for statement in body:
        yield statement
        for field in ("body", "orelse", "finalbody", "handlers", "cases"):
            nested = getattr(statement, field, None)
            if nested:
                yield from _statements(nested)


def _imported(name: str, path: str) -> Set[str]:
    """The dotted names a module's import statements name (``from m import x`` gives m and m.x)."""
    with open(path, "rb") as source:
        tree = ast.parse(source.read(), path)
    package = name.split(".") if path.endswith("__init__.py") else name.split(".")[:-1]
    names: Set[str] = set()
    for node in _statements(tree.body):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            names.add(module)
            names.update(module + "." + alias.name for alias in node.names)
    return names


def _within(name: str, prefixes: Iterable[str]) -> bool:
    return any(name == prefix or name.startswith(prefix + ".") for prefix in prefixes)


class ImportGraph:
    """The txnsq modules and what each imports, read from the source."""

    def __init__(self) -> None:
        self.paths = _modules()
        self.imports = {name: _imported(name, path) for name, path in self.paths.items()}

    def internal(self, name: str) -> Set[str]:
        """The txnsq modules ``name`` imports (``from m import x`` counts m, and x if a module)."""
        return {found for found in self.imports[name] if found in self.paths}

    def chains(self, start: str, forbidden: List[str]) -> List[str]:
        """Import chains from ``start`` to a forbidden module, as ``a -> b -> c``."""
        found: List[str] = []
        seen = {start}
        stack = [[start]]
        while stack:
            chain = stack.pop()
            for module in sorted(self.internal(chain[-1])):
                if _within(module, forbidden) and not _within(module, ALLOWED):
                    found.append(" -> ".join(chain + [module]))
                elif module not in seen:
                    seen.add(module)
                    stack.append(chain + [module])
        return found


_graph: List[ImportGraph] = []


def import_graph() -> ImportGraph:
    """The package's import graph, read once per test run."""
    if not _graph:
        _graph.append(ImportGraph())
    return _graph[0]


class LayeringTests(SynchronousTestCase):
    """The layers import only the layers below them."""

    def setUp(self) -> None:
        self.graph = import_graph()

    def test_protocol_is_sans_io(self) -> None:
        """No txnsq.protocol module imports Twisted, zope or any txnsq module outside txnsq.protocol."""
        wrong = []
        for name in sorted(self.graph.paths):
            if not _within(name, ["txnsq.protocol"]):
                continue
            for imported in sorted(self.graph.imports[name]):
                if _within(imported, ["twisted", "zope"]) or (
                    _within(imported, ["txnsq"])
                    and not _within(imported, ["txnsq.protocol"])
                    and not _within(imported, PROTOCOL_MAY_IMPORT)
                ):
                    wrong.append("%s imports %s" % (name, imported))
        self.assertEqual(wrong, [])

    def test_protocol_exceptions_are_leaves(self) -> None:
        """What the protocol may import from outside it imports no Twisted, zope or txnsq module itself."""
        for name in PROTOCOL_MAY_IMPORT:
            self.assertIn(name, self.graph.paths)
            self.assertEqual(
                [imported for imported in self.graph.imports[name] if _within(imported, ["twisted", "zope", "txnsq"])],
                [],
            )

    def test_core_reaches_no_adapter(self) -> None:
        """No core module imports the CLI or an adapter, directly or through another module."""
        chains: List[str] = []
        for name in CORE:
            self.assertIn(name, self.graph.paths)
            chains.extend(self.graph.chains(name, FORBIDDEN))
        self.assertEqual(chains, [])

    def test_storage_reaches_no_adapter(self) -> None:
        """No txnsq.storage module imports the CLI, the nsqd core or an adapter, directly or not."""
        chains: List[str] = []
        for name in sorted(self.graph.paths):
            if _within(name, ["txnsq.storage"]):
                chains.extend(self.graph.chains(name, FORBIDDEN + ["txnsq.nsqd"]))
        self.assertEqual(chains, [])

    def test_mirror_hold_is_sans_io(self) -> None:
        """The V2 connection's hold for the mirror imports no Twisted, zope or txnsq module outside txnsq.protocol."""
        wrong = [
            imported
            for imported in sorted(self.graph.imports["txnsq.mirror.hold"])
            if _within(imported, ["twisted", "zope"])
            or (_within(imported, ["txnsq"]) and not _within(imported, ["txnsq.protocol"]))
        ]
        self.assertEqual(wrong, [])

    def test_chains_are_found(self) -> None:
        """The check sees an arrow through an intermediate module (so that it can fail)."""
        chains = self.graph.chains("txnsq.nsqd.flags", ["txnsq.cli"])
        self.assertIn("txnsq.nsqd.flags -> txnsq.cli", chains)
        self.assertTrue(self.graph.chains("txnsq.nsqd.tap", ["txnsq.nsqd.tcp"]))
