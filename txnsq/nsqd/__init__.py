"""
nsqd: the broker core (topics, channels, in-flight and deferred queues) and
its Twisted adapters (the V2 TCP protocol, HTTP, the service).

To embed an nsqd in a Twisted application::

    from txnsq.nsqd import NSQDOptions, NSQDService, parse_nsqd_args

    service = NSQDService(parse_nsqd_args(["--data-path=/var/lib/nsqd"]))
    service.setServiceParent(application)

The names are imported when first used, so that importing one submodule
(the broker core, say) does not import the HTTP API and its framework.

Public API: the names in ``__all__``
(:class:`NSQDService <txnsq.nsqd.service.NSQDService>`,
:class:`NSQDOptions <txnsq.nsqd.options.NSQDOptions>`,
:func:`parse_nsqd_args <txnsq.nsqd.flags.parse_nsqd_args>`), and the
submodules :mod:`txnsq.nsqd.service`, :mod:`txnsq.nsqd.options` and
:mod:`txnsq.nsqd.flags` that define them; :mod:`txnsq.nsqd.broker`,
:mod:`txnsq.nsqd.topic` and :mod:`txnsq.nsqd.channel`, the broker a
service (or :class:`MemoryNSQD <txnsq.testing.MemoryNSQD>`) holds, with
its topics and channels; and :mod:`txnsq.nsqd.retention`, the errors of
the broker's retained topics.  Every other submodule is private.
"""

from txnsq.lazy import lazy_exports

__all__ = ["NSQDOptions", "NSQDService", "parse_nsqd_args"]

_EXPORTS = {
    "NSQDOptions": "txnsq.nsqd.options",
    "NSQDService": "txnsq.nsqd.service",
    "parse_nsqd_args": "txnsq.nsqd.flags",
}


__getattr__ = lazy_exports(__name__, _EXPORTS)
