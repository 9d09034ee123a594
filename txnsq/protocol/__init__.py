"""
Sans-IO codecs for NSQ's wire protocols: V2 commands and frames, the message
wire format, name validation, IDENTIFY negotiation and error codes.

Nothing in this package imports Twisted; the server, the client, the fuzzers
and the benchmarks share it.
"""

__all__: list = []
