"""
Tests for txnsq.protocol.handshake.client: a client's side of the V2
handshake, each transition, and what it refuses.
"""

from __future__ import annotations

import json
from typing import Any, List, Optional

from twisted.trial.unittest import SynchronousTestCase

from tests.test_protocol_handshake import HEARTBEAT_FRAME, reply, response
from txnsq.protocol import v2_client as codec
from txnsq.protocol.compression import CompressionError, DeflateEncoder, SnappyEncoder
from txnsq.protocol.frames import FRAME_TYPE_ERROR, FRAME_TYPE_MESSAGE, encode_frame
from txnsq.protocol.handshake import ClientHandshake, HandshakeError, Ready, Send, StartCompression, StartTLS, Step
from txnsq.protocol.v2_client import NSQError


class ClientTestCase(SynchronousTestCase):
    """Helpers: a client machine past its first bytes."""

    def client(self, secret: Optional[str] = None, **kwargs: Any) -> ClientHandshake:
        shake = ClientHandshake({"client_id": "c", "feature_negotiation": True}, secret, **kwargs)
        shake.initiate()
        return shake


class ClientIdentifyTests(ClientTestCase):
    """IDENTIFY and its reply."""

    def test_initiate(self) -> None:
        """The first bytes are the magic and IDENTIFY with the JSON body."""
        shake = ClientHandshake({"client_id": "c"})
        body = b'{"client_id":"c"}'
        self.assertEqual(shake.initiate(), b"  V2IDENTIFY\n" + len(body).to_bytes(4, "big") + body)
        self.assertEqual(shake.state, "identifying")

    def test_bare_ok(self) -> None:
        """A bare OK (no feature negotiation) ends the handshake with no features."""
        shake = self.client()
        self.assertEqual(shake.receive(response(b"OK")), [Ready(b"")])
        self.assertEqual((shake.identify_response, shake.done, shake.state), ({}, True, "ready"))

    def test_reply_in_pieces(self) -> None:
        """The reply may come a byte at a time."""
        shake = self.client()
        data = reply(max_rdy_count=5)
        steps: List[Step] = []
        for i in range(len(data)):
            steps += shake.receive(data[i : i + 1])
        self.assertEqual(steps, [Ready(b"")])
        self.assertEqual(shake.identify_response, {"max_rdy_count": 5})

    def test_rest(self) -> None:
        """Bytes after the handshake's last frame are given with Ready."""
        shake = self.client()
        after = response(b"OK") + encode_frame(FRAME_TYPE_MESSAGE, b"m" * 26)
        self.assertEqual(shake.receive(reply() + after), [Ready(after)])

    def test_heartbeat(self) -> None:
        """A heartbeat during the handshake is answered with NOP."""
        shake = self.client()
        self.assertEqual(shake.receive(HEARTBEAT_FRAME), [Send(b"NOP\n")])
        self.assertEqual(shake.state, "identifying")

    def test_error_frame(self) -> None:
        """An error frame is raised as NSQError with nsqd's code and text."""
        shake = self.client()
        data = encode_frame(FRAME_TYPE_ERROR, b"E_BAD_BODY IDENTIFY failed to decode JSON body")
        error = self.assertRaises(NSQError, shake.receive, data)
        self.assertEqual((error.code, error.description, error.fatal), ("E_BAD_BODY", "IDENTIFY failed to decode JSON body", True))

    def test_not_json(self) -> None:
        """A reply that is neither OK nor a JSON object is a HandshakeError."""
        error = self.assertRaises(HandshakeError, self.client().receive, response(b"[1]"))
        self.assertIn("not a JSON object", str(error))

    def test_message(self) -> None:
        """A message frame during the handshake is a HandshakeError."""
        data = encode_frame(FRAME_TYPE_MESSAGE, b"m" * 26)
        self.assertIn("message", str(self.assertRaises(HandshakeError, self.client().receive, data)))

    def test_malformed(self) -> None:
        """A frame with an unknown type (or garbage) is a HandshakeError, without waiting for more."""
        error = self.assertRaises(HandshakeError, self.client().receive, b"HTTP/1.1 400 Bad Request")
        self.assertIn("malformed frame", str(error))

    def test_too_long(self) -> None:
        """A frame longer than max_frame_size is refused."""
        data = reply(padding="x" * 100)
        self.assertRaises(HandshakeError, self.client(max_frame_size=64).receive, data)

    def test_after_ready(self) -> None:
        """Bytes after Ready belong to the ready connection, not to the machine."""
        shake = self.client()
        shake.receive(response(b"OK"))
        self.assertRaises(RuntimeError, shake.receive, b"x")


