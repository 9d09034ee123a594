"""
Run a client script from ``tests/interop/scripts/`` in a subprocess (each
client library keeps its own event loop there) and collect the JSON event
lines it prints, without blocking the reactor that runs the nsqd under test.
"""

from __future__ import annotations

import json
import os
import platform
import sys
from typing import Any, Dict, List, Mapping, NamedTuple, Optional, Sequence

from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.protocol import ProcessProtocol
from twisted.python.failure import Failure

SCRIPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "scripts")

#: The requirement lines the interop tests need, by client (tox deps).
REQUIREMENTS: Dict[str, str] = {
    "pynsq": "pynsq==0.9.1 'tornado<6.2'",
    "gnsq": "gnsq==1.0.2 'urllib3<2' (pulls in gevent)",
}

#: Why a client cannot run under this interpreter at all (None: it can).
#: gevent, under gnsq, has no PyPy build; the CPython environment runs
#: the gnsq tests.
GNSQ_UNAVAILABLE: Optional[str] = (
    "gnsq needs gevent, which has no PyPy build (tox's py3 environment runs this)"
    if platform.python_implementation() == "PyPy" else None)


class ScriptResult(NamedTuple):
    """What a client script did."""

    code: Optional[int]
    signal: Optional[int]
    events: List[Dict[str, Any]]
    stderr: str

    def of(self, event: str) -> List[Dict[str, Any]]:
        """The events of one kind, in order."""
        return [item for item in self.events if item.get("event") == event]

    def describe(self) -> str:
        """Everything, for failure messages."""
        return "exit %s signal %s\nevents:\n%s\nstderr:\n%s" % (
            self.code, self.signal, "\n".join(json.dumps(e) for e in self.events), self.stderr[-4000:])


class _ScriptProtocol(ProcessProtocol):
    def __init__(self) -> None:
        self.out = bytearray()
        self.err = bytearray()
        self.reason: Optional[Failure] = None
        self.ended: Deferred[None] = Deferred()

    def outReceived(self, data: bytes) -> None:
        self.out += data

    def errReceived(self, data: bytes) -> None:
        self.err += data

    def processEnded(self, reason: Failure) -> None:
        # Not callback(reason): a Failure would take the errback path.
        self.reason = reason
        self.ended.callback(None)


@inlineCallbacks
def run_script(
    name: str,
    args: Sequence[str],
    reactor: Any = None,
    timeout: float = 60.0,
    env: Optional[Mapping[str, str]] = None,
) -> Any:
    """
    Run ``scripts/<name>`` with this interpreter; fires with a
    :class:`ScriptResult` (the script is killed after ``timeout`` seconds).
    """
    if reactor is None:
        from twisted.internet import reactor as global_reactor

        reactor = global_reactor
    protocol = _ScriptProtocol()
    command = [sys.executable, os.path.join(SCRIPTS, name)] + list(args)
    child_env = dict(os.environ)
    child_env["PYTHONUNBUFFERED"] = "1"
    child_env.update(env or {})
    transport = reactor.spawnProcess(protocol, sys.executable, command, env=child_env)

    def kill() -> None:
        try:
            transport.signalProcess("KILL")
        except Exception:  # already gone
            pass

    timer = reactor.callLater(timeout, kill)
    yield protocol.ended
    reason = protocol.reason
    assert reason is not None
    if timer.active():
        timer.cancel()
    events = []
    for line in bytes(protocol.out).decode("utf-8", "replace").splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            events.append({"event": "unparsed", "line": line})
    return ScriptResult(
        getattr(reason.value, "exitCode", None),
        getattr(reason.value, "signal", None),
        events,
        bytes(protocol.err).decode("utf-8", "replace"),
    )
