"""txnsq's storage backends as Twisted plugins, selected with ``--storage NAME``."""

from txnsq.storage.ephemeral import EphemeralStorage
from txnsq.storage.memory import MemoryStorage

memory = MemoryStorage()
ephemeral = EphemeralStorage()
