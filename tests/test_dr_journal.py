"""The journals of `stream replica promote` and `stream replica resync`: a run that dies part way (the crash hook
$STREAMREPL_CRASH_AFTER_STEP exits hard right after a step, as SIGKILL would; SIGTERM and SIGINT stop it as an
interrupt) is completed, or rolled back, by the next run; one run at a time holds the stream.

Every crash point is a test; all but a representative one or two are marked `drcrash` (out of the default run:
`pytest -m drcrash tests/test_dr_journal.py`). On the session's shared brokers: nothing here stops a broker.
"""

from __future__ import annotations

import signal
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from support import one_error_line
from support.cli import STREAMREPL_BIN, Run, run_proc
from support.streams import (
    assert_identical,
    cli,
    new_stream,
    new_topics,
    produce,
    read_all,
    sp,
    true_ends,
)

from streamrepl import registry, streams
from streamrepl.dr import PROMOTE_STEPS
from streamrepl.local import EphemeralClusters
from streamrepl.model import Stream
from streamrepl.oplock import CRASH_EXIT, OpLock

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


class Sides:
    """Both streams' metadata and records, taken before a DR command, to check them after it."""

    def __init__(self, ec: EphemeralClusters, sf: str, ny: str):
        self.ec, self.sf, self.ny = ec, sf, ny
        self.sf_rec, self.ny_rec = record(ec.registry_path, sf), record(ec.registry_path, ny)
        self.sf_recs, self.ny_recs = self.records(sf), self.records(ny)

    def bs(self, path: str) -> str:
        return self.ec.brokers[sp(path).cluster].bootstrap

    def records(self, path: str) -> dict:
        return read_all(self.bs(path), sp(path), TOPICS)


def check_promoted(ec: EphemeralClusters, before: Sides) -> None:
    """The replica promoted exactly as an uninterrupted promote leaves it; its source untouched."""
    reg, sf, ny = ec.registry_path, before.sf, before.ny
    rec = record(reg, ny)
    assert rec.upstreams == []
    assert rec.oplock is None
    p = rec.promotion
    assert p is not None
    assert (p["state"], p["from"], p["done"], p["uuid"]) == ("complete", [sf], list(PROMOTE_STEPS), before.ny_rec.uuid)
    ends = true_ends(before.bs(ny), sp(ny), TOPICS)
    assert p["ends"] == {"t": [ends[("t", 0)], ends[("t", 1)]]}
    assert rec.uuid == before.sf_rec.uuid  # the identity of the history it holds
    assert p["at"] >= p["started"]
    # The source is not contacted: its record and records are as they were; the replica's records too.
    assert record(reg, sf).to_json() == before.sf_rec.to_json()
    assert before.records(sf) == before.sf_recs
    assert before.records(ny) == before.ny_recs
    assert assert_identical(before.bs(sf), sp(sf), before.sf_rec.uuid, before.bs(ny), sp(ny), TOPICS) == 20


def promote_crash_test(ec: EphemeralClusters, step: int) -> None:
    reg = ec.registry_path
    sf, ny = replicated_pair(ec)
    before = Sides(ec, sf, ny)
    crash_run(reg, f"promote:{step}", "stream", "replica", "promote", "-path", ny)
    journal = record(reg, ny).promotion
    assert journal is not None and journal["done"] == list(PROMOTE_STEPS[:step])
    again = cli("stream", "replica", "promote", "-path", ny, "-json", registry=reg)
    if step < len(PROMOTE_STEPS):
        assert f"completed an interrupted promote of {ny}" in again.stderr, again.stderr
    else:
        assert f"{ny} was promoted from {sf} at " in again.stderr and "nothing left to do" in again.stderr
    assert again.json()["data"] == [{"path": ny, "promotedfrom": sf, "writable": True, "dryrun": False}]
    check_promoted(ec, before)


@pytest.mark.parametrize(
    "step",
    [pytest.param(k, marks=[] if k == 2 else [pytest.mark.drcrash]) for k in range(1, len(PROMOTE_STEPS) + 1)],
)
def test_promote_crashed_after_each_step_is_completed_by_the_next_run(clusters: EphemeralClusters, step: int) -> None:
    promote_crash_test(clusters, step)


@pytest.mark.drcrash
@pytest.mark.parametrize("delay", [0.2, 0.3, 0.35, 0.45, 0.6])
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_promote_stopped_by_a_signal_is_completed_by_the_next_run(
    clusters: EphemeralClusters, sig: signal.Signals, delay: float
) -> None:
    reg = clusters.registry_path
    sf, ny = replicated_pair(clusters)
    before = Sides(clusters, sf, ny)
    proc = subprocess.Popen(
        [STREAMREPL_BIN, "stream", "replica", "promote", "-path", ny],
        env={**__import__("os").environ, "STREAMREPL_CLUSTERS": str(reg)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(delay)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=120)
    assert "Traceback" not in out + err, err
    if proc.returncode == 128 + sig:
        assert "interrupted" in err, err
    again = cli("stream", "replica", "promote", "-path", ny, registry=reg)
    assert again.code == 0
    check_promoted(clusters, before)


def test_a_second_promote_refuses_while_one_runs_and_changes_nothing(clusters: EphemeralClusters) -> None:
    reg = clusters.registry_path
    sf, ny = replicated_pair(clusters, n=4)
    r = streams.resolve(registry.load(str(reg)), ny)
    running = OpLock(r, "promote")  # a run of this live process, as far as the second one can tell
    running.acquire()
    try:
        held = record(reg, ny)
        run = cli("stream", "replica", "promote", "-path", ny, registry=reg, check=False)
        line = one_error_line(run)
        assert f"a promote of {ny} is running (owner {running.owner}, since " in line, line
        assert "nothing was changed" in line, line
        assert record(reg, ny).to_json() == held.to_json()
    finally:
        running.release()
    cli("stream", "replica", "promote", "-path", ny, registry=reg)
    assert record(reg, ny).upstreams == []
