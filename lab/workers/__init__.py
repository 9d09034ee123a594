"""
The lab's client processes, run on client hosts (inside their
namespaces): each writes its operations to a history file, one JSON
object a line (see :mod:`lab.history`).
"""

__all__: list = []
