"""
txnsq's fault lab: txnsq clusters on emulated hosts (network namespaces on
a bridge with no uplink), under partitions, pauses, lost writes, full
disks and skewed clocks, with Jepsen-style histories and checkers.

Part of the repository, not of the installed ``txnsq``.  Run as
``python -m lab list`` and ``python -m lab run NAME|all``; needs root.
``lab/README.md`` says how it works.
"""

__all__: list = []
