"""
Tests for txnsq.protocol.handshake: nsqd's side of the V2 handshake (magic,
IDENTIFY, TLS, snappy/deflate, AUTH), each transition and each refusal with
Go nsqd's codes and texts, and the two sides joined (the client's side
alone: tests.test_protocol_handshake_client).
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Tuple

from twisted.trial.unittest import SynchronousTestCase

from txnsq.nsqd.options import NSQDOptions
from txnsq.protocol.auth import AuthState, Authorization
from txnsq.protocol.errors import ProtocolError
from txnsq.protocol.frames import FRAME_TYPE_RESPONSE, OK_FRAME, encode_frame
from txnsq.protocol.handshake import BadMagic, ClientHandshake, Send, ServerHandshake, StartCompression, StartTLS
from txnsq.protocol.handshake.server import BAD_PROTOCOL_FRAME
from txnsq.protocol.handshake.steps import compression_codecs
from txnsq.protocol.v2 import V2CommandParser

VERSION = "1.3.0"
HEARTBEAT_FRAME = encode_frame(FRAME_TYPE_RESPONSE, b"_heartbeat_")


def identify_body(**fields: Any) -> bytes:
    """An IDENTIFY body with these fields."""
    return json.dumps(fields).encode("utf-8")


def response(data: bytes) -> bytes:
    """A response frame."""
    return encode_frame(FRAME_TYPE_RESPONSE, data)


def reply(**fields: Any) -> bytes:
    """A response frame carrying an IDENTIFY reply with these fields."""
    return response(json.dumps(fields).encode("utf-8"))


def state(*authorizations: Authorization, expires: float = 100.0) -> AuthState:
    """Authorizations as the auth server gives them."""
    return AuthState("alice", "https://id/alice", authorizations, expires)


PUBLISH_T = Authorization("^t$", [".*"], ["publish"])


class ServerTestCase(SynchronousTestCase):
    """Helpers: a server machine and error assertions."""

    def server(self, **features: Any) -> ServerHandshake:
        return ServerHandshake(NSQDOptions(), VERSION, **features)

    def assertRefused(self, expected: bytes, call: Any, *args: Any) -> ProtocolError:
        with self.assertRaises(ProtocolError) as caught:
            call(*args)
        self.assertEqual(caught.exception.frame_data(), expected)
        self.assertTrue(caught.exception.fatal)
        return caught.exception


class ServerMagicTests(ServerTestCase):
    """The protocol magic."""

    def test_magic_in_pieces(self) -> None:
        """The magic may come a byte at a time; the bytes after it are returned."""
        shake = self.server()
        self.assertEqual(shake.receive_magic(b" "), b"")
        self.assertFalse(shake.has_magic)
        self.assertEqual(shake.receive_magic(b" V2NOP\n"), b"NOP\n")
        self.assertTrue(shake.has_magic)

    def test_bad_magic(self) -> None:
        """A wrong magic is BadMagic, answered by Go's bare E_BAD_PROTOCOL frame."""
        shake = self.server()
        with self.assertRaises(BadMagic) as caught:
            shake.receive_magic(b"GET / HTTP/1.1")
        self.assertEqual(caught.exception.magic, b"GET ")
        self.assertFalse(shake.has_magic)
        self.assertEqual(BAD_PROTOCOL_FRAME, b"\x00\x00\x00\x12\x00\x00\x00\x01E_BAD_PROTOCOL")


class ServerStateTests(ServerTestCase):
    """--tls-required and the commands allowed only before SUB."""

    def test_tls_required_refuses(self) -> None:
        """With --tls-required a command but IDENTIFY before TLS is E_INVALID (TLS required)."""
        shake = self.server(tls_configured=True, tls_required=True)
        self.assertRefused(b"E_INVALID cannot PUB in current state (TLS required)", shake.check_tls, b"PUB")
        shake.check_tls(b"IDENTIFY")

    def test_tls_required_lifted(self) -> None:
        """Once IDENTIFY grants TLS every command may run."""
        shake = self.server(tls_configured=True, tls_required=True)
        shake.identify(identify_body(feature_negotiation=True, tls_v1=True))
        self.assertFalse(shake.needs_tls)
        shake.check_tls(b"SUB")

    def test_tls_required_not_lifted_without_tls(self) -> None:
        """An IDENTIFY that does not ask for TLS leaves the policy in force."""
        shake = self.server(tls_configured=True, tls_required=True)
        shake.identify(identify_body(feature_negotiation=True))
        self.assertRefused(b"E_INVALID cannot SUB in current state (TLS required)", shake.check_tls, b"SUB")

    def test_not_initial(self) -> None:
        """IDENTIFY and AUTH after SUB are E_INVALID cannot ... in current state."""
        check = ServerHandshake.check_initial
        check(b"IDENTIFY", True)
        self.assertRefused(b"E_INVALID cannot IDENTIFY in current state", check, b"IDENTIFY", False)
        self.assertRefused(b"E_INVALID cannot AUTH in current state", check, b"AUTH", False)


