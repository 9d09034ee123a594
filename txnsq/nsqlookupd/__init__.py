"""
nsqlookupd: the discovery daemon NSQ producers register with and consumers query.

To embed one in a Twisted application::

    from txnsq.nsqlookupd import NSQLookupdService, parse_nsqlookupd_args

    NSQLookupdService(parse_nsqlookupd_args([])).setServiceParent(application)

The names are imported when first used.

Public API: the names in ``__all__``
(:class:`NSQLookupdService <txnsq.nsqlookupd.service.NSQLookupdService>`,
:class:`NSQLookupdOptions <txnsq.nsqlookupd.options.NSQLookupdOptions>`,
:func:`parse_nsqlookupd_args <txnsq.nsqlookupd.options.parse_nsqlookupd_args>`),
and the submodules :mod:`txnsq.nsqlookupd.service` and
:mod:`txnsq.nsqlookupd.options` that define them.  Every other submodule
is private.
"""

from txnsq.lazy import lazy_exports

__all__ = ["NSQLookupdOptions", "NSQLookupdService", "parse_nsqlookupd_args"]

_EXPORTS = {
    "NSQLookupdOptions": "txnsq.nsqlookupd.options",
    "NSQLookupdService": "txnsq.nsqlookupd.service",
    "parse_nsqlookupd_args": "txnsq.nsqlookupd.options",
}


__getattr__ = lazy_exports(__name__, _EXPORTS)
