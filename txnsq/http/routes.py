# -*- test-case-name: tests.test_http_routes,tests.test_http,tests.test_nsqlookupd_http -*-
"""
Go's daemons' routing (julienschmidt/httprouter) on top of Klein.

Each daemon keeps its own table of :class:`Route` objects, filled by
:func:`go_route` (nsqd's is ``txnsq.nsqd.http.ROUTES``, nsqlookupd's
``txnsq.nsqlookupd.http.LOOKUPD_ROUTES``), and a request that misses it
gets httprouter's answer: a 301/307 redirect to the path with the trailing
slash fixed or the case and dots cleaned, ``405`` with an ``Allow`` list
(``200`` for ``OPTIONS``), else ``404 NOT_FOUND``.  Klein (werkzeug) finds
the handler; the miss logic and the exact method check (werkzeug also
routes ``HEAD`` to ``GET`` handlers, httprouter does not) are
:class:`GoRouter`'s.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any, Callable, Dict, List, Optional, Tuple
from urllib.parse import quote, unquote_to_bytes

from klein import Klein
from twisted.internet.defer import Deferred
from twisted.python.failure import Failure
from twisted.web.iweb import IRequest

from txnsq.http.api import HTML_CONTENT_TYPE, APIBase, raw_query
from txnsq.protocol.http_params import APIError

__all__ = [
    "GoRouter",
    "Route",
    "allowed_methods",
    "clean_path",
    "find_route",
    "go_route",
    "redirect_path",
    "request_path",
]

_REASONS = {
    301: "Moved Permanently",
    307: "Temporary Redirect",
}

_ABSOLUTE_FORM = re.compile(rb"[A-Za-z][A-Za-z0-9+.-]*://[^/]*")


class Route:
    """
    One route of a Go daemon's HTTP server.

    :ivar method: the one method it answers (httprouter has no implicit
        ``HEAD``).
    :ivar pattern: httprouter's pattern; ``:name`` matches one non-empty
        path segment.
    :ivar style: how replies are rendered: ``v1``, ``text`` or ``raw``.
    :ivar logged: Go logs the request (its ``http_api.Log`` decorator).
    """

    def __init__(self, method: str, pattern: str, style: str, logged: bool) -> None:
        self.method = method
        self.pattern = pattern
        self.style = style
        self.logged = logged
        self.segments = pattern.split("/")
        #: The unbound handler method, set when it is registered.
        self.handler: Any = None

    def __repr__(self) -> str:
        return "<Route %s %s>" % (self.method, self.pattern)

    def match(self, path: str, fold_case: bool = False) -> Optional[Dict[str, str]]:
        """The parameters if ``path`` matches (case-insensitively with ``fold_case``)."""
        segments = path.split("/")
        if len(segments) != len(self.segments):
            return None
        params: Dict[str, str] = {}
        for want, got in zip(self.segments, segments):
            if want.startswith(":"):
                if not got:
                    return None
                params[want[1:]] = got
            elif want != got and not (fold_case and want.lower() == got.lower()):
                return None
        return params

    def fill(self, path: str) -> str:
        """The route's own spelling of ``path`` (which matches it ignoring case)."""
        return "/".join(
            got if want.startswith(":") else want
            for want, got in zip(self.segments, path.split("/"))
        )

    @property
    def werkzeug_rule(self) -> str:
        """The pattern in werkzeug's syntax, for Klein."""
        return re.sub(r":(\w+)", r"<\1>", self.pattern)


def go_route(
    app: Klein,
    method: str,
    pattern: str,
    style: str = "v1",
    logged: bool = True,
    *,
    routes: List[Route],
) -> Callable[[Any], Any]:
    """
    Register a handler for one Go route: with Klein (which finds it) and in
    ``routes``, the daemon's own table (which answers misses).  ``style``
    is ``v1``, ``text`` or ``raw`` (the handler writes its own headers).
    """
    # Go's pprof handlers are not decorated, so not logged.
    route = Route(method, pattern, style, logged and style != "raw")
    routes.append(route)

    def register(handler: Any) -> Any:
        route.handler = handler

        def endpoint(self: GoRouter, request: IRequest, **kwargs: Any) -> Any:
            return self._serve(request, route)

        endpoint.__name__ = handler.__name__
        endpoint.__doc__ = handler.__doc__
        app.route(route.werkzeug_rule, methods=[method], endpoint=method + " " + pattern)(
            endpoint
        )
        return handler

    return register


