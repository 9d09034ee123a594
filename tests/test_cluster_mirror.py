"""
Tests for :mod:`txnsq.mirror.mirror`: two brokers on one Clock, each with
a route node and a :class:`Mirror`, joined by a route over
StringTransports that a pump empties into each other.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

from twisted.internet.defer import Deferred
from twisted.internet.task import Clock
from twisted.internet.testing import StringTransport
from twisted.trial.unittest import SynchronousTestCase

from tests.cluster_fakes import FakeDials, dialed_route, written
from tests.core_fakes import START, FakeConsumer, decode, make_broker
from tests.mirror_fakes import FakeConnection
from txnsq.mirror.mirror import INFO_FIELD, Mirror
from txnsq.mirror.files import load_node_id
from txnsq.cluster.node import RouteNode
from txnsq.cluster.route import RouteProtocol
from txnsq.protocol.nats_route import RouteMessage


class Side:
    """One node: broker, route node, mirror."""

    def __init__(
        self, clock: Clock, name: str, port: int, broker: Any = None, **mirror: Any
    ) -> None:
        # A broker given is one kept across a restart (its queues on disk).
        self.broker = broker if broker is not None else make_broker(clock)
        # No heartbeat unless a test asks: the pump moves bytes only when
        # called, so pings sent while a test advances the clock go unheard.
        mirror.setdefault("heartbeat", (0.0, 0.0))
        self.dials = FakeDials()
        self.node = RouteNode(clock, "c1", self.dials, advertise=("127.0.0.1", port))
        self.mirror = Mirror(self.broker, self.node, clock, name, **mirror)
        self.mirror.start()


class MirrorTestCase(SynchronousTestCase):
    """Nodes ``a`` (publishing) and ``b`` (standby) mirroring topics ``m*``."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(START)
        self.a = Side(self.clock, "node-a", 7000, topics="^m", failover_timeout=5.0)
        self.b = Side(self.clock, "node-b", 7001, topics="^m", failover_timeout=5.0)
        self.link: Optional[Tuple[RouteProtocol, StringTransport, RouteProtocol, StringTransport]] = None
        self.connect()

    def connect(self, pump: bool = True) -> None:
        """Route a -> b (a dials b's listener); bytes moved unless ``pump`` is false."""
        if not self.a.dials.pending:
            self.a.node.start(["nats-route://127.0.0.1:7001"])
        _, _, dialer, waiting = self.a.dials.pending.pop(0)
        client = self.a.node.build_protocol(dialer)
        server = self.b.node.build_protocol(None)
        client_transport, server_transport = StringTransport(), StringTransport()
        client.makeConnection(client_transport)
        server.makeConnection(server_transport)
        waiting.callback(client)
        self.link = (client, client_transport, server, server_transport)
        if pump:
            self.pump()

    def move(self, acks: bool = True) -> None:
        """Move bytes until quiet without running a reactor turn (b's bytes only if ``acks``)."""
        assert self.link is not None
        client, client_transport, server, server_transport = self.link
        while True:
            moved = False
            data = client_transport.value()
            if data:
                client_transport.clear()
                server.dataReceived(data)
                moved = True
            data = server_transport.value() if acks else b""
            if data:
                server_transport.clear()
                client.dataReceived(data)
                moved = True
            if not moved:
                return

    def pump(self) -> None:
        """Run the reactor turn (mirror flushes), then move bytes until quiet."""
        self.clock.advance(0)
        assert self.link is not None
        client, client_transport, server, server_transport = self.link
        for _ in range(100):
            moved = False
            data = client_transport.value()
            if data:
                client_transport.clear()
                server.dataReceived(data)
                moved = True
            data = server_transport.value()
            if data:
                server_transport.clear()
                client.dataReceived(data)
                moved = True
            self.clock.advance(0)
            if not moved:
                return

    def cut(self) -> None:
        """Both ends of the route lose the connection."""
        assert self.link is not None
        client, _, server, _ = self.link
        self.link = None
        client.connectionLost()
        server.connectionLost()

    def copy_of_a(self, topic: str = "mt", channel: str = "c") -> List[bytes]:
        """The bodies b keeps for a's ``topic:channel``, in order."""
        copy = self.b.mirror.copies["node-a"].topics[topic]
        return [decode(data).body for data in copy.channels[channel].values()]


class CopyTests(MirrorTestCase):
    """What a publishing node's standby keeps."""

    def test_info_names_the_mirror(self) -> None:
        """Each node's INFO carries its mirror id and epoch; each sees the other as a peer."""
        self.assertEqual(self.a.node.info_fields()[INFO_FIELD]["id"], "node-a")
        self.assertEqual([p.node_id for p in self.a.mirror.peers.values()], ["node-b"])
        self.assertEqual([p.node_id for p in self.b.mirror.peers.values()], ["node-a"])

    def test_messages_copied_not_delivered(self) -> None:
        """Published messages reach b's copy with their ids; b's broker delivers none of them."""
        topic = self.a.broker.get_topic("mt")
        topic.get_channel("c")
        topic.publish(b"one")
        topic.publish_many([b"two", b"three"])
        self.pump()
        self.assertEqual(self.copy_of_a(), [b"one", b"two", b"three"])
        self.assertEqual(self.b.broker.topics["mt"].channels, {})

    def test_unmirrored_topic_not_sent(self) -> None:
        """A topic the pattern leaves out sends nothing."""
        self.a.broker.get_topic("other").publish(b"x")
        self.pump()
        self.assertEqual(self.a.mirror.batches_sent, 0)
        self.assertNotIn("node-a", self.b.mirror.copies)

    def test_fin_removes_from_copy(self) -> None:
        """A FIN on a's channel removes the message from b's copy of that channel only."""
        topic = self.a.broker.get_topic("mt")
        channel = topic.get_channel("c")
        topic.get_channel("d")
        consumer = FakeConsumer(ready_count=10)
        topic.publish_many([b"one", b"two"])
        channel.add_consumer(consumer)
        channel.consumer_ready(consumer)
        first = consumer.take()[0]
        channel.finish(consumer, first.id)
        self.pump()
        self.assertEqual(self.copy_of_a("mt", "c"), [b"two"])
        self.assertEqual(self.copy_of_a("mt", "d"), [b"one", b"two"])

    def test_held_messages_go_to_first_channel(self) -> None:
        """Messages published before any channel go to the first channel created, as on the node."""
        topic = self.a.broker.get_topic("mt")
        topic.publish(b"early")
        topic.get_channel("c")
        topic.publish(b"late")
        topic.get_channel("d")
        self.pump()
        self.assertEqual(self.copy_of_a("mt", "c"), [b"early", b"late"])
        self.assertEqual(self.copy_of_a("mt", "d"), [])

    def test_channel_delete_and_empty(self) -> None:
        """Deleting or emptying a channel on a does the same in b's copy."""
        topic = self.a.broker.get_topic("mt")
        topic.get_channel("c")
        topic.get_channel("d")
        topic.publish(b"x")
        topic.delete_channel("d")
        topic.channels["c"].empty()
        self.pump()
        copy = self.b.mirror.copies["node-a"].topics["mt"]
        self.assertEqual(list(copy.channels), ["c"])
        self.assertEqual(self.copy_of_a(), [])

    def test_mirror_topic_by_name(self) -> None:
        """mirror_topic() mirrors a topic the pattern leaves out."""
        self.a.mirror.mirror_topic("named")
        topic = self.a.broker.topics["named"]
        topic.get_channel("c")
        topic.publish(b"x")
        self.pump()
        self.assertEqual(self.copy_of_a("named", "c"), [b"x"])

    def test_ephemeral_topic_refused(self) -> None:
        """An ephemeral topic cannot be mirrored."""
        self.assertRaises(ValueError, self.a.mirror.mirror_topic, "x#ephemeral")


