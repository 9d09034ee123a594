"""
The CPU a mirrored topic costs per message, in-process (no sockets, no
other process competing): MPUBs of ``--batch`` messages to a topic with
one channel, not mirrored and mirrored (the records gathered and encoded
as the sender does once per reactor turn), and what the standby spends
decoding those payloads and keeping the copy (as a node does: the
records logged, not applied until the copy is read; see
``bench/micro/mirror_standby.py`` for the route's side and the copy read).

Median of ``--rounds`` runs of ``--count`` messages, in microseconds per
message.

    python bench/micro/mirror_hot.py [--count 200000] [--batch 100] [--size 100] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench.micro.measure import broker  # noqa: E402
from txnsq.mirror.recorder import MirrorRecorder  # noqa: E402
from txnsq.mirror.standby import StandbyCopy  # noqa: E402
from txnsq.protocol.mirror import OP_CHANNEL_CREATE, RecordBuilder, decode_records  # noqa: E402


def run(
    count: int, batch: int, size: int, mirrored: bool, payloads: List[bytes],
    keep_payloads: bool = False,
) -> float:
    """
    CPU per message of MPUBs (mirrored: records gathered and encoded); the
    payloads kept in ``payloads`` when ``keep_payloads`` (not in a timed
    run: the memory they take, never freed, costs page faults that a node
    sending and dropping them does not pay).
    """
    found, _, _ = broker("memory", mem_queue_size=count * 4, node_id=1)
    topic = found.get_topic("t")
    topic.get_channel("c")
    recorder = MirrorRecorder(lambda: None, lambda: None)
    if mirrored:
        recorder.live = True
        topic.mirror = recorder
    bodies = [b"x" * size] * batch
    rounds = count // batch
    start = time.perf_counter()
    keep = payloads.append
    for seq in range(1, rounds + 1):
        topic.publish_many(bodies)
        if mirrored:
            payload = recorder.builder.encode(seq)
            if keep_payloads:
                keep(payload)
    return (time.perf_counter() - start) / (rounds * batch) * 1e6


def apply(payloads: List[bytes], count: int) -> float:
    copy = StandbyCopy("a", "e")
    create = RecordBuilder()
    create.add(OP_CHANNEL_CREATE, "t", "c", [])
    copy.apply(0, decode_records(create.encode(0))[1])
    start = time.perf_counter()
    for payload in payloads:
        seq, records = decode_records(payload, packed=True)
        copy.apply(seq, records)
    return (time.perf_counter() - start) / count * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=200000)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    plain: List[float] = []
    mirrored: List[float] = []
    standby: List[float] = []
    for _ in range(options.rounds):
        plain.append(run(options.count, options.batch, options.size, False, []))
        payloads: List[bytes] = []
        mirrored.append(run(options.count, options.batch, options.size, True, payloads))
        run(options.count, options.batch, options.size, True, payloads, keep_payloads=True)
        standby.append(apply(payloads, options.count // options.batch * options.batch))
    print("%s, MPUB x%d of %d-byte messages, us per message (median of %d):"
          % (sys.implementation.name, options.batch, options.size, options.rounds))
    print("  primary, not mirrored: %.2f" % statistics.median(plain))
    print("  primary, mirrored:     %.2f" % statistics.median(mirrored))
    print("  standby, applying:     %.2f" % statistics.median(standby))


if __name__ == "__main__":
    main()