class ServerIdentifyTests(ServerTestCase):
    """IDENTIFY and the upgrades it grants, in Go's order."""

    def test_without_feature_negotiation(self) -> None:
        """Without feature_negotiation the answer is a bare OK and nothing is upgraded."""
        shake = self.server(tls_configured=True, snappy=True)
        identity, steps = shake.identify(identify_body(client_id="c", tls_v1=True, snappy=True))
        self.assertEqual(steps, [Send(OK_FRAME)])
        self.assertEqual((identity.client_id, shake.tls, shake.snappy), ("c", False, False))
        self.assertIs(shake.identity, identity)

    def test_reply(self) -> None:
        """With feature_negotiation the answer is Go's JSON reply, and nothing else."""
        shake = self.server(auth_required=True)
        _, steps = shake.identify(identify_body(feature_negotiation=True))
        self.assertEqual(len(steps), 1)
        step = steps[0]
        assert isinstance(step, Send)
        self.assertEqual(step.data[4:8], b"\x00\x00\x00\x00")
        fields = json.loads(step.data[8:])
        self.assertEqual(
            (fields["version"], fields["tls_v1"], fields["snappy"], fields["deflate"], fields["auth_required"]),
            (VERSION, False, False, False, True),
        )

    def test_tls(self) -> None:
        """tls_v1 on a server with a certificate: the reply, StartTLS, then OK inside it."""
        shake = self.server(tls_configured=True)
        _, steps = shake.identify(identify_body(feature_negotiation=True, tls_v1=True))
        self.assertEqual(steps[1:], [StartTLS(), Send(OK_FRAME)])
        self.assertTrue(json.loads(steps[0].data[8:])["tls_v1"])  # type: ignore[union-attr]
        self.assertTrue(shake.tls)

    def test_tls_not_configured(self) -> None:
        """tls_v1 on a server without a certificate is not granted."""
        shake = self.server()
        _, steps = shake.identify(identify_body(feature_negotiation=True, tls_v1=True))
        self.assertEqual(len(steps), 1)
        self.assertFalse(json.loads(steps[0].data[8:])["tls_v1"])  # type: ignore[union-attr]
        self.assertFalse(shake.tls)

    def test_snappy(self) -> None:
        """snappy on a --snappy server: the reply, StartCompression, then OK through it."""
        shake = self.server(snappy=True)
        _, steps = shake.identify(identify_body(feature_negotiation=True, snappy=True))
        self.assertEqual([type(step) for step in steps], [Send, StartCompression, Send])
        self.assertEqual((steps[1].name, steps[2]), ("snappy", Send(OK_FRAME)))  # type: ignore[union-attr]
        self.assertTrue(shake.snappy)

    def test_snappy_disabled(self) -> None:
        """snappy on a server without --snappy is not granted."""
        shake = self.server()
        _, steps = shake.identify(identify_body(feature_negotiation=True, snappy=True))
        self.assertEqual(len(steps), 1)
        self.assertFalse(shake.snappy)

    def test_deflate_level(self) -> None:
        """deflate's encoder uses the negotiated level."""
        shake = self.server(deflate=True)
        _, steps = shake.identify(identify_body(feature_negotiation=True, deflate=True, deflate_level=3))
        upgrade = steps[1]
        assert isinstance(upgrade, StartCompression)
        self.assertEqual((upgrade.name, upgrade.encoder.level), ("deflate", 3))  # type: ignore[attr-defined]
        self.assertTrue(shake.deflate)

    def test_tls_then_compression(self) -> None:
        """TLS and deflate: TLS first, its OK, then deflate and its OK."""
        shake = self.server(tls_configured=True, deflate=True)
        _, steps = shake.identify(identify_body(feature_negotiation=True, tls_v1=True, deflate=True))
        self.assertEqual(
            [type(step) for step in steps], [Send, StartTLS, Send, StartCompression, Send]
        )

    def test_bad_body(self) -> None:
        """A body that is not JSON is E_BAD_BODY IDENTIFY failed to decode JSON body."""
        shake = self.server()
        self.assertRefused(b"E_BAD_BODY IDENTIFY failed to decode JSON body", shake.identify, b"{nope")
        self.assertIsNone(shake.identity)

    def test_bad_value(self) -> None:
        """A value out of range is E_BAD_BODY with Go's text."""
        shake = self.server()
        self.assertRefused(
            b"E_BAD_BODY IDENTIFY heartbeat interval (-5) is invalid",
            shake.identify,
            identify_body(heartbeat_interval=-5),
        )

    def test_both_compressions(self) -> None:
        """snappy and deflate together are E_IDENTIFY_FAILED."""
        shake = self.server(snappy=True, deflate=True)
        self.assertRefused(
            b"E_IDENTIFY_FAILED cannot enable both deflate and snappy compression",
            shake.identify,
            identify_body(feature_negotiation=True, snappy=True, deflate=True),
        )
        self.assertFalse(shake.snappy or shake.deflate)


