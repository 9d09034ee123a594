"""txnsq's fault lab: emulated hosts, nemeses, workloads and checkers (not part of the installed txnsq)."""
