"""
Tests for :mod:`lab.spark_checker`: a file sink's committed files read
from hand-made ``_spark_metadata`` logs, and the outputs checked against
hand-made producer histories with the queue checker.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List

from twisted.trial.unittest import SynchronousTestCase

from lab.checkers import check_queue
from lab.spark_checker import commit_times, committed_files, parquet_events, stray_files


def _write_parquet(path: str, bodies: List[bytes]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"body": pa.array(bodies, type=pa.binary())}), path)


def _log(folder: str, name: str, entries: List[Dict[str, Any]]) -> None:
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "w") as f:
        f.write("v1\n")
        for entry in entries:
            f.write(json.dumps(entry) + "\n")


def _add(path: str) -> Dict[str, Any]:
    return {"path": "file://" + path, "size": 1, "isDir": False, "modificationTime": 0,
            "blockReplication": 1, "blockSize": 1, "action": "add"}


def _pubs(process: str, acked: List[int], unknown: List[int] = ()) -> List[Dict[str, Any]]:  # type: ignore[assignment]
    events: List[Dict[str, Any]] = []
    for n in list(acked) + list(unknown):
        events.append({"t": 1, "p": process, "type": "invoke", "f": "pub", "v": [n], "node": "n1"})
    for n in acked:
        events.append({"t": 2, "p": process, "type": "ok", "f": "pub", "v": [n], "node": "n1"})
    for n in unknown:
        events.append({"t": 2, "p": process, "type": "info", "f": "pub", "v": [n], "node": "n1"})
    return events


class CommittedFilesTests(SynchronousTestCase):
    """Which files of a file sink's folder are its output."""

    def setUp(self) -> None:
        self.output = os.path.abspath(self.mktemp())
        self.meta = os.path.join(self.output, "_spark_metadata")
        os.makedirs(self.output)

    def test_no_log_no_files(self) -> None:
        """An output folder without a log has committed nothing, whatever files it holds."""
        _write_parquet(os.path.join(self.output, "part-0.parquet"), [b"p1:1"])
        self.assertEqual(committed_files(self.output), [])
        self.assertEqual(stray_files(self.output), [os.path.join(self.output, "part-0.parquet")])

    def test_batches_listed_in_order(self) -> None:
        """Each batch file's ``add`` entries are output; a file no batch lists is a stray."""
        a, b, c = (os.path.join(self.output, "part-%s.parquet" % x) for x in "abc")
        for path in (a, b, c):
            _write_parquet(path, [b"p1:1"])
        _log(self.meta, "0", [_add(a)])
        _log(self.meta, "1", [_add(b)])
        self.assertEqual(committed_files(self.output), [a, b])
        self.assertEqual(stray_files(self.output), [c])

    def test_compact_supersedes_earlier_batches(self) -> None:
        """The latest ``N.compact`` stands for every batch up to N; later batch files add to it."""
        a, b, c = (os.path.join(self.output, "part-%s.parquet" % x) for x in "abc")
        _log(self.meta, "8", [_add(c)])  # left from before the compaction; not read again
        _log(self.meta, "9.compact", [_add(a)])
        _log(self.meta, "10", [_add(b)])
        self.assertEqual(committed_files(self.output), [a, b])

    def test_delete_entries_remove(self) -> None:
        """A ``delete`` entry takes a file out of the output."""
        a, b = (os.path.join(self.output, "part-%s.parquet" % x) for x in "ab")
        _log(self.meta, "0", [_add(a), _add(b)])
        _log(self.meta, "1", [dict(_add(a), action="delete")])
        self.assertEqual(committed_files(self.output), [b])

    def test_temporary_files_ignored(self) -> None:
        """A log file being written (a hidden temporary name) is not a batch."""
        a = os.path.join(self.output, "part-a.parquet")
        _log(self.meta, "0", [_add(a)])
        _log(self.meta, ".1.3f2e.tmp", [_add(os.path.join(self.output, "part-b.parquet"))])
        self.assertEqual(committed_files(self.output), [a])

    def test_not_a_log(self) -> None:
        """A batch file without the version line is an error, not an empty batch."""
        os.makedirs(self.meta)
        with open(os.path.join(self.meta, "0"), "w") as f:
            f.write('{"path": "file:///x"}\n')
        self.assertRaises(ValueError, committed_files, self.output)

    def test_percent_encoded_paths(self) -> None:
        """Paths in the log are URIs: percent-encoded characters are decoded."""
        a = os.path.join(self.output, "part a.parquet")
        entry = _add(a)
        entry["path"] = entry["path"].replace(" ", "%20")
        _log(self.meta, "0", [entry])
        self.assertEqual(committed_files(self.output), [a])

    def test_commit_times(self) -> None:
        """A checkpoint's commit times are its ``commits/N`` files' times, in order."""
        checkpoint = os.path.abspath(self.mktemp())
        os.makedirs(os.path.join(checkpoint, "commits"))
        for n, t in ((0, 100.0), (1, 50.0)):
            path = os.path.join(checkpoint, "commits", str(n))
            open(path, "w").close()
            os.utime(path, (t, t))
        open(os.path.join(checkpoint, "commits", ".1.crc"), "w").close()
        self.assertEqual(commit_times(checkpoint), [50.0, 100.0])
        self.assertEqual(commit_times(os.path.join(checkpoint, "none")), [])


