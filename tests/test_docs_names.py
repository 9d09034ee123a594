"""
Every public name ``docs/embedding.md`` and ``docs/testing.md`` show is
real and exercised by a test; every txnsq name any page, the README or an
example imports or spells out (``txnsq.x.Y``) is real, part of the
declared public API (:mod:`tests.public_api`) and used by a test, unless
it is listed here as a private name a page names on purpose.

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
import glob
import importlib
import importlib.util
import inspect
import os
import re
from typing import Any, Dict, List, Set, Tuple

from twisted.trial.unittest import SynchronousTestCase

from tests.public_api import is_public

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
    "txnsq.reactors.install_steady_clock": [("txnsq.reactors", "install_steady_clock")],
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
    "callLater",  # Twisted's IReactorTime, in the clocks paragraph
    "getContext",
    "twisted.internet.ssl.CertificateOptions",
    "twisted.internet.testing.MemoryReactorClock",
    "twistd",
    # words of prose in code spans: "from txnsq.nsqd import ...", a file,
    # endpoint descriptions, host:port, the test module's path
    "from",
    "nsqd",
    "nsqd.dat",
    "nsqlookupd",
    "nsqadmin",
    "seconds",
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


#: Private names the pages name on purpose, and why: where a figure was
#: measured, where a format lives.  Each must still exist, be named and
#: be private; a name that becomes public leaves this list.
PRIVATE_MENTIONS: Dict[str, str] = {
    "txnsq.http.routes": "performance.md: which routing the HTTP figures include",
    "txnsq.nsqd.memstats.memory_stats": "http.md: what each /stats memory field holds",
    "txnsq.nsqd.script": "performance.md: the console script's start-up cost",
    "txnsq.nsqd.tcp._compiled_message_frame": "performance.md: how the pure delivery path was measured",
    "txnsq.plain_reactor": "performance.md: the console script's start-up cost",
    "txnsq.protocol._message": "performance.md: the compiled speed-ups",
    "txnsq.protocol._v2": "performance.md: the compiled speed-ups",
    "txnsq.protocol.message": "performance.md: what a compiled speed-up accelerates",
    "txnsq.protocol.v2.V2CommandParser": "performance.md: what a compiled speed-up accelerates",
    "txnsq.spark.datasource": "spark.md: the data source's import cost",
    "txnsq.storage._diskqueue_format": "performance.md: the compiled speed-ups",
    "txnsq.storage._log_format": "performance.md: the compiled speed-ups",
    "txnsq.storage.diskqueue_format": "performance.md: what a compiled speed-up accelerates",
    "txnsq.storage.log_format": "storage.md and performance.md: where the retained log's record format is",
    "txnsq.storage.log_retention": "storage.md: where the retained log's retention is",
}

_API_LINK = re.compile(r"\]\(([^)#]*build/apidocs/([\w.]+)\.html)(?:#(\w+))?\)")
_FROM_IMPORT = re.compile(r"\bfrom\s+(txnsq[\w.]*)\s+import\s+(\([^)]*\)|[\w, ]+)")
_DOTTED = re.compile(r"(?<![\w./])txnsq(?:\.[A-Za-z_]\w*)+")


#: Pages for the project's maintainers, not its users: they name private
#: modules on purpose (the layers, the path of a message).
_MAINTAINER_PAGES = {"design.md"}


def user_docs() -> List[str]:
    """The README, every page under docs/ (but the maintainers') and every example, as paths."""
    found = [os.path.join(_ROOT, "README.md")]
    found += sorted(
        path
        for path in glob.glob(os.path.join(_ROOT, "docs", "**", "*.md"), recursive=True)
        if os.path.relpath(path, os.path.join(_ROOT, "docs")) not in _MAINTAINER_PAGES
    )
    found += sorted(glob.glob(os.path.join(_ROOT, "examples", "*.py")))
    return found


def mentioned() -> Tuple[Dict[Tuple[str, str], Set[str]], Dict[str, Set[str]]]:
    """
    What the docs use of txnsq: the ``(module, name)`` pairs of their
    ``from txnsq... import`` statements, and the dotted names they spell
    out, each with the files that have it.
    """
    imports: Dict[Tuple[str, str], Set[str]] = {}
    dotted: Dict[str, Set[str]] = {}
    for path in user_docs():
        with open(path, encoding="utf-8") as doc:
            text = doc.read()
        where = os.path.relpath(path, _ROOT)
        for statement in _FROM_IMPORT.finditer(text):
            for name in re.findall(r"\w+", statement.group(2)):
                imports.setdefault((statement.group(1), name), set()).add(where)
        for name in _DOTTED.findall(text):
            dotted.setdefault(name, set()).add(where)
    return imports, dotted


def exists(dotted: str) -> bool:
    """
    Whether a dotted name is a module (or a compiled speed-up, whose C
    source is enough: it is built only on CPython), or a name in one.
    """
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        name = ".".join(parts[:cut])
        try:
            spec = importlib.util.find_spec(name)
        except ImportError:  # a name inside a module, not a submodule
            spec = None
        if spec is None:
            if cut == len(parts) and os.path.exists(os.path.join(_ROOT, *parts) + ".c"):
                return True
            continue
        found: Any = importlib.import_module(name) if cut < len(parts) else None
        for part in parts[cut:]:
            if not hasattr(found, part):
                return False
            found = getattr(found, part)
        return True
    return False


_test_texts: List[str] = []


def used_by_a_test(dotted: str) -> bool:
    """
    Whether some test module (of any suite: tests, tests_spark,
    tests_browser) imports a module, or names a module's name together
    with its module.
    """
    if not _test_texts:
        for suite in ("tests", "tests_spark", "tests_browser"):
            for root, _, files in os.walk(os.path.join(_ROOT, suite)):
                for filename in files:
                    path = os.path.join(root, filename)
                    if filename.endswith(".py") and os.path.abspath(path) != os.path.abspath(__file__):
                        with open(path, encoding="utf-8") as source:
                            _test_texts.append(source.read())
    if _is_module(dotted):
        return any(re.search(r"\b%s\b" % (re.escape(dotted),), text) for text in _test_texts)
    owner, _, member = dotted.rpartition(".")
    words = [r"\b%s\b" % (re.escape(w),) for w in (owner.rsplit(".", 1)[-1], member)]
    return any(all(re.search(w, text) for w in words) for text in _test_texts)


def _is_module(dotted: str) -> bool:
    """Whether a dotted name is a module (rather than a name in one)."""
    try:
        return importlib.util.find_spec(dotted) is not None
    except ImportError:
        return False


class DocAPITests(SynchronousTestCase):
    """What the docs import or name of txnsq is real, public and tested."""

    def test_imports_public(self) -> None:
        """Each name a page imports from txnsq exists, in the __all__ of a public module."""
        imports, _ = mentioned()
        wrong = []
        for (module, name), where in sorted(imports.items()):
            if not (exists(module + "." + name) and is_public(module + "." + name)):
                wrong.append("%s: from %s import %s" % (", ".join(sorted(where)), module, name))
        self.assertEqual(wrong, [])

    def test_imports_found(self) -> None:
        """The import statements are read, the parenthesised ones too (so that the check can fail)."""
        imports, dotted = mentioned()
        self.assertIn(("txnsq.client", "Consumer"), imports)
        self.assertIn(("txnsq.protocol.metaq_record", "validate_records"), imports)
        self.assertIn("txnsq.client.metaq.records_since", dotted)
        self.assertFalse(is_public("txnsq.nsqd.tcp"))
        self.assertFalse(exists("txnsq.client.NoSuchThing"))

    def test_dotted_names_public(self) -> None:
        """Each ``txnsq.x.Y`` a page spells out exists and is public, or is a listed private mention."""
        _, dotted = mentioned()
        wrong = []
        for name, where in sorted(dotted.items()):
            if name in PRIVATE_MENTIONS:
                continue
            if not exists(name):
                wrong.append("%s: %s does not exist" % (", ".join(sorted(where)), name))
            elif not is_public(name):
                wrong.append("%s: %s is private" % (", ".join(sorted(where)), name))
        self.assertEqual(wrong, [])

    def test_private_mentions_current(self) -> None:
        """Each listed private mention is still on a page, still exists and is still private."""
        _, dotted = mentioned()
        stale = [n for n in sorted(PRIVATE_MENTIONS) if n not in dotted or not exists(n) or is_public(n)]
        self.assertEqual(stale, [])

    def test_public_names_tested(self) -> None:
        """Each public name the docs import or spell out is used by a test."""
        imports, dotted = mentioned()
        names = {module + "." + name for module, name in imports} | set(dotted)
        untested = [n for n in sorted(names - set(PRIVATE_MENTIONS)) if not used_by_a_test(n)]
        self.assertEqual(untested, [])

    def test_api_links(self) -> None:
        """Each link into the API reference is relative to build/apidocs and names an object that exists."""
        wrong = []
        count = 0
        for path in user_docs():
            with open(path, encoding="utf-8") as doc:
                text = doc.read()
            for target, page, anchor in _API_LINK.findall(text):
                count += 1
                where = os.path.normpath(os.path.join(os.path.dirname(path), target))
                name = page + ("." + anchor if anchor else "")
                if where != os.path.join(_ROOT, "build", "apidocs", page + ".html"):
                    wrong.append("%s: %s is not under build/apidocs" % (os.path.relpath(path, _ROOT), target))
                elif page != "index" and not exists(name):
                    wrong.append("%s: %s does not exist" % (os.path.relpath(path, _ROOT), name))
        self.assertEqual(wrong, [])
        self.assertGreater(count, 0)
