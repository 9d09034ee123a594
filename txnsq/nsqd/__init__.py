"""
nsqd: the broker core (topics, channels, in-flight and deferred queues) and
its Twisted adapters (the V2 TCP protocol, HTTP, the service).

To embed an nsqd in a Twisted application::

    from txnsq.nsqd import NSQDOptions, NSQDService, parse_nsqd_args

    service = NSQDService(parse_nsqd_args(["--data-path=/var/lib/nsqd"]))
    service.setServiceParent(application)

The names are imported when first used, so that importing one submodule
(the broker core, say) does not import the HTTP API and its framework.
"""

from typing import Any

__all__ = ["NSQDOptions", "NSQDService", "parse_nsqd_args"]

_EXPORTS = {
    "NSQDOptions": "txnsq.nsqd.options",
    "NSQDService": "txnsq.nsqd.service",
    "parse_nsqd_args": "txnsq.nsqd.options",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError("module %r has no attribute %r" % (__name__, name))
    import importlib

    return getattr(importlib.import_module(module), name)
