"""Tests for txnsq.version: the versions the daemons report."""

from __future__ import annotations

import re

from twisted.trial.unittest import SynchronousTestCase

from tests.integration.nsqd_process import GNSQ_NSQD_VERSION
from txnsq import __version__, speedups
from txnsq.version import NSQ_VERSION, TXNSQ_VERSION, build_token, version_string


class BuildTokenTests(SynchronousTestCase):
    """build_token names txnsq and its runtime in the place of Go's toolchain."""

    def test_shape(self) -> None:
        """It is txnsq's version, the implementation and the Python version, lower case, dashed."""
        self.assertEqual(build_token("CPython", "3.11.7"), "txnsq-%s-cpython-3.11.7" % (__version__,))
        self.assertEqual(build_token("PyPy", "3.9.16"), "txnsq-%s-pypy-3.9.16" % (__version__,))

    def test_only_token_characters(self) -> None:
        """Characters a harness would not accept (spaces, ``+``, capitals) become dashes or lower case."""
        token = build_token("Weird Impl", "3.12.0+ (dev)")
        self.assertRegex(token, r"\A[a-z0-9.-]+\Z")
        self.assertEqual(token, "txnsq-%s-weird-impl-3.12.0-dev" % (__version__,))


class VersionStringTests(SynchronousTestCase):
    """version_string is Go's ``--version`` line with the NSQ level implemented."""

    def test_nsq_level(self) -> None:
        """The version reported is NSQ 1.3.0; txnsq's own and the hot path in use are in the build token."""
        self.assertEqual(NSQ_VERSION, "1.3.0")
        self.assertEqual(TXNSQ_VERSION, __version__)
        self.assertEqual(
            version_string("nsqd"),
            "nsqd v1.3.0 (built w/%s-%s)" % (build_token(), speedups.hot_path_token()),
        )

    def test_gnsq_pattern(self) -> None:
        """Every daemon's line matches the pattern gnsq's harness requires (with its name)."""
        for program in ("nsqd", "nsqlookupd", "nsqadmin"):
            pattern = GNSQ_NSQD_VERSION.replace("nsqd", program)
            self.assertTrue(re.match(pattern, version_string(program)), version_string(program))
