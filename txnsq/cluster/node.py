# -*- test-case-name: tests.test_cluster_node -*-
"""
This server's place in a NATS cluster: its routes to every other server
(the full mesh), what it wants from them, and what they want from it.

A :class:`RouteNode` knows nothing of NSQ.  Its users:

- :meth:`RouteNode.subscribe` states local interest (sent as ``RS+`` to
  every route, now and on every route made later) and registers the
  handler that messages for it are given to;
- :meth:`RouteNode.publish` sends a message to the servers that want it,
  once each: every server with plain interest in the subject gets it, and
  each queue group is named on exactly one server that has members of it
  (servers never relay what comes from a route, so every server must be
  sent to directly and no group may be named twice).

Routes come from ``--routes`` (dialed, and redialed every
:attr:`RouteNode.redial_interval` seconds while down), from servers that
dial the route listener, and from gossip: an ``INFO`` naming a new server
(``"ip": "nats-route://host:port/"``) is dialed unless a route to that
``server_id`` exists.  Two connections to one server (both sides dialed,
or nats-server 2.15's extra ``$SYS`` connection) are both kept and read;
only the first is sent on.
"""

from __future__ import annotations

import os
from base64 import b32encode
from typing import Any, Callable, Dict, List, Optional, Sequence, Set, Tuple

from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import Logger

from txnsq.cluster.options import parse_route_url
from txnsq.cluster.route import ROUTED, RouteProtocol
from txnsq.cluster.subjects import subject_matches
from txnsq.protocol.nats_route import (
    CRLF,
    RouteMessages,
    encode_hmsg_head,
    encode_rmsg_head,
    encode_rs_minus,
    encode_rs_plus,
)

__all__ = ["Handler", "RouteNode", "Subscription", "new_server_id"]

#: A message handler: ``handler(route, batch) -> taken``.  ``batch`` is a
#: :class:`RouteMessages`: messages for one subject with the same reply
#: and queues; the handler takes the first ``taken`` of its payloads.
#: Fewer than all means "not now" for the rest: the route stops reading
#: and offers them again shortly (backpressure), so a handler must not
#: have acted on those.
Handler = Callable[[RouteProtocol, RouteMessages], int]

#: Cached send plans / dispatch lists before the caches are cleared.
CACHE_SIZE = 4096

_VERSION = "2.10.0"


def new_server_id() -> str:
    """A random 56-character upper-case ``server_id``, as nats-server's look."""
    return "N" + b32encode(os.urandom(35)).decode()[:55]


class Subscription:
    """Local interest in ``subject`` of ``account`` (``queue``: a group)."""

    __slots__ = ("account", "subject", "queue", "handler")

    def __init__(
        self, account: str, subject: str, queue: Optional[str], handler: Handler
    ) -> None:
        self.account = account
        self.subject = subject
        self.queue = queue
        self.handler = handler

    def __repr__(self) -> str:
        return "<Subscription %s %s %s>" % (self.account, self.subject, self.queue or "")


# A send plan: (routes with plain interest, [(queue, [(route, weight)],
# total weight)], the RMSG lines made so far for plain messages by size).
_Group = Tuple[str, List[Tuple[RouteProtocol, int]], int]
_Plan = Tuple[List[RouteProtocol], List[_Group], Dict[int, bytes]]


class _Dialer:
    """One route URL we dial, and redial while no route to its server is up."""

    _log = Logger()

    def __init__(self, node: RouteNode, url: str, seed: bool) -> None:
        self.node = node
        self.url = url
        self.seed = seed
        _, self.host, self.port = parse_route_url(url)
        self.state = "idle"  # idle, connecting, connected, waiting, parked
        self.server_id: Optional[str] = None
        self.attempts = 0
        self._call: Any = None

    def start(self, delay: float = 0.0) -> None:
        if self.node.stopped or self.state in ("connecting", "connected"):
            return
        self._cancel()
        if delay <= 0:
            self._connect()
        else:
            self.state = "waiting"
            self._call = self.node.clock.callLater(delay, self._connect)

    def _connect(self) -> None:
        self._call = None
        if self.node.stopped:
            return
        self.state = "connecting"
        self.attempts += 1
        connected = self.node.connect(self.host, self.port, self)
        connected.addCallbacks(self._connected, self._failed)

    def _connected(self, protocol: Any) -> None:
        self.state = "connected"

    def _failed(self, failure: Any) -> None:
        if self.attempts == 1 or self.attempts % 60 == 0:
            self._log.info(
                "NATS route {url}: cannot connect ({error}), retrying every {interval}s",
                url=self.url,
                error=failure.getErrorMessage(),
                interval=self.node.redial_interval,
            )
        self.state = "idle"
        self.start(self.node.redial_interval)

    def lost(self, still_routed: bool) -> None:
        """Our connection closed; redial unless its server is routed otherwise."""
        if still_routed:
            self.state = "parked"
            return
        self.state = "idle"
        self.start(self.node.redial_interval)

    def _cancel(self) -> None:
        call, self._call = self._call, None
        if call is not None and call.active():
            call.cancel()

    def stop(self) -> None:
        self._cancel()
        self.state = "idle"


