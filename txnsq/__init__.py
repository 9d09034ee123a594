"""
txnsq: NSQ, the realtime distributed messaging platform, written on Twisted.

A drop-in peer of the Go daemons (``nsqd``, ``nsqlookupd``) that any NSQ
client can talk to, embeddable in any Twisted application.

Public API: ``__version__``; the packages :mod:`txnsq.client`,
:mod:`txnsq.testing`, :mod:`txnsq.nsqd`, :mod:`txnsq.nsqlookupd`,
:mod:`txnsq.nsqadmin`, :mod:`txnsq.metaq`, :mod:`txnsq.storage`,
:mod:`txnsq.protocol` and :mod:`txnsq.spark`, each of which says which of
its submodules are public; and the module :mod:`txnsq.reactors`.  In a
public package or module, the names in its ``__all__`` are public.

Every other package and module (the daemons' command lines and plugins,
the HTTP plumbing, the NATS cluster routes and mirroring, the
command-line tools' parts) is private: txnsq's own, and free to change
in any release.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
