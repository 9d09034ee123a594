"""
``docs/design.md``, the maintainers' map, names only what exists: every
path and file it shows, every page it links, every package of txnsq, and
the core modules ``tests/test_layering.py`` holds to the core's rules.
"""

from __future__ import annotations

import glob
import os
import re
from typing import Iterator, List, Set

from twisted.trial.unittest import SynchronousTestCase

from tests.test_layering import CORE

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_DOCS = os.path.join(_ROOT, "docs")
_PAGE = os.path.join(_DOCS, "design.md")

_FENCE = re.compile(r"^```.*?^```$", re.M | re.S)
_SPAN = re.compile(r"`([^`\s]+)`")
_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
_FILE = re.compile(r"^[\w.*-]+\.(?:py|c|md|ini|in|sh)$")

#: Top-level directories whose paths the page shows and which exist in
#: every checkout (``lab/`` is left out: it is described, not checked).
_TREES = ["txnsq", "tests", "twisted", "docs", "bench", ".ci", "tests_spark", "tests_browser", "examples"]

#: Where a file named without its directory may be.
_SEARCHED = ["", "txnsq", "tests", "twisted", "bench", ".ci"]


def page() -> str:
    """The text of docs/design.md."""
    with open(_PAGE, encoding="utf-8") as source:
        return source.read()


def spans(text: str) -> Iterator[str]:
    """The code spans of ``text`` outside its fenced blocks."""
    yield from _SPAN.findall(_FENCE.sub("", text))


def exists(path: str) -> bool:
    """Whether ``path`` (relative to the root; ``*`` allowed) names a file or directory."""
    return bool(glob.glob(os.path.join(_ROOT, path)))


def basenames() -> Set[str]:
    """The names of the files under the searched directories."""
    found: Set[str] = set()
    for directory in _SEARCHED:
        top = os.path.join(_ROOT, directory)
        if not directory:
            found.update(os.listdir(top))
            continue
        for _, _, files in os.walk(top):
            found.update(files)
    return found


class DesignPageTests(SynchronousTestCase):
    """docs/design.md shows the tree as it is."""

    def setUp(self) -> None:
        self.text = page()

    def test_paths_exist(self) -> None:
        """Every path the page shows exists (integration/ and interop/ ones are under tests/)."""
        missing = []
        for span in spans(self.text):
            path = span.rstrip("/")
            first = path.split("/")[0]
            if first in ("integration", "interop"):
                path = "tests/" + path
            elif first not in _TREES or "/" not in path or "<" in path:
                # Not a path, or a pattern in words (tests/test_<module>.py).
                continue
            if not exists(path):
                missing.append(span)
        self.assertEqual(missing, [])

    def test_files_exist(self) -> None:
        """Every file the page names without its directory exists somewhere in the tree."""
        names = basenames()
        missing: List[str] = []
        for span in spans(self.text):
            if "/" in span or not _FILE.match(span):
                continue
            pattern = re.compile(re.escape(span).replace(r"\*", ".*") + "$")
            if not any(pattern.match(name) for name in names):
                missing.append(span)
        self.assertEqual(missing, [])

    def test_links_exist(self) -> None:
        """Every page the design page links to exists."""
        links = [link for link in _LINK.findall(self.text) if "://" not in link]
        self.assertTrue(links)
        self.assertEqual([link for link in links if not os.path.exists(os.path.join(_DOCS, link))], [])

    def test_every_package_named(self) -> None:
        """Every package of txnsq is on the page."""
        packages = sorted(
            name
            for name in os.listdir(os.path.join(_ROOT, "txnsq"))
            if os.path.isfile(os.path.join(_ROOT, "txnsq", name, "__init__.py"))
        )
        self.assertTrue(packages)
        self.assertEqual([name for name in packages if "txnsq/%s/" % (name,) not in self.text], [])

    def test_core_in_the_picture(self) -> None:
        """Every module the layering test holds to the core's rules is in the page's core layer."""
        [picture] = [block for block in _FENCE.findall(self.text) if " core " in block]
        core = picture[picture.index(" core ") : picture.index(" storage ")]
        missing = [name for name in CORE if not re.search(r"\b%s\b" % (name.rsplit(".", 1)[1],), core)]
        self.assertEqual(missing, [])

    def test_checks_can_fail(self) -> None:
        """The path and file checks see what is not there."""
        self.assertFalse(exists("txnsq/nsqd/no_such_module.py"))
        self.assertNotIn("no_such_module.py", basenames())
        self.assertIn("broker.py", basenames())