class ServerAuthTests(ServerTestCase):
    """AUTH and Go's CheckAuth."""

    def test_disabled(self) -> None:
        """AUTH on a server without an auth server is E_AUTH_DISABLED."""
        self.assertRefused(b"E_AUTH_DISABLED AUTH disabled", self.server().auth, b"secret")

    def test_secret(self) -> None:
        """AUTH's body is the secret to ask about."""
        shake = self.server(auth_required=True)
        self.assertEqual(shake.auth(b"s3cret"), "s3cret")
        self.assertEqual(shake.auth_secret, "s3cret")

    def test_authenticated(self) -> None:
        """The auth server's answer is kept and answered with Go's JSON."""
        shake = self.server(auth_required=True)
        shake.auth(b"s3cret")
        authorized = state(PUBLISH_T)
        self.assertEqual(
            shake.authenticated(authorized),
            response(b'{"identity":"alice","identity_url":"https://id/alice","permission_count":1}'),
        )
        self.assertIs(shake.auth_state, authorized)

    def test_no_authorizations(self) -> None:
        """An answer without authorizations is E_UNAUTHORIZED AUTH no authorizations found."""
        shake = self.server(auth_required=True)
        shake.auth(b"s3cret")
        self.assertRefused(b"E_UNAUTHORIZED AUTH no authorizations found", shake.authenticated, state())

    def test_twice(self) -> None:
        """A second AUTH is E_INVALID AUTH already set."""
        shake = self.server(auth_required=True)
        shake.auth(b"s3cret")
        shake.authenticated(state(PUBLISH_T))
        self.assertRefused(b"E_INVALID AUTH already set", shake.auth, b"again")

    def test_check_disabled(self) -> None:
        """Without an auth server every command is allowed."""
        self.assertTrue(self.server().check_auth("PUB", "t", "", 0.0))

    def test_check_first(self) -> None:
        """A command before AUTH is E_AUTH_FIRST AUTH required before VERB."""
        shake = self.server(auth_required=True)
        self.assertRefused(b"E_AUTH_FIRST AUTH required before SUB", shake.check_auth, "SUB", "t", "c", 0.0)

    def test_check_allowed(self) -> None:
        """An allowed command may run; another is E_UNAUTHORIZED with Go's text."""
        shake = self.server(auth_required=True)
        shake.auth(b"s3cret")
        shake.authenticated(state(PUBLISH_T))
        self.assertTrue(shake.check_auth("PUB", "t", "", 1.0))
        self.assertRefused(
            b'E_UNAUTHORIZED AUTH failed for PUB on "other" ""', shake.check_auth, "PUB", "other", "", 1.0
        )

    def test_check_expired(self) -> None:
        """Expired authorizations ask to be fetched again; the new ones are checked."""
        shake = self.server(auth_required=True)
        shake.auth(b"s3cret")
        shake.authenticated(state(PUBLISH_T, expires=10.0))
        self.assertFalse(shake.check_auth("PUB", "t", "", 11.0))
        shake.reauthorized(state(PUBLISH_T, expires=20.0), "PUB", "t", "")
        self.assertTrue(shake.check_auth("PUB", "t", "", 12.0))
        self.assertRefused(
            b'E_UNAUTHORIZED AUTH failed for SUB on "t" "c"',
            shake.reauthorized,
            state(PUBLISH_T, expires=30.0),
            "SUB",
            "t",
            "c",
        )


