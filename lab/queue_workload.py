"""
The queue workload: numbered PUBs (or MPUBs) from producers on a client
host, consumers on several channels that find the nsqds through
nsqlookupd, and the drain and check after the faults.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Dict, List, Optional

from lab.checkers import QueueResult, check_queue
from lab.errors import LabError
from lab.history import read_history
from lab.net import Host
from lab.procs import LabProcess
from lab.world import NsqdNode, World

__all__ = ["QueueWorkload"]


class QueueWorkload:
    """
    Producers and consumers of one topic.

    :param world: the round's world (nsqds started, lookupds up).
    :param history_dir: where the workers write.
    :param client: the client host.
    :param nodes: the nsqds producers publish to, in order.
    :param topic: the topic.
    :param channels: the consumers' channels (each must get everything).
    """

    def __init__(
        self,
        world: World,
        history_dir: str,
        client: Host,
        nodes: List[NsqdNode],
        topic: str,
        channels: List[str],
    ) -> None:
        self.world = world
        self.history_dir = history_dir
        self.client = client
        self.nodes = nodes
        self.topic = topic
        self.channels = channels
        self.producers: List[LabProcess] = []
        self.consumers: List[LabProcess] = []
        self.stop_file = os.path.join(history_dir, "stop-consumers")

    def create(self) -> None:
        """The topic and its channels on every nsqd, before any publish (so every channel gets all)."""
        for node in self.nodes:
            self.create_on(node)

    def create_on(self, node: NsqdNode) -> None:
        """The topic and its channels on ``node`` (also a replaced, empty one)."""
        for path in ["/topic/create?topic=%s" % self.topic] + [
            "/channel/create?topic=%s&channel=%s" % (self.topic, c) for c in self.channels
        ]:
            status, text = self.world.http(self.client, "POST", "http://%s%s" % (node.http, path))
            if status != 200:
                raise LabError("%s on %s: %s %s" % (path, node.name, status, text[:200]))

    def start_consumers(self, channels: Optional[List[str]] = None, extra: Optional[List[str]] = None) -> None:
        """
        One consumer process per channel (of ``channels``, default all),
        through both nsqlookupds.  A channel whose consumer starts late
        holds a backlog on the nsqds through the faults.

        :param extra: more arguments for :mod:`lab.workers.consumer`.
        """
        for channel in channels if channels is not None else self.channels:
            index = self.channels.index(channel)
            name = "consumer%d" % (index + 1)
            self.consumers.append(
                self.world.start_worker(self.client, name, "consumer", [
                    "--lookupd", ",".join(self.world.lookupd_http),
                    "--topic", self.topic,
                    "--channel", channel,
                    "--out", os.path.join(self.history_dir, name + ".jsonl"),
                    "--process", name,
                    "--stop-file", self.stop_file,
                    *(extra or []),
                ])
            )

    def start_producer(
        self,
        name: str,
        duration: float,
        rate: float,
        mode: str = "failover",
        batch: int = 1,
        nodes: Optional[List[NsqdNode]] = None,
        timeout: float = 4.0,
        extra: Optional[List[str]] = None,
    ) -> LabProcess:
        """A numbering producer (see :mod:`lab.workers.producer`; ``extra``: more of its arguments)."""
        targets = nodes if nodes is not None else self.nodes
        process = self.world.start_worker(self.client, name, "producer", [
            "--nodes", ",".join(n.tcp for n in targets),
            "--topic", self.topic,
            "--rate", str(rate),
            "--batch", str(batch),
            "--duration", str(duration),
            "--mode", mode,
            "--timeout", str(timeout),
            "--out", os.path.join(self.history_dir, name + ".jsonl"),
            "--process", name,
            *(extra or []),
        ])
        self.producers.append(process)
        return process

    def wait_producers(self, timeout: float) -> None:
        """Wait for every producer to end (they stop by themselves)."""
        deadline = time.monotonic() + timeout
        for process in self.producers:
            left = max(1.0, deadline - time.monotonic())
            if process.wait(left) is None:
                process.kill()
                raise LabError("producer %s did not end: %s" % (process.name, process.log()[-400:]))
            if process.popen.returncode != 0:
                raise LabError("producer %s failed: %s" % (process.name, process.log()[-600:].replace("\n", " | ")))

    def drain(self, quiet: float, limit: float) -> float:
        """
        Wait until every acknowledged message was delivered on every
        channel, or nothing new arrived for ``quiet`` seconds, or
        ``limit`` seconds passed.  Returns when the last first delivery
        arrived (a ``time.time()``).
        """
        start = time.monotonic()
        last_count = -1
        last_change = time.monotonic()
        while True:
            time.sleep(0.5)
            result = self.check()
            delivered = sum(c["delivered"] for c in result.channels.values())
            if result.lost == 0:
                break
            if delivered != last_count:
                last_count = delivered
                last_change = time.monotonic()
            if time.monotonic() - last_change > quiet or time.monotonic() - start > limit:
                break
        # What arrives after: duplicates, unexpected messages.
        time.sleep(1.0)
        return self._last_first_delivery()

    def _last_first_delivery(self) -> float:
        seen = set()
        last = 0.0
        for event in read_history(self.history_dir):
            if event.get("type") == "recv":
                key = (event.get("ch"), event.get("src"), event.get("v"))
                if key not in seen:
                    seen.add(key)
                    last = max(last, event["t"])
        return last

    def stop_consumers(self) -> None:
        """Stop the consumers (they close cleanly and flush their histories)."""
        with open(self.stop_file, "w"):
            pass
        for process in self.consumers:
            if process.wait(15) is None:
                process.kill()

    def check(self) -> QueueResult:
        """The queue checker over the history so far."""
        return check_queue(read_history(self.history_dir), self.channels)

    def events(self) -> List[Dict[str, Any]]:
        """The round's history."""
        return read_history(self.history_dir)


def failover_seconds(events: List[Dict[str, Any]], fault_at: float) -> Optional[float]:
    """
    Time from the fault's start to the first acknowledgement of a publish
    invoked after it (``None`` if there was none): how long producers
    could not publish.
    """
    invoked_after: Dict[tuple, float] = {}
    for event in events:
        if event.get("f") != "pub":
            continue
        key = (event["p"], json.dumps(event["v"]))
        if event["type"] == "invoke" and event["t"] >= fault_at:
            invoked_after[key] = event["t"]
        elif event["type"] == "ok" and key in invoked_after:
            return round(event["t"] - fault_at, 2)
    return None
