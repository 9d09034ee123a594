"""
nsqd: the broker core (topics, channels, in-flight and deferred queues) and
its Twisted adapters (the V2 TCP protocol, HTTP, the service).
"""

__all__: list = []
