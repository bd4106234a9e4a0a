"""What the DR journal tests share: a replicated pair of streams, a command run until a crash point, stream records read back."""

from __future__ import annotations

import uuid
from pathlib import Path

from streamrepl import registry, streams
from streamrepl.local import EphemeralClusters
from streamrepl.model import Stream
from streamrepl.oplock import CRASH_EXIT
from support.cli import Run, run_proc
from support.streams import (
    cli,
    new_stream,
    new_topics,
    produce,
    sp,
)

TOPICS = {"t": 2}


def record(reg: Path, path: str) -> Stream:
    return streams.load(registry.load(str(reg)), path)[1]


def crash_run(reg: Path, hook: str, *args: str) -> Run:
    """`streamrepl <args>` as its own process, ended by the crash hook `hook` (`promote:2`)."""
    run = run_proc(args, env={"STREAMREPL_CLUSTERS": str(reg), "STREAMREPL_CRASH_AFTER_STEP": hook}, timeout=120)
    assert run.code == CRASH_EXIT, run
    assert f"crash hook: exiting after step {hook.split(':')[1]}" in run.stderr, run.stderr
    return run


def replicated_pair(ec: EphemeralClusters, n: int = 20) -> tuple[str, str]:
    """A source with records and its replica set up by autosetup (copied, replicating; no gateway runs)."""
    reg = ec.registry_path
    name = f"j{uuid.uuid4().hex[:6]}"
    sf, ny = f"/sanfrancisco/{name}", f"/newyork/{name}"
    new_stream(reg, sf)
    new_topics(reg, sf, TOPICS)
    produce(ec.brokers["sanfrancisco"].bootstrap, sp(sf), "t", n, 2)
    cli("stream", "replica", "autosetup", "-path", sf, "-replica", ny, registry=reg)
    return sf, ny


def key(recs: dict) -> dict:
    """Records as set aside compares them: offsets, keys, values, user headers, timestamps."""
    return {tp: [(r.offset, r.key, r.value, r.headers, r.timestamp) for r in rs] for tp, rs in recs.items()}
