"""Tests for txnsq.tools.filename and txnsq.tools.strftime."""

from __future__ import annotations

import os
import time

from twisted.trial.unittest import SynchronousTestCase

from txnsq.tools.filename import (
    FilenameFormatError,
    compute_filename_format,
    dated_filename,
    go_path_join,
    output_path,
    with_revision,
)
from txnsq.tools.strftime import strftime

DEFAULT = "<TOPIC>.<HOST><REV>.<DATETIME>.log"


class StrftimeTests(SynchronousTestCase):
    """Go nsq_to_file's strftime table."""

    def setUp(self) -> None:
        self.when = time.mktime((2024, 3, 5, 14, 7, 9, 0, 0, -1))

    def test_default_format(self) -> None:
        """The default --datetime-format gives year-month-day_hour."""
        self.assertEqual(strftime("%Y-%m-%d_%H", self.when), "2024-03-05_14")

    def test_names_and_twelve_hour_clock(self) -> None:
        """Month and day names are English; %I and %p give the 12-hour clock."""
        self.assertEqual(
            strftime("%B %b %A %a %I%p %M:%S %y %%", self.when),
            "March Mar Tuesday Tue 02PM 07:09 24 %",
        )

    def test_unknown_directive_kept(self) -> None:
        """A directive outside Go's table, and a trailing %, stay as written."""
        self.assertEqual(strftime("%j-%Y%", self.when), "%j-2024%")

    def test_numeric_zone(self) -> None:
        """%z is the numeric offset of local time."""
        text = strftime("%z", self.when)
        self.assertRegex(text, r"^[+-]\d{4}$")


class ComputeFilenameFormatTests(SynchronousTestCase):
    """The per-topic file name template."""

    def compute(self, **kwargs: object) -> str:
        values = dict(
            filename_format=DEFAULT,
            topic="events",
            hostname="web1.example.com",
            pid=42,
            work_dir="/out",
            output_dir="/out",
        )
        values.update(kwargs)
        return compute_filename_format(**values)  # type: ignore[arg-type]

    def test_rev_dropped_when_unneeded(self) -> None:
        """Without gzip, rotation or a work dir, <REV> is removed and <HOST> is the short name."""
        self.assertEqual(self.compute(), "events.web1.<DATETIME>.log")

    def test_rev_kept_and_gz_suffix(self) -> None:
        """With gzip <REV> stays and .gz is appended."""
        self.assertEqual(self.compute(gzip=True), "events.web1<REV>.<DATETIME>.log.gz")

    def test_gz_suffix_not_doubled(self) -> None:
        """A format already ending in .gz gets no second suffix."""
        self.assertEqual(
            self.compute(filename_format="<TOPIC><REV>.gz", gzip=True), "events<REV>.gz"
        )

    def test_missing_rev(self) -> None:
        """Rotation, gzip or a separate work dir without <REV> is Go's error."""
        for kwargs in (
            dict(gzip=True),
            dict(rotate_size=10),
            dict(rotate_interval=1.0),
            dict(work_dir="/work"),
        ):
            error = self.assertRaises(
                FilenameFormatError, self.compute, filename_format="<TOPIC>.log", **kwargs
            )
            self.assertEqual(
                str(error),
                "missing <REV> in --filename-format when gzip, rotation, or work dir enabled",
            )

    def test_pid_and_host_identifier(self) -> None:
        """<PID> is the process id; --host-identifier replaces <HOST> with its own tokens."""
        self.assertEqual(
            self.compute(
                filename_format="<TOPIC>-<HOST>-<PID>.log",
                host_identifier="<SHORT_HOST>~<HOSTNAME>",
            ),
            "events-web1~web1.example.com-42.log",
        )

    def test_defaults_from_this_host(self) -> None:
        """Without a hostname and pid, this machine's and this process's are used."""
        result = compute_filename_format("<PID>", "t")
        self.assertEqual(result, str(os.getpid()))


class FilenameHelpersTests(SynchronousTestCase):
    """Dating, revisions and paths."""

    def test_dated_and_revision(self) -> None:
        """<DATETIME> and <REV> are replaced as Go does."""
        when = time.mktime((2024, 3, 5, 14, 7, 9, 0, 0, -1))
        dated = dated_filename("t.h<REV>.<DATETIME>.log", "%Y-%m-%d_%H", when)
        self.assertEqual(dated, "t.h<REV>.2024-03-05_14.log")
        self.assertEqual(with_revision(dated, 3), "t.h-000003.2024-03-05_14.log")

    def test_go_path_join(self) -> None:
        """Parts are joined and cleaned; a part's leading slash does not restart the path."""
        self.assertEqual(go_path_join("work/", "/a.log"), "work/a.log")
        self.assertEqual(go_path_join("./w", "x/../a.log"), "w/a.log")
        self.assertEqual(go_path_join("", "a.log"), "a.log")

    def test_output_path(self) -> None:
        """A work-dir path maps to the same name under the output dir."""
        self.assertEqual(output_path("/w/sub/a.log", "/w", "/o"), "/o/sub/a.log")
        self.assertEqual(output_path("w/a.log", "./w", "o"), "o/a.log")
