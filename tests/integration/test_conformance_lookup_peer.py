"""
What nsqd sends to an nsqlookupd, against the recorded behaviour of Go
nsqd v1.3.0.

One test per case of ``tests/fixtures/conformance/nsqd_lookup_peer.json``: a
stand-in lookupd listens on 127.0.0.1, a brand-new in-process nsqd
(``txnsq.testing.start_nsqd``) is pointed at it, and the replay checks the
bytes nsqd writes to it (magic, IDENTIFY, REGISTER/UNREGISTER) while the
stand-in answers as recorded.  The methods are generated from the fixture:
the name is ``test_<case name>``, the docstring the case's description.
"""

from __future__ import annotations

from typing import Any, Callable, List, Mapping, Tuple

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

FIXTURE = "nsqd_lookup_peer.json"


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


def _load() -> Tuple[List[Mapping[str, Any]], str]:
    """The fixture's cases, or no cases and why."""
    try:
        return list(load_fixture(FIXTURE)["cases"]), ""
    except FixtureMissing as error:
        return [], str(error)


CASES, MISSING = _load()


class LookupPeerConformanceTests(TestCase):
    """nsqd registers with an nsqlookupd byte for byte as Go nsqd v1.3.0 does."""

    timeout = 60

    def test_fixture_present(self) -> None:
        """The nsqd_lookup_peer.json recordings are there (else every case is missing)."""
        if MISSING:
            self.fail(MISSING)
        self.assertTrue(CASES)


def _generate(cls: type, cases: List[Mapping[str, Any]]) -> None:
    """Add one test method per case."""
    for case in cases:
        method = _case_test(case)
        if hasattr(cls, method.__name__):
            raise RuntimeError("duplicate conformance test %s" % (method.__name__,))
        setattr(cls, method.__name__, method)


_generate(LookupPeerConformanceTests, CASES)
