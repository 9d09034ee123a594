# -*- test-case-name: tests.test_tcp -*-
"""
The V2 commands as nsqd runs them, for one connection: the dispatch loop
over the parser's commands, each command's handler with Go nsqd's checks
in Go's order, the PUB runs published together, and the auth checks (the
auth server's query holding commands until it answers).

:class:`V2Commands` is mixed into :class:`txnsq.nsqd.tcp.NSQDProtocol`,
which owns the transport, the output buffer and the timers; the handshake's
rules (IDENTIFY, upgrades, AUTH) are :class:`txnsq.protocol.handshake.ServerHandshake`'s.
The handlers run on the hot path (PUB, FIN, RDY): they are methods of the
connection itself, with no hop between objects per command.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional

from txnsq.nsqd.authorizing import AuthGate
from txnsq.nsqd.channel import InFlightError, SubscribeError
from txnsq.mirror.recorder import StandbysUnavailable
from txnsq.nsqd.topic import PublishError
from txnsq.protocol.errors import LineTooLong, ProtocolError, protocol_error
from txnsq.protocol.frames import CLOSE_WAIT_FRAME, FRAME_TYPE_ERROR, OK_FRAME, encode_frame
from txnsq.protocol.handshake import Send, ServerHandshake, StartCompression, StartTLS
from txnsq.protocol.identify import Identity
from txnsq.protocol.v2 import Command, V2CommandParser, parse_fin, parse_rdy, parse_req, parse_sub, parse_touch

if TYPE_CHECKING:
    from twisted.internet.interfaces import IReactorTime, ITransport

    from txnsq.nsqd.broker import Broker
    from txnsq.nsqd.channel import Channel
    from txnsq.nsqd.features import ServerFeatures
    from txnsq.nsqd.topic import Topic

__all__ = ["STATE_CLOSED", "STATE_CLOSING", "STATE_INIT", "STATE_SUBSCRIBED", "V2Commands"]

STATE_INIT = 0
STATE_SUBSCRIBED = 1
STATE_CLOSING = 2
STATE_CLOSED = 3

#: The most PUBs published as one run (a read holds a few hundred at most).
_MAX_RUN = 1024


class V2Commands(AuthGate):
    """
    The command side of an nsqd connection (a mixin of
    :class:`txnsq.nsqd.tcp.NSQDProtocol`, which sets the attributes below
    and provides the output and connection methods).
    """

    if TYPE_CHECKING:
        transport: ITransport
        broker: Broker
        clock: IReactorTime
        features: ServerFeatures
        state: int
        channel: Optional[Channel]
        identity: Optional[Identity]
        ready_count: int
        in_flight_count: int
        msg_timeout: float
        sample_rate: int
        finish_count: int
        requeue_count: int
        pub_counts: Dict[str, int]
        client_id: str
        hostname: str
        user_agent: str
        heartbeat_interval: float
        tls: bool
        snappy: bool
        deflate: bool
        _shake: ServerHandshake
        _parser: V2CommandParser
        _handlers: Dict[bytes, Callable[[Command], None]]
        _dead: bool
        _blocked: bool
        _held_command: Optional[Command]
        _auth_query: Any
        _mpub_topic: Optional[Topic]
        _run_name: bytes
        _run_topic: Optional[Topic]
        _run_bodies: List[bytes]
        _out_limit: int
        _encoder: Any
        _decoder: Any

        def _write(self, data: bytes) -> None: ...
        def flush_output(self) -> None: ...
        def _abort(self) -> None: ...
        def _peer(self) -> str: ...
        def _schedule_heartbeat(self) -> None: ...
        def _start_tls(self) -> None: ...
        def send_message(self, data: bytes) -> None: ...
        def _mirror_published(self, verb: bytes) -> None: ...

    def _command_handlers(self) -> Dict[bytes, Callable[[Command], None]]:
        """The handler of each V2 command."""
        return {
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
            b"AUTH": self._auth,
        }

    def _run(self) -> None:
        """Run every complete command, unless one waits for the auth server."""
        parser = self._parser
        handlers = self._handlers
        shake = self._shake
        # The messages the commands of this read make room for (FIN, REQ,
        # RDY) go out together when they are done.
        channel = self.channel
        if channel is not None:
            channel.hold()
        try:
            while not self._dead and not self._blocked:
                # A non-fatal error (E_FIN_FAILED, E_REQ_FAILED, ...) is
                # answered and the commands after it run, as Go's IOLoop
                # goes on; a fatal one closes the connection (_dead).
                try:
                    if channel is not None:
                        fin_ids = parser.next_fin_ids()
                        if fin_ids:
                            if self._run_topic is not None:
                                self._publish_run()
                                if self._dead:
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
                        if self._dead:
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
                        if self._dead:
                            return
                    self._send_error(error)
        except LineTooLong:
            # Go's 16 KiB read buffer overflows: it drops the connection
            # without a word (the PUBs before the long line are answered).
            if self._run_topic is not None:
                self._publish_run()
            self._abort()
        finally:
            if self._run_topic is not None:
                self._publish_run()
            if channel is not None:
                channel.release()

    def _early_check(self, name: bytes, params: List[bytes]) -> None:
        """Go's check before a body command's line: the TLS policy."""
        self._shake.check_tls(name)

    def _send_error(self, error: ProtocolError) -> None:
        self._write(encode_frame(FRAME_TYPE_ERROR, error.frame_data()))
        if error.fatal:
            self._log.info("client({peer}) - {error}", peer=self._peer(), error=error)
            self._abort()

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
            if self.features.auth is not None and not self._check_auth(
                "MPUB", topic_name, "", lambda: self._mpub_get_topic(topic_name)
            ):
                return False
            self._mpub_topic = self.broker.get_topic(topic_name)
            return True
        if name == b"IDENTIFY" or name == b"AUTH":
            self._shake.check_initial(name, self.state == STATE_INIT)
        return True

    def _mpub_get_topic(self, topic_name: str) -> None:
        # Kept for the handler, as Go keeps it: a topic deleted while the
        # body arrives makes the MPUB fail ("exiting"), not come back.
        self._mpub_topic = self.broker.get_topic(topic_name)

    def _require_state(self, verb: str, *states: int) -> None:
        if self.state not in states:
            raise protocol_error("E_INVALID", "cannot %s in current state" % (verb,))

    # -- commands --------------------------------------------------------

    def _nop(self, command: Command) -> None:
        pass

    def _identify(self, command: Command) -> None:
        assert isinstance(command.body, bytes)
        identity, steps = self._shake.identify(command.body)
        self.identity = identity
        self.client_id = identity.client_id
        self.hostname = identity.hostname
        self.user_agent = identity.user_agent
        self.msg_timeout = identity.msg_timeout
        self.sample_rate = identity.sample_rate
        self.heartbeat_interval = identity.heartbeat_interval
        self._schedule_heartbeat()
        if identity.output_buffer_size <= 0 or identity.output_buffer_timeout <= 0:
            self._out_limit = 0  # buffering disabled: encode every frame at once
        else:
            self._out_limit = identity.output_buffer_size
        # The reply, then the upgrades in Go's order, each confirmed by an
        # OK sent through it: TLS, then compression on top.
        for step in steps:
            if isinstance(step, Send):
                self._write(step.data)
            elif isinstance(step, StartTLS):
                self._start_tls()
            elif isinstance(step, StartCompression):
                # What came before goes out uncompressed.
                self.flush_output()
                self._encoder = step.encoder
                self._decoder = step.decoder
                self.snappy = step.name == "snappy"
                self.deflate = step.name == "deflate"

    def _sub(self, command: Command) -> None:
        self._require_state("SUB", STATE_INIT)
        if self.heartbeat_interval <= 0:
            raise protocol_error("E_INVALID", "cannot SUB with heartbeats disabled")
        topic_name, channel_name = parse_sub(command.params)
        if not self._authorized(command, topic_name, channel_name):
            return
        channel = self.broker.get_topic(topic_name).get_channel(channel_name)
        try:
            channel.add_consumer(self)
        except SubscribeError as error:
            raise protocol_error("E_SUB_FAILED", "SUB failed %s" % (error,))
        self.channel = channel
        self.state = STATE_SUBSCRIBED
        self._write(OK_FRAME)

    def _rdy(self, command: Command) -> None:
        if self.state == STATE_CLOSING:
            # Go ignores readiness changes from a client that sent CLS.
            return
        self._require_state("RDY", STATE_SUBSCRIBED)
        count = parse_rdy(command.params, self.broker.options.max_rdy_count)
        self.ready_count = count
        assert self.channel is not None
        self.channel.consumer_ready(self)

    def _fin(self, command: Command) -> None:
        # Go's order: the state, then the parameters.
        state = self.state
        if state != STATE_SUBSCRIBED and state != STATE_CLOSING:
            self._require_state("FIN", STATE_SUBSCRIBED, STATE_CLOSING)
        self._finish_all([parse_fin(command.params)])

    def _finish_all(self, msg_ids: List[bytes]) -> None:
        """
        The FINs of a run of plain FIN lines (or of one FIN command), in
        order; a failed one is answered with its error and the others still
        count, as if each had been a command of its own.
        """
        state = self.state
        if state != STATE_SUBSCRIBED and state != STATE_CLOSING:
            self._require_state("FIN", STATE_SUBSCRIBED, STATE_CLOSING)
        channel = self.channel
        assert channel is not None
        finish = channel.finish
        finished = 0
        for msg_id in msg_ids:
            try:
                finish(self, msg_id)
            except InFlightError as error:
                self._send_error(protocol_error(
                    "E_FIN_FAILED", b"FIN " + msg_id + b" failed " + str(error).encode()
                ))
                continue
            finished += 1
        self.finish_count += finished

    def _req(self, command: Command) -> None:
        self._require_state("REQ", STATE_SUBSCRIBED, STATE_CLOSING)
        msg_id, timeout_ms = parse_req(
            command.params, int(self.broker.options.max_req_timeout * 1000)
        )
        assert self.channel is not None
        try:
            self.channel.requeue(self, msg_id, timeout_ms / 1000.0)
        except InFlightError as error:
            raise protocol_error(
                "E_REQ_FAILED", b"REQ " + msg_id + b" failed " + str(error).encode()
            )
        self.requeue_count += 1

    def _touch(self, command: Command) -> None:
        self._require_state("TOUCH", STATE_SUBSCRIBED, STATE_CLOSING)
        msg_id = parse_touch(command.params)
        assert self.channel is not None
        try:
            self.channel.touch(self, msg_id)
        except InFlightError as error:
            raise protocol_error(
                "E_TOUCH_FAILED",
                b"TOUCH " + msg_id + b" failed " + str(error).encode(),
            )

    def _cls(self, command: Command) -> None:
        self._require_state("CLS", STATE_SUBSCRIBED)
        self.state = STATE_CLOSING
        self.ready_count = 0
        self._write(CLOSE_WAIT_FRAME)

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
                if self.features.auth is not None and not self._authorized(
                    command, raw_name.decode("ascii"), ""
                ):
                    return
                bodies = self._run_bodies
                bodies.append(body)
                if len(bodies) >= _MAX_RUN:
                    self._publish_run()
                return
            self._publish_run()
            if self._dead:
                return
        name = raw_name.decode("ascii")
        if not self._authorized(command, name, ""):
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
        name = topic.name
        counts = self.pub_counts
        try:
            if len(bodies) == 1:
                topic.publish(bodies[0])
            else:
                # All or none: on an error nothing was published.
                topic.publish_many(bodies)
        except StandbysUnavailable as error:
            # Refused as a whole, before anything was stored.
            self._send_error(protocol_error("E_PUB_FAILED", "PUB failed %s" % (error,)))
            return
        except PublishError:
            for done, body in enumerate(bodies):
                try:
                    topic.publish(body)
                except PublishError as error:
                    if done:
                        counts[name] = counts.get(name, 0) + done
                        if topic.mirror is not None:
                            self._mirror_published(b"PUB")
                        self._write(OK_FRAME * done)
                    self._send_error(protocol_error("E_PUB_FAILED", "PUB failed %s" % (error,)))
                    return
        counts[name] = counts.get(name, 0) + len(bodies)
        if topic.mirror is not None:
            self._mirror_published(b"PUB")
        self._write(OK_FRAME * len(bodies))

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
        counts = self.pub_counts
        counts[name] = counts.get(name, 0) + len(bodies)
        if topic.mirror is not None:
            self._mirror_published(b"MPUB")
        self._write(OK_FRAME)

    def _dpub(self, command: Command) -> None:
        body = command.body
        assert isinstance(body, bytes)
        name = command.params[0].decode("ascii")
        if not self._authorized(command, name, ""):
            return
        topic = self.broker.get_topic(name)
        try:
            topic.publish_deferred(body, command.defer_ms / 1000.0)
        except PublishError as error:
            raise protocol_error("E_DPUB_FAILED", "DPUB failed %s" % (error,))
        counts = self.pub_counts
        counts[name] = counts.get(name, 0) + 1
        if topic.mirror is not None:
            self._mirror_published(b"DPUB")
        self._write(OK_FRAME)