class RouteNode:
    """
    The local server of a NATS cluster.

    :param clock: time (``IReactorTime``).
    :param cluster_name: the cluster's name (CONNECT must match it).
    :param connect: ``connect(host, port, dialer) -> Deferred`` opening a
        route; the service's uses the reactor (TCP), tests a fake.  The
        protocol it builds comes from :meth:`build_protocol`.
    :param server_name: what INFO calls us.
    :param advertise: ``(host, port)`` other servers dial us at, or None
        (until the listener is bound: :meth:`set_advertise`).
    :param max_payload: the largest message payload taken from a route.
    :param ping_interval: seconds between keepalive PINGs.
    :param tls: routes are TLS (the transports are; INFO and CONNECT say so).

    :ivar server_id: our random ``server_id``.
    :ivar routes: the route sent on, by the peer's ``server_id``.
    :ivar connections: every open route connection.
    :ivar errors: protocol errors, sent or received.
    :ivar paused: times a route was paused for backpressure.
    """

    _log = Logger()

    #: Seconds between dials of a route that is down.
    redial_interval = 1.0

    def __init__(
        self,
        clock: Any,
        cluster_name: str,
        connect: Callable[[str, int, "_Dialer"], "Deferred[Any]"],
        server_name: str = "",
        advertise: Optional[Tuple[str, int]] = None,
        max_payload: int = 1048576,
        ping_interval: float = 30.0,
        tls: bool = False,
    ) -> None:
        self.clock = clock
        self.cluster_name = cluster_name
        self._connect = connect
        self.server_id = new_server_id()
        self.server_name = server_name or self.server_id
        self.advertise = advertise
        self.max_payload = max_payload
        self.ping_interval = ping_interval
        self.tls = tls
        self.routes: Dict[str, RouteProtocol] = {}
        self.connections: Set[RouteProtocol] = set()
        self.errors = 0
        self.paused = 0
        self.messages_dropped = 0
        self.stopped = True
        self._dialers: Dict[str, _Dialer] = {}
        self._subscriptions: List[Subscription] = []
        # (account, subject, queue) -> local subscription count
        self._local: Dict[Tuple[str, str, Optional[str]], int] = {}
        self._plans: Dict[Tuple[str, str], _Plan] = {}
        self._dispatch: Dict[Tuple[str, str], Tuple[Subscription, ...]] = {}
        self._turn = 0
        self._flush_waiters: Dict[RouteProtocol, List["Deferred[None]"]] = {}
        #: Extra INFO fields txnsq peers negotiate (nats-server ignores them).
        self.info_extra: Dict[str, Any] = {}
        #: Told ``route_up(route)`` when a server's route is the one sent
        #: on, and ``route_down(server_id)`` when the server has none left.
        self.observers: List[Any] = []
        #: Messages on txnsq's internal subjects (``$NSQ.``) go here, never
        #: to subscriptions; ``None``: they are dropped.
        self.internal_handler: Optional[Handler] = None

    # -- life ------------------------------------------------------------------

    def start(self, seeds: List[str]) -> None:
        """Dial the ``seeds`` (route URLs), now and whenever they are down."""
        self.stopped = False
        for url in seeds:
            self.add_route_url(url, seed=True)

    def stop(self) -> None:
        """Stop dialing and close every route."""
        self.stopped = True
        for dialer in self._dialers.values():
            dialer.stop()
        for connection in list(self.connections):
            connection.close()

    def set_advertise(self, host: str, port: int) -> None:
        """Where other servers dial us (the bound listener, or ``--cluster-advertise``)."""
        self.advertise = (host, port)

    def add_route_url(self, url: str, seed: bool = False) -> None:
        """
        Dial ``url`` unless it is already dialed.  Seeds (``--routes``)
        and URLs learned by gossip alike are dialed again every
        :attr:`redial_interval` while their server has no route.
        """
        dialer = self._dialers.get(url)
        if dialer is None:
            dialer = self._dialers[url] = _Dialer(self, url, seed)
            dialer.start()
        elif dialer.state == "waiting":
            dialer.start()

    def connect(self, host: str, port: int, dialer: _Dialer) -> "Deferred[Any]":
        """Open a route to ``host:port`` for ``dialer`` (see ``connect`` above)."""
        return self._connect(host, port, dialer)

    def build_protocol(self, dialer: Optional[_Dialer]) -> RouteProtocol:
        """The protocol of a route we dial (``dialer``) or accept (``None``)."""
        if dialer is None:
            return RouteProtocol(self, outbound=False)
        protocol = RouteProtocol(self, outbound=True, url=dialer.url)
        protocol.dialer = dialer
        return protocol

    # -- what we say -------------------------------------------------------------

    def info_fields(self) -> Dict[str, Any]:
        """Our INFO (no route pool, no compression: one plain route for all accounts)."""
        host, port = self.advertise or ("", 0)
        fields: Dict[str, Any] = {
            "server_id": self.server_id,
            "server_name": self.server_name,
            "version": _VERSION,
            "proto": 1,
            "host": host,
            "port": port,
            "headers": True,
            "max_payload": self.max_payload,
            "cluster": self.cluster_name,
        }
        if self.tls:
            fields["tls_required"] = True
            fields["tls_verify"] = True
        fields.update(self.info_extra)
        return fields

    def connect_fields(self) -> Dict[str, Any]:
        """Our CONNECT."""
        return {
            "echo": True,
            "verbose": False,
            "pedantic": False,
            "tls_required": self.tls,
            "name": self.server_id,
            "cluster": self.cluster_name,
            "headers": True,
        }

    def interest_lines(self) -> List[bytes]:
        """``RS+`` for every local interest."""
        return [
            encode_rs_plus(account, subject, queue, count)
            for (account, subject, queue), count in self._local.items()
        ]

    # -- local interest ----------------------------------------------------------

    def subscribe(
        self, account: str, subject: str, handler: Handler, queue: Optional[str] = None
    ) -> Subscription:
        """
        Want ``subject`` (a pattern) of ``account``; messages for it go to
        ``handler``.  Told to every route at once and to later ones.
        """
        subscription = Subscription(account, subject, queue, handler)
        self._subscriptions.append(subscription)
        self._dispatch.clear()
        key = (account, subject, queue)
        count = self._local.get(key, 0) + 1
        self._local[key] = count
        if count == 1 or queue is not None:
            line = encode_rs_plus(account, subject, queue, count)
            for route in self.connections:
                route.send(line)
        return subscription

    def unsubscribe(self, subscription: Subscription) -> None:
        """Undo :meth:`subscribe`; unknown subscriptions are ignored."""
        if subscription not in self._subscriptions:
            return
        self._subscriptions.remove(subscription)
        self._dispatch.clear()
        key = (subscription.account, subscription.subject, subscription.queue)
        count = self._local[key] - 1
        if count:
            self._local[key] = count
            line = encode_rs_plus(key[0], key[1], key[2], count) if key[2] is not None else b""
        else:
            del self._local[key]
            line = encode_rs_minus(key[0], key[1], key[2])
        if line:
            for route in self.connections:
                route.send(line)

    def flush(self) -> "Deferred[None]":
        """
        Fires once every route up now answered a PING sent now: what was
        sent before (RS+ say) has been taken by the peers.
        """
        waiters = []
        for route in self.routes.values():
            waiter: Deferred[None] = Deferred()
            self._flush_waiters.setdefault(route, []).append(waiter)
            route.send_ping()
            waiters.append(waiter)
        done: Deferred[None] = Deferred()
        DeferredList(waiters).addCallback(lambda _: done.callback(None))
        return done

    # -- sending -----------------------------------------------------------------

    def wants(self, account: str, subject: str) -> bool:
        """Some server has interest in ``subject``."""
        plan = self._plans.get((account, subject)) or self._make_plan(account, subject)
        return bool(plan[0] or plan[1])

    def publish(
        self,
        account: str,
        subject: str,
        payload: bytes,
        headers: Optional[bytes] = None,
        reply: Optional[str] = None,
    ) -> int:
        """
        Send a message to the servers that want it, once each (see the
        module's docstring); the number of servers it went to.
        """
        plan = self._plans.get((account, subject))
        if plan is None:
            plan = self._make_plan(account, subject)
        plain, groups, heads = plan
        if not plain and not groups:
            return 0
        if not groups and headers is None and reply is None:
            size = len(payload)
            head = heads.get(size)
            if head is None:
                if len(heads) >= CACHE_SIZE:
                    heads.clear()
                head = heads[size] = encode_rmsg_head(account, subject, size)
            for route in plain:
                route.send_message(head, payload)
            return len(plain)
        if headers is not None:
            body = headers + payload
        else:
            body = payload
        if not groups:
            head = self._head(account, subject, reply, (), headers, len(body))
            for route in plain:
                route.send_message(head, body)
            return len(plain)
        self._turn = turn = self._turn + 1
        named: Dict[RouteProtocol, List[str]] = {}
        for queue, members, total in groups:
            slot = turn % total
            for route, weight in members:
                if slot < weight:
                    break
                slot -= weight
            names = named.setdefault(route, [])
            if queue not in names:
                names.append(queue)
        sent = 0
        for route in plain:
            queues = named.pop(route, ())
            route.send_message(
                self._head(account, subject, reply, queues, headers, len(body)), body
            )
            sent += 1
        for route, queues in named.items():
            route.send_message(
                self._head(account, subject, reply, queues, headers, len(body)), body
            )
            sent += 1
        return sent

    def publish_many(self, account: str, subject: str, payloads: Sequence[bytes]) -> int:
        """
        :meth:`publish` several messages (in order); the number of sends.
        Without queue groups each route gets them in one write.
        """
        plan = self._plans.get((account, subject))
        if plan is None:
            plan = self._make_plan(account, subject)
        plain, groups, heads = plan
        if not plain and not groups:
            return 0
        if groups:
            return sum([self.publish(account, subject, payload) for payload in payloads])
        parts: List[bytes] = []
        append = parts.append
        total = 0
        for payload in payloads:
            size = len(payload)
            head = heads.get(size)
            if head is None:
                if len(heads) >= CACHE_SIZE:
                    heads.clear()
                head = heads[size] = encode_rmsg_head(account, subject, size)
            append(head)
            append(payload)
            append(CRLF)
            total += size
        data = b"".join(parts)
        for route in plain:
            route.send_messages(data, len(payloads), total)
        return len(plain) * len(payloads)

    @staticmethod
    def _head(
        account: str,
        subject: str,
        reply: Optional[str],
        queues: Any,
        headers: Optional[bytes],
        size: int,
    ) -> bytes:
        if headers is None:
            return encode_rmsg_head(account, subject, size, reply, queues)
        return encode_hmsg_head(account, subject, len(headers), size, reply, queues)

    def _make_plan(self, account: str, subject: str) -> _Plan:
        # A queue group is a (subject pattern, queue name) pair, as in
        # NATS: "nsq.*" q and "nsq.orders" q are two groups, each to get
        # the message once; the RMSG names only the queue.
        plain: List[RouteProtocol] = []
        members: Dict[Tuple[str, str], List[Tuple[RouteProtocol, int]]] = {}
        for route in self.routes.values():
            wants, queues = route.interest.match(account, subject)
            if wants:
                plain.append(route)
            if queues:
                for (pattern, queue), weight in route.interest.queue_groups(account).items():
                    if queue in queues and subject_matches(pattern, subject):
                        members.setdefault((pattern, queue), []).append((route, max(weight, 1)))
        groups = [
            (queue, routes, sum(weight for _, weight in routes))
            for (_, queue), routes in sorted(members.items())
        ]
        plan: _Plan = (plain, groups, {})
        if len(self._plans) >= CACHE_SIZE:
            self._plans.clear()
        self._plans[(account, subject)] = plan
        return plan

    # -- from routes ---------------------------------------------------------------

    def connection_made(self, route: RouteProtocol) -> None:
        """A route connection opened (handshake not done)."""
        self.connections.add(route)

    def route_ready(self, route: RouteProtocol) -> None:
        """The handshake is done: send on it unless its server has a route."""
        server_id = route.server_id
        if server_id == self.server_id:
            # We dialed ourselves (gossip named our own address).
            route.close()
            return
        if server_id is None:
            route.protocol_error("Unknown Protocol Operation", "INFO without server_id")
            return
        self._log.info(
            "NATS route {route}: up ({direction})",
            route=route.describe(),
            direction="dialed" if route.outbound else "accepted",
        )
        if server_id not in self.routes:
            self.routes[server_id] = route
            self._plans.clear()
            for observer in self.observers:
                observer.route_up(route)
        host, port = route.peer_info.get("host"), route.peer_info.get("port")
        for dialer in self._dialers.values():
            if dialer.host == host and dialer.port == port:
                dialer.server_id = server_id
                if dialer.state in ("waiting", "idle"):
                    dialer.stop()
                    dialer.state = "parked"

    def connection_lost(self, route: RouteProtocol, was_routed: bool) -> None:
        """A route connection closed: forget it; redial what must be."""
        self.connections.discard(route)
        for waiter in self._flush_waiters.pop(route, []):
            waiter.callback(None)
        server_id = route.server_id
        if server_id is not None and self.routes.get(server_id) is route:
            del self.routes[server_id]
            self._plans.clear()
            # Another connection to the same server takes over.
            for other in self.connections:
                if other.server_id == server_id and other.state == ROUTED:
                    self.routes[server_id] = other
                    break
            replacement = self.routes.get(server_id)
            for observer in self.observers:
                if replacement is None:
                    observer.route_down(server_id)
                else:
                    observer.route_up(replacement)
        if was_routed:
            self._log.info("NATS route {route}: down", route=route.describe())
        still = server_id is not None and server_id in self.routes
        dialer = route.dialer
        if dialer is not None and not self.stopped:
            dialer.lost(still)
        if not still and not self.stopped:
            # Dialers waiting on this server's other connection dial again.
            for parked in self._dialers.values():
                if parked.state == "parked" and parked.server_id == server_id:
                    parked.state = "idle"
                    parked.start(0)

    def interest_changed(self, route: RouteProtocol) -> None:
        """A route's interest changed: plans are made again."""
        self._plans.clear()

    def pong_received(self, route: RouteProtocol) -> None:
        """A PONG came: the oldest flush waiting on ``route`` is done."""
        waiters = self._flush_waiters.get(route)
        if waiters:
            waiters.pop(0).callback(None)

    def gossip(self, route: RouteProtocol, fields: Dict[str, Any]) -> None:
        """An INFO after the handshake: dial a server it names, if new."""
        url = fields.get("ip")
        if not isinstance(url, str) or not url:
            return
        server_id = fields.get("server_id")
        if server_id == self.server_id or server_id in self.routes:
            return
        try:
            _, host, port = parse_route_url(url)
        except ValueError:
            return
        if self.advertise is not None and (host, port) == self.advertise:
            return
        self.add_route_url(url.rstrip("/"))

    def route_messages(self, route: RouteProtocol, batch: RouteMessages) -> int:
        """
        Messages from a route to the local subscriptions; how many (of
        ``batch.payloads``, in order) were taken: fewer means the rest later.

        With one subscription wanting them (the usual case: the bridge)
        the batch goes to it whole.  With several, message by message; a
        subscription refusing one stops there, and the others, which took
        it, will be given it again.
        """
        if batch.subject.startswith("$NSQ."):
            internal = self.internal_handler
            if internal is None:
                self.messages_dropped += len(batch.payloads)
                return len(batch.payloads)
            return internal(route, batch)
        key = (batch.account, batch.subject)
        targets = self._dispatch.get(key)
        if targets is None:
            targets = tuple(
                subscription
                for subscription in self._subscriptions
                if subscription.account == batch.account
                and subject_matches(subscription.subject, batch.subject)
            )
            if len(self._dispatch) >= CACHE_SIZE:
                self._dispatch.clear()
            self._dispatch[key] = targets
        queues = batch.queues
        if queues or any(target.queue is not None for target in targets):
            targets = tuple(
                target for target in targets if target.queue is None or target.queue in queues
            )
        count = len(batch.payloads)
        if not targets:
            self.messages_dropped += count
            return count
        if len(targets) == 1:
            return targets[0].handler(route, batch)
        headers = batch.headers
        for index, payload in enumerate(batch.payloads):
            one = batch._replace(
                payloads=[payload], headers=[headers[index]] if headers is not None else None
            )
            for target in targets:
                if not target.handler(route, one):
                    return index
        return count

    # -- stats ---------------------------------------------------------------------

    def stats(self) -> Dict[str, Any]:
        """The cluster section of /stats."""
        routes = sorted(self.connections, key=lambda r: (r.server_id or "", r.outbound))
        return {
            "server_id": self.server_id,
            "cluster_name": self.cluster_name,
            "advertise": "%s:%d" % self.advertise if self.advertise else "",
            "route_count": len(self.routes),
            "connection_count": len(self.connections),
            "errors": self.errors,
            "paused": self.paused,
            "messages_dropped": self.messages_dropped,
            "local_interest": [
                {"account": a, "subject": s, "queue": q or ""} for (a, s, q) in self._local
            ],
            "routes": [
                dict(route.stats(), primary=self.routes.get(route.server_id or "") is route)
                for route in routes
            ],
        }
