"""
Tests for txnsq.http.routes on tables of their own, apart from any daemon's
routes: julienschmidt/httprouter's matching, redirects and ``Allow`` lists,
and :class:`~txnsq.http.routes.GoRouter` registering and finding handlers.
Each daemon's answers through the router are in tests.test_http (nsqd) and
tests.test_nsqlookupd_http.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, List

from klein import Klein
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import Clock
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.trial.unittest import SynchronousTestCase
from twisted.web.iweb import IRequest
from werkzeug.exceptions import HTTPException

from txnsq.http.api import APIBase
from txnsq.http.routes import (
    GoRouter,
    Route,
    allowed_methods,
    clean_path,
    find_route,
    go_route,
    redirect_path,
    request_path,
)


class PingAPI(GoRouter):
    """
    The smallest Go-routed API, for tests of the shared HTTP plumbing:
    ``GET /ping`` answers ``OK`` as text, timed by ``clock``.
    """

    app = Klein()
    routes: List[Route] = []
    _log = Logger()

    def __init__(self, clock: IReactorTime) -> None:
        self.clock = clock

    def _seconds(self) -> float:
        return float(self.clock.seconds())

    @app.handle_errors(HTTPException)
    def _unrouted(self, request: IRequest, failure: Failure) -> Any:
        return self._serve(request, None)

    @go_route(app, "GET", "/ping", style="text", routes=routes)
    def ping(self, request: IRequest) -> str:
        """Go's health check."""
        return "OK"


def _table() -> List[Route]:
    """A route table with parameters, two methods on one path and an index with a slash."""
    return [
        Route("GET", "/ping", "text", True),
        Route("GET", "/config/:opt", "v1", True),
        Route("PUT", "/config/:opt", "v1", True),
        Route("POST", "/topic/create", "v1", True),
        Route("GET", "/debug/pprof/", "raw", False),
        Route("GET", "/debug/pprof/symbol", "raw", False),
        Route("POST", "/debug/pprof/symbol", "raw", False),
    ]


class RouteTests(SynchronousTestCase):
    """One route: httprouter's pattern matching."""

    def test_match(self) -> None:
        """A ``:name`` segment matches one non-empty segment; the rest must be equal."""
        route = Route("GET", "/config/:opt", "v1", True)
        self.assertEqual(route.match("/config/max_msg_size"), {"opt": "max_msg_size"})
        self.assertIsNone(route.match("/config/"))
        self.assertIsNone(route.match("/config/a/b"))
        self.assertIsNone(route.match("/CONFIG/a"))
        self.assertEqual(route.match("/CONFIG/a", fold_case=True), {"opt": "a"})

    def test_fill(self) -> None:
        """fill spells a case-folded match the route's way, keeping the parameters."""
        route = Route("GET", "/config/:opt", "v1", True)
        self.assertEqual(route.fill("/CONFIG/Max_Msg_Size"), "/config/Max_Msg_Size")

    def test_werkzeug_rule(self) -> None:
        """Klein is given the pattern in werkzeug's syntax."""
        self.assertEqual(Route("GET", "/a/:b/c/:d", "v1", True).werkzeug_rule, "/a/<b>/c/<d>")
        self.assertEqual(repr(Route("PUT", "/x", "v1", True)), "<Route PUT /x>")


class TableTests(SynchronousTestCase):
    """The answers a route table gives: the route, the Allow list, the redirect."""

    def test_find_route(self) -> None:
        """find_route wants the exact method and path; there is no implicit HEAD."""
        table = _table()
        found = find_route("PUT", "/config/x", table)
        assert found is not None
        self.assertEqual(found, (table[2], {"opt": "x"}))
        self.assertIsNone(find_route("HEAD", "/ping", table))
        self.assertIsNone(find_route("GET", "/ping/", table))

    def test_allowed_methods(self) -> None:
        """The other methods with a route for the path, plus OPTIONS, sorted; or nothing."""
        table = _table()
        self.assertEqual(allowed_methods("/config/x", "POST", table), "GET, OPTIONS, PUT")
        self.assertEqual(allowed_methods("/config/x", "GET", table), "OPTIONS, PUT")
        self.assertEqual(allowed_methods("/ping", "HEAD", table), "GET, OPTIONS")
        self.assertEqual(allowed_methods("/ping", "GET", table), "")
        self.assertEqual(allowed_methods("/nope", "GET", table), "")

    def test_redirect_path(self) -> None:
        """The trailing slash is fixed first, then case and dot segments; only within a method."""
        table = _table()
        for method, path, target in [
            ("GET", "/ping/", "/ping"),
            ("GET", "/debug/pprof", "/debug/pprof/"),
            ("GET", "/PING", "/ping"),
            ("GET", "/x/../ping/", "/ping"),
            ("GET", "/CONFIG/Max_Msg_Size", "/config/Max_Msg_Size"),
            ("POST", "/TOPIC/create/", "/topic/create"),
            ("GET", "/", None),
            ("CONNECT", "/ping/", None),
            ("DELETE", "/ping/", None),
            ("POST", "/ping/", None),
            ("GET", "/config/", None),
        ]:
            self.assertEqual(redirect_path(method, path, table), target, (method, path))

    def test_clean_path(self) -> None:
        """httprouter's CleanPath: rooted, dots resolved, the trailing slash kept."""
        cleaned = {"": "/", "a/b": "/a/b", "//a/./b/../c/": "/a/c/", "/../": "/", "/a//b": "/a/b"}
        self.assertEqual({path: clean_path(path) for path in cleaned}, cleaned)

    def test_request_path(self) -> None:
        """The decoded path as Latin-1, of an absolute-form target too."""
        for raw, path in [
            (b"/a%20b", "/a b"),
            (b"/%FF", "/\xff"),
            (b"http://nsqd:4151/ping", "/ping"),
            (b"http://nsqd", "/"),
        ]:
            request: Any = SimpleNamespace(path=raw)
            self.assertEqual(request_path(request), path, raw)


class GoRouterTests(SynchronousTestCase):
    """A daemon's router: its own table, filled by go_route."""

    def test_go_route(self) -> None:
        """go_route adds to the table it is given, with the handler; raw routes are not logged."""
        self.assertEqual(
            [(r.method, r.pattern, r.style, r.logged, r.handler) for r in PingAPI.routes],
            [("GET", "/ping", "text", True, PingAPI.ping)],
        )
        app = Klein()
        table: List[Route] = []
        go_route(app, "GET", "/debug/x", style="raw", routes=table)(PingAPI.ping)
        self.assertEqual([(r.pattern, r.logged) for r in table], [("/debug/x", False)])

    def test_clock_required(self) -> None:
        """An API that does not say which clock times requests cannot time them."""
        self.assertRaises(NotImplementedError, APIBase()._seconds)
        self.assertEqual(PingAPI(Clock())._seconds(), 0.0)
