"""
``bench/README.md`` describes every script in ``bench/``, and the scripts
it lists as standard library only import nothing else.

The benchmarks are run by hand, so their page is the only way to find out
what a script answers and how to run it: a script added without a section
is found only by reading its source.
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

#: The sentence of the README that lists the standard-library-only scripts.
_STDLIB_ONLY = re.compile(r"Standard library only:(.*?)\.(?:\s|$)", re.S)
_SCRIPT = re.compile(r"`([\w-]+\.py)`")


def bench_scripts() -> List[str]:
    """The file names of the Python scripts in ``bench/``, sorted."""
    return sorted(name for name in os.listdir(_BENCH) if name.endswith(".py"))


def readme() -> str:
    """The text of ``bench/README.md``."""
    with open(_README, encoding="utf-8") as page:
        return page.read()


def named(text: str, script: str) -> bool:
    """Whether ``text`` names ``script`` (``hot_path.py``, ``bench/hot_path.py``; not ``xhot_path.py``)."""
    return re.search(r"(?<![\w.-])" + re.escape(script) + r"(?![\w.])", text) is not None


def top_level_imports(path: str) -> Set[str]:
    """The top-level names of every module the file imports, at any depth of its code."""
    with open(path, "rb") as source:
        tree = ast.parse(source.read(), path)
    found: Set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


class BenchReadmeTests(SynchronousTestCase):
    """bench/README.md names every benchmark and tells true about imports."""

    def test_every_script_named(self) -> None:
        """Every bench/*.py is named in bench/README.md."""
        text = readme()
        self.assertEqual([script for script in bench_scripts() if not named(text, script)], [])

    def test_named_recognises_names(self) -> None:
        """A script is named as itself or under bench/, not as part of a longer name."""
        self.assertTrue(named("run `hot_path.py` first", "hot_path.py"))
        self.assertTrue(named("python bench/hot_path.py --count 5", "hot_path.py"))
        self.assertFalse(named("`mirror_hot_path.py`", "hot_path.py"))
        self.assertFalse(named("`hot_path.pyc`", "hot_path.py"))

    def test_standard_library_only(self) -> None:
        """The scripts the README lists as standard library only import only it and each other."""
        stdlib = getattr(sys, "stdlib_module_names", None)
        if stdlib is None:
            raise SkipTest("needs sys.stdlib_module_names (Python 3.10)")
        match = _STDLIB_ONLY.search(readme())
        self.assertIsNotNone(match, "bench/README.md has no 'Standard library only:' list")
        assert match is not None
        listed = _SCRIPT.findall(match.group(1))
        self.assertIn("nsqd_harness.py", listed)
        self.assertEqual([name for name in listed if name not in bench_scripts()], [])
        siblings = {name[: -len(".py")] for name in listed}
        wrong = []
        for name in listed:
            for module in sorted(top_level_imports(os.path.join(_BENCH, name))):
                if module not in stdlib and module not in siblings and module != "__future__":
                    wrong.append("%s imports %s" % (name, module))
        self.assertEqual(wrong, [])
