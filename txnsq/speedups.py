# -*- test-case-name: tests.test_speedups -*-
"""
The optional compiled speed-ups, and which path is in use.

Each compiled module sits beside the pure-Python module it accelerates
(``txnsq/protocol/_v2.c`` beside ``v2.py``, ...), is built by ``setup.py``
on CPython where a C compiler exists, and is imported through
:func:`load`: ``None`` when it is not built (PyPy, no compiler at install,
a failed build) or ``TXNSQ_NO_EXTENSIONS`` is set in the environment, and
the pure Python runs.  Nothing else changes: the pure modules are the
reference, tested against the compiled ones byte for byte.

:func:`hot_path` says which is in use, for the start log line and
``--version``.
"""

from __future__ import annotations

import importlib
import os
import platform
from types import ModuleType
from typing import Dict, List, Optional

__all__ = ["COMPILED_MODULES", "ENVIRONMENT_VARIABLE", "disabled", "hot_path", "hot_path_token", "load"]

#: Set (to anything but an empty string) to run the pure Python.
ENVIRONMENT_VARIABLE = "TXNSQ_NO_EXTENSIONS"

#: Every compiled module, by the module it accelerates.
COMPILED_MODULES: Dict[str, str] = {
    "txnsq.protocol.v2": "txnsq.protocol._v2",
    "txnsq.protocol.message": "txnsq.protocol._message",
    "txnsq.storage.log_format": "txnsq.storage._log_format",
    "txnsq.storage.diskqueue_format": "txnsq.storage._diskqueue_format",
}

_loaded: Dict[str, Optional[ModuleType]] = {}


def disabled() -> bool:
    """Whether ``TXNSQ_NO_EXTENSIONS`` asks for the pure Python."""
    return bool(os.environ.get(ENVIRONMENT_VARIABLE))


def load(name: str) -> Optional[ModuleType]:
    """
    The compiled module ``name``, or ``None`` when it is not built, does
    not import, or the pure Python is asked for.  Never raises.
    """
    if disabled():
        return None
    try:
        module: Optional[ModuleType] = importlib.import_module(name)
    except ImportError:
        module = None
    _loaded[name] = module
    return module


def _in_use() -> List[str]:
    """The compiled modules that import here (each is loaded once to see)."""
    found = []
    for name in COMPILED_MODULES.values():
        module = _loaded[name] if name in _loaded else load(name)
        if module is not None:
            found.append(name)
    return found


def hot_path() -> str:
    """
    One line for the start log: ``compiled (txnsq.protocol._v2, ...)``, or
    ``pure Python`` and why.
    """
    if platform.python_implementation() != "CPython":
        return "pure Python (%s runs the pure modules)" % (platform.python_implementation(),)
    if disabled():
        return "pure Python (%s is set)" % (ENVIRONMENT_VARIABLE,)
    found = _in_use()
    if not found:
        return "pure Python (the compiled modules are not built)"
    missing = sorted(set(COMPILED_MODULES.values()) - set(found))
    if missing:
        return "compiled (%s; not built: %s)" % (", ".join(found), ", ".join(missing))
    return "compiled (%s)" % (", ".join(found),)


def hot_path_token() -> str:
    """``compiled`` when every compiled module is in use, else ``pure`` (or ``partly-compiled``)."""
    if disabled() or platform.python_implementation() != "CPython":
        return "pure"
    found = _in_use()
    if not found:
        return "pure"
    if len(found) < len(COMPILED_MODULES):
        return "partly-compiled"
    return "compiled"