def find_route(
    method: str, path: str, routes: List[Route]
) -> Optional[Tuple[Route, Dict[str, str]]]:
    """The route for ``method`` and ``path`` in ``routes`` and its parameters, if any."""
    for route in routes:
        if route.method == method:
            params = route.match(path)
            if params is not None:
                return route, params
    return None


def allowed_methods(path: str, method: str, routes: List[Route]) -> str:
    """
    httprouter's ``Allow`` list for ``path``: the other methods ``routes``
    has a route for, plus ``OPTIONS``, sorted; empty when there is none.
    """
    methods = {
        route.method
        for route in routes
        if route.method != method and route.match(path) is not None
    }
    methods.discard("OPTIONS")
    if not methods:
        return ""
    return ", ".join(sorted(methods | {"OPTIONS"}))


def clean_path(path: str) -> str:
    """
    httprouter's ``CleanPath`` (and ``http.Redirect``'s clean-up):
    ``path.Clean`` of the rooted path, keeping a trailing slash.
    """
    if not path:
        return "/"
    if not path.startswith("/"):
        path = "/" + path
    cleaned = posixpath.normpath(path)
    if cleaned.startswith("//"):
        cleaned = "/" + cleaned.lstrip("/")
    if path.endswith("/") and cleaned != "/":
        cleaned += "/"
    return cleaned


def redirect_path(method: str, path: str, routes: List[Route]) -> Optional[str]:
    """
    Where httprouter redirects a ``method`` request for ``path`` that has
    no route: the path with its trailing slash added or removed, else the
    cleaned path matched ignoring case (trailing slash fixed too).  Only
    methods with routes redirect; ``CONNECT`` and ``/`` never do.
    """
    if method == "CONNECT" or path == "/":
        return None
    same_method = [route for route in routes if route.method == method]
    if not same_method:
        return None
    if len(path) > 1 and path.endswith("/"):
        toggled = path[:-1]
    else:
        toggled = path + "/"
    for route in same_method:
        if route.match(toggled) is not None:
            return toggled
    cleaned = clean_path(path)
    candidates = [cleaned]
    if cleaned != "/":
        candidates.append(cleaned[:-1] if cleaned.endswith("/") else cleaned + "/")
    for candidate in candidates:
        for route in same_method:
            if route.match(candidate, fold_case=True) is not None:
                return route.fill(candidate)
    return None


def request_path(request: IRequest) -> str:
    """
    The request's decoded path (Go's ``URL.Path``), as Latin-1 text; of an
    absolute-form target (``GET http://host/ping``) too.
    """
    path: bytes = request.path
    absolute = _ABSOLUTE_FORM.match(path)
    if absolute is not None:
        path = path[absolute.end() :] or b"/"
    return unquote_to_bytes(path).decode("latin-1")


def _html_escape(text: str) -> str:
    """Go's ``htmlEscape`` (net/http): ``& ' < > "``."""
    return (
        text.replace("&", "&amp;")
        .replace("'", "&#39;")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
        .replace('"', "&#34;")
    )


