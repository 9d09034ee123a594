# -*- test-case-name: tests.test_tcp -*-
"""
The V2 commands as nsqd runs them, for one connection: the dispatch loop
over the parser's commands, each command's handler with Go nsqd's checks
in Go's order, the PUB runs published together, and the auth checks
(:class:`txnsq.nsqd.authorizing.AuthGate`, which holds commands while the
auth server is asked).

:class:`V2Commands` is a part of :class:`txnsq.nsqd.tcp.NSQDProtocol`,
made by it and handed the bytes it reads; the connection owns the
transport, the output buffer, the timers and the state that the channel
and stats read (``state``, ``channel``, the counters), which the handlers
set.  The handshake's rules (IDENTIFY, upgrades, AUTH) are
:class:`txnsq.protocol.handshake.ServerHandshake`'s.  The handlers run on
the hot path (PUB, FIN, RDY): one call from the connection per read, then
plain method calls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Dict, List, Optional

from txnsq.nsqd.authorizing import AuthGate
from txnsq.nsqd.channel import InFlightError, SubscribeError
from txnsq.mirror.recorder import StandbysUnavailable
from txnsq.nsqd.topic import PublishError
from txnsq.protocol.errors import LineTooLong, ProtocolError, protocol_error
from txnsq.protocol.frames import CLOSE_WAIT_FRAME, OK_FRAME
from txnsq.protocol.handshake import ServerHandshake
from txnsq.protocol.v2 import Command, V2CommandParser, parse_fin, parse_rdy, parse_req, parse_sub, parse_touch

if TYPE_CHECKING:
    from txnsq.nsqd.tcp import NSQDProtocol
    from txnsq.nsqd.topic import Topic

__all__ = ["STATE_CLOSED", "STATE_CLOSING", "STATE_INIT", "STATE_SUBSCRIBED", "V2Commands"]

STATE_INIT = 0
STATE_SUBSCRIBED = 1
STATE_CLOSING = 2
STATE_CLOSED = 3

#: The most PUBs published as one run (a read holds a few hundred at most).
_MAX_RUN = 1024


class V2Commands:
    """
    The command side of one nsqd connection.

    :param connection: the connection whose commands these are; the
        handlers write through it (``write``, ``send_error``) and set its
        ``state``, ``channel``, ``ready_count`` and counters.
    :param shake: the connection's handshake rules (IDENTIFY, TLS policy,
        AUTH).

    :ivar parser: the V2 command parser the read bytes go to.
    """

    def __init__(self, connection: NSQDProtocol, shake: ServerHandshake) -> None:
        broker = connection.broker
        options = broker.options
        features = connection.features
        self.connection = connection
        self.broker = broker
        self._shake = shake
        self._features = features
        self._auth = AuthGate(connection, shake, self._resume)
        self.parser = V2CommandParser(
            max_msg_size=options.max_msg_size,
            max_body_size=options.max_body_size,
            max_req_timeout_ms=int(options.max_req_timeout * 1000),
            precheck=self._precheck,
            # Only when needed: the hook takes PUB off the parser's fast path.
            early_check=self._early_check if features.tls_required else None,
        )
        # The topic of the MPUB whose body is being read.
        self._mpub_topic: Optional[Topic] = None
        # A run of PUBs to one topic in this read, published together
        # (_publish_run) before any other command runs or the read ends.
        self._run_name = b""
        self._run_topic: Optional[Topic] = None
        self._run_bodies: List[bytes] = []
        self._handlers: Dict[bytes, Callable[[Command], None]] = {
            b"FIN": self._fin,
            b"RDY": self._rdy,
            b"REQ": self._req,
            b"PUB": self._pub,
            b"MPUB": self._mpub,
            b"DPUB": self._dpub,
            b"NOP": self._nop,
            b"TOUCH": self._touch,
            b"SUB": self._sub,
            b"CLS": self._cls,
            b"IDENTIFY": self._identify,
            b"AUTH": self._auth.auth,
        }

    def received(self, data: bytes) -> None:
        """Bytes read (decompressed): run every complete command, unless one waits for the auth server."""
        self.parser.feed(data)
        self._run()

    def connection_lost(self) -> None:
        """The connection is gone: forget a pending auth query."""
        self._auth.cancel()

    def _resume(self, held: Optional[Command]) -> None:
        """The auth server answered: run the held command, then the rest."""
        if held is not None:
            try:
                self._handlers[held.name](held)
            except ProtocolError as error:
                self.connection.send_error(error)
                return
        self._run()

    def _run(self) -> None:
        """Run every complete command, unless one waits for the auth server."""
        connection = self.connection
        parser = self.parser
        handlers = self._handlers
        shake = self._shake
        auth = self._auth
        # The messages the commands of this read make room for (FIN, REQ,
        # RDY) go out together when they are done.
        channel = connection.channel
        if channel is not None:
            channel.hold()
        try:
            while not connection.dead and not auth.waiting:
                # A non-fatal error (E_FIN_FAILED, E_REQ_FAILED, ...) is
                # answered and the commands after it run, as Go's IOLoop
                # goes on; a fatal one closes the connection (dead).
                try:
                    if channel is not None:
                        fin_ids = parser.next_fin_ids()
                        if fin_ids:
                            if self._run_topic is not None:
                                self._publish_run()
                                if connection.dead:
                                    return
                            self._finish_all(fin_ids)
                            continue
                    command = parser.next_command()
                    if command is None:
                        return
                    name = command.name
                    # A run of PUBs ends at any other command, answered
                    # in order after the run's OKs.
                    if self._run_topic is not None and name != b"PUB":
                        self._publish_run()
                        if connection.dead:
                            return
                    # Go's order: the TLS policy, then the command's own
                    # checks, an unknown command included.
                    if shake.needs_tls:
                        shake.check_tls(name)
                    handler = handlers.get(name)
                    if handler is None:
                        raise protocol_error("E_INVALID", b"invalid command " + name)
                    handler(command)
                except ProtocolError as error:
                    if self._run_topic is not None:
                        self._publish_run()
                        if connection.dead:
                            return
                    connection.send_error(error)
        except LineTooLong:
            # Go's 16 KiB read buffer overflows: it drops the connection
            # without a word (the PUBs before the long line are answered).
            if self._run_topic is not None:
                self._publish_run()
            connection.abort()
        finally:
            if self._run_topic is not None:
                self._publish_run()
            if channel is not None:
                channel.release()

    def _early_check(self, name: bytes, params: List[bytes]) -> None:
        """Go's check before a body command's line: the TLS policy."""
        self._shake.check_tls(name)

    def _precheck(self, name: bytes, params: List[bytes]) -> bool:
        """
        The checks Go makes before it reads a command's body, at Go's place
        for each command (the parser calls this once per body command):
        IDENTIFY's and AUTH's state, MPUB's auth.  ``False`` holds the body
        until the auth server has answered.

        :raises ProtocolError: E_INVALID (wrong state), MPUB's auth errors.
        """
        if name == b"PUB":
            return True
        if name == b"MPUB":
            # Go's MPUB checks auth once its line is checked, before the
            # body, and gets (so creates) the topic then: an MPUB whose body
            # turns out bad leaves the topic behind.
            topic_name = params[0].decode("ascii")
            if self._features.auth is not None and not self._auth.check_auth(
                "MPUB", topic_name, "", lambda: self._mpub_get_topic(topic_name)
            ):
                return False
            self._mpub_topic = self.broker.get_topic(topic_name)
            return True
        if name == b"IDENTIFY" or name == b"AUTH":
            self._shake.check_initial(name, self.connection.state == STATE_INIT)
        return True

    def _mpub_get_topic(self, topic_name: str) -> None:
        # Kept for the handler, as Go keeps it: a topic deleted while the
        # body arrives makes the MPUB fail ("exiting"), not come back.
        self._mpub_topic = self.broker.get_topic(topic_name)

    def _require_state(self, verb: str, *states: int) -> None:
        if self.connection.state not in states:
            raise protocol_error("E_INVALID", "cannot %s in current state" % (verb,))

    # -- commands --------------------------------------------------------

    def _nop(self, command: Command) -> None:
        pass

    def _identify(self, command: Command) -> None:
        assert isinstance(command.body, bytes)
        identity, steps = self._shake.identify(command.body)
        self.connection.identified(identity, steps)

    def _sub(self, command: Command) -> None:
        self._require_state("SUB", STATE_INIT)
        connection = self.connection
        if connection.heartbeat_interval <= 0:
            raise protocol_error("E_INVALID", "cannot SUB with heartbeats disabled")
        topic_name, channel_name = parse_sub(command.params)
        if not self._auth.authorized(command, topic_name, channel_name):
            return
        channel = self.broker.get_topic(topic_name).get_channel(channel_name)
        try:
            channel.add_consumer(connection)
        except SubscribeError as error:
            raise protocol_error("E_SUB_FAILED", "SUB failed %s" % (error,))
        connection.channel = channel
        connection.state = STATE_SUBSCRIBED
        connection.write(OK_FRAME)

    def _rdy(self, command: Command) -> None:
        connection = self.connection
        if connection.state == STATE_CLOSING:
            # Go ignores readiness changes from a client that sent CLS.
            return
        self._require_state("RDY", STATE_SUBSCRIBED)
        count = parse_rdy(command.params, self.broker.options.max_rdy_count)
        connection.ready_count = count
        assert connection.channel is not None
        connection.channel.consumer_ready(connection)

    def _fin(self, command: Command) -> None:
        # Go's order: the state, then the parameters.
        state = self.connection.state
        if state != STATE_SUBSCRIBED and state != STATE_CLOSING:
            self._require_state("FIN", STATE_SUBSCRIBED, STATE_CLOSING)
        self._finish_all([parse_fin(command.params)])

    def _finish_all(self, msg_ids: List[bytes]) -> None:
        """
        The FINs of a run of plain FIN lines (or of one FIN command), in
        order; a failed one is answered with its error and the others still
        count, as if each had been a command of its own.
        """
        connection = self.connection
        state = connection.state
        if state != STATE_SUBSCRIBED and state != STATE_CLOSING:
            self._require_state("FIN", STATE_SUBSCRIBED, STATE_CLOSING)
        channel = connection.channel
        assert channel is not None
        finish = channel.finish
        finished = 0
        for msg_id in msg_ids:
            try:
                finish(connection, msg_id)
            except InFlightError as error:
                connection.send_error(protocol_error(
                    "E_FIN_FAILED", b"FIN " + msg_id + b" failed " + str(error).encode()
                ))
                continue
            finished += 1
        connection.finish_count += finished

    def _req(self, command: Command) -> None:
        self._require_state("REQ", STATE_SUBSCRIBED, STATE_CLOSING)
        msg_id, timeout_ms = parse_req(
            command.params, int(self.broker.options.max_req_timeout * 1000)
        )
        connection = self.connection
        assert connection.channel is not None
        try:
            connection.channel.requeue(connection, msg_id, timeout_ms / 1000.0)
        except InFlightError as error:
            raise protocol_error(
                "E_REQ_FAILED", b"REQ " + msg_id + b" failed " + str(error).encode()
            )
        connection.requeue_count += 1

    def _touch(self, command: Command) -> None:
        self._require_state("TOUCH", STATE_SUBSCRIBED, STATE_CLOSING)
        msg_id = parse_touch(command.params)
        connection = self.connection
        assert connection.channel is not None
        try:
            connection.channel.touch(connection, msg_id)
        except InFlightError as error:
            raise protocol_error(
                "E_TOUCH_FAILED",
                b"TOUCH " + msg_id + b" failed " + str(error).encode(),
            )

    def _cls(self, command: Command) -> None:
        self._require_state("CLS", STATE_SUBSCRIBED)
        connection = self.connection
        connection.state = STATE_CLOSING
        connection.ready_count = 0
        connection.write(CLOSE_WAIT_FRAME)

    def _pub(self, command: Command) -> None:
        """
        PUB: joins the run of PUBs to the same topic in this read, which
        :meth:`_publish_run` publishes and answers as one MPUB would cost
        (one retained-log write, one output frame of OKs).
        """
        body = command.body
        assert isinstance(body, bytes)
        raw_name = command.params[0]
        if self._run_topic is not None:
            if raw_name == self._run_name:
                if self._features.auth is not None and not self._auth.authorized(
                    command, raw_name.decode("ascii"), ""
                ):
                    return
                bodies = self._run_bodies
                bodies.append(body)
                if len(bodies) >= _MAX_RUN:
                    self._publish_run()
                return
            self._publish_run()
            if self.connection.dead:
                return
        name = raw_name.decode("ascii")
        if not self._auth.authorized(command, name, ""):
            return
        # Got (so created) now, as Go's PUB does before it publishes.
        self._run_topic = self.broker.get_topic(name)
        self._run_name = raw_name
        self._run_bodies = [body]

    def _publish_run(self) -> None:
        """
        Publish the pending run of PUBs and answer each: all at once when
        the topic takes them all; else one by one, each answered as Go
        answers a PUB, so that an error (E_PUB_FAILED, fatal) follows the
        OKs of the PUBs published before it and nothing after it is
        published.
        """
        topic = self._run_topic
        bodies = self._run_bodies
        assert topic is not None
        self._run_topic = None
        self._run_bodies = []
        connection = self.connection
        name = topic.name
        counts = connection.pub_counts
        try:
            if len(bodies) == 1:
                topic.publish(bodies[0])
            else:
                # All or none: on an error nothing was published.
                topic.publish_many(bodies)
        except StandbysUnavailable as error:
            # Refused as a whole, before anything was stored.
            connection.send_error(protocol_error("E_PUB_FAILED", "PUB failed %s" % (error,)))
            return
        except PublishError:
            for done, body in enumerate(bodies):
                try:
                    topic.publish(body)
                except PublishError as error:
                    if done:
                        counts[name] = counts.get(name, 0) + done
                        if topic.mirror is not None:
                            connection.mirror_published(b"PUB")
                        connection.answer_published(topic, b"PUB", OK_FRAME * done)
                    connection.send_error(protocol_error("E_PUB_FAILED", "PUB failed %s" % (error,)))
                    return
        counts[name] = counts.get(name, 0) + len(bodies)
        if topic.mirror is not None:
            connection.mirror_published(b"PUB")
        connection.answer_published(topic, b"PUB", OK_FRAME * len(bodies))

    def _mpub(self, command: Command) -> None:
        bodies = command.body
        assert isinstance(bodies, list)
        # Auth was checked and the topic got before the body: _precheck.
        topic = self._mpub_topic
        self._mpub_topic = None
        assert topic is not None
        name = topic.name
        try:
            topic.publish_many(bodies)
        except PublishError as error:
            raise protocol_error("E_MPUB_FAILED", "MPUB failed %s" % (error,))
        connection = self.connection
        counts = connection.pub_counts
        counts[name] = counts.get(name, 0) + len(bodies)
        if topic.mirror is not None:
            connection.mirror_published(b"MPUB")
        connection.answer_published(topic, b"MPUB", OK_FRAME)

    def _dpub(self, command: Command) -> None:
        body = command.body
        assert isinstance(body, bytes)
        name = command.params[0].decode("ascii")
        if not self._auth.authorized(command, name, ""):
            return
        topic = self.broker.get_topic(name)
        try:
            topic.publish_deferred(body, command.defer_ms / 1000.0)
        except PublishError as error:
            raise protocol_error("E_DPUB_FAILED", "DPUB failed %s" % (error,))
        connection = self.connection
        counts = connection.pub_counts
        counts[name] = counts.get(name, 0) + 1
        if topic.mirror is not None:
            connection.mirror_published(b"DPUB")
        connection.answer_published(topic, b"DPUB", OK_FRAME)
