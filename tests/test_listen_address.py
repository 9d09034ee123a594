"""Tests for txnsq.listen_address: listen flags checked and turned into endpoint descriptions."""

from __future__ import annotations

from typing import Any, List

from twisted.internet.endpoints import (
    TCP4ServerEndpoint,
    TCP6ServerEndpoint,
    UNIXServerEndpoint,
    serverFromString,
)
from twisted.internet.testing import MemoryReactor
from twisted.trial.unittest import SynchronousTestCase

from txnsq import listen_address as listen_address_module
from txnsq.listen_address import check_listen_address, listen_endpoint_description


class CheckListenAddressTests(SynchronousTestCase):
    """check_listen_address refuses a listen flag's unusable value, naming the flag."""

    def test_usable(self) -> None:
        """host:port and endpoint descriptions pass."""
        check_listen_address("tcp-address", "127.0.0.1:0")
        check_listen_address("tcp-address", "unix:/run/nsqd.sock")

    def test_empty(self) -> None:
        """An empty value must not be."""
        error = self.assertRaises(ValueError, check_listen_address, "http-address", "")
        self.assertEqual(str(error), "--http-address must not be empty")

    def test_unreadable(self) -> None:
        """Another value is refused with the flag and the reason."""
        error = self.assertRaises(ValueError, check_listen_address, "tcp-address", "nonsense")
        self.assertTrue(str(error).startswith("--tcp-address: invalid listen address 'nonsense'"))


class ListenEndpointTests(SynchronousTestCase):
    """listen_endpoint_description turns listen flags into endpoint strings."""

    def endpoint(self, address: str) -> Any:
        """The endpoint the description makes."""
        return serverFromString(MemoryReactor(), listen_endpoint_description(address))

    def test_ipv4(self) -> None:
        """An IPv4 host:port listens on that interface."""
        self.assertEqual(
            listen_endpoint_description("127.0.0.1:4150"), "tcp:4150:interface=127.0.0.1"
        )
        endpoint = self.endpoint("127.0.0.1:4150")
        self.assertIsInstance(endpoint, TCP4ServerEndpoint)
        self.assertEqual((endpoint._interface, endpoint._port), ("127.0.0.1", 4150))

    def test_port_zero(self) -> None:
        """Port 0 asks for a free port; an empty port means the same."""
        self.assertEqual(
            listen_endpoint_description("127.0.0.1:0"), "tcp:0:interface=127.0.0.1"
        )
        self.assertEqual(
            listen_endpoint_description("127.0.0.1:"), "tcp:0:interface=127.0.0.1"
        )
        self.assertEqual(self.endpoint("127.0.0.1:0")._port, 0)

    def test_all_interfaces(self) -> None:
        """An empty host or 0.0.0.0 listens on every IPv4 interface."""
        self.assertEqual(listen_endpoint_description(":4150"), "tcp:4150")
        self.assertEqual(
            listen_endpoint_description("0.0.0.0:4151"), "tcp:4151:interface=0.0.0.0"
        )
        endpoint = self.endpoint(":4150")
        self.assertEqual((endpoint._interface, endpoint._port), ("", 4150))

    def test_ipv6(self) -> None:
        """A bracketed IPv6 host becomes a tcp6 endpoint with escaped colons."""
        self.assertEqual(
            listen_endpoint_description("[::1]:4150"), "tcp6:4150:interface=\\:\\:1"
        )
        endpoint = self.endpoint("[::1]:4150")
        self.assertIsInstance(endpoint, TCP6ServerEndpoint)
        self.assertEqual((endpoint._interface, endpoint._port), ("::1", 4150))
        endpoint = self.endpoint("[::]:0")
        self.assertEqual((endpoint._interface, endpoint._port), ("::", 0))

    def test_ipv6_zone(self) -> None:
        """An IPv6 zone is kept."""
        endpoint = self.endpoint("[fe80::1%eth0]:4150")
        self.assertEqual(endpoint._interface, "fe80::1%eth0")

    def test_hostname(self) -> None:
        """A host name is passed to the endpoint, resolved when listening."""
        self.assertEqual(
            listen_endpoint_description("localhost:4151"), "tcp:4151:interface=localhost"
        )
        self.assertEqual(self.endpoint("localhost:4151")._interface, "localhost")

    def test_endpoint_strings_pass_through(self) -> None:
        """Twisted endpoint descriptions are returned unchanged."""
        for description in (
            "tcp:4150:interface=127.0.0.1",
            "tcp:0",
            "tcp6:4150:interface=\\:\\:1",
            "unix:/run/nsqd.sock",
            "unix:/run/nsqd.sock:mode=660",
            "ssl:4152:privateKey=key.pem:certKey=cert.pem",
            "systemd:domain=INET:index=0",
        ):
            self.assertEqual(listen_endpoint_description(description), description)
        endpoint = self.endpoint("unix:/run/nsqd.sock")
        self.assertIsInstance(endpoint, UNIXServerEndpoint)

    def test_socket_path(self) -> None:
        """A path listens on a UNIX socket, as Go nsqd v1.3 does."""
        self.assertEqual(
            listen_endpoint_description("/tmp/nsqd.sock"), "unix:/tmp/nsqd.sock"
        )
        self.assertEqual(listen_endpoint_description("nsqd.sock"), "unix:nsqd.sock")
        self.assertEqual(
            listen_endpoint_description("/tmp/a=b/x"), "unix:/tmp/a\\=b/x"
        )
        endpoint = self.endpoint("/tmp/a=b/x")
        self.assertEqual(endpoint._address, "/tmp/a=b/x")

    def test_garbage(self) -> None:
        """Garbage is refused with a reason."""
        cases = [
            "",
            "garbage",
            "1.2.3.4",
            "::1:4150",
            "[::1]",
            "[::1]x:4150",
            "127.0.0.1:99999",
            "127.0.0.1:http",
            "127.0.0.1:-1",
            "a b:4150",
            "[host]:4150",
            " 127.0.0.1:4150",
            "1.2.3.4%eth0:1",
        ]
        for address in cases:
            self.assertRaises(ValueError, listen_endpoint_description, address)

    def test_garbage_message(self) -> None:
        """The message says what was expected."""
        with self.assertRaises(ValueError) as caught:
            listen_endpoint_description("garbage")
        self.assertEqual(
            str(caught.exception),
            "invalid listen address 'garbage': missing port in address "
            "(expected <addr>:<port>, a socket path or a Twisted endpoint "
            "description)",
        )

    def test_plugin_prefixes(self) -> None:
        """Prefixes of installed endpoint plugins pass through."""
        fake: List[str] = ["myendpoint"]
        self.patch(
            listen_address_module, "_plugin_endpoint_types", lambda: frozenset(fake)
        )
        self.assertEqual(
            listen_endpoint_description("myendpoint:1234"), "myendpoint:1234"
        )
