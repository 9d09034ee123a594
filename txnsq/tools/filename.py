# -*- test-case-name: tests.test_tools_filename -*-
"""
How ``nsq_to_file`` names its files, by Go ``nsq_to_file``'s rules.

``--filename-format`` (``<TOPIC>.<HOST><REV>.<DATETIME>.log``) is resolved
in two steps.  Once per topic, :func:`compute_filename_format` replaces
``<TOPIC>``, ``<HOST>`` and ``<PID>``, drops ``<REV>`` when nothing can
need a revision, insists on it when something can (gzip, rotation, a
work directory) and appends ``.gz`` for gzip.  Each time a file is opened,
:func:`dated_filename` replaces ``<DATETIME>`` with ``--datetime-format``
and :func:`with_revision` replaces ``<REV>`` with ``-000000``,
``-000001``...
"""

from __future__ import annotations

import os
import posixpath
import socket
from typing import Optional

from txnsq.tools.strftime import strftime

__all__ = [
    "FilenameFormatError",
    "compute_filename_format",
    "dated_filename",
    "go_path_join",
    "output_path",
    "with_revision",
]

REV = "<REV>"


class FilenameFormatError(ValueError):
    """``--filename-format`` cannot be used with the other flags (Go's text)."""


def compute_filename_format(
    filename_format: str,
    topic: str,
    gzip: bool = False,
    rotate_size: int = 0,
    rotate_interval: float = 0.0,
    work_dir: str = "",
    output_dir: str = "",
    host_identifier: str = "",
    hostname: Optional[str] = None,
    pid: Optional[int] = None,
) -> str:
    """
    The per-topic file name template, with only ``<DATETIME>`` and
    ``<REV>`` left, as Go's ``computeFilenameFormat``.

    :param host_identifier: replaces ``<HOST>`` when not empty, itself
        with ``<SHORT_HOST>`` and ``<HOSTNAME>`` replaced; otherwise
        ``<HOST>`` is the short host name.
    :param hostname: the host name (this machine's by default).
    :param pid: the process id (this process's by default).
    :raises FilenameFormatError: ``<REV>`` is missing but gzip, rotation
        or a separate work directory is enabled.
    """
    if hostname is None:
        hostname = socket.gethostname()
    if pid is None:
        pid = os.getpid()
    short_hostname = hostname.split(".")[0]
    identifier = short_hostname
    if host_identifier:
        identifier = host_identifier.replace("<SHORT_HOST>", short_hostname)
        identifier = identifier.replace("<HOSTNAME>", hostname)
    template = filename_format
    if gzip or rotate_size > 0 or rotate_interval > 0 or work_dir != output_dir:
        if REV not in template:
            raise FilenameFormatError(
                "missing <REV> in --filename-format when gzip, rotation, or work dir enabled"
            )
    else:
        template = template.replace(REV, "")
    template = template.replace("<TOPIC>", topic)
    template = template.replace("<HOST>", identifier)
    template = template.replace("<PID>", "%d" % (pid,))
    if gzip and not template.endswith(".gz"):
        template += ".gz"
    return template


def dated_filename(template: str, datetime_format: str, when: float) -> str:
    """``template`` with ``<DATETIME>`` replaced by the local time ``when``."""
    return template.replace("<DATETIME>", strftime(datetime_format, when))


def with_revision(path: str, rev: int) -> str:
    """``path`` with every ``<REV>`` replaced by ``-%06d`` of ``rev``."""
    return path.replace(REV, "-%06d" % (rev,))


def go_path_join(*parts: str) -> str:
    """
    Go's ``path.Join``: the non-empty parts joined by ``/`` and cleaned;
    a leading ``/`` of a later part does not restart the path.
    """
    joined = "/".join(part for part in parts if part)
    if not joined:
        return ""
    return posixpath.normpath(joined)


def output_path(path: str, work_dir: str, output_dir: str) -> str:
    """
    Where a finished file in ``work_dir`` goes in ``output_dir``: Go's
    ``filepath.Join(OutputDir, strings.TrimPrefix(path, WorkDir))``.
    """
    work = go_path_join(work_dir)
    relative = path[len(work) :] if path.startswith(work) else path
    return go_path_join(output_dir, relative)