class ParquetCheckTests(SynchronousTestCase):
    """The committed rows against the producers' history."""

    def setUp(self) -> None:
        self.output = os.path.abspath(self.mktemp())
        self.meta = os.path.join(self.output, "_spark_metadata")
        os.makedirs(self.output)

    def check(self, history: List[Dict[str, Any]]) -> Any:
        return check_queue(history + parquet_events(self.output, "parquet"), ["parquet"])

    def test_exactly_once(self) -> None:
        """Every acknowledged publish once in the committed files: nothing lost, duplicated or unexpected."""
        a, b = (os.path.join(self.output, "part-%s.parquet" % x) for x in "ab")
        _write_parquet(a, [b"p1:1", b"p1:2"])
        _write_parquet(b, [b"p2:1"])
        _log(self.meta, "0", [_add(a), _add(b)])
        result = self.check(_pubs("p1", [1, 2]) + _pubs("p2", [1]))
        self.assertEqual((result.acknowledged, result.lost, result.duplicates, result.unexpected), (3, 0, 0, 0))

    def test_stray_file_is_not_a_duplicate(self) -> None:
        """A file of an attempt that did not commit repeats rows without making duplicates."""
        a, stray = (os.path.join(self.output, "part-%s.parquet" % x) for x in ("a", "stray"))
        _write_parquet(a, [b"p1:1", b"p1:2"])
        _write_parquet(stray, [b"p1:2"])
        _log(self.meta, "0", [_add(a)])
        result = self.check(_pubs("p1", [1, 2]))
        self.assertEqual((result.lost, result.duplicates), (0, 0))

    def test_missing_and_duplicated(self) -> None:
        """An acknowledged row absent is lost; one committed in two batches is a duplicate."""
        a, b = (os.path.join(self.output, "part-%s.parquet" % x) for x in "ab")
        _write_parquet(a, [b"p1:1", b"p1:3"])
        _write_parquet(b, [b"p1:3"])
        _log(self.meta, "0", [_add(a)])
        _log(self.meta, "1", [_add(b)])
        result = self.check(_pubs("p1", [1, 2, 3]))
        self.assertEqual((result.lost, result.duplicates), (1, 1))
        self.assertEqual(result.lost_sample, ["p1:2"])

    def test_unexpected(self) -> None:
        """A row never published, or not a numbered body, is unexpected."""
        a = os.path.join(self.output, "part-a.parquet")
        _write_parquet(a, [b"p1:1", b"p1:9", b"garbage"])
        _log(self.meta, "0", [_add(a)])
        result = self.check(_pubs("p1", [1]))
        self.assertEqual(result.unexpected, 2)

    def test_unknown_outcome_written_once_is_recovered(self) -> None:
        """A publish of unknown outcome found once is recovered, not unexpected."""
        a = os.path.join(self.output, "part-a.parquet")
        _write_parquet(a, [b"p1:1", b"p1:2"])
        _log(self.meta, "0", [_add(a)])
        result = self.check(_pubs("p1", [1], unknown=[2]))
        self.assertEqual((result.lost, result.unexpected, result.recovered), (0, 0, 1))