class GoRouter(APIBase):
    """
    Dispatch to the Go route a request matches exactly and render the
    result in the route's style; answer a miss as httprouter does.

    :cvar routes: the daemon's route table, which each subclass sets.
    """

    routes: List[Route]

    def _tls_refusal(self, request: IRequest) -> Optional[bytes]:
        """A reply refusing every request before it is routed, or None."""
        return None

    def _route_path(self, request: IRequest) -> Optional[str]:
        """
        The path the routes are matched against (the decoded request path),
        or None for a path this server does not serve at all (``404``).
        """
        return request_path(request)

    def _render(self, request: IRequest, route: Route, code: int, data: Any) -> bytes:
        if route.style == "text":
            return self._respond_text(request, code, data)
        return self._respond_v1(request, code, data)

    def _serve(self, request: IRequest, route: Optional[Route]) -> Any:
        """
        Answer a request Klein routed to ``route`` (or to no route): run
        the handler of the Go route it matches exactly, and render the
        result in that route's style, or answer the miss as httprouter.
        """
        self._begin(request)
        refusal = self._tls_refusal(request)
        if refusal is not None:
            return refusal
        method = request.method.decode("latin-1")
        routed = self._route_path(request)
        if routed is None:
            self._log_request(request, 404, self._seconds())
            return self._respond_v1(request, 404, "NOT_FOUND")
        path = routed
        params = route.match(path) if route is not None and method == route.method else None
        if route is None or params is None:
            # werkzeug and httprouter disagree at the edges (HEAD routed to
            # GET handlers, an absolute-form request target): ours decides.
            found = find_route(method, path, self.routes)
            if found is None:
                return self._miss(request, method, path)
            route, params = found
        started = self._seconds()
        if route.style == "raw":
            return route.handler(self, request, **params)
        return self._dispatch(request, route, params, started)

    def _dispatch(
        self, request: IRequest, route: Route, params: Dict[str, str], started: float
    ) -> Any:
        """
        Run ``route``'s handler with the path's ``params`` and render its
        result, or its :class:`APIError`, in the route's style (a request
        log line timed from ``started`` for a logged route); a handler's
        other exception is logged and answered 500.
        """
        handler = route.handler
        try:
            data = handler(self, request, **params)
        except APIError as error:
            if route.logged:
                self._log_request(request, error.code, started)
            return self._render(request, route, error.code, error.text)
        except Exception:
            self._log.failure("panic in HTTP handler {route}", route=route)
            return self._respond_v1(request, 500, "INTERNAL_ERROR")
        if isinstance(data, Deferred):
            # A handler answering later (a publish to a mirrored topic),
            # or failing later with an APIError.
            def answered(value: Any) -> Any:
                if route.logged:
                    self._log_request(request, 200, started)
                return self._render(request, route, 200, value)

            def refused(failure: Failure) -> Any:
                failure.trap(APIError)
                error = failure.value
                assert isinstance(error, APIError)
                if route.logged:
                    self._log_request(request, error.code, started)
                return self._render(request, route, error.code, error.text)

            return data.addCallbacks(answered, refused)
        if route.logged:
            self._log_request(request, 200, started)
        return self._render(request, route, 200, data)

    def _miss(self, request: IRequest, method: str, path: str) -> bytes:
        """httprouter's answer when no route has this method and path."""
        target = redirect_path(method, path, self.routes)
        if target is not None:
            return self._redirect(request, method, target)
        allow = allowed_methods(path, method, self.routes)
        started = self._seconds()
        if allow:
            request.setHeader(b"Allow", allow.encode("ascii"))
            if method == "OPTIONS":
                return self._reply(request, 200, b"", None)
            self._log_request(request, 405, started)
            return self._respond_v1(request, 405, "METHOD_NOT_ALLOWED")
        self._log_request(request, 404, started)
        return self._respond_v1(request, 404, "NOT_FOUND")

    def _redirect(self, request: IRequest, method: str, path: str) -> bytes:
        """``http.Redirect`` to ``path`` (the query kept): 301 for GET, else 307."""
        code = 301 if method == "GET" else 307
        query, had_query = raw_query(request)
        # http.Redirect cleans the escaped path as httprouter cleans paths.
        url = clean_path(quote(path.encode("latin-1"), safe="/$&+,:;=@"))
        if had_query:
            url += "?" + query.decode("latin-1")
        location = re.sub(
            "[\x80-\xff]", lambda match: "%%%02X" % (ord(match.group()),), url
        ).encode("latin-1")
        request.setHeader(b"Location", location)
        if method == "GET":
            body = '<a href="%s">%s</a>.\n\n' % (
                _html_escape(location.decode("latin-1")),
                _REASONS[code],
            )
            return self._reply(request, code, body.encode("latin-1"), HTML_CONTENT_TYPE)
        return self._reply(request, code, b"", None)
