"""
Names a package exports but imports only when first used (PEP 562's
module ``__getattr__``), so that importing one of its submodules does not
import everything the exported names need.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable, Dict

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Dict[str, str]) -> Callable[[str], Any]:
    """
    The ``__getattr__`` of ``package``: each name of ``exports`` is taken
    from the module it maps to, on first use.

    :param exports: ``{name: module}``.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError("module %r has no attribute %r" % (package, name))
        return getattr(importlib.import_module(module), name)

    return __getattr__
