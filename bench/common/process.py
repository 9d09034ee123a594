"""
What the benchmarks read about a process (this one or a child nsqd): its
CPU time and resident memory from ``/proc``, and the limit on open files
that runs with thousands of connections raise.

Standard library only; ``None`` where ``/proc`` is missing (not Linux).
"""

from __future__ import annotations

import os
from typing import Optional

__all__ = ["process_cpu_seconds", "process_rss_bytes", "raise_open_files_limit"]


def process_cpu_seconds(pid: int) -> Optional[float]:
    """
    The user + system CPU seconds process ``pid`` has used so far (its own,
    not its children's), from ``/proc/PID/stat``; ``None`` where there is no
    such file (not Linux, or the process is gone).
    """
    try:
        with open("/proc/%d/stat" % (pid,), "rb") as stat:
            text = stat.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces;
    # utime and stime are fields 14 and 15.
    fields = text[text.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_rss_bytes(pid: int) -> Optional[int]:
    """
    The resident set size of process ``pid`` in bytes (``VmRSS`` in
    ``/proc/PID/status``); ``None`` where there is no such file (not Linux,
    or the process is gone).
    """
    try:
        with open("/proc/%d/status" % (pid,), "rb") as status:
            for line in status:
                if line.startswith(b"VmRSS:"):
                    # "VmRSS:	  123456 kB": the kernel's kB are KiB.
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def raise_open_files_limit(wanted: int) -> int:
    """
    Raise this process's soft limit on open files (``RLIMIT_NOFILE``) to
    ``wanted``, or as far as the hard limit allows. Children started
    afterwards, nsqd among them, inherit it.

    :return: the soft limit now in force (``wanted`` or more when it was
        already that high; unchanged where there is no ``resource`` module).
    """
    try:
        import resource  # Unix only
    except ImportError:
        return wanted
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    if soft >= wanted:
        return soft
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return target
