# -*- test-case-name: tests.test_cluster_bridge -*-
"""
NSQ topics as NATS subjects, over a :class:`RouteNode <txnsq.cluster.node.RouteNode>`.

- A NATS message for ``<prefix>X`` (the node wants ``<prefix>>``) is
  published to NSQ topic ``X``, created as a producer's publish creates
  it; headers are dropped from the body and reply subjects ignored.  A
  name that is no valid NSQ topic (or that ``--nats-topics`` leaves out)
  is counted and dropped.  When the topic cannot take it (a full memory
  queue) the route stops being read until it can: nothing is dropped.
- A message published to NSQ topic ``X`` goes to the NATS servers with
  interest in ``<prefix>X`` (:meth:`RouteNode.publish`: each server once,
  each queue group once) -- unless it came from NATS: those are never sent
  back.
"""

from __future__ import annotations

import re
from typing import Any, Callable, List, Optional, Set

from twisted.logger import Logger

from txnsq.cluster.node import RouteNode
from txnsq.cluster.route import RouteProtocol
from txnsq.nsqd.topic import PublishError, Topic
from txnsq.protocol.names import is_valid_topic_name
from txnsq.protocol.nats_route import RouteMessages

__all__ = ["NatsBridge"]


class NatsBridge:
    """
    The bridge between ``broker``'s topics and ``node``'s subjects.

    :param prefix: subject prefix (``--nats-subject-prefix``).
    :param account: the NATS account (``--nats-account``).
    :param topics: regular expression of bridged topic names, or empty.

    :ivar from_nats, to_nats: messages bridged each way.
    :ivar invalid: NATS messages dropped: no valid (or bridged) topic name.
    """

    _log = Logger()

    def __init__(
        self, broker: Any, node: RouteNode, prefix: str = "nsq.", account: str = "$G", topics: str = ""
    ) -> None:
        self.broker = broker
        self.node = node
        self.prefix = prefix
        self.account = account
        self._pattern = re.compile(topics) if topics else None
        self._bridged: dict = {}
        self._inbound = False
        self._invalid_logged: Set[str] = set()
        self.from_nats = 0
        self.to_nats = 0
        self.invalid = 0
        self._subscription: Optional[Any] = None
        #: ``exclude(topic_name)``: topics never bridged (mirrored ones).
        self.exclude: Optional[Callable[[str], bool]] = None

    def start(self) -> None:
        """Want ``<prefix>>`` and watch NSQ publishes."""
        if self._subscription is None:
            self._subscription = self.node.subscribe(
                self.account, self.prefix + ">", self._from_nats
            )
            self.broker.publish_taps.append(self._from_nsq)

    def stop(self) -> None:
        """Undo :meth:`start`."""
        if self._subscription is not None:
            self.node.unsubscribe(self._subscription)
            self._subscription = None
            if self._from_nsq in self.broker.publish_taps:
                self.broker.publish_taps.remove(self._from_nsq)

    def bridged(self, topic_name: str) -> bool:
        """
        ``topic_name`` is bridged (``--nats-topics``).  A mirrored topic
        (:attr:`exclude`) is not: its txnsq peers get it as a mirror.
        """
        exclude = self.exclude
        if exclude is not None and exclude(topic_name):
            return False
        found = self._bridged.get(topic_name)
        if found is None:
            pattern = self._pattern
            found = pattern is None or pattern.search(topic_name) is not None
            if len(self._bridged) > 65536:
                self._bridged.clear()
            self._bridged[topic_name] = found
        return found

    def _from_nats(self, route: RouteProtocol, batch: RouteMessages) -> int:
        broker = self.broker
        payloads = batch.payloads
        count = len(payloads)
        name = batch.subject[len(self.prefix) :]
        topic = broker.topics.get(name)
        if topic is None:
            if not is_valid_topic_name(name) or not self.bridged(name):
                return self._drop(name, count)
            if broker.exiting:
                return count
            topic = broker.get_topic(name)
        elif not self.bridged(name):
            return self._drop(name, count)
        taken = 0
        self._inbound = True
        try:
            if count == 1:
                topic.publish(payloads[0])
                taken = 1
            else:
                try:
                    topic.publish_many(payloads)
                    taken = count
                except PublishError:
                    # Not room for all: as many as there is room for.
                    for payload in payloads:
                        topic.publish(payload)
                        taken += 1
        except PublishError:
            if broker.exiting or topic.exiting:
                taken = count
        finally:
            self._inbound = False
        self.from_nats += taken
        return taken

    def _drop(self, name: str, count: int) -> int:
        self.invalid += count
        if name not in self._invalid_logged and len(self._invalid_logged) < 1000:
            self._invalid_logged.add(name)
            self._log.warn(
                "NATS bridge: dropping messages for {subject!r}: not a bridged NSQ topic name",
                subject=self.prefix + name,
            )
        return count

    def _from_nsq(self, topic: Topic, bodies: List[bytes]) -> None:
        if self._inbound:
            return
        name = topic.name
        if not self.bridged(name):
            return
        subject = self.prefix + name
        if len(bodies) == 1:
            if self.node.publish(self.account, subject, bodies[0]):
                self.to_nats += 1
        else:
            self.to_nats += self.node.publish_many(self.account, subject, bodies)

    def stats(self) -> dict:
        """The bridge's counts in /stats."""
        return {
            "subject_prefix": self.prefix,
            "account": self.account,
            "messages_from_nats": self.from_nats,
            "messages_to_nats": self.to_nats,
            "messages_invalid": self.invalid,
        }
