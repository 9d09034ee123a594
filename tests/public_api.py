"""
txnsq's public API, read from where it is declared.

Each package's docstring has a paragraph that starts ``Public API:`` and
names, with ``:mod:`` references, which of its submodules are public; a
package or module is public when its parent package declares it so
(``txnsq`` itself is).  In a public module the names of its ``__all__``
are public.  Everything else is private.

``pydoctor.ini`` says the same to pydoctor with its ``privacy`` list;
:func:`pydoctor_privacy` reads that list for the tests to compare.
"""

from __future__ import annotations

import ast
import configparser
import importlib
import os
import re
from typing import Dict, List, Optional, Set, Tuple

__all__ = [
    "ROOT",
    "declared_submodules",
    "defined_in_init",
    "is_public",
    "packages",
    "public_modules",
    "pydoctor_privacy",
]

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_PARAGRAPH = re.compile(r"^Public API:.*?(?=\n\s*\n|\Z)", re.M | re.S)
_MODULE_REF = re.compile(r":mod:`(?:[^`<]*<)?(txnsq[\w.]*)>?`")


def _init_path(package: str) -> str:
    return os.path.join(ROOT, *package.split("."), "__init__.py")


def _parse(package: str) -> ast.Module:
    with open(_init_path(package), encoding="utf-8") as source:
        return ast.parse(source.read())


def packages() -> List[str]:
    """Every package of txnsq, as dotted names, found on disk."""
    found = []
    for directory, _, files in os.walk(os.path.join(ROOT, "txnsq")):
        if "__init__.py" in files:
            found.append(os.path.relpath(directory, ROOT).replace(os.sep, "."))
    return sorted(found)


def declared_submodules(package: str) -> Optional[Set[str]]:
    """
    The submodules the package's ``Public API:`` paragraph names, or
    ``None`` when its docstring has no such paragraph.
    """
    doc = ast.get_docstring(_parse(package)) or ""
    paragraph = _PARAGRAPH.search(doc)
    if paragraph is None:
        return None
    return set(_MODULE_REF.findall(paragraph.group(0)))


def public_modules() -> Set[str]:
    """Every public package and module: ``txnsq`` and what public packages declare."""
    public = {"txnsq"}
    todo = ["txnsq"]
    all_packages = set(packages())
    while todo:
        package = todo.pop()
        for module in declared_submodules(package) or ():
            public.add(module)
            if module in all_packages:
                todo.append(module)
    return public


def defined_in_init(package: str) -> Set[str]:
    """The names a package's ``__init__.py`` itself defines (not imports)."""
    names: Set[str] = set()
    for node in _parse(package).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
    return names


def _module_prefix(dotted: str) -> Tuple[str, List[str]]:
    """The longest importable module a dotted name starts with, and the rest."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        try:
            importlib.import_module(name)
        except ImportError:
            continue
        return name, parts[cut:]
    raise ImportError(dotted)


def is_public(dotted: str) -> bool:
    """
    Whether a dotted name is public: a public module, or a name in a
    public module's ``__all__`` (and what that name holds, such as a
    class's methods).
    """
    module, rest = _module_prefix(dotted)
    if module not in public_modules():
        return False
    if not rest:
        return True
    return rest[0] in getattr(importlib.import_module(module), "__all__", ())


def pydoctor_privacy() -> Dict[str, List[str]]:
    """``pydoctor.ini``'s privacy list: the patterns and names, by privacy."""
    config = configparser.ConfigParser()
    config.read(os.path.join(ROOT, "pydoctor.ini"), encoding="utf-8")
    privacy: Dict[str, List[str]] = {}
    for line in config["pydoctor"]["privacy"].split():
        kind, _, pattern = line.partition(":")
        privacy.setdefault(kind.upper(), []).append(pattern)
    return privacy
