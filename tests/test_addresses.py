"""Tests for txnsq.addresses: peers written as Go's RemoteAddr().String()."""

from twisted.internet.address import IPv4Address, IPv6Address, UNIXAddress
from twisted.trial.unittest import SynchronousTestCase

from txnsq.addresses import go_address, join_host_port, split_host_port


class GoAddressTests(SynchronousTestCase):
    def test_ipv4(self) -> None:
        """host:port, and the host alone."""
        self.assertEqual(go_address(IPv4Address("TCP", "127.0.0.1", 4150)), ("127.0.0.1:4150", "127.0.0.1"))

    def test_ipv6(self) -> None:
        """IPv6 hosts are bracketed in the address, bare in the host part."""
        self.assertEqual(go_address(IPv6Address("TCP", "::1", 4150)), ("[::1]:4150", "::1"))

    def test_unix(self) -> None:
        """A Unix socket peer has its name, or Go's "@" when unnamed, and no host."""
        self.assertEqual(go_address(UNIXAddress(b"/tmp/sock")), ("/tmp/sock", ""))
        self.assertEqual(go_address(UNIXAddress(None)), ("@", ""))

    def test_none(self) -> None:
        """No peer: empty strings."""
        self.assertEqual(go_address(None), ("", ""))


class HostPortTests(SynchronousTestCase):
    """split_host_port and join_host_port, as Go's net.SplitHostPort and JoinHostPort."""

    def test_split(self) -> None:
        """host:port and [v6]:port are split as Go's net.SplitHostPort does."""
        self.assertEqual(split_host_port("127.0.0.1:4160"), ("127.0.0.1", 4160))
        self.assertEqual(split_host_port("lookupd:4160"), ("lookupd", 4160))
        self.assertEqual(split_host_port("[::1]:4160"), ("::1", 4160))

    def test_split_invalid(self) -> None:
        """Addresses without a valid port, or with a bare IPv6 host, are refused."""
        for address in ("lookupd", "lookupd:", ":4160", "h:port", "h:70000", "::1:4160"):
            self.assertRaises(ValueError, split_host_port, address)

    def test_join(self) -> None:
        """IPv6 hosts get brackets."""
        self.assertEqual(join_host_port("h", 1), "h:1")
        self.assertEqual(join_host_port("::1", 1), "[::1]:1")
