# -*- test-case-name: tests.test_nsqadmin_api,tests.test_nsqadmin_pages -*-
"""
What nsqadmin's API handlers and page handlers share: the Klein app and
route table, asynchronous dispatch in Go's reply styles (plus ``html``
for pages), the settings, and the gathering of cluster stats (which also
feeds the :class:`History <txnsq.nsqadmin.history.History>`).

With ``--base-path /nsq`` every route is served under ``/nsq`` (``/nsq``
and ``/nsq/`` are the index), as Go registers each route at
``path.Join(basePath, route)``; anything else is ``404 NOT_FOUND`` and
redirects keep the prefix.  A state-changing request passes the
cross-site checks of :mod:`txnsq.nsqadmin.guard` before its handler runs.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple

from klein import Klein
from twisted.internet.defer import Deferred, maybeDeferred
from twisted.internet.interfaces import IReactorTime
from twisted.logger import Logger
from twisted.python.failure import Failure
from twisted.web.iweb import IRequest
from werkzeug.exceptions import HTTPException

from txnsq.http.api import HTML_CONTENT_TYPE
from txnsq.http.routes import GoRouter, Route, request_path
from txnsq.nsqadmin.actions import ClusterActions, is_admin
from txnsq.nsqadmin.clusterinfo import ClusterInfo, ClusterUnavailable, Gathered, NodeError
from txnsq.nsqadmin.guard import CSRF_HEADER, STATE_CHANGING, csrf_refusal
from txnsq.nsqadmin.history import History
from txnsq.nsqadmin.notify import Notifier
from txnsq.nsqadmin.options import NSQAdminOptions, normalize_base_path
from txnsq.nsqadmin.stats import topic_totals
from txnsq.nsqadmin.view_parts import error_page
from txnsq.nsqadmin.views import total_depth
from txnsq.protocol.http_params import APIError

__all__ = ["ADMIN_APP", "ADMIN_ROUTES", "AdminBase", "PageError", "warning"]

ADMIN_APP = Klein()

#: Every route nsqadmin serves, API and pages.
ADMIN_ROUTES: List[Route] = []


class PageError(APIError):
    """A page that cannot be shown: its status, title and a line of detail."""

    def __init__(self, code: int, title: str, detail: str = "") -> None:
        APIError.__init__(self, code, title)
        self.detail = detail


def warning(errors: List[NodeError]) -> str:
    """Go's ``maybeWarnMsg``: ``WARNING: a; b`` or ''."""
    if not errors:
        return ""
    return "WARNING: " + "; ".join(error.text for error in errors)


