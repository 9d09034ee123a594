"""
The examples of ``docs/testing.md`` run as they are written: each Python
block is executed as part of this module, and the test cases it defines
are collected by trial from here (as ``DocExample<N>_<Name>``), so they
run with the rest of the suite and must pass.
"""

from __future__ import annotations

import os
import re
from typing import Any, Dict, List

from twisted.trial.unittest import SynchronousTestCase

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "testing.md")

_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.M | re.S)


def example_blocks() -> List[str]:
    """The Python code blocks of ``docs/testing.md``, in order."""
    with open(DOC, encoding="utf-8") as doc:
        return _BLOCK.findall(doc.read())


def _collect() -> Dict[str, Any]:
    """Each block's test cases, by the name they get in this module."""
    found: Dict[str, Any] = {}
    for number, block in enumerate(example_blocks()):
        namespace: Dict[str, Any] = {"__name__": __name__}
        exec(compile(block, "%s[python block %d]" % (DOC, number), "exec"), namespace)
        for name, value in namespace.items():
            if isinstance(value, type) and issubclass(value, SynchronousTestCase):
                if value.__module__ == __name__:
                    alias = "DocExample%d_%s" % (number, name)
                    # Named as it is found in this module, so that trial can
                    # load it by name (its workers, --jobs, do).
                    value.__name__ = value.__qualname__ = alias
                    found[alias] = value
    return found


globals().update(_collect())


class TestingDocExamplesTests(SynchronousTestCase):
    """docs/testing.md's examples."""

    def test_examples_collected(self) -> None:
        """Both examples are on the page and define their test cases here."""
        self.assertEqual(len(example_blocks()), 2)
        self.assertEqual(
            sorted(_collect()),
            ["DocExample0_SignupEventsTests", "DocExample1_PublisherTests"],
        )
