"""
Slow-network scenarios: the mirrored queue workload with the nsqds'
cluster routes slowed or cut by TCP proxies (:mod:`lab.proxy`; these
kernels have no netem), or the primary's link narrowed by a token
bucket (:mod:`lab.bandwidth`).  A sync mirror waits for its standbys,
so the producers slow down; nothing acknowledged may be lost.  Besides
the queue checker's figures, each round reports the publish rate and
the publish latency (invoke to OK) before, during and after the fault.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from lab.bandwidth import Bandwidth
from lab.history import read_history
from lab.proxy import SlowLink, route_proxies, start_route_proxies, via_route_proxy
from lab.scenarios import register
from lab.scenarios.queue import MirroredQueue
from lab.world import NsqdNode

__all__ = ["SlowQueue", "publish_windows"]


def _route_proxies(context: Any, nodes: List[NsqdNode]) -> None:
    start_route_proxies(context.world, [n.host for n in nodes], context.rng.randrange(1 << 30))


def publish_windows(events: List[Dict[str, Any]]) -> Dict[str, Dict[str, Optional[float]]]:
    """
    Acknowledged publishes per second and their median and 99th
    percentile latency (invoke to OK, ms), before the first nemesis
    started, while any ran, and after the last stopped.
    """
    starts = [e["t"] for e in events if e.get("p") == "nemesis" and e.get("type") == "start"]
    stops = [e["t"] for e in events if e.get("p") == "nemesis" and e.get("type") == "stop"]
    invoked: Dict[tuple, float] = {}
    acks: List[tuple] = []
    for event in events:
        if event.get("f") != "pub":
            continue
        key = (event.get("p"), str(event.get("v")))
        if event.get("type") == "invoke":
            invoked[key] = event["t"]
        elif event.get("type") == "ok" and key in invoked:
            value = event.get("v")
            acks.append((event["t"], event["t"] - invoked[key], len(value) if isinstance(value, list) else 1))
    if not acks:
        return {}
    first, last = min(invoked.values()), max(t for t, _, _ in acks)
    fault_at = min(starts) if starts else last
    healed_at = max(stops) if stops else last
    windows = {"before": (first, fault_at), "during": (fault_at, healed_at), "after": (healed_at, last)}
    found: Dict[str, Dict[str, Optional[float]]] = {}
    for name, (low, high) in windows.items():
        inside = [(latency, count) for t, latency, count in acks if low <= t < high or (name == "after" and t == high)]
        latencies = sorted(latency for latency, _ in inside)
        span = high - low
        found[name] = {
            "per_s": round(sum(count for _, count in inside) / span, 1) if span > 0 else None,
            "p50_ms": round(1000 * latencies[len(latencies) // 2], 1) if latencies else None,
            "p99_ms": round(1000 * latencies[int(len(latencies) * 0.99)], 1) if latencies else None,
        }
    return found


class SlowQueue(MirroredQueue):
    """
    :class:`MirroredQueue` whose figures also hold the publish rate and
    latency by window, and the connections the proxies cut; with
    ``require_cuts`` a round in which no route connection was cut fails
    (it would have tested nothing).
    """

    def __init__(self, *args: Any, require_cuts: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.require_cuts = require_cuts

    def run_round(self, context: Any, result: Any) -> None:
        super().run_round(context, result)
        events = read_history(context.history.folder)
        result.figures["publish"] = publish_windows(events)
        cuts = sum(e.get("cuts", 0) for e in events if e.get("f") == "slow-link" and e.get("type") == "stop")
        result.figures["cuts"] = cuts
        if self.require_cuts and not cuts:
            result.problems.append("no route connection was cut")
            result.passed = False


def _slow_routes(context: Any, nodes: List[NsqdNode]) -> List[tuple]:
    proxies = route_proxies(context.world)
    return [(0.0, SlowLink(context.world, context.history, proxies, "every route 50+-30 ms each way",
                           delay_ms=50.0, jitter_ms=30.0))]


def _route_cuts(context: Any, nodes: List[NsqdNode]) -> List[tuple]:
    proxies = route_proxies(context.world)
    return [(0.0, SlowLink(context.world, context.history, proxies, "every route cut after ~0.3 s (exponential)",
                           cut_every_s=0.3))]


def _narrow_primary(context: Any, nodes: List[NsqdNode]) -> List[tuple]:
    return [(0.0, Bandwidth(context.world, context.history, nodes[0].host, "256kbit"))]


register(SlowQueue(
    "queue-slow-route", "every cluster route through a proxy adding 50+-30 ms each way, for 6 s",
    ["slownet:delay"], _slow_routes, prepare=_route_proxies, route_via=via_route_proxy))
register(SlowQueue(
    "queue-route-drops", "every cluster route connection cut (RST) after ~0.3 s on average, for 6 s",
    ["slownet:cuts"], _route_cuts, prepare=_route_proxies, route_via=via_route_proxy, require_cuts=True))
register(SlowQueue(
    "queue-bandwidth", "the primary n1's link limited to 256 kbit/s each way (tbf), for 6 s",
    ["slownet:bandwidth"], _narrow_primary))
