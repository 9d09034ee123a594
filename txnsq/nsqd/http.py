# -*- test-case-name: tests.test_http -*-
"""
nsqd's HTTP API, served with Klein, answering as Go nsqd v1.3 does.

The app is a class attribute so every :class:`NSQDHTTPAPI` instance serves
its own broker.  The plain HTTP and the HTTPS listener serve the same
instance.

This module holds the handlers and the route table, :data:`ROUTES`; Go's
design around them is shared with the other daemons in :mod:`txnsq.http`:

- :mod:`txnsq.http.routes`: routes registered with
  :func:`go_route <txnsq.http.routes.go_route>` and httprouter's answers to a miss
  (redirects, ``405`` with ``Allow``, ``404``);
- :mod:`txnsq.http.api`: Go's ``internal/http_api`` reply styles
  (``v1``, ``text``; ``raw`` handlers write their own headers), its
  request log line and the request readers;
- :mod:`txnsq.http.pprof` (``/debug/pprof``) and :mod:`txnsq.http.site`
  (the ``twisted.web.server.Site`` and Go's answer to bytes that are not HTTP);
- :mod:`txnsq.protocol.http_params` and :mod:`txnsq.protocol.go_json`:
  query strings and bodies parsed, and JSON written, as Go does;
- :mod:`txnsq.nsqd.http_config` (``/config``) is nsqd's own.

``/debug/pprof/...`` keeps Go's paths with Python's equivalents: thread
stacks for ``goroutine``, a memory summary for ``heap``, a cProfile of the
reactor thread for ``profile``.  ``GET /metrics`` (Prometheus) is txnsq's
own.
"""

from __future__ import annotations

import gc
import socket
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Tuple

from incremental import Version
from klein import Klein
from twisted.internet.defer import Deferred
from twisted.logger import Logger
from twisted.python.deprecate import deprecatedModuleAttribute
from twisted.python.failure import Failure
from twisted.web.iweb import IRequest
from werkzeug.exceptions import HTTPException

from txnsq.version import NSQ_VERSION, TXNSQ_VERSION
from txnsq.http.api import JSON_CONTENT_TYPE, raw_query
from txnsq.http.pprof import PprofHandlers, add_pprof_routes
from txnsq.http.routes import GoRouter, Route, go_route
from txnsq.nsqd.http_config import CONFIG_OPTIONS, config_value, set_config_value
from txnsq.mirror.recorder import StandbysUnavailable
from txnsq.protocol.go_values import parse_duration
from txnsq.nsqd.options import TLS_REQUIRED
from txnsq.nsqd.retention import (
    EARLIEST,
    NoSuchPartition,
    RetainedWriteError,
    RetentionSettings,
    parse_offsets,
    parse_timestamp,
)
from txnsq.nsqd.topic import PublishError
from txnsq.storage.log import OffsetOutOfRange
from txnsq.protocol.go_json import go_json
from txnsq.protocol.http_params import (
    BOOL_PARAMS,
    APIError,
    go_parse_int,
    parse_mpub_binary,
    parse_mpub_lines,
    parse_query,
    topic_channel_args,
    wrap_int64,
)
from txnsq.protocol.names import is_valid_topic_name

if TYPE_CHECKING:
    from txnsq.nsqd.broker import Broker

__all__ = ["NSQDHTTPAPI", "ROUTES"]

# Names that moved out of this module when the HTTP API was split by
# concept: importing them from here still works, with a DeprecationWarning
# that says where they live now.
_MOVED = {
    "APIError": "txnsq.protocol.http_params",
    "CONFIG_OPTIONS": "txnsq.nsqd.http_config",
    "go_json": "txnsq.protocol.go_json",
    "parse_mpub_binary": "txnsq.protocol.http_params",
    "parse_mpub_lines": "txnsq.protocol.http_params",
    "parse_query": "txnsq.protocol.http_params",
}
for _name, _home in _MOVED.items():
    deprecatedModuleAttribute(
        Version("txnsq", 0, 1, 0), "use %s.%s instead" % (_home, _name), __name__, _name
    )
