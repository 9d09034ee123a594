"""Tests for txnsq.plain_reactor."""

from __future__ import annotations

import subprocess
import sys

from twisted.trial.unittest import SynchronousTestCase

from txnsq.plain_reactor import import_reactor


class ImportReactorTests(SynchronousTestCase):
    """import_reactor returns the global reactor and leaves pyOpenSSL importable."""

    def test_already_imported(self) -> None:
        """Once the reactor's modules are imported, the reactor is returned as it is."""
        from twisted.internet import reactor

        self.assertIs(import_reactor(False), reactor)
        self.assertIs(import_reactor(True), reactor)

    def test_without_tls_in_a_fresh_process(self) -> None:
        """
        In a fresh process the reactor comes without TLS and pyOpenSSL is
        not loaded, yet stays importable afterwards.
        """
        program = (
            "import sys\n"
            "from txnsq.plain_reactor import import_reactor\n"
            "import_reactor(False)\n"
            "from twisted.internet import tcp\n"
            "print('OpenSSL' in sys.modules, hasattr(tcp.Server, 'startTLS'))\n"
            "import OpenSSL.SSL\n"
            "print('imported')\n"
        )
        result = subprocess.run(
            [sys.executable, "-c", program], stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(result.stdout.split(b"\n"), [b"False False", b"imported", b""])
