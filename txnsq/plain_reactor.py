# -*- test-case-name: tests.test_plain_reactor -*-
"""
Importing Twisted's reactor without its TLS support, for a daemon process
whose settings can never use TLS.

``twisted.internet.tcp`` and ``twisted.internet.posixbase`` (which every
reactor imports) and ``twisted.internet.endpoints`` import pyOpenSSL, and through it
``cryptography``, whenever they are installed: that is 12 MB of memory and
a tenth of a second of start on CPython, 22 MB on PyPy, for a process that
never speaks TLS.  Both modules import it inside ``try: ... except
ImportError``, and without it they simply lack TLS (``startTLS`` on TCP
connections, ``listenSSL`` and ``connectSSL``, ``ssl:`` endpoints,
``wrapClientTLS``).  :func:`import_reactor`
imports them with pyOpenSSL out of sight; pyOpenSSL stays importable
afterwards for anything else.

Only a console script calls it, with its own settings, and only when they
name no certificate, no ``https`` peer and no endpoint other than plain
TCP or UNIX sockets (``txnsq.nsqd.options.NSQDOptions.may_use_tls``): the
same process with TLS configured imports the reactor as usual.  It does
nothing if the reactor's modules are already imported (``twistd``, an
application, a test run).
"""

from __future__ import annotations

import sys
from typing import Any, Dict

__all__ = ["import_reactor"]

#: The modules imported with pyOpenSSL hidden: they keep what they found.
_TLS_OPTIONAL = (
    "twisted.internet.tcp",
    "twisted.internet.endpoints",
    "twisted.internet.posixbase",
)

#: Set to ``None`` in ``sys.modules`` while they import, which makes
#: ``import OpenSSL`` raise ImportError.
_HIDDEN = ("OpenSSL", "OpenSSL.SSL")


def import_reactor(tls: bool) -> Any:
    """
    Import and return the global reactor; with ``tls`` false, import the
    reactor's TCP support and the endpoints without TLS first, when they
    are not imported yet.
    """
    if not tls and not any(name in sys.modules for name in _TLS_OPTIONAL):
        saved: Dict[str, Any] = {}
        for name in _HIDDEN:
            if name in sys.modules:
                saved[name] = sys.modules[name]
            sys.modules[name] = None  # type: ignore[assignment]
        try:
            import twisted.internet.endpoints  # noqa: F401
            import twisted.internet.posixbase  # noqa: F401
            import twisted.internet.tcp  # noqa: F401
        finally:
            for name in _HIDDEN:
                del sys.modules[name]
            sys.modules.update(saved)
    from twisted.internet import reactor

    return reactor
