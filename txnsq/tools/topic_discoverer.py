# -*- test-case-name: tests.test_tools_nsq_to_file -*-
"""
Which topics ``nsq_to_file`` archives, as Go ``nsq_to_file``'s
``TopicDiscoverer`` decides: the ``--topic`` ones, or -- when none is
given -- every topic the lookupds list, asked again every
``--topic-refresh`` (the first time one interval after start, as in Go).
Either way only topics matching ``--topic-pattern`` (a Go regular
expression, searched unanchored) are taken.  Each topic gets one archiver,
made by the ``make_archiver`` callable and never replaced.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Pattern, Sequence

from twisted.internet.defer import Deferred, DeferredList
from twisted.internet.interfaces import IReactorTime
from twisted.internet.task import LoopingCall
from twisted.logger import Logger

from txnsq.protocol.go_regexp import GoRegexpError, compile_go_regexp

__all__ = ["TopicDiscoverer"]


class TopicDiscoverer:
    """
    Starts an archiver per topic.

    :param topics: the ``--topic`` values.
    :param pattern: ``--topic-pattern`` (empty: every topic).
    :param refresh: ``--topic-refresh`` in seconds.
    :param fetch_topics: every topic the lookupds know (a Deferred list),
        :meth:`txnsq.tools.cluster_http.ClusterHTTP.lookupd_topics` bound to
        the lookupd addresses.
    :param make_archiver: makes and starts the archiver of a topic; it has
        ``reopen()`` and ``stop() -> Deferred``.  It may raise
        ``ValueError``, logged as Go logs it.
    :param clock: times the refreshes.
    """

    log = Logger()

    def __init__(
        self,
        topics: Sequence[str],
        pattern: str,
        refresh: float,
        fetch_topics: Callable[[], "Deferred[List[str]]"],
        make_archiver: Callable[[str], Any],
        clock: IReactorTime,
    ) -> None:
        self.topics = list(topics)
        self.pattern = pattern
        self.refresh = refresh
        self._fetch_topics = fetch_topics
        self._make_archiver = make_archiver
        self.archivers: Dict[str, Any] = {}
        self._regexp: Optional[Pattern[str]] = None
        self._pattern_error: Optional[str] = None
        if pattern:
            try:
                self._regexp = compile_go_regexp(pattern)
            except GoRegexpError as error:
                self._pattern_error = str(error)
        self._poller = LoopingCall(self._poll)
        self._poller.clock = clock
        self._stopped = False

    def is_topic_allowed(self, topic: str) -> bool:
        """Whether ``topic`` matches ``--topic-pattern`` (an invalid pattern matches nothing, as in Go)."""
        if not self.pattern:
            return True
        if self._regexp is None:
            return False
        return self._regexp.search(topic) is not None

    def start(self) -> None:
        """Take the ``--topic`` topics; without any, poll the lookupds every refresh."""
        if self._pattern_error is not None:
            self.log.error(
                "invalid --topic-pattern {pattern}: {error}",
                pattern=self.pattern,
                error=self._pattern_error,
            )
        if not self.topics:
            self._poller.start(self.refresh, now=False)
        self.update_topics(self.topics)

    def _poll(self) -> "Deferred[None]":
        def failed(failure: Any) -> None:
            self.log.error(
                "could not retrieve topic list: {error}", error=failure.getErrorMessage()
            )

        return self._fetch_topics().addCallbacks(self.update_topics, failed)

    def update_topics(self, topics: Sequence[str]) -> None:
        """Start an archiver for each new allowed topic."""
        if self._stopped:
            return
        for topic in topics:
            if topic in self.archivers:
                continue
            if not self.is_topic_allowed(topic):
                self.log.warn(
                    "skipping topic {topic} (doesn't match pattern {pattern})",
                    topic=topic,
                    pattern=self.pattern,
                )
                continue
            try:
                archiver = self._make_archiver(topic)
            except ValueError as error:
                self.log.error(
                    "couldn't create logger for new topic {topic}: {error}",
                    topic=topic,
                    error=error,
                )
                continue
            self.archivers[topic] = archiver

    def reopen(self) -> None:
        """SIGHUP: every archiver closes its file; the next message opens a new one."""
        for archiver in self.archivers.values():
            archiver.reopen()

    def stop(self) -> "Deferred[Any]":
        """Stop polling and stop every archiver; fires when all are stopped."""
        self._stopped = True
        if self._poller.running:
            self._poller.stop()
        return DeferredList([archiver.stop() for archiver in self.archivers.values()])