class CompressionCodecsTests(SynchronousTestCase):
    """compression_codecs."""

    def test_unknown(self) -> None:
        """A name other than snappy or deflate is a ValueError."""
        self.assertRaises(ValueError, compression_codecs, "gzip")


class BothSidesTests(SynchronousTestCase):
    """A client machine and a server machine joined byte for byte."""

    def join(
        self, identify: Dict[str, Any], secret: Optional[str] = None, **features: Any
    ) -> Tuple[ClientHandshake, ServerHandshake, List[str]]:
        """
        Run the handshake: the server reads the client's bytes with the V2
        command parser and its steps' frames go back through the codecs.
        """
        options = NSQDOptions()
        client = ClientHandshake(identify, secret)
        server = ServerHandshake(options, VERSION, **features)
        parser = V2CommandParser(options.max_msg_size, options.max_body_size, 60000)
        log: List[str] = []
        codecs: Dict[str, Any] = {"server": None, "client": None}

        def to_server(data: bytes) -> None:
            if codecs["server"] is not None:
                data = codecs["server"].decoder.decode(codecs["client"].encoder.encode(data))
            parser.feed(server.receive_magic(data) if not server.has_magic else data)
            command = parser.next_command()
            while command is not None:
                log.append(command.name.decode())
                if command.name == b"IDENTIFY":
                    _, steps = server.identify(command.body)  # type: ignore[arg-type]
                elif command.name == b"AUTH":
                    server.auth(command.body)  # type: ignore[arg-type]
                    steps = [Send(server.authenticated(state(PUBLISH_T)))]
                else:
                    steps = []
                for step in steps:
                    if isinstance(step, Send):
                        to_client(step.data)
                    elif isinstance(step, StartCompression):
                        codecs["server"] = step
                        log.append("server " + step.name)
                    else:
                        log.append("server " + type(step).__name__)
                command = parser.next_command()

        def to_client(data: bytes) -> None:
            if codecs["server"] is not None:
                data = codecs["client"].decoder.decode(codecs["server"].encoder.encode(data))
            for step in client.receive(data):
                if isinstance(step, Send):
                    to_server(step.data)
                elif isinstance(step, StartCompression):
                    codecs["client"] = step
                    log.append("client " + step.name)
                else:
                    log.append("client " + type(step).__name__)

        to_server(client.initiate())
        return client, server, log

    def test_plain(self) -> None:
        """Without features both sides are done after IDENTIFY."""
        client, server, log = self.join({"client_id": "c"})
        self.assertEqual(log, ["IDENTIFY", "client Ready"])
        self.assertEqual((client.identify_response, server.identity.client_id), ({}, "c"))  # type: ignore[union-attr]

    def test_tls_snappy_auth(self) -> None:
        """TLS, snappy and AUTH run in NSQ's order on both sides."""
        client, server, log = self.join(
            {"feature_negotiation": True, "tls_v1": True, "snappy": True},
            "s3cret",
            tls_configured=True,
            snappy=True,
            auth_required=True,
        )
        self.assertEqual(
            log,
            [
                "IDENTIFY",
                "client StartTLS",
                "server StartTLS",
                "client snappy",
                "server snappy",
                "AUTH",
                "client Ready",
            ],
        )
        self.assertEqual((client.tls, client.compression, server.auth_secret), (True, "snappy", "s3cret"))
        self.assertEqual(client.auth_response["permission_count"], 1)  # type: ignore[index]

    def test_deflate(self) -> None:
        """deflate negotiated at the client's level reaches Ready through the codec."""
        client, server, log = self.join(
            {"feature_negotiation": True, "deflate": True, "deflate_level": 5}, deflate=True
        )
        self.assertEqual(log, ["IDENTIFY", "client deflate", "server deflate", "client Ready"])
        self.assertEqual((client.identify_response["deflate_level"], server.deflate), (5, True))