class ClientUpgradeTests(ClientTestCase):
    """TLS and compression."""

    def test_tls(self) -> None:
        """TLS granted: StartTLS, then the OK inside it ends the handshake."""
        shake = self.client()
        self.assertEqual(shake.receive(reply(tls_v1=True)), [StartTLS()])
        self.assertEqual((shake.state, shake.tls), ("tls", True))
        self.assertEqual(shake.receive(response(b"OK")), [Ready(b"")])

    def test_clear_data_after_tls(self) -> None:
        """Bytes in clear after the reply granting TLS are a HandshakeError."""
        error = self.assertRaises(HandshakeError, self.client().receive, reply(tls_v1=True) + response(b"OK"))
        self.assertIn("in clear", str(error))

    def test_tls_required(self) -> None:
        """require_tls refuses an nsqd that does not grant TLS."""
        error = self.assertRaises(HandshakeError, self.client(require_tls=True).receive, reply(tls_v1=False))
        self.assertIn("did not grant TLS", str(error))

    def test_not_ok_after_upgrade(self) -> None:
        """Anything but OK after an upgrade is a HandshakeError naming the upgrade."""
        shake = self.client()
        shake.receive(reply(tls_v1=True))
        error = self.assertRaises(HandshakeError, shake.receive, response(b"NO"))
        self.assertIn("instead of OK after tls", str(error))

    def test_snappy_same_read(self) -> None:
        """The compressed OK may share a read with the reply: it is decoded at once."""
        shake = self.client()
        steps = shake.receive(reply(snappy=True) + SnappyEncoder().encode(response(b"OK")))
        self.assertEqual([type(step) for step in steps], [StartCompression, Ready])
        self.assertEqual((steps[1], shake.compression), (Ready(b""), "snappy"))

    def test_deflate_later_read(self) -> None:
        """The compressed OK of a later read comes decoded by the adapter, with the codec given."""
        shake = self.client()
        steps = shake.receive(reply(deflate=True, deflate_level=2))
        upgrade = steps[0]
        assert isinstance(upgrade, StartCompression)
        self.assertEqual((upgrade.encoder.level, shake.state), (2, "compression"))  # type: ignore[attr-defined]
        compressed = DeflateEncoder().encode(response(b"OK"))
        self.assertEqual(shake.receive(upgrade.decoder.decode(compressed)), [Ready(b"")])

    def test_deflate_bad_level(self) -> None:
        """A deflate level outside 1-9 in the reply falls back to the client's own."""
        steps = self.client(deflate_level=4).receive(reply(deflate=True, deflate_level=12))
        self.assertEqual(steps[0].encoder.level, 4)  # type: ignore[union-attr]

    def test_corrupt_compressed(self) -> None:
        """Compressed bytes that do not decode raise CompressionError."""
        self.assertRaises(CompressionError, self.client().receive, reply(snappy=True) + b"\xff\x06\x00\x00garbage")


class ClientAuthTests(ClientTestCase):
    """AUTH."""

    def test_auth(self) -> None:
        """auth_required: AUTH with the secret; its JSON reply ends the handshake."""
        shake = self.client("s3cret")
        self.assertEqual(shake.receive(reply(auth_required=True)), [Send(codec.auth("s3cret"))])
        self.assertEqual(shake.state, "auth")
        answer = {"identity": "alice", "identity_url": "", "permission_count": 1}
        self.assertEqual(shake.receive(response(json.dumps(answer).encode())), [Ready(b"")])
        self.assertEqual(shake.auth_response, answer)

    def test_no_secret(self) -> None:
        """auth_required without a secret is a HandshakeError."""
        error = self.assertRaises(HandshakeError, self.client().receive, reply(auth_required=True))
        self.assertIn("requires AUTH but no auth_secret", str(error))

    def test_refused(self) -> None:
        """nsqd's refusal of AUTH is raised as NSQError."""
        shake = self.client("bad")
        shake.receive(reply(auth_required=True))
        data = encode_frame(FRAME_TYPE_ERROR, b"E_UNAUTHORIZED AUTH no authorizations found")
        self.assertEqual(self.assertRaises(NSQError, shake.receive, data).code, "E_UNAUTHORIZED")

    def test_reply_not_json(self) -> None:
        """An AUTH reply that is not a JSON object is a HandshakeError."""
        shake = self.client("s3cret")
        shake.receive(reply(auth_required=True))
        self.assertRaises(HandshakeError, shake.receive, response(b"OK"))
