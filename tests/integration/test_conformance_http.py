"""
nsqd's HTTP API against the recorded behaviour of Go nsqd v1.3.0.

One test per case of ``tests/fixtures/conformance/http_nsqd.json``, each against
a brand-new in-process nsqd (``txnsq.testing.start_nsqd``) on 127.0.0.1,
over real sockets.  The methods are generated from the fixture: the name is
``test_<case name>``, the docstring the case's description.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Tuple

from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.internet.endpoints import TCP4ServerEndpoint
from twisted.internet.protocol import Factory, Protocol
from twisted.trial.unittest import TestCase

from tests.integration.conformance import (
    CaseReplay,
    FixtureMissing,
    Target,
    generated_test_name,
    load_fixture,
    replay_case,
)
from txnsq.version import NSQ_VERSION

FIXTURE = "http_nsqd.json"

#: Cases that need another part of txnsq first; not generated until it
#: lands (then delete the entry and the case runs).
LATER_CASES: Dict[str, str] = {}

#: Cases that name an nsqlookupd among their daemons only so that nsqd has
#: one to point at; they are replayed with a stand-in lookupd that accepts
#: connections and stays silent.  Nothing the case checks comes from the
#: lookupd (txnsq has no nsqlookupd yet: replace the stand-in when it lands).
STAND_IN_LOOKUPD_CASES = frozenset(["config_nsqlookupd_tcp_addresses"])


@inlineCallbacks
def start_in_process(flags: List[str]) -> Any:
    """Start a fresh in-process nsqd; fires with ``(Target, stop)``."""
    from txnsq.testing import start_nsqd

    nsqd = yield start_nsqd(args=flags)
    target = Target(nsqd.host, {"nsqd_tcp": nsqd.tcp_port, "nsqd_http": nsqd.http_port}, NSQ_VERSION)
    return target, nsqd.stop


class _SilentPeer(Protocol):
    """Accepts nsqd's bytes and never answers."""


@inlineCallbacks
def replay_with_stand_in_lookupd(case: Mapping[str, Any]) -> Any:
    """
    Replay a ``["nsqlookupd", "nsqd"]`` case: a listening port stands in
    for nsqlookupd (``<lookupd_tcp_port>``), then a fresh nsqd runs the steps.
    """
    from twisted.internet import reactor

    port = yield TCP4ServerEndpoint(reactor, 0, interface="127.0.0.1").listen(
        Factory.forProtocol(_SilentPeer)
    )
    replay = CaseReplay(case, reactor)
    try:
        target, stop = yield start_in_process(replay.nsqd_flags())
        target.ports["lookupd_tcp"] = port.getHost().port
        try:
            yield replay.run(target)
        finally:
            yield replay.close_connections()
            yield stop()
    finally:
        yield port.stopListening()


def _case_test(case: Mapping[str, Any]) -> Callable[[TestCase], "Deferred[None]"]:
    """A trial test method replaying ``case``."""
    if case["name"] in STAND_IN_LOOKUPD_CASES:

        def test(self: TestCase) -> "Deferred[None]":
            return replay_with_stand_in_lookupd(case)  # type: ignore[no-any-return]

    else:

        def test(self: TestCase) -> "Deferred[None]":
            return replay_case(case, start_in_process)  # type: ignore[no-any-return]

    test.__name__ = generated_test_name(case["name"])
    test.__doc__ = case["description"]
    return test


def _load() -> Tuple[List[Mapping[str, Any]], str]:
    """The fixture's cases, or no cases and why."""
    try:
        return list(load_fixture(FIXTURE)["cases"]), ""
    except FixtureMissing as error:
        return [], str(error)


CASES, MISSING = _load()


class HTTPConformanceTests(TestCase):
    """nsqd's HTTP API answers byte for byte as Go nsqd v1.3.0 does."""

    # Deferred delivery and paused-channel cases wait for seconds.
    timeout = 60

    def test_fixture_present(self) -> None:
        """The http_nsqd.json recordings are there (else every case is missing)."""
        if MISSING:
            self.fail(MISSING)
        self.assertTrue(CASES)

    def test_later_cases_exist(self) -> None:
        """Every case held back for later work is a real case of the fixture."""
        names = {case["name"] for case in CASES}
        self.assertEqual(sorted(set(LATER_CASES) - names), [])
        self.assertEqual(sorted(STAND_IN_LOOKUPD_CASES - names), [])

    def test_every_case_runs(self) -> None:
        """Every case is generated, or held back with a reason."""
        generated = {
            case["name"]
            for case in CASES
            if hasattr(type(self), generated_test_name(case["name"]))
        }
        self.assertEqual(
            sorted(case["name"] for case in CASES if case["name"] not in generated),
            sorted(LATER_CASES),
        )


def _generate(cls: type, cases: List[Mapping[str, Any]]) -> None:
    """Add one test method per case not held back."""
    for case in cases:
        if case["name"] in LATER_CASES:
            continue
        method = _case_test(case)
        if hasattr(cls, method.__name__):
            raise RuntimeError("duplicate conformance test %s" % (method.__name__,))
        setattr(cls, method.__name__, method)


_generate(HTTPConformanceTests, CASES)