class GateTests(MirrorTestCase):
    """``--mirror-ack``: when a producer's OK may leave."""

    def test_sync_holds_until_ack(self) -> None:
        """In sync mode the gate holds a connection until b has acked the publish's payload."""
        topic = self.a.broker.get_topic("mt")
        topic.publish(b"x")
        connection = FakeConnection()
        self.assertTrue(self.a.mirror.gate(connection))
        self.assertEqual(connection.released, 0)
        self.pump()
        self.assertEqual(connection.released, 1)
        self.assertEqual(self.a.mirror.lag_bytes, 0)

    def test_nothing_pending_not_held(self) -> None:
        """With every payload acked the gate lets output go."""
        self.assertFalse(self.a.mirror.gate(FakeConnection()))

    def test_peer_down_releases(self) -> None:
        """A peer going down releases the connections waiting for it."""
        self.a.broker.get_topic("mt").publish(b"x")
        connection = FakeConnection()
        self.assertTrue(self.a.mirror.gate(connection))
        self.cut()
        self.assertEqual(connection.released, 1)
        self.assertFalse(self.a.mirror.gate(FakeConnection()))

    def test_async_not_held(self) -> None:
        """In async mode the gate holds only past the lag bound."""
        mirror = self.a.mirror
        mirror.sync = False
        self.a.broker.get_topic("mt").publish(b"x")
        self.assertFalse(mirror.gate(FakeConnection()))
        mirror.max_lag_bytes = 0
        mirror.flush()
        self.assertTrue(mirror.gate(FakeConnection()))


