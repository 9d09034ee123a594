"""
Message storage: the ``IBackendQueue`` interface and its backends, each
registered as a Twisted plugin and chosen with ``--storage NAME``.
"""

__all__: list = []
