"""Tests for txnsq.addresses: peers written as Go's RemoteAddr().String()."""

from twisted.internet.address import IPv4Address, IPv6Address, UNIXAddress
from twisted.trial.unittest import SynchronousTestCase

from txnsq.addresses import go_address


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
