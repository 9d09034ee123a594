"""
txnsq: NSQ, the realtime distributed messaging platform, written on Twisted.

A drop-in peer of the Go daemons (``nsqd``, ``nsqlookupd``) that any NSQ
client can talk to, embeddable in any Twisted application.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
