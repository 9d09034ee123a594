# -*- test-case-name: tests.test_lookup -*-
"""
nsqd's side of nsqlookupd (Go's ``lookupLoop`` and the channel lookup of
``NSQD.GetTopic``).

:class:`LookupService` keeps one :class:`LookupPeer <txnsq.nsqd.lookup_peer.LookupPeer>`
per ``--lookupd-tcp-address`` (changed at run time through ``PUT
/config/nsqlookupd_tcp_addresses``), tells each of them about topics and
channels as the broker creates and deletes them, and knows the lookupds'
HTTP addresses from their IDENTIFY replies.

With lookupds known, a topic created by a client waits (:meth:`Topic.hold
<txnsq.nsqd.topic.Topic.hold>`) while the lookupds are asked which channels
the topic has elsewhere; those channels are created before the topic hands
out its first message, so that none of them misses it.  Go blocks
``GetTopic`` for that; here the topic just keeps its messages meanwhile.
"""

from __future__ import annotations

import socket
from typing import (
    TYPE_CHECKING,
    Any,
    Callable,
    Dict,
    Iterable,
    List,
    Mapping,
    Optional,
    Sequence,
    Set,
    Tuple,
)

from twisted.application.service import Service
from twisted.internet.defer import Deferred, DeferredList
from twisted.logger import Logger
from twisted.python.failure import Failure

from txnsq.version import NSQ_VERSION
from txnsq.nsqd.broker import Broker, TopologyListener
from txnsq.nsqd.channel import Channel
from txnsq.nsqd.topic import Topic
from txnsq.protocol.lookup_v1 import encode_register, encode_unregister

if TYPE_CHECKING:
    # Imported by the first peer (its ClientService machinery is not needed
    # by an nsqd with no --lookupd-tcp-address).
    from txnsq.nsqd.lookup_peer import LookupPeer

__all__ = ["LookupService"]

#: Makes a peer: ``(address, identify, registrations) -> LookupPeer``.
PeerFactory = Callable[
    [str, Callable[[], Mapping[str, Any]], Callable[[], Iterable[Tuple[str, str]]]],
    "LookupPeer",
]

_EPHEMERAL = "#ephemeral"


