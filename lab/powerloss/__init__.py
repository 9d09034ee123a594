"""
Lost unsynced writes for a process killed with SIGKILL, as a power loss
would lose them: an ``LD_PRELOAD`` shim journals what each file under a
watched directory held at its last ``fsync`` (:mod:`lab.powerloss.power`).
"""

from lab.powerloss.power import (
    FileLoss,
    PowerLossReport,
    PowerLossUnavailable,
    build,
    environment,
    lose_unsynced_writes,
    settle,
)

__all__ = [
    "FileLoss",
    "PowerLossReport",
    "PowerLossUnavailable",
    "build",
    "environment",
    "lose_unsynced_writes",
    "settle",
]
