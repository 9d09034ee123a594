"""
Every public name ``docs/embedding.md`` and ``docs/testing.md`` show is
real and exercised by a test.

Each page's code spans (outside its examples, which run as tests of their
own: ``tests/test_docs_embedding.py``, ``tests/test_docs_testing.py``) are
read; each name in them is either one of txnsq's, listed here with the
object it names, or listed as not txnsq's (Twisted's, a flag, a file).  A
name of neither kind fails the test, so a name added to a page must be
classified here.  Each txnsq name must resolve (a module, a class, a
method, a constructor parameter, an instance attribute the class sets or a
dataclass field), and some test module must use it together with its owner.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import os
import re
from typing import Any, Dict, List, Set, Tuple

from twisted.trial.unittest import SynchronousTestCase

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TESTS = os.path.join(_ROOT, "tests")

_FENCE = re.compile(r"^```.*?^```$", re.M | re.S)
_SPAN = re.compile(r"`([^`]+)`")
_NAME = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")

#: (owner, member): the owner is a dotted path to a module or class; the
#: member a name on it ("" for the owner itself).
Target = Tuple[str, str]

_NSQD = "txnsq.nsqd.service.NSQDService"
_LOOKUPD = "txnsq.nsqlookupd.service.NSQLookupdService"
_ADMIN = "txnsq.nsqadmin.service.NSQAdminService"
_OPTIONS = "txnsq.nsqd.options.NSQDOptions"

EMBEDDING: Dict[str, List[Target]] = {
    "NSQDService": [(_NSQD, "")],
    "NSQDService.fromOptions": [(_NSQD, "fromOptions")],
    "NSQDService.whenListening": [(_NSQD, "whenListening")],
    "NSQDOptions": [(_OPTIONS, "")],
    "NSQLookupdService": [(_LOOKUPD, "")],
    "NSQLookupdService.fromOptions": [(_LOOKUPD, "fromOptions")],
    "NSQLookupdOptions": [("txnsq.nsqlookupd.options.NSQLookupdOptions", "")],
    "NSQAdminService": [(_ADMIN, "")],
    "NSQAdminService.fromOptions": [(_ADMIN, "fromOptions")],
    "NSQAdminOptions": [("txnsq.nsqadmin.options.NSQAdminOptions", "")],
    "parse_nsqlookupd_args": [("txnsq.nsqlookupd", "parse_nsqlookupd_args")],
    "parse_nsqadmin_args": [("txnsq.nsqadmin", "parse_nsqadmin_args")],
    "whenListening": [(_NSQD, "whenListening"), (_LOOKUPD, "whenListening"), (_ADMIN, "whenListening")],
    "bound_ports": [(_NSQD, "bound_ports"), (_LOOKUPD, "bound_ports")],
    "bound_port": [(_ADMIN, "bound_port")],
    "open_data": [(_NSQD, "open_data")],
    "privilegedStartService": [(_NSQD, "privilegedStartService")],
    "startService": [(_NSQD, "startService")],
    "service.broker": [(_NSQD, "broker")],
    "reactor": [(_NSQD, "reactor"), (_LOOKUPD, "reactor"), (_ADMIN, "reactor")],
    "storage": [(_NSQD, "storage")],
    "tls": [(_NSQD, "tls")],
    "tls_policy": [(_ADMIN, "tls_policy")],
    "tcp_endpoint": [(_NSQD, "tcp_endpoint"), (_LOOKUPD, "tcp_endpoint")],
    "http_endpoint": [(_NSQD, "http_endpoint"), (_LOOKUPD, "http_endpoint"), (_ADMIN, "http_endpoint")],
    "https_endpoint": [(_NSQD, "https_endpoint")],
    "metaq_endpoint": [(_NSQD, "metaq_endpoint")],
    "options.storage": [(_OPTIONS, "storage")],
    "options.tcp_address": [(_OPTIONS, "tcp_address")],
    "options.http_address": [(_OPTIONS, "http_address")],
    "options.https_address": [(_OPTIONS, "https_address")],
    "options.metaq_address": [(_OPTIONS, "metaq_address")],
    "txnsq.nsqd.NSQDService": [("txnsq.nsqd", "NSQDService")],
    "txnsq.nsqd.service": [("txnsq.nsqd.service", "")],
    "txnsq.nsqd.options": [("txnsq.nsqd.options", "")],
    "txnsq.nsqd.flags": [("txnsq.nsqd.flags", "parse_nsqd_args")],
    "txnsq.nsqlookupd": [("txnsq.nsqlookupd", "NSQLookupdService")],
    "txnsq.nsqadmin": [("txnsq.nsqadmin", "NSQAdminService")],
    "txnsq.reactors.ServiceReactor": [("txnsq.reactors", "ServiceReactor")],
}

#: Names on the embedding page that are not txnsq's.
EMBEDDING_OTHERS = {
    "IPolicyForHTTPS",
    "IReactorTCP",
    "IReactorTime",
    "IStorageBackend",  # txnsq's storage interface, its own page and tests
    "IStreamServerEndpoint",
    "ValueError",
    "getContext",
    "twisted.internet.ssl.CertificateOptions",
    "twisted.internet.testing.MemoryReactorClock",
    "twistd",
    # words of prose in code spans: "from txnsq.nsqd import ...", a file,
    # endpoint descriptions, host:port, the test module's path
    "from",
    "nsqd",
    "nsqd.dat",
    "tcp",
    "unix",
    "host",
    "tests",
}

_MEMORY = "txnsq.testing.memory.MemoryNSQD"
_RUNNING = "txnsq.testing.servers.RunningNSQD"
_RUNNING_LOOKUPD = "txnsq.testing.servers.RunningNSQLookupd"

TESTING: Dict[str, List[Target]] = {
    "MemoryNSQD": [("txnsq.testing", "MemoryNSQD")],
    "connect": [(_MEMORY, "connect")],
    "flush": [(_MEMORY, "flush")],
    "advance": [(_MEMORY, "advance")],
    "publish": [(_MEMORY, "publish")],
    "refuse": [(_MEMORY, "refuse")],
    "accept": [(_MEMORY, "accept")],
    "drop": [(_MEMORY, "drop")],
    "connections": [(_MEMORY, "connections")],
    "broker": [(_MEMORY, "broker"), (_RUNNING, "broker")],
    "options": [(_MEMORY, "options"), (_RUNNING, "options")],
    "clock": [(_MEMORY, "clock")],
    "factory": [(_MEMORY, "factory")],
    "close": [(_MEMORY, "close")],
    "start_nsqd": [("txnsq.testing", "start_nsqd")],
    "txnsq.testing.start_nsqd": [("txnsq.testing", "start_nsqd")],
    "start_nsqlookupd": [("txnsq.testing", "start_nsqlookupd")],
    "txnsq.testing": [("txnsq.testing", "")],
    "RunningNSQD": [("txnsq.testing", "RunningNSQD")],
    "RunningNSQLookupd": [("txnsq.testing", "RunningNSQLookupd")],
    "host": [(_RUNNING, "host")],
    "tcp_port": [(_RUNNING, "tcp_port")],
    "http_port": [(_RUNNING, "http_port")],
    "tcp_address": [(_RUNNING, "tcp_address"), (_RUNNING_LOOKUPD, "tcp_address")],
    "http_address": [(_RUNNING, "http_address"), (_RUNNING_LOOKUPD, "http_address")],
    "lookupd": [(_RUNNING_LOOKUPD, "lookupd")],
    "stop": [(_RUNNING, "stop"), (_RUNNING_LOOKUPD, "stop")],
    "NSQDOptions": [(_OPTIONS, "")],
    "Producer": [("txnsq.client.producer.Producer", "")],
    "Consumer": [("txnsq.client.consumer.Consumer", "")],
    "nsqd_tcp_addresses": [("txnsq.client.consumer.Consumer", "nsqd_tcp_addresses")],
    "txnsq.client.connection.connect": [("txnsq.client.connection", "connect")],
    "broker.find_topic": [("txnsq.nsqd.broker.Broker", "find_topic")],
    "topic.depth": [("txnsq.nsqd.topic.Topic", "depth")],
    "topic.channels": [("txnsq.nsqd.topic.Topic", "channels")],
    "channel.depth": [("txnsq.nsqd.channel.Channel", "depth")],
    "channel.in_flight_count": [("txnsq.nsqd.channel.Channel", "in_flight_count")],
    "channel.deferred_count": [("txnsq.nsqd.channel.Channel", "deferred_count")],
}

#: Names on the testing page that are not txnsq's.
TESTING_OTHERS = {"treq.testing.StubTreq", "twisted.internet.task.Clock", "tests"}


def page_names(page: str) -> Set[str]:
    """The names in a page's code spans, outside its code blocks."""
    with open(os.path.join(_ROOT, "docs", page), encoding="utf-8") as doc:
        text = _FENCE.sub("", doc.read())
    names = set()
    for span in _SPAN.findall(text):
        match = _NAME.match(span)
        if match:
            names.add(match.group(0))
    return names