class LookupService(Service, TopologyListener):
    """
    Registers one nsqd's topics and channels with its nsqlookupds.

    Start it once nsqd listens (the ports it registers are then known).

    :param broker: the topics and channels to register.
    :param options: nsqd's settings (``NSQDOptions``): the lookupd
        addresses, broadcast address and ports, ``--max-body-size`` and
        the HTTP client timeouts, read when used.
    :param bound_ports: the ports nsqd listens on, by label (``TCP``,
        ``HTTP``); registered unless ``--broadcast-tcp-port`` or
        ``--broadcast-http-port`` say otherwise.
    :param reactor: connects and times everything.
    :param hostname: sent in IDENTIFY; the OS hostname when omitted.
    :param peer_factory: makes the peers (tests); :class:`LookupPeer`
        with ``reactor`` when omitted.
    :param channels_client: asks lookupds for a topic's channels (tests);
        a :class:`TopicChannelsClient <txnsq.nsqd.lookup_channels.TopicChannelsClient>` when
        omitted (imported then: its HTTP client, ``twisted.web.client``,
        imports TLS).
    """

    _log = Logger()

    def __init__(
        self,
        broker: Broker,
        options: Any,
        bound_ports: Callable[[], Mapping[str, int]],
        reactor: Any,
        *,
        hostname: Optional[str] = None,
        peer_factory: Optional[PeerFactory] = None,
        channels_client: Optional[Any] = None,
    ) -> None:
        self.broker = broker
        self.options = options
        self.reactor = reactor
        self.hostname = hostname if hostname is not None else socket.gethostname()
        self._bound_ports = bound_ports
        self._peer_factory = peer_factory or self._make_peer
        self._channels_client = channels_client
        # The peers by address, in the order the addresses were given.
        self.peers: Dict[str, "LookupPeer"] = {}
        # Channel lookups under way, cancelled when stopping.
        self._lookups: Set["Deferred[Any]"] = set()
        # Peers being stopped, waited for by stopService.
        self._stopping: Set["Deferred[None]"] = set()

    def __repr__(self) -> str:
        return "<LookupService %s>" % (", ".join(self.peers) or "no lookupd",)

    # -- life ------------------------------------------------------------

    def startService(self) -> None:
        """Connect to every ``--lookupd-tcp-address``; follow the broker."""
        Service.startService(self)
        self.broker.add_listener(self)
        self.broker.prepare_topic = self.prepare_topic
        self.set_addresses(list(self.options.lookupd_tcp_address))

    def stopService(self) -> "Deferred[None]":
        """Close every lookupd connection; fires once all are closed."""
        Service.stopService(self)
        self._log.info("LOOKUP: closing")
        self.broker.remove_listener(self)
        if self.broker.prepare_topic == self.prepare_topic:
            self.broker.prepare_topic = None
        for lookup in list(self._lookups):
            lookup.cancel()
        peers, self.peers = list(self.peers.values()), {}
        for peer in peers:
            self._stop_peer(peer)
        done: Deferred[Any] = DeferredList(list(self._stopping), consumeErrors=True)
        return done.addCallback(lambda _: None)

    def set_addresses(self, addresses: Sequence[str]) -> None:
        """
        Use these lookupd TCP addresses from now on: peers whose address
        stays are kept as they are, the others stopped, new ones started
        (Go's ``optsNotificationChan`` branch).  Ignored while stopped
        (:meth:`startService` reads the options).
        """
        if not self.running:
            return
        wanted = list(dict.fromkeys(addresses))
        for address in list(self.peers):
            if address not in wanted:
                self._log.info("LOOKUP({address}): removing peer", address=address)
                self._stop_peer(self.peers.pop(address))
        for address in wanted:
            if address in self.peers:
                continue
            self._log.info("LOOKUP({address}): adding peer", address=address)
            try:
                peer = self._peer_factory(address, self.identify, self.registrations)
            except ValueError as error:
                self._log.error("LOOKUP({address}): {error}", address=address, error=error)
                continue
            self.peers[address] = peer
            peer.startService()

    def _make_peer(
        self,
        address: str,
        identify: Callable[[], Mapping[str, Any]],
        registrations: Callable[[], Iterable[Tuple[str, str]]],
    ) -> "LookupPeer":
        from txnsq.nsqd.lookup_peer import LookupPeer

        return LookupPeer(
            address,
            self.reactor,
            identify,
            registrations,
            max_reply_size=self.options.max_body_size,
        )

    def _stop_peer(self, peer: "LookupPeer") -> None:
        stopping = peer.stopService()
        self._stopping.add(stopping)

        def forget(result: object) -> None:
            self._stopping.discard(stopping)

        stopping.addBoth(forget)

    # -- what is registered ----------------------------------------------

    def identify(self) -> Dict[str, Any]:
        """
        The IDENTIFY body: the broadcast address and ports (the bound ports
        unless broadcast ones are set), the hostname and the version.
        """
        options = self.options
        ports = self._bound_ports()
        return {
            "broadcast_address": options.broadcast_address,
            "hostname": self.hostname,
            "http_port": options.broadcast_http_port or ports.get("HTTP", 0),
            "tcp_port": options.broadcast_tcp_port or ports.get("TCP", 0),
            "version": NSQ_VERSION,
        }

    def registrations(self) -> List[Tuple[str, str]]:
        """
        Everything to register on a new connection, as Go does: a topic
        without channels as ``(topic, "")``, else one ``(topic, channel)``
        per channel.
        """
        found: List[Tuple[str, str]] = []
        for topic in list(self.broker.topics.values()):
            if not topic.channels:
                found.append((topic.name, ""))
            else:
                found.extend((topic.name, name) for name in topic.channels)
        return found

    def lookupd_http_addresses(self) -> List[str]:
        """The HTTP ``host:port`` of every lookupd that told its broadcast address."""
        found = []
        for peer in self.peers.values():
            info = peer.info
            address = info.http_address() if info is not None else None
            if address is not None:
                found.append(address)
        return found

    # -- TopologyListener ------------------------------------------------

    def topic_created(self, topic: Topic) -> None:
        self._send(encode_register(topic.name), "topic")

    def topic_deleted(self, topic: Topic) -> None:
        self._send(encode_unregister(topic.name), "topic")

    def channel_created(self, topic: Topic, channel: Channel) -> None:
        self._send(encode_register(topic.name, channel.name), "channel")

    def channel_deleted(self, topic: Topic, channel: Channel) -> None:
        self._send(encode_unregister(topic.name, channel.name), "channel")

    def _send(self, command: bytes, branch: str) -> None:
        for peer in list(self.peers.values()):
            peer.send(command, branch)

    # -- channels of new topics ------------------------------------------

    def prepare_topic(self, topic: Topic) -> None:
        """
        A client created ``topic``: hold it while the lookupds are asked for
        its channels, create them (not ``#ephemeral`` ones: they would have
        no consumer), then start it.  Without a lookupd to ask, the topic
        starts at once.
        """
        addresses = self.lookupd_http_addresses()
        if not addresses:
            if self.peers:
                self._log.error(
                    "no available nsqlookupd to query for channels to pre-create for topic {topic}",
                    topic=topic.name,
                )
            return
        client = self._channels_client
        if client is None:
            from txnsq.nsqd.lookup_channels import TopicChannelsClient

            client = TopicChannelsClient(
                self.reactor,
                self.options.http_client_connect_timeout,
                self.options.http_client_request_timeout,
            )
        topic.hold()
        lookup: Deferred[Any] = client.topic_channels(topic.name, addresses)
        self._lookups.add(lookup)

        def found(result: Tuple[List[str], List[str]]) -> None:
            channels, errors = result
            if errors:
                self._warn(topic, "; ".join(errors))
            if topic.exiting or self.broker.topics.get(topic.name) is not topic:
                return
            for name in channels:
                if name.endswith(_EPHEMERAL):
                    continue
                try:
                    topic.get_channel(name)
                except ValueError:
                    self._log.warn(
                        "nsqlookupd named an invalid channel {channel!r} for topic {topic}",
                        channel=name,
                        topic=topic.name,
                    )

        def failed(failure: Failure) -> None:
            # A lookup cancelled by stopService is no news.
            if self.running:
                self._warn(topic, failure.getErrorMessage())

        def start(result: object) -> None:
            self._lookups.discard(lookup)
            topic.start()

        lookup.addCallbacks(found, failed).addBoth(start)

    def _warn(self, topic: Topic, error: str) -> None:
        self._log.warn(
            "failed to query nsqlookupd for channels to pre-create for topic {topic} - {error}",
            topic=topic.name,
            error=error,
        )
