"""Tests for txnsq.speedups: loading the compiled modules and saying which path runs."""

from __future__ import annotations

import os
import platform
import sys
from typing import Dict, Optional

from twisted.trial.unittest import SynchronousTestCase

from txnsq import speedups

_ON_CPYTHON = platform.python_implementation() == "CPython"


class _Environment:
    """Sets or clears TXNSQ_NO_EXTENSIONS for one test."""

    def __init__(self, case: SynchronousTestCase, value: Optional[str]) -> None:
        saved = os.environ.get(speedups.ENVIRONMENT_VARIABLE)
        if value is None:
            os.environ.pop(speedups.ENVIRONMENT_VARIABLE, None)
        else:
            os.environ[speedups.ENVIRONMENT_VARIABLE] = value

        def restore() -> None:
            if saved is None:
                os.environ.pop(speedups.ENVIRONMENT_VARIABLE, None)
            else:
                os.environ[speedups.ENVIRONMENT_VARIABLE] = saved

        case.addCleanup(restore)


class LoadTests(SynchronousTestCase):
    """load() imports a compiled module, or gives None."""

    def test_missing(self) -> None:
        """A module that is not built is None, not an error."""
        self.assertIsNone(speedups.load("txnsq.protocol._no_such_module"))

    def test_disabled(self) -> None:
        """TXNSQ_NO_EXTENSIONS=1 gives None even for a module that imports."""
        _Environment(self, "1")
        self.assertIsNone(speedups.load("txnsq.storage.log_format"))
        self.assertTrue(speedups.disabled())

    def test_empty_is_not_set(self) -> None:
        """An empty TXNSQ_NO_EXTENSIONS does not disable anything."""
        _Environment(self, "")
        self.assertFalse(speedups.disabled())
        self.assertIsNotNone(speedups.load("txnsq.storage.log_format"))


class HotPathTests(SynchronousTestCase):
    """hot_path() and hot_path_token() say which path runs."""

    def test_disabled(self) -> None:
        """With TXNSQ_NO_EXTENSIONS set, the pure Python runs and the line says why."""
        _Environment(self, "1")
        self.assertEqual(speedups.hot_path_token(), "pure")
        if _ON_CPYTHON:
            self.assertEqual(speedups.hot_path(), "pure Python (TXNSQ_NO_EXTENSIONS is set)")

    def test_current(self) -> None:
        """On CPython with the modules built, every compiled module is named; elsewhere pure Python."""
        _Environment(self, None)
        if not _ON_CPYTHON:
            self.assertEqual(speedups.hot_path_token(), "pure")
            self.assertTrue(speedups.hot_path().startswith("pure Python (PyPy"))
            return
        built: Dict[str, bool] = {name: speedups.load(name) is not None for name in speedups.COMPILED_MODULES.values()}
        if all(built.values()):
            self.assertEqual(speedups.hot_path_token(), "compiled")
            self.assertEqual(
                speedups.hot_path(), "compiled (%s)" % (", ".join(speedups.COMPILED_MODULES.values()),)
            )
        else:
            self.assertIn(speedups.hot_path_token(), ("pure", "partly-compiled"))

    def test_none_built(self) -> None:
        """When no compiled module imports, the line says they are not built."""
        if not _ON_CPYTHON:
            self.skipTest("PyPy never builds them")
        _Environment(self, None)
        saved = dict(speedups._loaded)
        self.addCleanup(speedups._loaded.update, saved)
        for name in speedups.COMPILED_MODULES.values():
            speedups._loaded[name] = None
        self.assertEqual(speedups.hot_path(), "pure Python (the compiled modules are not built)")
        self.assertEqual(speedups.hot_path_token(), "pure")

    def test_modules_exist(self) -> None:
        """Each pure module named in COMPILED_MODULES imports and has its compiled flag."""
        for pure in speedups.COMPILED_MODULES:
            __import__(pure)
            self.assertTrue(hasattr(sys.modules[pure], "compiled"), pure)