del _name, _home

_NS = 1000000000

#: ``--mirror-min-standbys``: a publish to a mirrored topic refused, nothing
#: stored (fewer live standbys than asked for).
MIRROR_STANDBYS_UNAVAILABLE = "MIRROR_STANDBYS_UNAVAILABLE"
#: ``--mirror-min-standbys``: a publish stored here, but the live standbys
#: fell below the count before they had it: it may still be delivered.
MIRROR_STANDBYS_LOST = "MIRROR_STANDBYS_LOST_OUTCOME_UNKNOWN"

#: Every route of Go nsqd v1.3's HTTP server, plus ``GET /metrics``.
ROUTES: List[Route] = []


class NSQDHTTPAPI(GoRouter, PprofHandlers):
    """
    The HTTP endpoints of one nsqd.

    :param broker: the broker to publish to and report on.
    :param start_time: when nsqd started (Unix seconds).
    :param ports: called to learn the bound ports by listener label
        (``TCP``, ``HTTP``, ``HTTPS``), which are only known once the
        listeners are up.
    :param clients: called to list the TCP clients (for ``/stats``).
    :param options_changed: called with the config name after ``PUT
        /config/NAME`` changed ``broker.options`` (Go's options
        notification: the lookup peers reconnect, the log level applies).
    """

    app = Klein()
    routes = ROUTES
    _log = Logger()

    def __init__(
        self,
        broker: Broker,
        start_time: float,
        ports: Callable[[], Dict[str, int]],
        clients: Optional[Callable[[], Iterable[Any]]] = None,
        options_changed: Optional[Callable[[str], None]] = None,
    ) -> None:
        self.broker = broker
        self.start_time = start_time
        self._ports = ports
        self._clients = clients if clients is not None else (lambda: ())
        self.options_changed = options_changed
        self._profiler_clock = broker.clock
        #: The ``cluster`` section of /stats and /metrics (NATS routes), if any.
        self.cluster_stats: Optional[Callable[[], Dict[str, Any]]] = None
        #: Mirrored topics (txnsq.mirror.mirror.Mirror), when routes are on.
        self.mirror: Optional[Any] = None

    def _commit(self, topic: Any) -> None:
        """
        With ``--mem-queue-size=0``: write what a publish to ``topic``
        stored before its ``OK`` is sent (see :attr:`Broker.barrier`).

        :raises APIError: 503 ``EXITING`` (Go's answer to a failed put):
            a write failed (a full disk), so the message is not on disk.
            The queue keeps it in memory and writes it once writing works
            again: it may still be delivered (the outcome is unknown to
            the producer), or be lost in a crash.
        """
        barrier = self.broker.barrier
        if barrier is not None:
            barrier()
            if topic.write_error() is not None:
                raise APIError(503, "EXITING")

    def _seconds(self) -> float:
        """Requests are timed by the broker's clock."""
        return float(self.broker.clock.seconds())

    def _tls_refusal(self, request: IRequest) -> Optional[bytes]:
        """
        With ``--tls-required=true``, Go's plain HTTP server answers
        every request ``403 TLS_REQUIRED`` (``tcp-https`` leaves HTTP open).
        """
        if self.broker.options.tls_required != TLS_REQUIRED or request.isSecure():
            return None
        body = ('{"message": "TLS_REQUIRED", "https_port": %d}' % (
            self._ports().get("HTTPS", 0),
        )).encode("ascii")
        return self._reply(request, 403, body, JSON_CONTENT_TYPE, nsq=True)

    @app.handle_errors(HTTPException)
    def _unrouted(self, request: IRequest, failure: Failure) -> Any:
        """Klein found no handler: usually Go's redirect, 405 or 404."""
        return self._serve(request, None)

    # -- helpers ---------------------------------------------------------

    def _topic_from_query(self, request: IRequest) -> Tuple[Dict[str, List[str]], Any]:
        """
        Go's ``getTopicFromQuery``: the query and the topic named by
        ``topic``, created if need be.
        """
        values = self._query(request)
        names = values.get("topic")
        if names is None:
            raise APIError(400, "MISSING_ARG_TOPIC")
        name = names[0]
        if not is_valid_topic_name(name):
            raise APIError(400, "INVALID_TOPIC")
        try:
            return values, self.broker.get_topic(name)
        except ValueError:
            raise APIError(400, "INVALID_TOPIC")

    def _existing_topic_and_channel(self, request: IRequest) -> Tuple[Any, str]:
        """
        Go's ``getExistingTopicFromQuery``: both names valid, the topic
        must exist.
        """
        topic_name, channel_name = topic_channel_args(self._query(request))
        topic = self.broker.find_topic(topic_name)
        if topic is None:
            raise APIError(404, "TOPIC_NOT_FOUND")
        return topic, channel_name

    def _existing_channel(self, request: IRequest) -> Any:
        topic, name = self._existing_topic_and_channel(request)
        channel = topic.find_channel(name)
        if channel is None:
            raise APIError(404, "CHANNEL_NOT_FOUND")
        return channel

    def _topic_name(self, request: IRequest) -> str:
        values = self._query(request)
        names = values.get("topic")
        if names is None:
            raise APIError(400, "MISSING_ARG_TOPIC")
        return names[0]

    def _health(self) -> Tuple[bool, str]:
        error = self.broker.storage_error()
        if error is None:
            return True, "OK"
        return False, "NOK - %s" % (error,)

    # -- endpoints -------------------------------------------------------

    @go_route(app, "GET", "/ping", style="text", routes=ROUTES)
    def ping(self, request: IRequest) -> str:
        """``OK`` while healthy; else 500 with Go's ``NOK - <reason>``."""
        healthy, health = self._health()
        if not healthy:
            raise APIError(500, health)
        return health

    @go_route(app, "GET", "/info", routes=ROUTES)
    def info(self, request: IRequest) -> Any:
        """Describe this nsqd: version, addresses, ports and limits."""
        options = self.broker.options
        ports = self._ports()
        info = {
            "version": NSQ_VERSION,
            "broadcast_address": options.broadcast_address,
            "hostname": socket.gethostname(),
            "http_port": ports.get("HTTP", 0),
            "tcp_port": ports.get("TCP", 0),
            "start_time": int(self.start_time),
            "max_heartbeat_interval": int(round(options.max_heartbeat_interval * _NS)),
            "max_output_buffer_size": options.max_output_buffer_size,
            "max_output_buffer_timeout": int(round(options.max_output_buffer_timeout * _NS)),
            "max_deflate_level": options.max_deflate_level,
            # txnsq's own, after Go's fields: "version" is the NSQ level
            # implemented, for clients that enable features by it.
            "txnsq_version": TXNSQ_VERSION,
            **self._mirror_info(),
        }
        if ports.get("MetaQ"):
            # With --metaq-address: where retained topics are read by offset
            # (the Spark source finds the MetaQ listener through /info).
            info["metaq_port"] = ports["MetaQ"]
        return info

    def _mirror_info(self) -> Dict[str, Any]:
        mirror = self.mirror
        if mirror is None:
            return {}
        standby = sorted(
            name
            for name, topic in self.broker.topics.items()
            if (mirror.topic_role(topic) or {}).get("role") == "standby"
        )
        return {"mirror": {"node_id": mirror.node_id, "standby_topics": standby}}

    def _after_mirror(self, topic: Any, answer: str) -> Any:
        """
        ``answer`` now, or -- a mirrored topic whose peers must have the
        publish first (``--mirror-ack=sync``, or a lagging peer) -- a
        Deferred firing with it once they have, or failing with
        ``APIError(503, "MIRROR_STANDBYS_LOST_OUTCOME_UNKNOWN")`` when
        fewer standbys than ``--mirror-min-standbys`` are left live before
        they have (the message is stored here and may still be delivered).
        """
        gate = self.broker.mirror_gate
        if topic.mirror is None or gate is None:
            return answer
        waiter = _MirrorWaiter()
        if not gate(waiter):
            return answer
        return waiter.done.addCallback(lambda _: answer)

    @go_route(app, "POST", "/pub", logged=False, routes=ROUTES)
    def pub(self, request: IRequest) -> Any:
        """
        Publish the body to ``?topic=`` (created if need be), ``defer``
        milliseconds later when given.
        """
        options = self.broker.options
        body = self._body(request)
        if len(body) > options.max_msg_size:
            raise APIError(413, "MSG_TOO_BIG")
        if not body:
            raise APIError(400, "MSG_EMPTY")
        values, topic = self._topic_from_query(request)
        deferred_ns = 0
        defers = values.get("defer")
        if defers is not None:
            milliseconds = go_parse_int(defers[0])
            if milliseconds is None:
                raise APIError(400, "INVALID_DEFER")
            deferred_ns = wrap_int64(milliseconds * 1000000)
            if deferred_ns < 0 or deferred_ns > int(round(options.max_req_timeout * _NS)):
                raise APIError(400, "INVALID_DEFER")
        try:
            if deferred_ns:
                topic.publish_deferred(body, deferred_ns / 1e9)
            else:
                topic.publish(body)
        except RetainedWriteError:
            # The retained log could not be written (a full disk).
            raise APIError(500, "PUB_FAILED")
        except StandbysUnavailable:
            # --mirror-min-standbys: nothing was stored.
            raise APIError(503, MIRROR_STANDBYS_UNAVAILABLE)
        except PublishError:
            raise APIError(503, "EXITING")
        self._commit(topic)
        return self._after_mirror(topic, "OK")

    @go_route(app, "POST", "/mpub", logged=False, routes=ROUTES)
    def mpub(self, request: IRequest) -> Any:
        """
        Publish several messages to ``?topic=``, all or none: one per line,
        or the MPUB binary format with ``binary=true``.
        """
        options = self.broker.options
        if self._declared_length(request) > options.max_body_size:
            raise APIError(413, "BODY_TOO_BIG")
        values, topic = self._topic_from_query(request)
        binary = False
        flags = values.get("binary")
        if flags is not None:
            binary = BOOL_PARAMS.get(flags[0], True)
            if flags[0] not in BOOL_PARAMS:
                self._log.warn(
                    "deprecated value '{value}' used for /mpub binary param",
                    value=flags[0],
                )
        body = self._body(request)
        if binary:
            messages = parse_mpub_binary(body, options.max_msg_size, options.max_body_size)
        else:
            messages = parse_mpub_lines(body, options.max_msg_size, options.max_body_size)
        try:
            topic.publish_many(messages)
        except RetainedWriteError:
            # The retained log could not be written (a full disk).
            raise APIError(500, "PUB_FAILED")
        except StandbysUnavailable:
            # --mirror-min-standbys: nothing was stored.
            raise APIError(503, MIRROR_STANDBYS_UNAVAILABLE)
        except PublishError:
            raise APIError(503, "EXITING")
        self._commit(topic)
        return self._after_mirror(topic, "OK")

    @go_route(app, "GET", "/stats", routes=ROUTES)
    def stats(self, request: IRequest) -> Any:
        """
        Topics, channels, clients and memory: text, or JSON with
        ``format=json``; ``topic``/``channel`` narrow it,
        ``include_clients``/``include_mem`` (default true) trim it.
        """
        from txnsq.nsqd import stats as nsqd_stats
        from txnsq.nsqd.stats_text import to_text

        values = self._query(request)

        def first(name: str) -> str:
            found = values.get(name)
            return found[0] if found else ""

        snapshot = nsqd_stats.collect(
            self.broker,
            self._clients(),
            self.start_time,
            NSQ_VERSION,
            topic=first("topic") or None,
            channel=first("channel") or None,
            include_clients=BOOL_PARAMS.get(first("include_clients"), True),
            include_mem=BOOL_PARAMS.get(first("include_mem"), True),
        )
        if first("format") == "json":
            found = nsqd_stats.to_json(snapshot)
            if self.cluster_stats is not None:
                found["cluster"] = self.cluster_stats()
            mirror = self.mirror
            if mirror is not None:
                for entry in found.get("topics") or ():
                    topic = self.broker.find_topic(entry.get("topic_name", ""))
                    role = mirror.topic_role(topic) if topic is not None else None
                    if role is not None:
                        entry["mirror"] = role
            return found
        return to_text(snapshot, self.broker.clock.seconds()).encode("utf-8")

    @go_route(app, "GET", "/metrics", style="raw", routes=ROUTES)
    def metrics(self, request: IRequest) -> bytes:
        """txnsq's own: the ``/stats`` numbers for Prometheus."""
        from txnsq.nsqd import metrics as nsqd_metrics
        from txnsq.nsqd import stats as nsqd_stats

        snapshot = nsqd_stats.collect(
            self.broker, self._clients(), self.start_time, NSQ_VERSION
        )
        body = nsqd_metrics.render_metrics(nsqd_stats.to_json(snapshot))
        if self.cluster_stats is not None:
            from txnsq.cluster.metrics import render_cluster_metrics

            body += render_cluster_metrics(self.cluster_stats())
        content_type: Any = nsqd_metrics.CONTENT_TYPE
        if isinstance(content_type, str):
            content_type = content_type.encode("ascii")
        return self._reply(request, 200, body, content_type)

    # -- topics and channels ---------------------------------------------

    @go_route(app, "POST", "/topic/create", routes=ROUTES)
    def topic_create(self, request: IRequest) -> None:
        """Create ``?topic=`` (nothing happens if it exists)."""
        self._topic_from_query(request)

    @go_route(app, "POST", "/topic/delete", routes=ROUTES)
    def topic_delete(self, request: IRequest) -> None:
        """Delete ``?topic=``, its channels and their messages."""
        name = self._topic_name(request)
        try:
            self.broker.delete_topic(name)
        except KeyError:
            raise APIError(404, "TOPIC_NOT_FOUND")

    @go_route(app, "POST", "/topic/empty", routes=ROUTES)
    def topic_empty(self, request: IRequest) -> None:
        """Drop the messages ``?topic=`` holds itself (its channels keep theirs)."""
        name = self._topic_name(request)
        if not is_valid_topic_name(name):
            raise APIError(400, "INVALID_TOPIC")
        topic = self.broker.find_topic(name)
        if topic is None:
            raise APIError(404, "TOPIC_NOT_FOUND")
        topic.empty()

    def _pause_topic(self, request: IRequest, pause: bool) -> None:
        name = self._topic_name(request)
        topic = self.broker.find_topic(name)
        if topic is None:
            raise APIError(404, "TOPIC_NOT_FOUND")
        if pause:
            topic.pause()
        else:
            topic.unpause()

    @go_route(app, "POST", "/topic/mirror", routes=ROUTES)
    def topic_mirror(self, request: IRequest) -> None:
        """Mirror ``?topic=`` (created if need be) to the routed txnsq nodes."""
        name = self._topic_name(request)
        if not is_valid_topic_name(name):
            raise APIError(400, "INVALID_TOPIC")
        if self.mirror is None:
            raise APIError(403, "MIRROR_DISABLED")
        try:
            self.mirror.mirror_topic(name)
        except ValueError:
            raise APIError(400, "INVALID_TOPIC")

    @go_route(app, "POST", "/topic/pause", routes=ROUTES)
    def topic_pause(self, request: IRequest) -> None:
        """Hold ``?topic=``'s messages in the topic until unpaused."""
        self._pause_topic(request, True)

    @go_route(app, "POST", "/topic/unpause", routes=ROUTES)
    def topic_unpause(self, request: IRequest) -> None:
        """Resume copying ``?topic=``'s messages to its channels."""
        self._pause_topic(request, False)

    @go_route(app, "POST", "/channel/create", routes=ROUTES)
    def channel_create(self, request: IRequest) -> None:
        """
        Create ``?channel=`` on the existing ``?topic=``; with
        ``from=earliest`` or ``from=TIMESTAMP`` (retained topics), a new
        channel is first fed the retained records from there.
        """
        topic, name = self._existing_topic_and_channel(request)
        values = self._query(request)
        start = values.get("from")
        if start is not None and topic.retention is None:
            raise APIError(403, "TOPIC_NOT_RETAINED")
        since: Optional[int] = None
        if start is not None and start[0] != EARLIEST:
            try:
                since = parse_timestamp(start[0])
            except ValueError:
                raise APIError(400, "INVALID_FROM")
        created = topic.find_channel(name) is None
        try:
            channel = topic.get_channel(name)
        except ValueError:
            raise APIError(400, "INVALID_ARG_CHANNEL")
        if start is not None and created and topic.retention is not None:
            retention = topic.retention
            if since is None:
                retention.rewind(channel, retention.earliest())
            else:
                retention.rewind(channel, retention.starts_for_timestamp(since), since)

    @go_route(app, "POST", "/channel/rewind", routes=ROUTES)
    def channel_rewind(self, request: IRequest) -> None:
        """
        Re-feed the existing channel's queue from the retained log: from
        ``offset=P:O,...`` (per partition), ``timestamp=`` (RFC 3339 or
        unix ms; exactly the records published from then on) or
        ``earliest``.  Messages already queued stay.
        """
        channel = self._existing_channel(request)
        topic = channel.topic
        retention = topic.retention
        if retention is None:
            raise APIError(403, "TOPIC_NOT_RETAINED")
        values = self._query(request)
        partitions = retention.settings.partitions
        since: Optional[int] = None
        if "offset" in values:
            try:
                starts = parse_offsets(values["offset"][0], partitions)
            except NoSuchPartition:
                raise APIError(400, "INVALID_PARTITION")
            except ValueError:
                raise APIError(400, "INVALID_OFFSET")
        elif "timestamp" in values:
            try:
                since = parse_timestamp(values["timestamp"][0])
            except ValueError:
                raise APIError(400, "INVALID_TIMESTAMP")
            starts = retention.starts_for_timestamp(since)
        elif EARLIEST in values:
            starts = retention.earliest()
        else:
            raise APIError(400, "MISSING_ARG_OFFSET")
        try:
            retention.rewind(channel, starts, since)
        except OffsetOutOfRange:
            raise APIError(400, "OFFSET_OUT_OF_RANGE")

    @go_route(app, "POST", "/topic/retention", routes=ROUTES)
    def topic_retention(self, request: IRequest) -> None:
        """
        Turn ``?topic=``'s retained log on (created if need be) or change
        it: ``bytes=`` (``0`` turns it off and removes the log),
        ``age=`` (a duration, ``0`` for none), ``partitions=`` (can only
        grow); what is not given keeps its value, or the ``--retention-*``
        default.
        """
        values, topic = self._topic_from_query(request)
        if topic.ephemeral:
            raise APIError(400, "INVALID_TOPIC")
        current = (
            topic.retention.settings
            if topic.retention is not None
            else self.broker.retention.defaults()
        )
        size = current.bytes
        if "bytes" in values:
            parsed = go_parse_int(values["bytes"][0])
            if parsed is None or parsed < 0:
                raise APIError(400, "INVALID_BYTES")
            if parsed == 0:
                topic.set_retention(None)
                return
            size = parsed
        age = current.age
        if "age" in values:
            try:
                age = parse_duration(values["age"][0])
            except ValueError:
                raise APIError(400, "INVALID_AGE")
            if age < 0:
                raise APIError(400, "INVALID_AGE")
        partitions = current.partitions
        if "partitions" in values:
            parsed = go_parse_int(values["partitions"][0])
            if parsed is None or not 1 <= parsed <= 1024:
                raise APIError(400, "INVALID_PARTITIONS")
            partitions = parsed
        try:
            topic.set_retention(RetentionSettings(size, age, partitions))
        except ValueError:
            raise APIError(400, "INVALID_PARTITIONS")
        except OSError as e:
            self._log.error("cannot open the retained log of {topic} - {error}", topic=topic.name, error=e)
            raise APIError(500, "INTERNAL_ERROR")

    @go_route(app, "POST", "/channel/delete", routes=ROUTES)
    def channel_delete(self, request: IRequest) -> None:
        """Delete a channel and its messages; its consumers are closed."""
        topic, name = self._existing_topic_and_channel(request)
        try:
            topic.delete_channel(name)
        except KeyError:
            raise APIError(404, "CHANNEL_NOT_FOUND")

    @go_route(app, "POST", "/channel/empty", routes=ROUTES)
    def channel_empty(self, request: IRequest) -> None:
        """Drop a channel's queued messages."""
        self._existing_channel(request).empty()

    @go_route(app, "POST", "/channel/pause", routes=ROUTES)
    def channel_pause(self, request: IRequest) -> None:
        """Stop a channel delivering until unpaused."""
        self._existing_channel(request).pause()

    @go_route(app, "POST", "/channel/unpause", routes=ROUTES)
    def channel_unpause(self, request: IRequest) -> None:
        """Let a paused channel deliver again."""
        self._existing_channel(request).unpause()

    # -- /config ---------------------------------------------------------

    def _config(self, request: IRequest, opt: str, put: bool) -> Any:
        options = self.broker.options
        if put:
            set_config_value(options, opt, self._body(request), options.max_msg_size)
            if self.options_changed is not None:
                self.options_changed(opt)
        try:
            return config_value(options, opt)
        except KeyError:
            raise APIError(400, "INVALID_OPTION")

    @go_route(app, "GET", "/config/:opt", routes=ROUTES)
    def config_get(self, request: IRequest, opt: str) -> Any:
        """An option's value by Go's config name."""
        return self._config(request, opt, False)

    @go_route(app, "PUT", "/config/:opt", routes=ROUTES)
    def config_put(self, request: IRequest, opt: str) -> Any:
        """Change ``nsqlookupd_tcp_addresses`` (a JSON list) or ``log_level``."""
        return self._config(request, opt, True)

    # -- /debug ----------------------------------------------------------

    # Go's pprof handlers, between /config and the two below.
    add_pprof_routes(app, ROUTES, "/debug/pprof/")

    @go_route(app, "PUT", "/debug/setblockrate", style="text", routes=ROUTES)
    def debug_setblockrate(self, request: IRequest) -> str:
        """Go's block profile rate: checked as Go does; no effect in Python."""
        values, _ = parse_query(raw_query(request)[0])
        text = (values.get("rate") or [""])[0]
        if go_parse_int(text) is None:
            raise APIError(
                400,
                'invalid block rate : strconv.Atoi: parsing "%s": invalid syntax' % (text,),
            )
        return ""

    @go_route(app, "POST", "/debug/freememory", style="text", routes=ROUTES)
    def debug_freememory(self, request: IRequest) -> str:
        """Go's ``debug.FreeOSMemory``: here a full garbage collection."""
        gc.collect()
        return ""


class _MirrorWaiter:
    """An HTTP publish waiting at the mirror gate (as a V2 connection does)."""

    __slots__ = ("done",)

    def __init__(self) -> None:
        self.done: "Deferred[None]" = Deferred()

    def mirror_release(self) -> None:
        """The peers have the publish."""
        if not self.done.called:
            self.done.callback(None)

    def mirror_fail(self, reason: str) -> None:
        """Too few standbys are left to confirm the publish: 503, outcome unknown."""
        if not self.done.called:
            self.done.errback(APIError(503, MIRROR_STANDBYS_LOST))
