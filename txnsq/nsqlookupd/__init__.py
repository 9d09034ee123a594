"""
nsqlookupd: the discovery daemon NSQ producers register with and consumers query.

To embed one in a Twisted application::

    from txnsq.nsqlookupd import NSQLookupdService, parse_nsqlookupd_args

    NSQLookupdService(parse_nsqlookupd_args([])).setServiceParent(application)

The names are imported when first used.
"""

from typing import Any

__all__ = ["NSQLookupdOptions", "NSQLookupdService", "parse_nsqlookupd_args"]

_EXPORTS = {
    "NSQLookupdOptions": "txnsq.nsqlookupd.options",
    "NSQLookupdService": "txnsq.nsqlookupd.service",
    "parse_nsqlookupd_args": "txnsq.nsqlookupd.options",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    import importlib

    return getattr(importlib.import_module(module), name)
