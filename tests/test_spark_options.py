"""
Tests for :mod:`txnsq.spark.options`.
"""

from __future__ import annotations

from twisted.trial.unittest import SynchronousTestCase

from txnsq.spark.options import OptionError, SinkOptions, SourceOptions

_BASE = {"nsqd_tcp_addresses": "127.0.0.1:4150", "topic": "clicks", "channel": "spark"}


class SourceOptionsTests(SynchronousTestCase):
    """SourceOptions.parse."""

    def refused(self, options: dict, streaming: bool = False) -> str:
        error = self.assertRaises(OptionError, SourceOptions.parse, options, streaming)
        return str(error)

    def test_defaults(self) -> None:
        """Only addresses, topic and channel are needed for a batch read; the rest has defaults."""
        options = SourceOptions.parse(_BASE, streaming=False)
        self.assertEqual(options.nsqd_tcp_addresses, ["127.0.0.1:4150"])
        self.assertEqual((options.topic, options.channel), ("clicks", "spark"))
        self.assertEqual(options.max_messages_per_batch, 1000)
        self.assertEqual(options.max_messages, 10000)
        self.assertIsNone(options.settings.msg_timeout)
        self.assertFalse(options.settings.tls)

    def test_addresses_required(self) -> None:
        """Without nsqd or lookupd addresses the error names both options."""
        message = self.refused({"topic": "t", "channel": "c"})
        self.assertIn("'nsqd_tcp_addresses'", message)
        self.assertIn("'lookupd_http_addresses'", message)

    def test_address_list(self) -> None:
        """Comma-separated addresses are split; one that is not host:port is named."""
        options = SourceOptions.parse(dict(_BASE, nsqd_tcp_addresses="a:1, b:2"), False)
        self.assertEqual(options.nsqd_tcp_addresses, ["a:1", "b:2"])
        self.assertIn("'nohost'", self.refused(dict(_BASE, nsqd_tcp_addresses="a:1,nohost")))

    def test_lookupd(self) -> None:
        """lookupd addresses may be host:port or URLs, and exclude nsqd addresses."""
        options = {"lookupd_http_addresses": "http://127.0.0.1:4161/lookup", "topic": "t", "channel": "c"}
        self.assertEqual(SourceOptions.parse(options, False).lookupd_http_addresses, ["http://127.0.0.1:4161/lookup"])
        self.assertIn("exclude", self.refused(dict(options, nsqd_tcp_addresses="a:1")))

    def test_topic_and_channel(self) -> None:
        """A missing or invalid topic or channel is refused by name."""
        self.assertIn("'topic' is required", self.refused({"nsqd_tcp_addresses": "a:1", "channel": "c"}))
        self.assertIn("'topic'", self.refused(dict(_BASE, topic="bad topic")))
        self.assertIn("'channel' is required", self.refused(dict(_BASE, channel="")))
        self.assertIn("'channel'", self.refused(dict(_BASE, channel="x" * 70)))

    def test_spool_path_for_streaming(self) -> None:
        """A stream needs spool_path; a batch read does not."""
        self.assertIn("'spool_path'", self.refused(_BASE, streaming=True))
        self.assertEqual(SourceOptions.parse(dict(_BASE, spool_path="/tmp/s"), True).spool_path, "/tmp/s")

    def test_numbers(self) -> None:
        """Counts must be positive integers and durations positive numbers; the error quotes the value."""
        self.assertIn("'max_messages_per_batch'", self.refused(dict(_BASE, max_messages_per_batch="0")))
        self.assertIn("'abc'", self.refused(dict(_BASE, max_messages="abc")))
        self.assertIn("'msg_timeout'", self.refused(dict(_BASE, msg_timeout="-1")))
        options = SourceOptions.parse(dict(_BASE, msg_timeout="2.5", max_messages_per_batch="7"), False)
        self.assertEqual(options.settings.msg_timeout, 2.5)
        self.assertEqual(options.max_messages_per_batch, 7)

    def test_tls_and_auth(self) -> None:
        """TLS files need tls=true; auth_secret and compression are passed on."""
        self.assertIn("'tls_ca_file' needs tls=true", self.refused(dict(_BASE, tls_ca_file="/ca.pem")))
        self.assertIn("'tls'", self.refused(dict(_BASE, tls="maybe")))
        self.assertIn("'compression'", self.refused(dict(_BASE, compression="lz4")))
        settings = SourceOptions.parse(
            dict(_BASE, tls="true", tls_ca_file="/ca.pem", auth_secret="s3", compression="snappy"), False
        ).settings
        self.assertEqual((settings.tls, settings.tls_ca_file, settings.auth_secret), (True, "/ca.pem", "s3"))
        self.assertEqual(settings.identify_body()["snappy"], True)


class SinkOptionsTests(SynchronousTestCase):
    """SinkOptions.parse."""

    def test_topic_optional(self) -> None:
        """The topic option may be left out (a topic column then names each row's topic)."""
        options = SinkOptions.parse({"nsqd_tcp_addresses": "127.0.0.1:4150"})
        self.assertIsNone(options.topic)
        self.assertEqual((options.max_msg_size, options.max_body_size), (1048576, 5242880))

    def test_nsqd_required(self) -> None:
        """Publishing needs nsqd addresses; lookupd addresses alone are refused with a reason."""
        error = self.assertRaises(OptionError, SinkOptions.parse, {"lookupd_http_addresses": "a:1", "topic": "t"})
        self.assertIn("'nsqd_tcp_addresses' is required to publish", str(error))

    def test_sizes(self) -> None:
        """A message can be no larger than an MPUB body of one message allows; a tiny max_body_size is refused."""
        options = SinkOptions.parse({"nsqd_tcp_addresses": "a:1", "max_msg_size": "100", "max_body_size": "100"})
        self.assertEqual((options.max_msg_size, options.max_body_size), (92, 100))
        error = self.assertRaises(OptionError, SinkOptions.parse, {"nsqd_tcp_addresses": "a:1", "max_body_size": "8"})
        self.assertIn("'max_body_size'", str(error))

    def test_idempotent(self) -> None:
        """Idempotent mode needs a topic, a producer id without spaces and MetaQ addresses, not nsqd TCP addresses."""
        options = SinkOptions.parse(
            {"idempotent": "true", "topic": "t", "producer_id": "job-1", "metaq_addresses": "a:1,b:2", "batch_id": "4"}
        )
        self.assertEqual((options.idempotent, options.producer_id, options.batch_id), (True, "job-1", 4))
        self.assertEqual(options.metaq_addresses, ["a:1", "b:2"])
        base = {"idempotent": "true", "topic": "t", "producer_id": "p", "metaq_addresses": "a:1"}
        for name, value, text in [
            ("topic", "", "'topic' is required with idempotent=true"),
            ("producer_id", "a b", "'producer_id' is required with idempotent=true"),
            ("metaq_addresses", "", "'metaq_addresses' or 'nsqd_http_addresses' is required"),
        ]:
            error = self.assertRaises(OptionError, SinkOptions.parse, dict(base, **{name: value}))
            self.assertIn(text, str(error))
        error = self.assertRaises(OptionError, SinkOptions.parse, {"nsqd_tcp_addresses": "a:1", "producer_id": "p"})
        self.assertIn("'producer_id' needs idempotent=true", str(error))