class AdminBase(GoRouter):
    """
    The state and dispatch of one nsqadmin.

    :param options: the settings.
    :param cluster: asks the nodes.
    :param clock: times requests and samples.
    :param notifier: sends admin action notifications.
    """

    app = ADMIN_APP
    routes = ADMIN_ROUTES
    _log = Logger()

    def __init__(
        self,
        options: NSQAdminOptions,
        cluster: ClusterInfo,
        clock: IReactorTime,
        notifier: Optional[Notifier] = None,
        history: Optional[History] = None,
    ) -> None:
        self.options = options
        self.cluster = cluster
        self.clock = clock
        self.lookupds = list(options.nsqlookupd_http_addresses)
        self.nsqds = list(options.nsqd_http_addresses)
        self.actions = ClusterActions(cluster, self.lookupds, self.nsqds)
        self.notifier = notifier
        self.history = history if history is not None else History(clock)
        base = normalize_base_path(options.base_path)
        #: The URL prefix of every route ('' when served at the root).
        self.base = "" if base == "/" else base

    def _seconds(self) -> float:
        return self.clock.seconds()

    def link(self, path: str) -> str:
        """``path`` (rooted, as the routes are written) as a URL under the base path."""
        return self.base + path

    # -- the base path ------------------------------------------------------------

    def _route_path(self, request: IRequest) -> Optional[str]:
        """The path under ``--base-path``; None (404) for one outside it."""
        path = request_path(request)
        if not self.base:
            return path
        if path in (self.base, self.base + "/"):
            return "/"
        if path.startswith(self.base + "/"):
            return path[len(self.base) :]
        return None

    def _redirect(self, request: IRequest, method: str, path: str) -> bytes:
        """httprouter's redirect, to the path under the base path."""
        return super()._redirect(request, method, self.link(path))

    # -- cross-site request forgery -------------------------------------------------

    def _own_hosts(self, request: IRequest) -> List[str]:
        """The names this nsqadmin answers to: ``Host`` and a proxy's ``X-Forwarded-Host``."""
        hosts = []
        host = request.getHeader(b"host")
        if host:
            hosts.append(host.decode("latin-1"))
        for forwarded in request.requestHeaders.getRawHeaders(b"x-forwarded-host", []):
            hosts.extend(part.strip() for part in forwarded.decode("latin-1").split(","))
        return hosts

    def check_csrf(self, request: IRequest) -> None:
        """
        :raises APIError: ``403 CSRF_CROSS_ORIGIN`` or ``403
            CSRF_HEADER_REQUIRED`` for a state-changing request a browser
            may have been tricked into sending (:func:`csrf_refusal <txnsq.nsqadmin.guard.csrf_refusal>`).
        """

        def header(name: bytes) -> Optional[str]:
            value = request.getHeader(name)
            return None if value is None else value.decode("latin-1")

        refusal = csrf_refusal(
            request.method.decode("latin-1"),
            header(b"origin"),
            header(b"referer"),
            header(b"sec-fetch-site"),
            header(CSRF_HEADER.lower().encode("ascii")),
            self._own_hosts(request),
        )
        if refusal is not None:
            self._log.warn(
                "refused {method} {path}: {refusal}",
                method=request.method.decode("latin-1"),
                path=request_path(request),
                refusal=refusal,
            )
            raise APIError(403, refusal)

    @ADMIN_APP.handle_errors(HTTPException)
    def _unrouted(self, request: IRequest, failure: Failure) -> Any:
        """Klein found no handler: Go's redirect, 405 or 404."""
        return self._serve(request, None)

    # -- dispatch ---------------------------------------------------------------

    def _render(self, request: IRequest, route: Route, code: int, data: Any) -> bytes:
        if route.style == "html":
            if code != 200:
                detail = data.detail if isinstance(data, PageError) else ""
                title = data.text if isinstance(data, APIError) else str(data)
                data = error_page(code, title, detail, self.base)
            body = data.encode("utf-8") if isinstance(data, str) else data
            request.setHeader(b"Cache-Control", b"no-store")
            # No page of nsqadmin may be framed by another site (clickjacking
            # its action buttons).
            request.setHeader(b"X-Frame-Options", b"DENY")
            request.setHeader(b"Content-Security-Policy", b"frame-ancestors 'none'")
            return self._reply(request, code, body, HTML_CONTENT_TYPE)
        return super()._render(request, route, code, data)

    def _dispatch(
        self, request: IRequest, route: Route, params: Dict[str, str], started: float
    ) -> Any:
        """
        Run the route's handler, which may return a Deferred, and render its
        result; a page's error is an error page, an unreachable cluster 502.
        A state-changing route is refused first if it may be a forgery.
        """

        def run() -> Any:
            if route.method in STATE_CHANGING:
                self.check_csrf(request)
            return route.handler(self, request, **params)

        done: Deferred[Any] = maybeDeferred(run)

        def ok(data: Any) -> bytes:
            if route.logged:
                self._log_request(request, 200, started)
            return self._render(request, route, 200, data)

        def failed(failure: Failure) -> bytes:
            code: int = 500
            data: Any = "INTERNAL_ERROR"
            error: Any = failure.value
            if failure.check(APIError):
                code = error.code
                data = error if route.style == "html" else error.text
            elif failure.check(ClusterUnavailable):
                self._log.error("{error}", error=failure.value)
                code, data = 502, "UPSTREAM_ERROR: %s" % (failure.value,)
                if route.style == "html":
                    data = PageError(502, "No node answered", str(failure.value))
            else:
                self._log.failure("panic in HTTP handler {route}", failure, route=route)
            if route.logged:
                self._log_request(request, code, started)
            return self._render(request, route, code, data)

        return done.addCallbacks(ok, failed)

    # -- shared questions -------------------------------------------------------

    def is_admin(self, request: IRequest) -> bool:
        """Whether this request's user may act."""
        return is_admin(request, self.options.admin_users, self.options.acl_http_header)

    def require_admin(self, request: IRequest) -> None:
        """:raises APIError: ``403 FORBIDDEN`` for a user who may not act."""
        if not self.is_admin(request):
            raise APIError(403, "FORBIDDEN")

    def notify(self, action: str, topic: str, channel: str, node: str, request: IRequest) -> None:
        """Send the notification of an action (when an endpoint is set)."""
        if self.notifier is not None:
            self.notifier.notify(action, topic, channel, node, request)

    def record(self, topics: List[Dict[str, Any]]) -> None:
        """
        Sample every topic and channel total (see :mod:`history <txnsq.nsqadmin.history>`);
        a topic's depth is its own plus its channels'.
        """
        for topic in topics:
            name = topic["topic_name"]
            self.history.record(name, total_depth(topic), topic["message_count"])
            for channel in topic["channels"]:
                self.history.record(
                    "%s/%s" % (name, channel["channel_name"]),
                    channel["depth"],
                    channel["message_count"],
                )

    def sample(self) -> "Deferred[None]":
        """
        Gather every topic's stats and :meth:`record` them, whoever looks:
        run every ``--sample-interval`` by the service, so that a page
        opened for the first time already has minutes of chart and a rate.
        Never fails: a node down is only a gap in its samples.
        """

        def record(result: Any) -> None:
            _, topics, _ = result
            self.record(list(topic_totals(topics).values()))

        def failed(failure: Failure) -> None:
            if failure.check(ClusterUnavailable):
                # Every interval while the cluster is down: one line, no traceback.
                self._log.warn("sampling stats: {error}", error=failure.value)
            else:
                self._log.failure("sampling stats", failure)

        return self.gather().addCallback(record).addErrback(failed)

    def gather(
        self,
        topic: str = "",
        channel: str = "",
        include_clients: bool = False,
        strict: bool = False,
    ) -> "Deferred[Tuple[List[Dict[str, Any]], List[Dict[str, Any]], List[NodeError]]]":
        """
        The producers (all, or ``topic``'s) and their per-node topic stats,
        with every failure on the way.

        :param strict: fail with ``ClusterUnavailable`` when no nsqd answers
            for its stats (the API's 502, as Go's); otherwise the pages show
            each nsqd's failure.
        """
        if topic:
            found = self.cluster.topic_producers(topic, self.lookupds, self.nsqds)
        else:
            found = self.cluster.producers(self.lookupds, self.nsqds)

        def stats(producers: Gathered) -> "Deferred[Any]":
            asked = self.cluster.nsqd_stats(producers.value, topic, channel, include_clients)

            def both(result: Gathered) -> Any:
                return producers.value, result.value, list(producers.errors) + list(result.errors)

            def none_answered(failure: Failure) -> Any:
                failure.trap(ClusterUnavailable)
                unavailable: Any = failure.value
                return producers.value, [], list(producers.errors) + unavailable.errors

            if strict:
                return asked.addCallback(both)
            return asked.addCallbacks(both, none_answered)

        return found.addCallback(stats)