def _resolve_owner(path: str) -> Any:
    """The module or class at a dotted path."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for part in parts[cut:]:
            found = getattr(found, part)
        return found
    raise ImportError(path)


def has_member(owner: Any, member: str) -> bool:
    """Whether ``member`` is an attribute, constructor parameter, dataclass field or ``self.member`` of ``owner``."""
    if hasattr(owner, member):
        return True
    if not inspect.isclass(owner):
        return False
    if dataclasses.is_dataclass(owner) and member in {f.name for f in dataclasses.fields(owner)}:
        return True
    if member in inspect.signature(owner).parameters:
        return True
    for klass in owner.__mro__:
        if klass.__module__.startswith("txnsq") and re.search(
            r"\bself\.%s\b" % (re.escape(member),), inspect.getsource(klass)
        ):
            return True
    return False


_WORDS = re.compile(r"\w+")
_word_sets: List[Set[str]] = []


def _test_words() -> List[Set[str]]:
    """The words of every test module's source, one set per module (this module excluded)."""
    if not _word_sets:
        for root, _, files in os.walk(_TESTS):
            for filename in files:
                path = os.path.join(root, filename)
                if filename.endswith(".py") and os.path.abspath(path) != os.path.abspath(__file__):
                    with open(path, encoding="utf-8") as source:
                        _word_sets.append(set(_WORDS.findall(source.read())))
    return _word_sets


