"""How TLS versions and cipher suites are named in stats (Go's spelling)."""

from twisted.trial.unittest import SynchronousTestCase

from txnsq.nsqd.tls import cipher_suite_name, tls_version_name


class NameTests(SynchronousTestCase):
    def test_tls12_suites_get_iana_names(self) -> None:
        """OpenSSL's names of the suites Go knows become Go's (IANA) names."""
        self.assertEqual(
            cipher_suite_name("ECDHE-RSA-AES128-GCM-SHA256"),
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
        )
        self.assertEqual(cipher_suite_name("AES256-SHA"), "TLS_RSA_WITH_AES_256_CBC_SHA")

    def test_tls13_and_unknown_suites_kept(self) -> None:
        """TLS 1.3 names are IANA names already; a suite Go lacks keeps OpenSSL's name."""
        self.assertEqual(cipher_suite_name("TLS_AES_128_GCM_SHA256"), "TLS_AES_128_GCM_SHA256")
        self.assertEqual(cipher_suite_name("DHE-RSA-AES128-SHA"), "DHE-RSA-AES128-SHA")

    def test_versions(self) -> None:
        """TLSv1 is TLS1.0, TLSv1.2 is TLS1.2, SSLv3 is SSL30, as Go writes them."""
        self.assertEqual(
            [tls_version_name(v) for v in ("SSLv3", "TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3")],
            ["SSL30", "TLS1.0", "TLS1.1", "TLS1.2", "TLS1.3"],
        )
