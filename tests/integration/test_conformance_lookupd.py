"""
nsqlookupd against the recorded behaviour of Go nsqlookupd v1.3.0.

One test per case of ``tests/fixtures/conformance/lookupd_v1.json`` (the V1 TCP
protocol) and ``lookupd_http.json`` (the HTTP API), each against a
brand-new in-process nsqlookupd (``txnsq.testing.start_nsqlookupd``) on
127.0.0.1, over real sockets.  A case whose daemons are
``["nsqlookupd", "nsqd"]`` also gets a fresh in-process nsqd, started after
the lookupd with the case's flags (``--lookupd-tcp-address`` pointing at
it).  The methods are generated from the fixtures: the name is
``test_<case name>``, the docstring the case's description.
"""

from __future__ import annotations

from typing import Any, Callable, List, Mapping, Tuple

from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.trial.unittest import TestCase

from tests.integration.conformance import (
    CaseReplay,
    FixtureError,
    FixtureMissing,
    Target,
    generated_test_name,
    load_fixture,
)
from txnsq.version import NSQ_VERSION

FIXTURES = ("lookupd_v1.json", "lookupd_http.json")


@inlineCallbacks
def replay_lookupd_case(case: Mapping[str, Any]) -> Any:
    """
    Play a case against a brand-new nsqlookupd (and nsqd, when the case
    names one), cleaning everything up after.

    :raises ConformanceFailure: at the first difference.
    """
    from txnsq.testing import start_nsqd, start_nsqlookupd

    daemons = list(case.get("daemons", []))
    if daemons not in (["nsqlookupd"], ["nsqlookupd", "nsqd"]):
        raise FixtureError("case %s needs daemons %s" % (case["name"], daemons))
    replay = CaseReplay(case)
    stops: List[Callable[[], "Deferred[None]"]] = []
    try:
        yield replay.start_stand_ins()
        lookupd = yield start_nsqlookupd(args=replay.lookupd_flags())
        stops.append(lookupd.stop)
        ports = {"lookupd_tcp": lookupd.tcp_port, "lookupd_http": lookupd.http_port}
        if "nsqd" in daemons:
            # nsqd's flags name the lookupd's port.
            replay.bindings.set("lookupd_tcp_port", lookupd.tcp_port)
            nsqd = yield start_nsqd(args=replay.nsqd_flags())
            stops.append(nsqd.stop)
            ports.update(nsqd_tcp=nsqd.tcp_port, nsqd_http=nsqd.http_port)
        yield replay.run(Target("127.0.0.1", ports, NSQ_VERSION))
    finally:
        yield replay.close_connections()
        # nsqd first, so that it leaves a lookupd that is still there.
        for stop in reversed(stops):
            try:
                yield stop()
            except Exception:
                pass  # a replay failure is the one to report
        yield replay.close_stand_ins()


def _case_test(case: Mapping[str, Any]) -> Callable[[TestCase], "Deferred[None]"]:
    """A trial test method replaying ``case``."""

    def test(self: TestCase) -> "Deferred[None]":
        return replay_lookupd_case(case)  # type: ignore[no-any-return]

    test.__name__ = generated_test_name(case["name"])
    test.__doc__ = case["description"]
    return test


def _load(filename: str) -> Tuple[List[Mapping[str, Any]], str]:
    """A fixture's cases, or no cases and why."""
    try:
        return list(load_fixture(filename)["cases"]), ""
    except FixtureMissing as error:
        return [], str(error)


V1_CASES, V1_MISSING = _load(FIXTURES[0])
HTTP_CASES, HTTP_MISSING = _load(FIXTURES[1])


class LookupdV1ConformanceTests(TestCase):
    """nsqlookupd speaks V1 byte for byte as Go nsqlookupd v1.3.0 does."""

    timeout = 30

    def test_fixture_present(self) -> None:
        """The lookupd_v1.json recordings are there (else every case is missing)."""
        if V1_MISSING:
            self.fail(V1_MISSING)
        self.assertEqual(len(V1_CASES), 21)

    def test_every_case_runs(self) -> None:
        """Every case of the fixture has its test."""
        missing = [c["name"] for c in V1_CASES if not hasattr(type(self), generated_test_name(c["name"]))]
        self.assertEqual(missing, [])


class LookupdHTTPConformanceTests(TestCase):
    """nsqlookupd's HTTP API answers byte for byte as Go nsqlookupd v1.3.0 does."""

    timeout = 30

    def test_fixture_present(self) -> None:
        """The lookupd_http.json recordings are there (else every case is missing)."""
        if HTTP_MISSING:
            self.fail(HTTP_MISSING)
        self.assertEqual(len(HTTP_CASES), 15)

    def test_every_case_runs(self) -> None:
        """Every case of the fixture has its test."""
        missing = [c["name"] for c in HTTP_CASES if not hasattr(type(self), generated_test_name(c["name"]))]
        self.assertEqual(missing, [])


def _generate(cls: type, cases: List[Mapping[str, Any]]) -> None:
    """Add one test method per case."""
    for case in cases:
        method = _case_test(case)
        if hasattr(cls, method.__name__):
            raise RuntimeError("duplicate conformance test %s" % (method.__name__,))
        setattr(cls, method.__name__, method)


_generate(LookupdV1ConformanceTests, V1_CASES)
_generate(LookupdHTTPConformanceTests, HTTP_CASES)