class AsyncGatheringTests(MirrorTestCase):
    """``async`` mode: while a payload is unacked, later turns' records wait to go with one."""

    def setUp(self) -> None:
        super().setUp()
        self.a.mirror.sync = False
        self.topic = self.a.broker.get_topic("mt")
        self.topic.get_channel("c")
        self.pump()
        self.sent = self.a.mirror.batches_sent

    def test_gathered_while_unacked(self) -> None:
        """Turns ending while a payload is unacked send nothing; its ack sends what they gathered, as one."""
        mirror = self.a.mirror
        self.topic.publish(b"one")
        self.clock.advance(0)
        self.assertEqual(mirror.batches_sent, self.sent + 1)
        self.topic.publish(b"two")
        self.clock.advance(0)
        self.topic.publish_many([b"three", b"four"])
        self.clock.advance(0)
        self.assertEqual(mirror.batches_sent, self.sent + 1)
        self.move()
        self.assertEqual(mirror.batches_sent, self.sent + 2)
        self.pump()
        self.assertEqual(self.copy_of_a(), [b"one", b"two", b"three", b"four"])
        self.assertEqual(mirror.lag_bytes, 0)

    def test_nothing_unacked_sent_at_turn_end(self) -> None:
        """With every payload acked, a turn's records leave at its end, as in sync mode."""
        for body in (b"one", b"two"):
            self.topic.publish(body)
            self.pump()
        self.assertEqual(self.a.mirror.batches_sent, self.sent + 2)
        self.assertEqual(self.copy_of_a(), [b"one", b"two"])

    def test_full_sent_without_waiting(self) -> None:
        """Records past FLUSH_SIZE leave while a payload is unacked."""
        from txnsq.mirror.recorder import FLUSH_SIZE

        mirror = self.a.mirror
        self.topic.publish(b"first")
        self.clock.advance(0)
        body = b"x" * 4096
        for _ in range(FLUSH_SIZE // len(body) + 1):
            self.topic.publish(body)
        self.assertEqual(mirror.batches_sent, self.sent + 2)
        self.pump()
        self.assertEqual(len(self.copy_of_a()), FLUSH_SIZE // len(body) + 2)

    def test_route_down_drops_gathered(self) -> None:
        """Records gathered for a peer whose route went down are dropped; its catch-up brings the messages."""
        self.topic.publish(b"one")
        self.clock.advance(0)
        self.topic.publish(b"two")
        self.clock.advance(0)
        self.cut()
        self.assertFalse(self.a.mirror.recorder.builder)
        self.connect()
        self.pump()
        self.assertEqual(self.copy_of_a(), [b"one", b"two"])

    def test_sync_not_gathered(self) -> None:
        """In sync mode each turn's records leave at its end, acked or not."""
        mirror = self.a.mirror
        mirror.sync = True
        self.topic.publish(b"one")
        self.clock.advance(0)
        self.topic.publish(b"two")
        self.clock.advance(0)
        self.assertEqual(mirror.batches_sent, self.sent + 2)


class FailoverTests(MirrorTestCase):
    """b delivering a's messages."""

    def publish_two_finish_one(self) -> List[bytes]:
        topic = self.a.broker.get_topic("mt")
        channel = topic.get_channel("c")
        consumer = FakeConsumer(ready_count=10)
        topic.publish_many([b"one", b"two", b"three"])
        channel.add_consumer(consumer)
        channel.consumer_ready(consumer)
        delivered = consumer.take()
        channel.finish(consumer, delivered[0].id)
        self.pump()
        return [message.id for message in delivered]

    def test_failover_after_timeout(self) -> None:
        """Once the route has been down for the timeout, b's channel holds a's unfinished messages, ids kept."""
        ids = self.publish_two_finish_one()
        self.cut()
        self.clock.advance(4.9)
        self.assertEqual(self.b.broker.topics["mt"].channels, {})
        self.clock.advance(0.2)
        channel = self.b.broker.topics["mt"].channels["c"]
        consumer = FakeConsumer(ready_count=10)
        channel.add_consumer(consumer)
        channel.consumer_ready(consumer)
        got = consumer.take()
        self.assertEqual([m.body for m in got], [b"two", b"three"])
        self.assertEqual([m.id for m in got], ids[1:])
        self.assertEqual(self.b.mirror.taken_over[0]["messages"], 2)

    def test_failover_of_copy_never_read(self) -> None:
        """b keeps the payloads unapplied until the takeover, which hands over what a held."""
        ids = self.publish_two_finish_one()
        copy = self.b.mirror.copies["node-a"].topics["mt"]
        self.assertGreater(copy.pending(), 0)
        self.cut()
        self.clock.advance(5.1)
        self.assertEqual(copy.pending(), 0)
        channel = self.b.broker.topics["mt"].channels["c"]
        consumer = FakeConsumer(ready_count=10)
        channel.add_consumer(consumer)
        channel.consumer_ready(consumer)
        self.assertEqual([m.id for m in consumer.take()], ids[1:])

    def test_back_before_timeout(self) -> None:
        """A route back before the timeout cancels the failover."""
        self.publish_two_finish_one()
        self.cut()
        self.clock.advance(2)
        self.connect()
        self.clock.advance(10)
        self.assertEqual(self.b.broker.topics["mt"].channels, {})
        self.assertEqual(self.copy_of_a(), [b"two", b"three"])

    def test_restarted_peer_taken_over_at_once(self) -> None:
        """A peer back as a new process (new epoch) has its old copy delivered by b at once."""
        self.publish_two_finish_one()
        self.cut()
        self.a = Side(self.clock, "node-a", 7000, topics="^m", failover_timeout=5.0)
        self.connect()
        self.assertEqual(self.b.mirror.taken_over[0]["reason"], "restarted")
        self.assertEqual(self.b.broker.topics["mt"].channels["c"].depth(), 2)
        # And a is now b's standby for what b publishes.
        self.b.broker.topics["mt"].publish(b"four")
        self.pump()
        copy = self.a.mirror.copies["node-b"].topics["mt"]
        self.assertEqual(sum(len(m) for m in copy.channels.values()), 3)

    def test_topic_pause_mirrored(self) -> None:
        """A topic paused on a is paused in b's copy, and on b after a failover, holding its messages."""
        topic = self.a.broker.get_topic("mt")
        topic.get_channel("c")
        topic.pause()
        topic.publish(b"held")
        self.pump()
        self.assertTrue(self.b.mirror.copies["node-a"].topics["mt"].paused.get(""))
        self.cut()
        self.clock.advance(5.1)
        b_topic = self.b.broker.topics["mt"]
        self.assertTrue(b_topic.paused)
        self.assertEqual((b_topic.depth(), b_topic.channels["c"].depth()), (1, 0))

    def test_stats_mark_roles(self) -> None:
        """/stats marks b's copy of the topic as standby and a's as primary."""
        topic = self.a.broker.get_topic("mt")
        topic.get_channel("c")
        topic.publish(b"x")
        self.pump()
        self.assertEqual(self.a.mirror.topic_role(topic)["role"], "primary")
        b_topic = self.b.broker.get_topic("mt")
        role = self.b.mirror.topic_role(b_topic)
        self.assertEqual(role["role"], "standby")
        self.assertEqual(role["standby_messages"], 1)
        self.assertEqual(self.b.mirror.stats()["copies"][0]["node_id"], "node-a")


class NatsPeerTests(SynchronousTestCase):
    """A nats-server peer is never sent the internal subjects."""

    def test_no_internal_subjects(self) -> None:
        """Publishes and FINs of a mirrored topic send nothing to a peer without the INFO field."""
        clock = Clock()
        broker = make_broker(clock)
        dials = FakeDials()
        node = RouteNode(clock, "c1", dials, advertise=("127.0.0.1", 7000))
        mirror = Mirror(broker, node, clock, "node-a", topics="^m")
        mirror.start()
        node.start(["nats-route://127.0.0.1:6222"])
        route, transport = dialed_route(node, dials, "SA")
        topic = broker.get_topic("mt")
        topic.get_channel("c")
        topic.publish(b"x")
        clock.advance(0)
        messages = [op for op in written(transport) if isinstance(op, RouteMessage)]
        self.assertEqual(messages, [])
        self.assertFalse(mirror.peers)

    def test_internal_subjects_from_stranger_dropped(self) -> None:
        """$NSQ. messages from a route that is no mirroring peer are dropped, not delivered."""
        clock = Clock()
        broker = make_broker(clock)
        dials = FakeDials()
        node = RouteNode(clock, "c1", dials, advertise=("127.0.0.1", 7000))
        mirror = Mirror(broker, node, clock, "node-a", topics="^m")
        mirror.start()
        node.start(["nats-route://127.0.0.1:6222"])
        route, transport = dialed_route(node, dials, "SA")
        route.dataReceived(b"RMSG $G $NSQ.mirror.data 8\r\n\x00\x00\x00\x00\x00\x00\x00\x01\r\n")
        self.assertEqual(mirror.copies, {})


class NodeIdTests(SynchronousTestCase):
    """The mirror id kept in the data path."""

    def test_kept(self) -> None:
        """The id made on first start is read back later."""
        path = self.mktemp()
        import os

        os.makedirs(path)
        first = load_node_id(path)
        self.assertEqual(load_node_id(path), first)
        self.assertTrue(first)

    def test_written_durably(self) -> None:
        """A new id is written as kept files are: synced, renamed in place, the directory synced, no temporary file left."""
        import os

        import txnsq.files

        path = self.mktemp()
        os.makedirs(path)
        synced: List[int] = []
        dirs: List[str] = []
        real_fsync = os.fsync

        def fsync(fd: int) -> None:
            synced.append(fd)
            real_fsync(fd)

        def fsync_directory(directory: str) -> None:
            dirs.append(directory)

        self.patch(txnsq.files.os, "fsync", fsync)
        self.patch(txnsq.files, "fsync_directory", fsync_directory)
        node_id = load_node_id(path)
        self.assertEqual(os.listdir(path), ["txnsq-mirror.id"])
        with open(os.path.join(path, "txnsq-mirror.id")) as stream:
            self.assertEqual(stream.read(), node_id + "\n")
        self.assertEqual(len(synced), 1)
        self.assertEqual(dirs, [path])


class HeartbeatTests(MirrorTestCase):
    """A peer that stops answering (hung, not disconnected) is seen by the heartbeat."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(START)
        self.a = Side(self.clock, "node-a", 7000, topics="^m", failover_timeout=5.0, heartbeat=(1.0, 3.0))
        self.b = Side(self.clock, "node-b", 7001, topics="^m", failover_timeout=5.0, heartbeat=(1.0, 3.0))
        self.link = None
        self.connect()

    def beat(self, seconds: int) -> None:
        """Let ``seconds`` pass, one second at a time, bytes moved each second."""
        for _ in range(seconds):
            self.clock.advance(1.0)
            self.pump()

    def test_pings_keep_peers(self) -> None:
        """Peers that ping each other stay peers however long nothing is published."""
        self.beat(20)
        self.assertEqual(len(self.b.mirror.peers), 1)
        self.assertEqual(self.b.mirror.silences, 0)

    def test_hung_primary_failed_over(self) -> None:
        """
        A primary that stops sending (its route still connected) is treated
        as down after the silence limit, and its copy delivered after the
        failover timeout; heard again, it is a peer again and the exchange
        runs (a drops what b took over).
        """
        topic = self.a.broker.get_topic("mt")
        channel = topic.get_channel("c")
        topic.publish(b"one")
        self.pump()
        assert self.link is not None
        client, client_transport, server, server_transport = self.link
        # a hangs: b's bytes pile up unread, a sends nothing.
        for _ in range(4):
            self.clock.advance(1.0)
            client_transport.clear()
            server_transport.clear()
        self.assertEqual(self.b.mirror.silences, 1)
        self.assertEqual(self.b.mirror.peers, {})
        self.clock.advance(5.0)
        self.assertEqual(self.b.mirror.taken_over[0]["reason"], "unreachable")
        self.assertEqual(self.b.broker.topics["mt"].channels["c"].depth(), 1)
        # a wakes up: its next ping revives it at b; a's own view saw b silent too.
        self.beat(3)
        self.assertEqual(len(self.b.mirror.peers), 1)
        self.assertTrue(self.b.mirror.taken_over[0]["split_brain"])
        self.assertEqual(channel.depth(), 0)
        self.assertEqual(self.b.broker.topics["mt"].channels["c"].depth(), 1)


class NamedTopicsTests(SynchronousTestCase):
    """The topics of ``POST /topic/mirror`` kept across a restart."""

    def test_named_kept(self) -> None:
        """A topic mirrored by name is mirrored again by a new Mirror on the same file, when it is made."""
        import os

        directory = self.mktemp()
        os.makedirs(directory)
        path = os.path.join(directory, "txnsq-mirror.topics")
        clock = Clock()
        first = Side(clock, "node-a", 7000, named_file=path)
        first.mirror.mirror_topic("orders")
        first.mirror.stop()
        again = Side(clock, "node-a", 7000, named_file=path)
        self.assertTrue(again.mirror.mirrored("orders"))
        self.assertFalse(again.mirror.mirrored("other"))
        topic = again.broker.get_topic("orders")
        self.assertIsNotNone(topic.mirror)

    def test_unwritable_logged(self) -> None:
        """A file that cannot be written does not fail POST /topic/mirror: the topic is mirrored until the restart."""
        clock = Clock()
        side = Side(clock, "node-a", 7000, named_file="/nonexistent/dir/txnsq-mirror.topics")
        side.mirror.mirror_topic("orders")
        self.assertTrue(side.mirror.mirrored("orders"))


class StandbyTopicTests(MirrorTestCase):
    """The standby makes the topics it keeps copies of."""

    def test_topic_made_on_standby(self) -> None:
        """b has the topic (so registers it with nsqlookupd) once it keeps a copy of it, but no message in it."""
        topic = self.a.broker.get_topic("mt")
        topic.get_channel("c")
        topic.publish(b"x")
        self.pump()
        b_topic = self.b.broker.topics["mt"]
        self.assertEqual((b_topic.depth(), b_topic.channels), (0, {}))


class CatchUpTests(MirrorTestCase):
    """A peer coming (back) is sent what the node holds."""

    def test_published_while_down(self) -> None:
        """Messages published and finished while the route was down: b's copy, back, holds exactly the unfinished ones in order."""
        topic = self.a.broker.get_topic("mt")
        channel = topic.get_channel("c")
        topic.publish(b"before")
        self.pump()
        self.cut()
        topic.publish_many([b"one", b"two", b"three"])
        consumer = FakeConsumer(ready_count=2)
        channel.add_consumer(consumer)
        channel.consumer_ready(consumer)
        delivered = consumer.take()
        self.assertEqual([m.body for m in delivered], [b"before", b"one"])
        channel.finish(consumer, delivered[0].id)
        self.clock.advance(1)
        self.connect()
        # In flight first, then the queue.
        self.assertEqual(self.copy_of_a(), [b"one", b"two", b"three"])
        self.assertEqual((channel.depth(), channel.in_flight_count), (1, 2))
        self.assertEqual(self.a.mirror.catch_up_messages, 3)

    def test_restarted_standby(self) -> None:
        """A restarted standby (a new process, no copy) gets the channels and the unfinished messages."""
        topic = self.a.broker.get_topic("mt")
        topic.get_channel("c")
        topic.publish_many([b"one", b"two"])
        self.pump()
        self.cut()
        self.b = Side(self.clock, "node-b", 7001, topics="^m", failover_timeout=5.0)
        self.clock.advance(1)
        self.connect()
        self.assertEqual(self.copy_of_a(), [b"one", b"two"])
        self.assertEqual(topic.channels["c"].depth(), 2)

    def test_held_by_topic(self) -> None:
        """Messages the topic holds itself (no channel) are sent too, and stay held there."""
        topic = self.a.broker.get_topic("mt")
        topic.publish(b"held")
        self.pump()
        self.cut()
        self.b = Side(self.clock, "node-b", 7001, topics="^m", failover_timeout=5.0)
        self.clock.advance(1)
        self.connect()
        copy = self.b.mirror.copies["node-a"].topics["mt"]
        self.assertEqual([decode(data).body for data in copy.held.values()], [b"held"])
        self.assertEqual(topic.depth(), 1)

    def turn(self) -> None:
        """
        One reactor turn: the calls due now, not those they schedule (which
        Clock.advance(0) would run too).
        """
        now = self.clock.seconds()
        for call in [c for c in self.clock.getDelayedCalls() if c.getTime() <= now]:
            if call.active():
                func, args, kw = call.func, call.args, call.kw
                call.cancel()
                func(*args, **kw)

    def big_node(self) -> Side:
        """Node a anew, its queues large enough for a backlog of several slices."""
        broker = make_broker(self.clock, mem_queue_size=1000000)
        return Side(self.clock, "node-a", 7000, broker, topics="^m", failover_timeout=5.0)

    def test_large_backlog_in_slices(self) -> None:
        """A backlog larger than a slice arrives whole over several reactor turns; a FIN and a publish made meanwhile follow it, and a sync producer waits for it."""
        from txnsq.mirror.catch_up import CATCH_UP_SLICE

        self.cut()
        self.a = self.big_node()
        topic = self.a.broker.get_topic("mt")
        channel = topic.get_channel("c")
        count = 3 * CATCH_UP_SLICE // 100
        bodies = [b"%099d" % (i,) for i in range(count)]
        topic.publish_many(bodies)
        self.b = Side(self.clock, "node-b", 7001, topics="^m", failover_timeout=5.0)
        self.clock.advance(1)
        self.connect(pump=False)
        self.move()
        # One reactor turn's slice is there, not the rest.
        stats = self.a.mirror.stats()
        kept = len(self.b.mirror.copies["node-a"].topics["mt"].channels["c"])
        self.assertTrue(0 < kept < count, kept)
        self.assertEqual(stats["catch_up_pending"], count - kept)
        # The node serves meanwhile: a consumer gets and finishes the
        # first message, a producer publishes, and waits (sync).
        consumer = FakeConsumer(ready_count=1)
        channel.add_consumer(consumer)
        channel.consumer_ready(consumer)
        first = consumer.take()[0]
        channel.finish(consumer, first.id)
        topic.publish(b"live")
        producer = FakeConnection()
        self.assertTrue(self.a.mirror.gate(producer))
        turns = 0
        while self.a.mirror.stats()["catch_up_pending"]:
            self.turn()
            self.move()
            turns += 1
        self.assertGreater(turns, 1)
        self.pump()
        self.assertEqual(producer.released, 1)
        self.assertEqual(self.copy_of_a(), bodies[1:] + [b"live"])
        self.assertEqual(self.a.mirror.catch_up_messages, count)

    def test_cut_during_catch_up(self) -> None:
        """A route lost while a catch-up runs drops the rest of it and releases the producers waiting for it; the next route gets a whole one."""
        from txnsq.mirror.catch_up import CATCH_UP_SLICE

        self.cut()
        self.a = self.big_node()
        topic = self.a.broker.get_topic("mt")
        topic.get_channel("c")
        count = 3 * CATCH_UP_SLICE // 100
        topic.publish_many([b"%099d" % (i,) for i in range(count)])
        self.clock.advance(1)
        self.connect(pump=False)
        self.move()
        self.assertGreater(self.a.mirror.stats()["catch_up_pending"], 0)
        producer = FakeConnection()
        topic.publish(b"live")
        self.assertTrue(self.a.mirror.gate(producer))
        self.cut()
        self.assertEqual(producer.released, 1)
        self.assertEqual(self.a.mirror.stats()["catch_up_pending"], 0)
        self.clock.advance(1)
        self.connect()
        self.assertEqual(len(self.copy_of_a()), count + 1)
        self.assertEqual(self.a.mirror.catch_ups, 2)

    def test_backlog_waits_for_acks(self) -> None:
        """A catch-up sends no more than its window while the peer has not acked, and goes on when it does."""
        from txnsq.mirror.catch_up import CATCH_UP_WINDOW
        from txnsq.mirror.recorder import FLUSH_SIZE

        self.cut()
        self.a = self.big_node()
        topic = self.a.broker.get_topic("mt")
        topic.get_channel("c")
        count = 2 * CATCH_UP_WINDOW // 100
        topic.publish_many([b"x" * 100] * count)
        self.clock.advance(1)
        self.connect(pump=False)
        self.move()
        for _ in range(50):
            self.clock.advance(0)
            self.move(acks=False)
        mirror = self.a.mirror
        self.assertLess(mirror.lag_bytes, CATCH_UP_WINDOW + 2 * FLUSH_SIZE)
        self.assertGreater(mirror.stats()["catch_up_pending"], 0)
        self.pump()
        self.assertEqual(mirror.stats()["catch_up_pending"], 0)
        self.assertEqual(len(self.copy_of_a()), count)

    def test_unwritable(self) -> None:
        """An id that cannot be kept is still made (and the failure logged)."""
        path = self.mktemp()
        node_id = load_node_id(path)  # the directory does not exist
        self.assertTrue(node_id)
        self.assertEqual(len(self.flushLoggedErrors()), 0)


class TopicEmptyTests(MirrorTestCase):
    """Emptying a mirrored topic."""

    def test_topic_empty(self) -> None:
        """What the topic held itself is dropped from b's copy too."""
        topic = self.a.broker.get_topic("mt")
        topic.publish(b"held")
        topic.empty()
        topic.get_channel("c")
        topic.publish(b"after")
        self.pump()
        self.assertEqual(self.copy_of_a(), [b"after"])


class FailBackTests(MirrorTestCase):
    """The exchange when a node comes back: what was taken over is delivered once."""

    def a_holds(self, bodies: List[bytes]) -> Any:
        """a's channel ``mt:c`` with ``bodies`` published, delivered to a consumer, in flight."""
        topic = self.a.broker.get_topic("mt")
        channel = topic.get_channel("c")
        consumer = FakeConsumer(ready_count=10)
        topic.publish_many(bodies)
        channel.add_consumer(consumer)
        channel.consumer_ready(consumer)
        self.pump()
        return channel, consumer

    def restart_a_keeping_queues(self) -> None:
        """a's process ends, its channels' queues kept (disk storage), and starts again."""
        channel = self.a.broker.topics["mt"].channels["c"]
        for consumer in list(channel.consumers):
            # In flight at the end: back in the queue at the restart.
            channel.remove_consumer(consumer)
        self.a.mirror.stop()
        self.a = Side(
            self.clock, "node-a", 7000, broker=self.a.broker, topics="^m", failover_timeout=5.0
        )

    def delivered_by(self, side: Side) -> List[bytes]:
        channel = side.broker.topics["mt"].channels["c"]
        consumer = FakeConsumer(ready_count=100)
        channel.add_consumer(consumer)
        channel.consumer_ready(consumer)
        return [message.body for message in consumer.take()]

    def test_restarted_primary_holds_then_drops_taken_over(self) -> None:
        """A primary restarted with its queues holds delivery, and drops what b took over at once at its return."""
        channel, consumer = self.a_holds([b"one", b"two", b"three"])
        channel.finish(consumer, consumer.take()[0].id)
        self.pump()
        self.cut()
        self.restart_a_keeping_queues()
        self.assertEqual(self.a.mirror.stats()["exchange"]["holding"], ["mt"])
        self.assertEqual(self.delivered_by(self.a), [])
        answered = self.b.mirror.exchanges_answered
        self.connect()
        self.assertEqual(self.b.mirror.taken_over[0]["reason"], "restarted")
        self.assertEqual(self.a.mirror.dropped_taken, 2)
        self.assertEqual(self.a.mirror.stats()["exchange"]["holding"], [])
        self.assertEqual(self.delivered_by(self.a), [])
        self.assertEqual(self.delivered_by(self.b), [b"two", b"three"])
        # b's list was applied: forgotten; a is b's standby for them.
        self.assertEqual(self.b.mirror.taken_ids, {})
        self.assertEqual(self.b.mirror.exchanges_answered, answered + 1)
        copy = self.a.mirror.copies["node-b"].topics["mt"]
        self.assertEqual(len(copy.channels["c"]), 2)

    def test_restarted_after_failover(self) -> None:
        """A primary back after b's failover drops every message b took over, finished there or not."""
        channel, consumer = self.a_holds([b"one", b"two"])
        self.cut()
        self.clock.advance(5.1)
        self.assertEqual(self.b.mirror.taken_over[0]["reason"], "unreachable")
        b_channel = self.b.broker.topics["mt"].channels["c"]
        b_consumer = FakeConsumer(ready_count=1)
        b_channel.add_consumer(b_consumer)
        b_channel.consumer_ready(b_consumer)
        b_channel.finish(b_consumer, b_consumer.take()[0].id)
        self.restart_a_keeping_queues()
        self.connect()
        self.assertEqual(self.a.mirror.dropped_taken, 2)
        self.assertEqual(self.delivered_by(self.a), [])
        self.assertEqual(channel.depth() + channel.in_flight_count, 0)

    def test_accepted_alone_kept(self) -> None:
        """A message the restarted node accepted while b was away is kept and delivered there, and copied to b."""
        self.a_holds([b"one"])
        self.cut()
        self.a.broker.topics["mt"].publish(b"alone")
        self.restart_a_keeping_queues()
        self.connect()
        self.assertEqual(self.a.mirror.dropped_taken, 1)
        self.assertEqual(self.delivered_by(self.a), [b"alone"])
        self.assertEqual(self.delivered_by(self.b), [b"one"])
        copy = self.b.mirror.copies["node-a"].topics["mt"]
        self.assertEqual([decode(data).body for data in copy.channels["c"].values()], [b"alone"])

    def test_hold_released_without_peer(self) -> None:
        """With no peer routed, a restarted node's kept messages are delivered after the failover timeout."""
        self.a_holds([b"one"])
        self.cut()
        self.restart_a_keeping_queues()
        channel = self.a.broker.topics["mt"].channels["c"]
        consumer = FakeConsumer(ready_count=10)
        channel.add_consumer(consumer)
        channel.consumer_ready(consumer)
        self.clock.advance(4.9)
        self.assertEqual(consumer.take(), [])
        self.clock.advance(0.2)
        self.assertEqual([m.body for m in consumer.take()], [b"one"])

    def test_fresh_node_not_held(self) -> None:
        """A node starting with no message in its mirrored topics holds nothing."""
        self.assertEqual(self.a.mirror.stats()["exchange"]["holding"], [])
        self.assertIsNone(self.a.mirror.fail_back.hold_timer)

    def test_split_brain_exchange(self) -> None:
        """
        Both alive and apart past the timeout: at the reconnection a drops
        what b took over (in flight there too), and b drops what a finished
        while apart; from then on each message is b's, once.
        """
        channel, consumer = self.a_holds([b"one", b"two", b"three"])
        delivered = consumer.take()
        self.cut()
        self.clock.advance(5.1)
        self.assertEqual(self.b.mirror.taken_over[0]["messages"], 3)
        # a, alive, finishes "one" while apart.
        channel.finish(consumer, delivered[0].id)
        self.connect()
        self.assertTrue(self.b.mirror.taken_over[0]["split_brain"])
        self.assertEqual((channel.depth(), channel.in_flight_count), (0, 0))
        self.assertEqual(consumer.in_flight_count, 0)
        self.assertEqual(self.a.mirror.dropped_taken, 2)
        self.assertEqual(self.b.mirror.dropped_finished_apart, 1)
        self.assertEqual(self.delivered_by(self.b), [b"two", b"three"])
        # a's copy of b: exactly what b holds.
        copy = self.a.mirror.copies["node-b"].topics["mt"]
        self.assertEqual(
            sorted(decode(data).body for data in copy.channels["c"].values()), [b"three", b"two"]
        )

    def test_large_list_in_chunks(self) -> None:
        """A list longer than one exchange payload is sent in several, each applied."""
        import txnsq.mirror.exchange as module

        self.patch(module, "EXCHANGE_CHUNK", 2)
        self.a_holds([b"%d" % (n,) for n in range(7)])
        self.cut()
        self.restart_a_keeping_queues()
        self.connect()
        self.assertEqual(self.a.mirror.dropped_taken, 7)
        self.assertEqual(self.delivered_by(self.a), [])
        self.assertEqual(len(self.delivered_by(self.b)), 7)


#: What a held producer is told when the live standbys drop from 1 to 0.
LOST_ONE = (
    "mirror: 0 of 1 required standbys live before the standbys acked; "
    "outcome unknown (stored here, may still be delivered)"
)


class Link:
    """A route between two Sides over StringTransports, ``dialer`` dialing ``listener``."""

    def __init__(self, dialer: Side, listener: Side, port: int) -> None:
        if not dialer.dials.pending:
            dialer.node.start(["nats-route://127.0.0.1:%d" % (port,)])
        _, _, dial, waiting = dialer.dials.pending.pop(0)
        self.client = dialer.node.build_protocol(dial)
        self.server = listener.node.build_protocol(None)
        self.client_transport, self.server_transport = StringTransport(), StringTransport()
        self.client.makeConnection(self.client_transport)
        self.server.makeConnection(self.server_transport)
        waiting.callback(self.client)

    def move(self, forward: bool = True, back: bool = True) -> None:
        """Move bytes until quiet: dialer to listener if ``forward``, the other way if ``back``."""
        while True:
            moved = False
            data = self.client_transport.value() if forward else b""
            if data:
                self.client_transport.clear()
                self.server.dataReceived(data)
                moved = True
            data = self.server_transport.value() if back else b""
            if data:
                self.server_transport.clear()
                self.client.dataReceived(data)
                moved = True
            if not moved:
                return


class MinStandbysTests(MirrorTestCase):
    """``--mirror-min-standbys=1``: a publish stands on a live standby or fails."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(START)
        self.a = Side(self.clock, "node-a", 7000, topics="^m", failover_timeout=5.0, min_standbys=1)
        self.b = Side(self.clock, "node-b", 7001, topics="^m", failover_timeout=5.0)
        self.link = None
        self.topic = self.a.broker.get_topic("mt")
        self.channel = self.topic.get_channel("c")

    def assertRefused(self, text: str = "mirror: 0 of 1 required standbys live") -> None:
        """Every form of publish to the mirrored topic is refused with ``text``, nothing stored."""
        from txnsq.mirror.recorder import StandbysUnavailable

        count = self.topic.message_count
        for publish in (
            lambda: self.topic.publish(b"x"),
            lambda: self.topic.publish_many([b"x", b"y"]),
            lambda: self.topic.publish_deferred(b"x", 1.0),
        ):
            with self.assertRaises(StandbysUnavailable) as caught:
                publish()
            self.assertEqual(str(caught.exception), text)
        self.assertEqual(self.topic.message_count, count)
        self.assertFalse(self.a.mirror.recorder.builder)

    def test_refused_before_storing_without_standby(self) -> None:
        """With no standby routed, publishes to a mirrored topic are refused before anything is stored; other topics are not."""
        self.assertRefused()
        self.assertEqual((self.channel.depth(), self.channel.deferred_count), (0, 0))
        other = self.a.broker.get_topic("other")
        other.publish(b"fine")
        self.assertEqual(other.message_count, 1)
        stats = self.a.mirror.stats()
        self.assertEqual(
            (stats["min_standbys"], stats["publishes_refused"], stats["producers_failed"]), (1, 3, 0)
        )

    def test_ok_after_standby_acked(self) -> None:
        """With the standby live, a publish is held until its ack, then released, as without the flag."""
        self.connect()
        self.topic.publish(b"x")
        connection = FakeConnection()
        self.assertTrue(self.a.mirror.gate(connection))
        self.assertEqual(connection.released, 0)
        self.pump()
        self.assertEqual((connection.released, connection.failed), (1, []))
        self.assertEqual(self.copy_of_a(), [b"x"])

    def test_held_fails_when_route_drops(self) -> None:
        """A publish waiting for the ack fails when the route drops: it stays stored here, outcome unknown; the next is refused."""
        self.connect()
        self.topic.publish(b"x")
        connection = FakeConnection()
        self.assertTrue(self.a.mirror.gate(connection))
        self.cut()
        self.assertEqual((connection.released, connection.failed), (0, [LOST_ONE]))
        self.assertEqual(self.channel.depth(), 1)
        self.assertEqual(self.a.mirror.stats()["producers_failed"], 1)
        self.assertRefused()

    def test_fails_at_gate_when_gone_before(self) -> None:
        """A publish taken while the standby was live, whose output reaches the gate after the route dropped, fails at once."""
        self.connect()
        self.topic.publish(b"x")
        self.cut()
        connection = FakeConnection()
        self.assertTrue(self.a.mirror.gate(connection))
        self.assertEqual((connection.released, connection.failed), (0, [LOST_ONE]))

    def test_publishes_taken_again_when_back(self) -> None:
        """The standby back, publishes are taken again and held until it acked them."""
        self.connect()
        self.cut()
        self.assertRefused()
        self.clock.advance(1)
        self.connect()
        self.topic.publish(b"back")
        connection = FakeConnection()
        self.assertTrue(self.a.mirror.gate(connection))
        self.pump()
        self.assertEqual((connection.released, connection.failed), (1, []))
        self.assertEqual(self.copy_of_a(), [b"back"])

    def test_fewer_than_asked(self) -> None:
        """Asking for two standbys with one live refuses, naming both counts."""
        self.a.mirror.min_standbys = 2
        self.connect()
        self.assertRefused("mirror: 1 of 2 required standbys live")

    def test_async_refuses_at_publish_only(self) -> None:
        """In async mode publishes are refused while the standby is away; a producer held past the lag bound is released, not failed."""
        mirror = self.a.mirror
        mirror.sync = False
        self.connect()
        self.topic.publish(b"x")
        self.assertFalse(mirror.gate(FakeConnection()))
        mirror.max_lag_bytes = 0
        self.topic.publish(b"y")
        mirror.flush()
        connection = FakeConnection()
        self.assertTrue(mirror.gate(connection))
        self.cut()
        self.assertEqual((connection.released, connection.failed), (1, []))
        self.assertRefused()

    def test_stopping_fails_held(self) -> None:
        """A node stopping fails the producers still waiting for acks."""
        self.connect()
        self.topic.publish(b"x")
        connection = FakeConnection()
        self.assertTrue(self.a.mirror.gate(connection))
        self.a.mirror.stop()
        self.assertEqual(
            connection.failed,
            [
                "mirror: stopping before the standbys acked; "
                "outcome unknown (stored here, may still be delivered)"
            ],
        )

    def test_new_peer_counts_after_its_catch_up(self) -> None:
        """
        A publish waiting when a second standby comes counts that one only
        once it has applied the catch-up carrying the message: the first
        one dropping meanwhile leaves it waiting, not released.
        """
        self.connect()
        self.topic.publish(b"x")
        connection = FakeConnection()
        self.assertTrue(self.a.mirror.gate(connection))
        # Not acked by b; then c comes: a hears c, c's acks are not read yet.
        c = Side(self.clock, "node-c", 7002, topics="^m", failover_timeout=5.0)
        link = Link(c, self.a, 7000)
        # a's INFO to c; c's CONNECT and INFO to a (a routes c, sends its
        # catch-up); the catch-up to c, whose acks stay unread.
        link.move(forward=False, back=True)
        link.move(forward=True, back=False)
        link.move(forward=False, back=True)
        self.assertEqual(len(self.a.mirror.peers), 2)
        self.cut()
        self.assertEqual((connection.released, connection.failed), (0, []))
        link.move()
        self.clock.advance(0)
        link.move()
        self.assertEqual((connection.released, connection.failed), (1, []))
        copy = c.mirror.copies["node-a"].topics["mt"]
        self.assertEqual([decode(data).body for data in copy.channels["c"].values()], [b"x"])


class MinStandbysHeartbeatTests(MirrorTestCase):
    """``--mirror-min-standbys=1`` with the heartbeat: a silent standby is not live."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(START)
        beat = {"topics": "^m", "failover_timeout": 5.0, "heartbeat": (1.0, 3.0)}
        self.a = Side(self.clock, "node-a", 7000, min_standbys=1, **beat)
        self.b = Side(self.clock, "node-b", 7001, **beat)
        self.link = None
        self.connect()

    def beat(self, seconds: int) -> None:
        """Let ``seconds`` pass, one second at a time, bytes moved each second."""
        for _ in range(seconds):
            self.clock.advance(1.0)
            self.pump()

    def test_held_fails_when_standby_silent(self) -> None:
        """A publish waiting for a standby that falls silent (route open) fails after the silence limit; heard again, publishes are taken."""
        from txnsq.mirror.recorder import StandbysUnavailable

        topic = self.a.broker.get_topic("mt")
        topic.publish(b"one")
        connection = FakeConnection()
        self.assertTrue(self.a.mirror.gate(connection))
        assert self.link is not None
        client, client_transport, server, server_transport = self.link
        # b hangs: a's bytes pile up unread, b sends nothing.
        for _ in range(4):
            self.clock.advance(1.0)
            client_transport.clear()
            server_transport.clear()
        self.assertEqual(self.a.mirror.silences, 1)
        self.assertEqual((connection.released, connection.failed), (0, [LOST_ONE]))
        self.assertRaises(StandbysUnavailable, topic.publish, b"two")
        self.beat(3)
        self.assertEqual(len(self.a.mirror.peers), 1)
        topic.publish(b"three")
        self.assertEqual(topic.message_count, 2)


class KnownLossTests(MirrorTestCase):
    """
    The loss seen in the fault lab, at unit level: a primary and its
    standby, ``sync``, the route cut for longer than the failover timeout
    while a producer publishes over TCP, then the primary's host lost.
    With ``--mirror-min-standbys=1`` every publish acknowledged is on the
    standby; with 0, those acknowledged during the cut are on the
    primary alone.
    """

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(START)
        self.link = None

    def start(self, min_standbys: int) -> None:
        from txnsq.nsqd.broker import Broker
        from txnsq.nsqd.options import NSQDOptions
        from txnsq.nsqd.tcp import NSQDFactory
        from txnsq.storage.memory import MemoryStorage

        # A broker with nsqd's options: a V2 connection reads them.
        broker = Broker(NSQDOptions(storage="memory", node_id=1), self.clock, MemoryStorage())
        self.a = Side(
            self.clock, "node-a", 7000, broker, topics="^m", failover_timeout=5.0, min_standbys=min_standbys
        )
        self.b = Side(self.clock, "node-b", 7001, topics="^m", failover_timeout=5.0)
        self.a.broker.get_topic("mt").get_channel("c")
        self.factory = NSQDFactory(self.a.broker, self.clock)
        self.connect()

    def publish(self, body: bytes) -> bool:
        """PUB ``body`` from a new producer connection; whether it was answered OK."""
        from tests.test_tcp import ERROR, OK, Client, frame, pub

        producer = Client(self.factory, 40000)
        producer.send(b"  V2" + pub(b"mt", body))
        if self.link is not None:
            self.pump()
        answer = producer.raw()
        if answer == OK:
            return True
        refused = b"E_PUB_FAILED PUB failed mirror: 0 of 1 required standbys live"
        self.assertEqual(answer, frame(ERROR, refused))
        self.assertTrue(producer.closed)
        return False

    def on_standby(self) -> List[bytes]:
        """The bodies of node-a's messages the standby holds: its copy, or (taken over) its channel."""
        from txnsq.mirror.snapshot import channel_snapshot

        found: List[bytes] = []
        copy = self.b.mirror.copies.get("node-a")
        if copy is not None and "mt" in copy.topics:
            found.extend(decode(data).body for data in copy.topics["mt"].channels.get("c", {}).values())
        topic = self.b.broker.topics.get("mt")
        if topic is not None and "c" in topic.channels:
            found.extend(decode(data).body for data in channel_snapshot(topic.channels["c"])[0])
        return found

    def run_cut(self) -> Tuple[List[bytes], List[bytes]]:
        """Publish every half second: 2 s routed, 8 s cut (past the 5 s failover); what was acknowledged before and during the cut."""
        before: List[bytes] = []
        during: List[bytes] = []
        for number in range(4):
            body = b"before-%d" % (number,)
            if self.publish(body):
                before.append(body)
            self.clock.advance(0.5)
        self.cut()
        for number in range(16):
            body = b"during-%d" % (number,)
            if self.publish(body):
                during.append(body)
            self.clock.advance(0.5)
        self.assertEqual(self.b.mirror.taken_over[0]["reason"], "unreachable")
        return before, during

    def test_nothing_acknowledged_alone(self) -> None:
        """With --mirror-min-standbys=1 no publish is acknowledged while the standby is unreachable: every acknowledged one survives the primary's loss."""
        self.start(1)
        before, during = self.run_cut()
        self.assertEqual(len(before), 4)
        self.assertEqual(during, [])
        # The primary's host is lost now: what was acknowledged is on b.
        self.assertEqual(sorted(self.on_standby()), sorted(before))
        stats = self.a.mirror.stats()
        self.assertEqual(stats["publishes_refused"], 16)
        self.assertEqual(self.a.broker.topics["mt"].message_count, 4)

    def test_zero_acknowledges_alone(self) -> None:
        """With --mirror-min-standbys=0 (the default) the primary goes on acknowledging alone, and those publishes are not on the standby."""
        self.start(0)
        before, during = self.run_cut()
        self.assertEqual((len(before), len(during)), (4, 16))
        self.assertEqual(sorted(self.on_standby()), sorted(before))
        self.assertEqual(self.a.mirror.stats()["publishes_refused"], 0)

    def test_publish_in_flight_at_the_cut(self) -> None:
        """A PUB whose OK waits for the standby's ack when the route is cut gets E_PUB_FAILED saying its outcome is unknown, and the connection closes."""
        from tests.test_tcp import ERROR, Client, frame, pub

        self.start(1)
        producer = Client(self.factory, 40000)
        producer.send(b"  V2" + pub(b"mt", b"x"))
        self.assertEqual(producer.raw(), b"")
        self.cut()
        self.assertEqual(
            producer.raw(),
            frame(
                ERROR,
                b"E_PUB_FAILED PUB failed mirror: 0 of 1 required standbys live before the "
                b"standbys acked; outcome unknown (stored here, may still be delivered)",
            ),
        )
        self.assertTrue(producer.closed)
        self.assertEqual(self.a.broker.topics["mt"].channels["c"].depth(), 1)

    def test_metaq_put(self) -> None:
        """A MetaQ put to a retained, mirrored topic: refused 503 with no standby (nothing stored), answered once the standby acked, 503 when it goes first."""
        import os

        from tests.test_metaq_server import Client as MetaqClient
        from txnsq.metaq.backend import BrokerMetaqBackend
        from txnsq.metaq.server import MetaqFactory
        from txnsq.nsqd.retention import RetentionSettings

        self.start(1)
        directory = self.mktemp()
        os.makedirs(directory)
        self.a.broker.options.data_path = directory
        topic = self.a.broker.get_topic("mt")
        topic.set_retention(RetentionSettings(1 << 20, 0.0, 1))
        self.addCleanup(self.a.broker.close)
        backend = BrokerMetaqBackend(self.a.broker, "v")
        client = MetaqClient(MetaqFactory(backend, self.clock, 1024, mirror_gate=backend.mirror_gate))
        # Routed: the reply waits for b's ack.
        self.assertEqual(client.send(b"put mt 0 3 0 1\r\none"), [])
        self.pump()
        [reply] = client.replies()
        self.assertEqual((reply.code, reply.opaque), (200, 1))
        # Waiting when the route goes: 503, stored, outcome unknown.
        self.assertEqual(client.send(b"put mt 0 3 0 2\r\ntwo"), [])
        self.cut()
        [reply] = client.replies()
        self.assertEqual(
            (reply.code, reply.body, reply.opaque),
            (
                503,
                b"put: mirror: 0 of 1 required standbys live before the standbys acked; "
                b"outcome unknown (stored here, may still be delivered)",
                2,
            ),
        )
        # No standby: refused before storing, and the connection goes on.
        [reply] = client.send(b"put mt 0 5 0 3\r\nthree")
        self.assertEqual(
            (reply.code, reply.body, reply.opaque), (503, b"put: mirror: 0 of 1 required standbys live", 3)
        )
        self.assertEqual(topic.message_count, 2)
        assert topic.retention is not None
        self.assertEqual(topic.retention.log.partitions[0].next_offset, 2 * 23)
        self.assertFalse(client.closed)


class Wire:
    """A route between two Sides over StringTransports, ``left`` having dialed ``right``."""

    def __init__(self, left: Side, right: Side) -> None:
        self.ends = (left, right)
        assert right.node.advertise is not None
        port = right.node.advertise[1]
        left.node.start(["nats-route://127.0.0.1:%d" % (port,)])
        [dial] = [entry for entry in left.dials.pending if entry[1] == port]
        left.dials.pending.remove(dial)
        _, _, dialer, waiting = dial
        self.left = left.node.build_protocol(dialer)
        self.right = right.node.build_protocol(None)
        self.left_transport, self.right_transport = StringTransport(), StringTransport()
        self.left.makeConnection(self.left_transport)
        self.right.makeConnection(self.right_transport)
        waiting.callback(self.left)

    def move(self) -> bool:
        """Move what each end wrote to the other; whether anything moved."""
        moved = False
        for transport, to in ((self.left_transport, self.right), (self.right_transport, self.left)):
            data = transport.value()
            if data:
                transport.clear()
                to.dataReceived(data)
                moved = True
        return moved

    def cut(self) -> None:
        """Both ends lose the connection."""
        self.left.connectionLost()
        self.right.connectionLost()


class ThreeNodeTests(SynchronousTestCase):
    """Nodes a, b and c mirroring ``m*`` to each other: one survivor takes over a lost node's copy."""

    def setUp(self) -> None:
        self.clock = Clock()
        self.clock.advance(START)
        self.sides = {
            name: Side(self.clock, "node-" + name, port, topics="^m", failover_timeout=5.0)
            for name, port in (("a", 7000), ("b", 7001), ("c", 7002))
        }
        self.wires: List[Wire] = []
        for left, right in (("a", "b"), ("a", "c"), ("b", "c")):
            self.wire(left, right)

    def wire(self, left: str, right: str) -> None:
        """Route ``left`` and ``right``; bytes moved."""
        self.wires.append(Wire(self.sides[left], self.sides[right]))
        self.pump()

    def pump(self) -> None:
        """Run reactor turns and move bytes on every wire until quiet."""
        for _ in range(100):
            self.clock.advance(0)
            if not any([wire.move() for wire in self.wires]):
                return

    def lose(self, name: str) -> None:
        """Every route of ``name`` is cut."""
        side = self.sides[name]
        for wire in [wire for wire in self.wires if side in wire.ends]:
            wire.cut()
            self.wires.remove(wire)

    def a_holds_two_unfinished(self) -> None:
        """a publishes three messages on ``mt:c`` and finishes one; b and c copy them."""
        topic = self.sides["a"].broker.get_topic("mt")
        channel = topic.get_channel("c")
        consumer = FakeConsumer(ready_count=10)
        topic.publish_many([b"one", b"two", b"three"])
        channel.add_consumer(consumer)
        channel.consumer_ready(consumer)
        channel.finish(consumer, consumer.take()[0].id)
        self.pump()

    def delivered_by(self, name: str) -> List[bytes]:
        """The bodies ``name``'s ``mt:c`` delivers to a new consumer."""
        topic = self.sides[name].broker.topics.get("mt")
        if topic is None or "c" not in topic.channels:
            return []
        channel = topic.channels["c"]
        consumer = FakeConsumer(ready_count=100)
        channel.add_consumer(consumer)
        channel.consumer_ready(consumer)
        return sorted(message.body for message in consumer.take())

    def test_routed_all_to_all(self) -> None:
        """Each node has the other two as mirroring peers, and b and c copy a's messages."""
        for name, side in self.sides.items():
            self.assertEqual(len(side.mirror.peers), 2, name)
        self.a_holds_two_unfinished()
        for name in ("b", "c"):
            self.assertEqual(self.sides[name].mirror.copies["node-a"].count(), 2)

    def test_only_smallest_survivor_takes_over(self) -> None:
        """When a is lost, b (the smallest survivor id) delivers its copy; c keeps its copy and delivers nothing."""
        self.a_holds_two_unfinished()
        self.lose("a")
        self.clock.advance(5.1)
        b, c = self.sides["b"].mirror, self.sides["c"].mirror
        self.assertEqual(b.taker_of("node-a"), "node-b")
        self.assertEqual(c.taker_of("node-a"), "node-b")
        self.assertEqual([done["node_id"] for done in b.taken_over], ["node-a"])
        self.assertEqual(c.taken_over, [])
        self.assertEqual(c.kept["node-a"].count(), 2)
        self.assertEqual(self.delivered_by("b"), [b"three", b"two"])
        self.assertEqual(self.delivered_by("c"), [])
        self.assertEqual(len(c.stats()["kept_copies"]), 1)

    def test_taker_lost_too(self) -> None:
        """When b is lost after taking over a's copy, c takes over both b's copy and its kept copy of a."""
        self.a_holds_two_unfinished()
        self.lose("a")
        self.clock.advance(5.1)
        self.pump()
        self.lose("b")
        self.clock.advance(4.9)
        c = self.sides["c"].mirror
        self.assertEqual(c.taken_over, [])
        self.clock.advance(0.2)
        self.assertEqual(
            sorted((done["node_id"], done["reason"]) for done in c.taken_over),
            [("node-a", "taker lost"), ("node-b", "unreachable")],
        )
        self.assertEqual(c.kept, {})
        # b mirrored a's messages onward as its own: c has them twice (at least once).
        self.assertEqual(self.delivered_by("c"), [b"three", b"three", b"two", b"two"])

    def test_taker_lost_at_once(self) -> None:
        """When a and b are lost together, c takes over both copies once b's timeout passes."""
        self.a_holds_two_unfinished()
        self.lose("a")
        self.lose("b")
        self.clock.advance(5.1)
        c = self.sides["c"].mirror
        self.assertEqual(
            [(done["node_id"], done["reason"]) for done in c.taken_over], [("node-a", "taker lost")]
        )
        self.assertEqual(self.delivered_by("c"), [b"three", b"two"])

    def test_back_in_same_process(self) -> None:
        """A node back in the same process after the timeout finds c's kept copy live again, with no takeover there."""
        self.a_holds_two_unfinished()
        self.lose("a")
        self.clock.advance(5.1)
        self.wire("a", "c")
        c = self.sides["c"].mirror
        self.assertEqual(c.kept, {})
        self.assertEqual(c.copies["node-a"].count(), 2)
        self.assertEqual(self.delivered_by("c"), [])

    def test_restarted_primary_one_taker(self) -> None:
        """A primary back as a new process is taken over by b alone; c drops its copy of the old process."""
        self.a_holds_two_unfinished()
        self.lose("a")
        self.sides["a"].mirror.stop()
        self.sides["a"] = Side(self.clock, "node-a", 7000, topics="^m", failover_timeout=5.0)
        self.wire("a", "c")
        c = self.sides["c"].mirror
        self.assertEqual(c.taken_over, [])
        # b may not have seen a back yet: c keeps its copy for a timeout.
        self.assertIn("node-a", c.kept)
        self.wire("a", "b")
        b = self.sides["b"].mirror
        self.assertEqual([(d["node_id"], d["reason"]) for d in b.taken_over], [("node-a", "restarted")])
        self.assertEqual(self.delivered_by("b"), [b"three", b"two"])
        self.assertEqual(self.delivered_by("c"), [])
        self.clock.advance(5.1)
        self.assertEqual((c.taken_over, c.kept), ([], {}))
        self.assertEqual(self.delivered_by("c"), [])

    def test_restarted_primary_taker_lost_before_drop(self) -> None:
        """When b is lost before c drops its copy of a's old process, c takes that copy over: nothing lost."""
        self.a_holds_two_unfinished()
        self.lose("a")
        self.sides["a"].mirror.stop()
        self.sides["a"] = Side(self.clock, "node-a", 7000, topics="^m", failover_timeout=5.0)
        self.wire("a", "c")
        self.lose("b")
        self.clock.advance(5.1)
        c = self.sides["c"].mirror
        self.assertEqual([(d["node_id"], d["reason"]) for d in c.taken_over], [("node-a", "taker lost")])
        self.assertEqual(self.delivered_by("c"), [b"three", b"two"])
