"""Replay or sweep schedules of the simulated cluster (docs/simulation.md).

PYTHONPATH=. python -m tests.sim.run --seed 17          one schedule, its events and violations
PYTHONPATH=. python -m tests.sim.run --seeds 0-999      a sweep: the failing seeds, and seeds per second
"""

from __future__ import annotations

import argparse
import sys
import time

from .world import PROFILES, World, replay_command


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.sim.run")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--seeds", help="a range A-B (B excluded)")
    ap.add_argument("--profile", default="default", choices=sorted(PROFILES))
    args = ap.parse_args(argv)
    if args.seed is not None:
        out = World(args.seed, args.profile).run()
        print(f"seed {out.seed}: {out.config}")
        for e in out.events:
            print("  ", e)
        for v in out.violations:
            print("VIOLATION:", v)
        print(
            f"{out.steps} gateway steps, {out.held_twice} ticks ending with a partition held twice; {'ok' if out.ok else 'FAILED'}"
        )
        return 0 if out.ok else 1
    a, b = (int(x) for x in (args.seeds or "0-100").split("-"))
    started, failed = time.monotonic(), []
    for seed in range(a, b):
        out = World(seed, args.profile).run()
        if not out.ok:
            failed.append(seed)
            print(
                f"seed {seed} FAILED: {out.violations[0]}\n  replay: {replay_command(seed, args.profile)}", flush=True
            )
    took = time.monotonic() - started
    print(f"{b - a} seeds in {took:.1f} s ({(b - a) / took:.1f}/s), {len(failed)} failed: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
