"""
nsqlookupd: the discovery daemon NSQ producers register with and consumers query.

To embed one in a Twisted application::

    from txnsq.nsqlookupd import NSQLookupdService, parse_nsqlookupd_args

    NSQLookupdService(parse_nsqlookupd_args([])).setServiceParent(application)

The names are imported when first used.
"""

from txnsq.lazy import lazy_exports

__all__ = ["NSQLookupdOptions", "NSQLookupdService", "parse_nsqlookupd_args"]

_EXPORTS = {
    "NSQLookupdOptions": "txnsq.nsqlookupd.options",
    "NSQLookupdService": "txnsq.nsqlookupd.service",
    "parse_nsqlookupd_args": "txnsq.nsqlookupd.options",
}


__getattr__ = lazy_exports(__name__, _EXPORTS)
