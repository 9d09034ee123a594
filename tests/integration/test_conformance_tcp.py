"""
nsqd's V2 TCP protocol against the recorded behaviour of Go nsqd v1.3.0.

One test per case of ``tests/fixtures/conformance/tcp_v2.json``, each against a
brand-new in-process nsqd (``txnsq.testing.start_nsqd``) on 127.0.0.1,
over real sockets.  The methods are generated from the fixture: the name is
``test_<case name>``, the docstring the case's description.

The cases of ``tcp_v2_check_order.json`` (the order of each command's
checks: TLS policy, state, auth, parameters, body) run the same way in
:class:`TCPCheckOrderConformanceTests`.  They were derived from Go's source,
not recorded from Go nsqd (see the fixtures' README.md).
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Mapping, Tuple

from twisted.internet.defer import Deferred, inlineCallbacks
from twisted.trial.unittest import TestCase

from tests.integration.conformance import (
    FixtureMissing,
    Target,
    generated_test_name,
    load_fixture,
    replay_case,
)
from txnsq.version import NSQ_VERSION

FIXTURE = "tcp_v2.json"
#: Derived from Go nsqd v1.3.0's protocol_v2.go, not recorded.
CHECK_ORDER_FIXTURE = "tcp_v2_check_order.json"

#: Cases for features that belong to later issues; not generated until
#: those issues land (then delete the entry and the case runs).
LATER_ISSUE_CASES: Dict[str, str] = {
    # TLS: the fixture has no TLS upgrade case (no certificates were used);
    # identify_tls_v1_without_tls_configured needs no TLS and runs.
}


@inlineCallbacks
def start_in_process(flags: List[str]) -> Any:
    """Start a fresh in-process nsqd; fires with ``(Target, stop)``."""
    from txnsq.testing import start_nsqd

    nsqd = yield start_nsqd(args=flags)
    target = Target(nsqd.host, {"nsqd_tcp": nsqd.tcp_port, "nsqd_http": nsqd.http_port}, NSQ_VERSION)
    return target, nsqd.stop


def _case_test(case: Mapping[str, Any]) -> Callable[[TestCase], "Deferred[None]"]:
    """A trial test method replaying ``case``."""

    def test(self: TestCase) -> "Deferred[None]":
        return replay_case(case, start_in_process)  # type: ignore[no-any-return]

    test.__name__ = generated_test_name(case["name"])
    test.__doc__ = case["description"]
    return test


def _load(filename: str) -> Tuple[List[Mapping[str, Any]], str]:
    """A fixture's cases, or no cases and why."""
    try:
        return list(load_fixture(filename)["cases"]), ""
    except FixtureMissing as error:
        return [], str(error)


CASES, MISSING = _load(FIXTURE)
CHECK_ORDER_CASES, CHECK_ORDER_MISSING = _load(CHECK_ORDER_FIXTURE)


class TCPConformanceTests(TestCase):
    """nsqd speaks V2 byte for byte as Go nsqd v1.3.0 does."""

    # Heartbeat, deferred and timeout cases wait for seconds.
    timeout = 60

    def test_fixture_present(self) -> None:
        """The tcp_v2.json recordings are there (else every case is missing)."""
        if MISSING:
            self.fail(MISSING)
        self.assertTrue(CASES)

    def test_later_issue_cases_exist(self) -> None:
        """Every case held back for a later issue is a real case of the fixture."""
        names = {case["name"] for case in CASES}
        self.assertEqual(sorted(set(LATER_ISSUE_CASES) - names), [])


def _generate(cls: type, cases: List[Mapping[str, Any]]) -> None:
    """Add one test method per case not held back for a later issue."""
    for case in cases:
        if case["name"] in LATER_ISSUE_CASES:
            continue
        method = _case_test(case)
        if hasattr(cls, method.__name__):
            raise RuntimeError("duplicate conformance test %s" % (method.__name__,))
        setattr(cls, method.__name__, method)


class TCPCheckOrderConformanceTests(TestCase):
    """
    nsqd makes each command's checks in Go nsqd v1.3.0's order (cases
    derived from Go's protocol_v2.go, not recorded).
    """

    # The auth expiry cases wait for a 1 s TTL.
    timeout = 60

    def test_fixture_present(self) -> None:
        """The tcp_v2_check_order.json cases are there (else every case is missing)."""
        if CHECK_ORDER_MISSING:
            self.fail(CHECK_ORDER_MISSING)
        self.assertTrue(CHECK_ORDER_CASES)

    def test_names_distinct_from_recorded(self) -> None:
        """No derived case shares a name with a recorded one."""
        recorded = {case["name"] for case in CASES}
        self.assertEqual(sorted(recorded & {case["name"] for case in CHECK_ORDER_CASES}), [])


_generate(TCPConformanceTests, CASES)
_generate(TCPCheckOrderConformanceTests, CHECK_ORDER_CASES)
