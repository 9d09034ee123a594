"""
Every ``test-case-name`` header of txnsq's sources names test modules that
exist in the repository's test packages (``tests/``, and ``tests_spark/``
and ``tests_browser/`` for what only Spark or a browser exercises).

The header (``# -*- test-case-name: tests.test_channel -*-``, several
modules separated by commas) is what ``trial --testmodule FILE`` and
editors run for a source file.  A module renamed, merged or never written
leaves a header that runs nothing.  The headers are read with trial's own
reader (:func:`twisted.scripts.trial.getTestModules`), which reads the
first two lines of a file and splits the list at each comma, spaces
included: ``tests.a, tests.b`` names ``" tests.b"``, which trial cannot
load, so this check rejects it too.
"""

from __future__ import annotations

import os
import re
from typing import Iterable, Iterator, List

from twisted.scripts.trial import getTestModules
from twisted.trial.unittest import SynchronousTestCase

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: The source trees whose files may carry a header, relative to the root.
SOURCES = ["txnsq", os.path.join("twisted", "plugins")]

#: The packages of trial tests a header may name.
TEST_PACKAGES = ["tests", "tests_spark", "tests_browser"]

_DECLARATION = re.compile(r"-\*-.*test-case-name\s*:")


def source_files(root: str, directories: Iterable[str]) -> Iterator[str]:
    """The ``.py`` files under ``directories`` of ``root``, relative to it, sorted."""
    for directory in directories:
        found: List[str] = []
        for path, _, files in os.walk(os.path.join(root, directory)):
            found.extend(os.path.join(path, name) for name in files if name.endswith(".py"))
        for path in sorted(found):
            yield os.path.relpath(path, root)


def is_test_module(root: str, name: str) -> bool:
    """Whether ``name`` is a module or package of one of the :data:`TEST_PACKAGES` under ``root``."""
    parts = name.split(".")
    if parts[0] not in TEST_PACKAGES or not all(part.isidentifier() for part in parts):
        return False
    base = os.path.join(root, *parts)
    return os.path.isfile(base + ".py") or os.path.isfile(os.path.join(base, "__init__.py"))


def stale_headers(root: str, directories: Iterable[str]) -> List[str]:
    """``"path: name"`` for each name a header gives that is no module of the test packages."""
    stale = []
    for relative in source_files(root, directories):
        for name in getTestModules(os.path.join(root, relative)):
            if not is_test_module(root, name):
                stale.append("%s: %r" % (relative, name))
    return stale


def unread_headers(root: str, directories: Iterable[str]) -> List[str]:
    """``"path:line"`` for each header below the second line, where trial never reads it."""
    unread = []
    for relative in source_files(root, directories):
        with open(os.path.join(root, relative), encoding="utf-8") as source:
            for number, line in enumerate(source, 1):
                if number > 2 and _DECLARATION.search(line):
                    unread.append("%s:%d" % (relative, number))
    return unread


class TestCaseNameTests(SynchronousTestCase):
    """The ``test-case-name`` headers of txnsq's sources name real test modules."""

    def test_headers_name_test_modules(self) -> None:
        """Every module a header in txnsq/ or twisted/plugins/ names exists in a test package."""
        self.assertEqual(stale_headers(_ROOT, SOURCES), [])

    def test_headers_where_trial_reads_them(self) -> None:
        """No header sits below a file's second line, where trial would not see it."""
        self.assertEqual(unread_headers(_ROOT, SOURCES), [])

    def test_headers_are_read(self) -> None:
        """The check reads every module of a comma-separated header (so that it checks something)."""
        self.assertEqual(
            getTestModules(os.path.join(_ROOT, "txnsq", "nsqadmin", "app.py")),
            ["tests.test_nsqadmin_api", "tests.test_nsqadmin_pages"],
        )

    def test_stale_header_found(self) -> None:
        """A header naming a missing module, one outside the test packages or one after ", " is reported."""
        root = self.mktemp()
        os.makedirs(os.path.join(root, "src", "deep"))
        os.makedirs(os.path.join(root, "tests", "integration"))
        for name in ["__init__.py", "test_here.py", os.path.join("integration", "__init__.py")]:
            with open(os.path.join(root, "tests", name), "w") as module:
                module.write("")
        headers = {
            "good.py": "tests.test_here,tests.integration",
            os.path.join("deep", "gone.py"): "tests.test_here,tests.test_gone",
            "outside.py": "twisted.test.test_here",
            "spaced.py": "tests.test_here, tests.test_here",
        }
        for name, header in headers.items():
            with open(os.path.join(root, "src", name), "w") as source:
                source.write("# -*- test-case-name: %s -*-\n" % (header,))
        with open(os.path.join(root, "src", "late.py"), "w") as source:
            source.write('"""\nA module.\n"""\n# -*- test-case-name: tests.test_here -*-\n')
        self.assertEqual(
            stale_headers(root, ["src"]),
            [
                "%s: 'tests.test_gone'" % (os.path.join("src", "deep", "gone.py"),),
                "%s: 'twisted.test.test_here'" % (os.path.join("src", "outside.py"),),
                "%s: ' tests.test_here'" % (os.path.join("src", "spaced.py"),),
            ],
        )
        self.assertEqual(unread_headers(root, ["src"]), [os.path.join("src", "late.py") + ":4"])
