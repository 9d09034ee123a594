#!/usr/bin/env python
"""
How nsqd's costs grow with the shape of the load: CPU per message and
memory per unit as channels per topic, topics, consumers, idle connections
and message size grow.

In-process, like ``hot_path.py``: the V2 adapter and the broker core on a
``task.Clock``, with transports that keep what is written to them; CPU is
``time.process_time`` of the measured step, memory the growth of this
process's resident set. Each point runs in a fresh child process (so that
one point's memory does not hide the next one's). The curves:

- **channels**: one topic with N channels (1 → 1,000), no consumers; MPUBs
  of 100 × 100 B; µs of CPU per message published (each is copied to every
  channel) and RSS per queued copy.
- **topics**: N topics (1 → 10,000) with one channel each; one PUB per
  message, round-robin over the topics; µs per message, and RSS per topic
  (topic and channel made, nothing queued).
- **consumers**: one channel with N consumer connections (1 → 1,000), RDY
  2500/N each (at least 1); the queue drained, every message FINed; µs per
  message delivered.
- **connections**: N connections (1 → 10,000) that send the magic and an
  IDENTIFY and stay idle; RSS per connection (the Python side only: no
  kernel socket buffers here; ``nsqd_perf.py --scenarios idle-connections``
  measures a real nsqd).
- **size**: message bodies of 10 B → 1 MB through a subscribed consumer
  (published, delivered, FINed); µs per message and MB/s.

Run by hand; not part of the test suite::

    python bench/micro/cost_curves.py --out cost-compiled.json
    TXNSQ_NO_EXTENSIONS=1 python bench/micro/cost_curves.py --out cost-pure.json
    python bench/micro/cost_curves.py --plot cost-compiled.json cost-pure.json --plot-dir docs/images

Plots need matplotlib (``pip install 'txnsq[bench]'``). Go nsqd's columns
are for a machine where Go nsqd runs: this script measures txnsq only.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from typing import Any, Dict, List, Tuple

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from twisted.internet.task import Clock  # noqa: E402

from bench.common.process import process_rss_bytes  # noqa: E402
from bench.common.report import markdown_table  # noqa: E402
from bench.micro.measure import broker, connect, fins_for, mpub  # noqa: E402
from txnsq.nsqd.broker import Broker  # noqa: E402
from txnsq.nsqd.tcp import NSQDFactory  # noqa: E402
from txnsq.speedups import hot_path, hot_path_token  # noqa: E402

#: The points of each curve.
CURVES: Dict[str, List[int]] = {
    "channels": [1, 10, 100, 1000],
    "topics": [1, 10, 100, 1000, 10000],
    "consumers": [1, 10, 100, 1000],
    "connections": [1, 100, 1000, 10000],
    "size": [10, 100, 1000, 10000, 100000, 1000000],
}

#: What each curve's y axes are.
UNITS = {
    "channels": ("µs CPU per message published", "RSS bytes per queued copy"),
    "topics": ("µs CPU per message published", "RSS bytes per topic"),
    "consumers": ("µs CPU per message delivered", None),
    "connections": (None, "RSS bytes per idle connection"),
    "size": ("µs CPU per message (in, out, FIN)", None),
}

_BODY = b"x" * 100
_IDENTIFY = b'IDENTIFY\n' + len(b'{"client_id":"idle","heartbeat_interval":-1}').to_bytes(4, "big") + b'{"client_id":"idle","heartbeat_interval":-1}'


def _broker(mem_queue_size: int) -> Tuple[Broker, NSQDFactory, Clock]:
    return broker("memory", mem_queue_size=mem_queue_size, max_rdy_count=2500)


def _rss() -> int:
    return process_rss_bytes(os.getpid()) or 0


def _drain(clock: Clock, consumers: List[Tuple[Any, Any]], expected: int) -> int:
    """Deliver and FIN until ``expected`` messages came back (or nothing moves)."""
    received = 0
    while received < expected:
        clock.advance(0)
        moved = 0
        for protocol, transport in consumers:
            fins, count = fins_for(transport.take())
            if count:
                moved += count
                protocol.dataReceived(fins)
        if not moved:
            break
        received += moved
    return received


def point(curve: str, x: int) -> Dict[str, Any]:
    """Measure one point of one curve in this process."""
    result: Dict[str, Any] = {"curve": curve, "x": x}
    if curve == "channels":
        count = max(1000, 200_000 // x // 100 * 100)
        broker, factory, clock = _broker(count + 1000)
        topic = broker.get_topic("t")
        for index in range(x):
            topic.get_channel("c%d" % (index,))
        publisher, _ = connect(factory, 1)
        command = mpub(b"t", [_BODY] * 100)
        before = _rss()
        start = time.process_time()
        for _ in range(count // 100):
            publisher.dataReceived(command)
        clock.advance(0)
        seconds = time.process_time() - start
        result.update(count=count, us=1e6 * seconds / count, rss_per_unit=(_rss() - before) / (count * x))
    elif curve == "topics":
        broker, factory, clock = _broker(10_000)
        before = _rss()
        names = [b"t%d" % (index,) for index in range(x)]
        for name in names:
            broker.get_topic(name.decode()).get_channel("c")
        per_topic = (_rss() - before) / x
        publisher, _ = connect(factory, 1)
        count = 20_000
        commands = [b"PUB " + names[index % x] + b"\n" + len(_BODY).to_bytes(4, "big") + _BODY for index in range(count)]
        start = time.process_time()
        for index in range(0, count, 100):
            publisher.dataReceived(b"".join(commands[index : index + 100]))
        clock.advance(0)
        seconds = time.process_time() - start
        result.update(count=count, us=1e6 * seconds / count, rss_per_unit=per_topic)
    elif curve == "consumers":
        count = 100_000
        broker, factory, clock = _broker(count + 1000)
        broker.get_topic("t").get_channel("c")
        publisher, _ = connect(factory, 1)
        command = mpub(b"t", [_BODY] * 100)
        for _ in range(count // 100):
            publisher.dataReceived(command)
        clock.advance(0)
        rdy = max(1, 2500 // x)
        consumers = [connect(factory, 10 + index) for index in range(x)]
        start = time.process_time()
        for protocol, _ in consumers:
            protocol.dataReceived(b"SUB t c\nRDY %d\n" % (rdy,))
        received = _drain(clock, consumers, count)
        seconds = time.process_time() - start
        result.update(count=received, us=1e6 * seconds / max(received, 1), rdy=rdy)
    elif curve == "connections":
        broker, factory, clock = _broker(10_000)
        before = _rss()
        held = []
        for index in range(x):
            protocol, transport = connect(factory, 10 + index)
            protocol.dataReceived(_IDENTIFY)
            transport.take()
            held.append((protocol, transport))
        clock.advance(0)
        result.update(count=x, rss_per_unit=(_rss() - before) / x)
    elif curve == "size":
        count = max(50, min(100_000, 100_000_000 // x))
        batch = max(1, min(100, 1_000_000 // x))
        count -= count % batch
        broker, factory, clock = _broker(10_000)
        consumer = connect(factory, 2)
        consumer[0].dataReceived(b"SUB t c\nRDY 2500\n")
        publisher, _ = connect(factory, 1)
        command = mpub(b"t", [b"x" * x] * batch)
        start = time.process_time()
        received = 0
        for _ in range(count // batch):
            publisher.dataReceived(command)
            received += _drain(clock, [consumer], batch)
        seconds = time.process_time() - start
        result.update(count=received, us=1e6 * seconds / max(received, 1), mb_per_s=received * x / seconds / 1e6)
    else:
        raise ValueError("no curve %r" % (curve,))
    return result


def run(curves: List[str]) -> Dict[str, Any]:
    """Every point of ``curves``, each in a child process."""
    points = []
    for curve in curves:
        for x in CURVES[curve]:
            output = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--point", "%s:%d" % (curve, x)],
                check=True,
                stdout=subprocess.PIPE,
            ).stdout
            measured = json.loads(output)
            print("%-12s %9d  %s" % (curve, x, json.dumps({k: v for k, v in measured.items() if k not in ("curve", "x")})),
                  file=sys.stderr)
            points.append(measured)
    return {
        "label": "%s %s, %s" % (platform.python_implementation(), platform.python_version(), hot_path_token()),
        "hot_path": hot_path(),
        "load_average": os.getloadavg(),
        "points": points,
    }


def _medians(files: List[str]) -> List[Dict[str, Any]]:
    """The results files, those with the same label merged: the median of each figure."""
    by_label: Dict[str, List[Dict[str, Any]]] = {}
    for name in files:
        with open(name, encoding="utf-8") as handle:
            data = json.load(handle)
        by_label.setdefault(data["label"], []).append(data)
    merged = []
    for label, runs in by_label.items():
        points: Dict[Tuple[str, int], Dict[str, List[float]]] = {}
        for run_data in runs:
            for measured in run_data["points"]:
                figures = points.setdefault((measured["curve"], measured["x"]), {})
                for key, value in measured.items():
                    if key not in ("curve", "x"):
                        figures.setdefault(key, []).append(value)
        merged.append({
            "label": "%s (median of %d)" % (label, len(runs)) if len(runs) > 1 else label,
            "points": [
                dict({"curve": curve, "x": x}, **{key: sorted(values)[len(values) // 2] for key, values in figures.items()})
                for (curve, x), figures in points.items()
            ],
        })
    return merged


def median_table(files: List[str]) -> str:
    """A Markdown table of the medians: a row per point, a column per label and figure."""
    runs = _medians(files)
    rows = [["curve", "x"] + [
        "%s %s" % (run_data["label"], key) for run_data in runs for key in ("us", "rss_per_unit")]]
    for curve, xs in CURVES.items():
        for x in xs:
            cells = []
            for run_data in runs:
                found = [p for p in run_data["points"] if p["curve"] == curve and p["x"] == x]
                for key in ("us", "rss_per_unit"):
                    cells.append("%.2f" % found[0][key] if found and key in found[0] else "–")
            rows.append([curve, "{:,}".format(x)] + cells)
    return markdown_table(rows)


def plot(files: List[str], directory: str) -> None:
    """One PNG per curve (two panels where it has CPU and memory), a line per file."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = _medians(files)
    os.makedirs(directory, exist_ok=True)
    for curve, (cpu, memory) in UNITS.items():
        panels = [(key, label) for key, label in (("us", cpu), ("rss_per_unit", memory)) if label]
        figure, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
        drawn = False
        for axis, (key, label) in zip(axes[0], panels):
            for run_data in runs:
                points = [p for p in run_data["points"] if p["curve"] == curve and key in p]
                if points:
                    axis.plot([p["x"] for p in points], [p[key] for p in points], marker="o", label=run_data["label"])
                    drawn = True
            axis.set_xscale("log")
            if curve in ("size", "channels") and key == "us":
                axis.set_yscale("log")
            axis.set_xlabel({"size": "message size (bytes)"}.get(curve, curve))
            axis.set_ylabel(label)
            axis.grid(True, which="both", alpha=0.3)
            axis.legend(fontsize="small")
        figure.suptitle("txnsq nsqd: %s (Go nsqd not measured here)" % (curve,))
        figure.tight_layout()
        if drawn:
            figure.savefig(os.path.join(directory, "cost-%s.png" % (curve,)), dpi=80)
        plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--curves", default=",".join(CURVES), help="comma-separated: " + ", ".join(CURVES))
    parser.add_argument("--out", default=None, help="write the results as JSON here")
    parser.add_argument("--point", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--plot", nargs="+", default=None, metavar="JSON", help="plot these results files")
    parser.add_argument("--plot-dir", default=".", help="where the PNGs go (default: here)")
    parser.add_argument("--table", nargs="+", default=None, metavar="JSON",
                        help="print a Markdown table of these results files (medians per label)")
    args = parser.parse_args()
    if args.point:
        curve, x = args.point.split(":")
        print(json.dumps(point(curve, int(x))))
        return
    if args.plot:
        plot(args.plot, args.plot_dir)
        return
    if args.table:
        print(median_table(args.table))
        return
    results = run([name for name in args.curves.split(",") if name])
    text = json.dumps(results, indent=1)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as handle:
            handle.write(text + "\n")
    else:
        print(text)


if __name__ == "__main__":
    main()
