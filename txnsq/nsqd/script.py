# -*- test-case-name: tests.integration.test_nsqd_script -*-
"""
The ``nsqd`` console script (and ``python -m txnsq.nsqd``).

Kept apart from :mod:`txnsq.nsqd.service` so that the command line is read
before anything imports the reactor: an nsqd whose settings can never use
TLS gets a reactor without it (:mod:`txnsq.plain_reactor`), and the
service's modules are imported only once the flags are valid.

Under PyPy the JIT is off while nsqd starts: the import of some 550
modules runs each module's top level once, and tracing it only costs
time (a third of a second) and memory (4 MB) that the JIT never uses
again.  It is turned back on, with PyPy's default settings, once nsqd
listens (so JIT settings given as ``pypy3 --jit ...`` do not outlive the
start).
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

__all__ = ["main"]


def set_jit(setting: str) -> None:
    """``pypyjit.set_param(setting)`` under PyPy (``off``, ``default``); nothing elsewhere."""
    try:
        import pypyjit  # type: ignore[import-not-found]
    except ImportError:
        return
    pypyjit.set_param(setting)


def _console_service(options: Any, reactor: Any) -> Any:
    """:func:`txnsq.nsqd.service._console_service`, imported when needed."""
    from txnsq.nsqd.service import _console_service

    return _console_service(options, reactor)


def _running() -> None:
    """nsqd listens: freeze what start made (CPython), turn the JIT on (PyPy)."""
    set_jit("default")
    from txnsq.nsqd.service import freeze_startup_objects

    freeze_startup_objects()


def main(argv: Optional[Sequence[str]] = None) -> None:
    """The ``nsqd`` console script: Go nsqd's flags, the same service."""
    set_jit("off")
    from txnsq.daemon import run_console_script
    from txnsq.nsqd.flags import parse_nsqd_args_or_exit
    from txnsq.nsqd.options import NSQDOptions

    run_console_script(
        "nsqd",
        argv,
        parse_nsqd_args_or_exit,
        _console_service,
        [_running],
        may_use_tls=NSQDOptions.may_use_tls,
    )
