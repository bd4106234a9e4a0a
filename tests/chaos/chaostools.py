"""What the chaos scenarios share: the brokers and gateways, and the table of results."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from support.streams import (
    Gateways,
    Tally,
    same_ends,
    sp,
    tally,
    true_ends,
    uuid_of,
)

from streamrepl.local import EphemeralClusters

#: CHAOS_SIZE=full: the sizes the issues ask for, outside the default run (not a STREAMREPL_ variable: it is
#: the test suite's, not streamrepl's)
FULL = os.environ.get("CHAOS_SIZE", "") == "full"

#: records/s per partition of a throttled link: low, so that `-throttle true` shows under the scenarios' load
THROTTLE_RATE = 150
GATEWAYS = ["ny0", "ny1", "ny2"]

ROWS: list[dict] = []


@dataclass
class Chaos:
    ec: EphemeralClusters
    reg: Path
    logdir: Path
    gws: Gateways
    rows: list[dict] = field(default_factory=lambda: ROWS)

    def bs(self, cluster: str) -> str:
        return self.ec.brokers[cluster].bootstrap

    def ensure_gateways(self) -> None:
        """All three newyork gateways running (a scenario before may have killed some)."""
        for name in GATEWAYS:
            p = self.gws.procs.get(name)
            if p is None or p.poll() is not None:
                self.gws.procs.pop(name, None)
                self.gws.start(name)

    def record(self, scenario: str, faults: str, t: Tally, seconds: float) -> None:
        self.rows.append(
            {
                "scenario": scenario,
                "records": t.records,
                "faults": faults,
                "lost": t.lost,
                "doubled": t.doubled,
                "misplaced": t.misplaced + t.strays,
                "seconds": round(seconds),
            }
        )


def table(rows: list[dict]) -> str:
    out = [
        "| scenario | records | faults injected | lost | doubled | misplaced offsets | time (s) |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for r in rows:
        out.append(
            f"| {r['scenario']} | {r['records']:,} | {r['faults']} | {r['lost']} | {r['doubled']} |"
            f" {r['misplaced']} | {r['seconds']} |"
        )
    return "\n".join(out)


def wait_writing(c: Chaos, dst: str, topics: dict[str, int], timeout: float = 60) -> None:
    """Until the replica grows: some gateway is writing right now."""
    deadline = time.monotonic() + timeout
    before = applied(c, dst, topics)
    while time.monotonic() < deadline:
        time.sleep(0.3)
        now = applied(c, dst, topics)
        if now > before:
            return
        before = now
    raise AssertionError(f"nothing written to {dst} for {timeout}s")


def settle(c: Chaos, src: str, dst: str, topics: dict[str, int], timeout: float = 120) -> Tally:
    """Wait until the replica ends where the source does (or time out), then compare record by record."""
    s, d = sp(src), sp(dst)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not same_ends(c.bs(s.cluster), s, c.bs(d.cluster), d, topics):
        time.sleep(1)
    return tally(c.bs(s.cluster), s, uuid_of(c.reg, src), c.bs(d.cluster), d, topics)


def applied(c: Chaos, dst: str, topics: dict[str, int]) -> int:
    try:
        return sum(true_ends(c.bs(sp(dst).cluster), sp(dst), topics).values())
    except Exception:  # noqa: BLE001 - not created yet, or a frozen broker
        return 0
