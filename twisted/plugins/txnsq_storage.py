"""txnsq's storage backends as Twisted plugins, selected with ``--storage NAME``."""

from txnsq.storage.disk import DiskStorage
from txnsq.storage.ephemeral import EphemeralStorage
from txnsq.storage.memory import MemoryStorage

disk = DiskStorage()
memory = MemoryStorage()
ephemeral = EphemeralStorage()