def exercised(owner_path: str, member: str) -> bool:
    """Whether a test module names both the owner (its last part) and the member."""
    owner = owner_path.rsplit(".", 1)[-1]
    return any(owner in words and (not member or member in words) for words in _test_words())


class DocNamesTests(SynchronousTestCase):
    """The pages' public names are real and tested."""

    def check(self, page: str, table: Dict[str, List[Target]], others: Set[str]) -> None:
        names = page_names(page)
        self.assertEqual(sorted(names - set(table) - others), [], "unclassified names on " + page)
        self.assertEqual(sorted(set(table) - names), [], "names no longer on " + page)
        missing = []
        untested = []
        for name in sorted(table):
            for owner_path, member in table[name]:
                owner = _resolve_owner(owner_path)
                if member and not has_member(owner, member):
                    missing.append("%s: %s.%s" % (name, owner_path, member))
                elif not exercised(owner_path, member):
                    untested.append("%s: %s.%s" % (name, owner_path, member))
        self.assertEqual(missing, [], "names that do not resolve")
        self.assertEqual(untested, [], "names no test uses")

    def test_embedding(self) -> None:
        """Every txnsq name docs/embedding.md shows resolves and a test uses it."""
        self.check("embedding.md", EMBEDDING, EMBEDDING_OTHERS)

    def test_testing(self) -> None:
        """Every txnsq name docs/testing.md shows resolves and a test uses it."""
        self.check("testing.md", TESTING, TESTING_OTHERS)

    def test_unknown_member_found_missing(self) -> None:
        """A member a class does not have is not taken for one (so that the check can fail)."""
        self.assertFalse(has_member(_resolve_owner(_NSQD), "no_such_endpoint"))
        self.assertTrue(has_member(_resolve_owner(_NSQD), "tcp_endpoint"))
        self.assertFalse(exercised(_NSQD, "no_such_endpoint"))
