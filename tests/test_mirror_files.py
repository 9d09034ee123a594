"""
Tests for :mod:`txnsq.mirror.files`: the node id and the named topics
kept in the data path; each file's part alone, on a temporary directory.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List

from twisted.logger import Logger
from twisted.trial.unittest import SynchronousTestCase

from txnsq.mirror.files import NODE_ID_FILE, NamedTopicsFile, load_node_id, random_id


class NamedTopicsFileTests(SynchronousTestCase):
    """The topics of ``POST /topic/mirror``, one a line."""

    def setUp(self) -> None:
        directory = self.mktemp()
        os.makedirs(directory)
        self.path = os.path.join(directory, "txnsq-mirror.topics")

    def test_kept_and_loaded(self) -> None:
        """What is kept is loaded back by another object on the same file, as lines in name order."""
        NamedTopicsFile(self.path).keep({"orders", "invoices"})
        self.assertEqual(NamedTopicsFile(self.path).load(), {"orders", "invoices"})
        with open(self.path) as stream:
            self.assertEqual(stream.read(), "invoices\norders\n")

    def test_missing(self) -> None:
        """A missing file is no topic."""
        self.assertEqual(NamedTopicsFile(self.path).load(), set())

    def test_no_path(self) -> None:
        """Without a path nothing is kept and nothing loaded."""
        topics = NamedTopicsFile(None)
        topics.keep({"orders"})
        self.assertEqual(topics.load(), set())

    def test_unwritable_logged(self) -> None:
        """A file that cannot be written is logged, not raised."""
        events: List[Dict[str, Any]] = []
        topics = NamedTopicsFile(os.path.join(self.path, "no", "such"))
        topics._log = Logger(observer=events.append)
        topics.keep({"orders"})
        [event] = events
        self.assertEqual(event["log_format"], "mirror: cannot keep the mirrored topics in {path}: {error}")


class NodeIdTests(SynchronousTestCase):
    """This node's mirror id."""

    def test_kept(self) -> None:
        """The id made at the first start is read back at the next."""
        directory = self.mktemp()
        os.makedirs(directory)
        first = load_node_id(directory)
        self.assertEqual(load_node_id(directory), first)
        with open(os.path.join(directory, NODE_ID_FILE)) as stream:
            self.assertEqual(stream.read(), first + "\n")

    def test_random_id(self) -> None:
        """Sixteen lower-case base32 characters, new each time."""
        first, second = random_id(), random_id()
        self.assertEqual(len(first), 16)
        self.assertEqual(first, first.lower())
        self.assertNotEqual(first, second)
