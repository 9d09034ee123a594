"""
``bench/README.md`` describes every script in ``bench/``, the scripts live
in the folder of their kind, and the scripts it lists as needing only the
standard library and txnsq's sans-IO codec (no Twisted, so that they can
drive any nsqd without measuring a client framework) import nothing else.

The benchmarks are run by hand, so their page is the only way to find out
what a script answers and how to run it: a script added without a section
is found only by reading its source.  The page names each script by its
path under ``bench/`` (``micro/hot_path.py``), the form a reader types.
"""

from __future__ import annotations

import ast
import os
import re
import sys
from typing import List, Set

from twisted.trial.unittest import SkipTest, SynchronousTestCase

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_BENCH = os.path.join(_ROOT, "bench")
_README = os.path.join(_BENCH, "README.md")

#: The folders of ``bench/``: in-process benchmarks, benchmarks over real
#: processes and sockets, and the helpers both kinds share.
FOLDERS = ("micro", "system", "common")

#: The sentence of the README that lists the scripts without Twisted.
_STDLIB_ONLY = re.compile(r"Standard library and `txnsq\.protocol` only:(.*?)\.(?:\s|$)", re.S)

#: The one package of txnsq those scripts may import: sans-IO, no Twisted
#: (``tests/test_layering.py`` holds it to that).
_CODEC = "txnsq.protocol"
_SCRIPT = re.compile(r"`([\w/-]+\.py)`")


def bench_scripts() -> List[str]:
    """The Python files under ``bench/``, as paths relative to it (``micro/hot_path.py``), sorted."""
    found = []
    for directory, _, files in os.walk(_BENCH):
        relative = os.path.relpath(directory, _BENCH)
        for name in files:
            if name.endswith(".py"):
                found.append(name if relative == "." else relative.replace(os.sep, "/") + "/" + name)
    return sorted(found)


def readme() -> str:
    """The text of ``bench/README.md``."""
    with open(_README, encoding="utf-8") as page:
        return page.read()


def named(text: str, script: str) -> bool:
    """
    Whether ``text`` names ``script`` by its path under bench/
    (``micro/hot_path.py``, ``bench/micro/hot_path.py``; not ``hot_path.py``
    alone, nor ``micro/xhot_path.py``).
    """
    return re.search(r"(?<![\w.-])" + re.escape(script) + r"(?![\w.])", text) is not None


def top_level_imports(path: str) -> Set[str]:
    """The dotted names of every module the file imports, at any depth of its code."""
    with open(path, "rb") as source:
        tree = ast.parse(source.read(), path)
    found: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module)
    return found


class BenchReadmeTests(SynchronousTestCase):
    """bench/README.md names every benchmark and tells true about imports."""

    def test_every_script_named(self) -> None:
        """Every .py under bench/ is named in bench/README.md by its path under bench/."""
        text = readme()
        self.assertTrue(bench_scripts())
        self.assertEqual([script for script in bench_scripts() if not named(text, script)], [])

    def test_scripts_in_folders(self) -> None:
        """Every .py under bench/ is in micro/, system/ or common/, none at the top or deeper."""
        misplaced = [
            script for script in bench_scripts()
            if script.count("/") != 1 or script.split("/")[0] not in FOLDERS
        ]
        self.assertEqual(misplaced, [])

    def test_micro_needs_no_system(self) -> None:
        """The in-process benchmarks import nothing from bench/system/ (its processes and sockets)."""
        wrong = []
        for script in bench_scripts():
            if script.startswith("micro/"):
                for module in sorted(top_level_imports(os.path.join(_BENCH, script))):
                    if module.startswith("bench.system"):
                        wrong.append("%s imports %s" % (script, module))
        self.assertEqual(wrong, [])

    def test_named_recognises_names(self) -> None:
        """A script is named by its path, with or without bench/, not as part of a longer name."""
        self.assertTrue(named("run `micro/hot_path.py` first", "micro/hot_path.py"))
        self.assertTrue(named("python bench/micro/hot_path.py --count 5", "micro/hot_path.py"))
        self.assertFalse(named("run `hot_path.py` first", "micro/hot_path.py"))
        self.assertFalse(named("`micro/mirror_hot_path.py`", "micro/hot_path.py"))
        self.assertFalse(named("`micro/hot_path.pyc`", "micro/hot_path.py"))

    def test_standard_library_only(self) -> None:
        """The scripts the README lists as standard library and txnsq.protocol only import only those and each other."""
        stdlib = getattr(sys, "stdlib_module_names", None)
        if stdlib is None:
            raise SkipTest("needs sys.stdlib_module_names (Python 3.10)")
        match = _STDLIB_ONLY.search(readme())
        self.assertIsNotNone(match, "bench/README.md has no 'Standard library and `txnsq.protocol` only:' list")
        assert match is not None
        listed = _SCRIPT.findall(match.group(1))
        self.assertIn("system/harness.py", listed)
        self.assertEqual([name for name in listed if name not in bench_scripts()], [])
        siblings = {"bench." + name[: -len(".py")].replace("/", ".") for name in listed}
        wrong = []
        for name in listed:
            for module in sorted(top_level_imports(os.path.join(_BENCH, name))):
                top = module.split(".")[0]
                codec = module == _CODEC or module.startswith(_CODEC + ".")
                if top not in stdlib and module not in siblings and top != "__future__" and not codec:
                    wrong.append("%s imports %s" % (name, module))
        self.assertEqual(wrong, [])
