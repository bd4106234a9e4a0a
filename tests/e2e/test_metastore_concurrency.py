"""Two operators editing the same stream at the same moment: no edit is silently lost.

Each test runs two separate OS processes (multiprocessing, 'spawn') that meet at a barrier before
every edit, so that they really race for the same stream record, many times over.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable
from typing import Any

from support.cli import Run, run_cli, unique_path

from streamrepl.local import EphemeralClusters

ROUNDS = 10
CONCURRENT = "being changed by others at the same time"


def _cli(args: list[str]) -> tuple[int, str, str]:
    r = run_cli(args)
    return r.code, r.stdout, r.stderr


def _worker(name: str, barrier: Any, out: Any, jobs: list[list[str]]) -> None:
    """Run each job (a CLI command line) right after the other process reaches the same point."""
    results = []
    for args in jobs:
        try:
            barrier.wait(timeout=60)
        except Exception:  # noqa: BLE001 - the other process died; finish alone
            pass
        results.append((args, *_cli(args)))
    out.put((name, results))


def _store_worker(name: str, barrier: Any, out: Any, cluster: str, path: str, rounds: int) -> None:
    """Increment a counter in the stream record through MetaStore.update, racing the other process."""
    from streamrepl import registry
    from streamrepl.errors import ConcurrentEdit
    from streamrepl.metastore import MetaStore
    from streamrepl.model import Stream

    store = MetaStore(registry.load().get(cluster))
    done, refused = 0, 0
    for _ in range(rounds):
        barrier.wait(timeout=60)

        def bump(rec: Stream | None) -> Stream:
            # Keys the model does not know, as a newer writer's would be: kept through every update.
            assert rec is not None
            counters = rec.extra.setdefault("counters", {})
            counters[name] = counters.get(name, 0) + 1
            rec.extra["total"] = rec.extra.get("total", 0) + 1
            return rec

        try:
            store.update(path, bump)
            done += 1
        except ConcurrentEdit:
            refused += 1
    out.put((name, done, refused))


def _race(target: Callable[..., None], per_process: dict[str, tuple[Any, ...]], timeout: float = 120) -> list[Any]:
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(len(per_process))
    out = ctx.Queue()
    procs = [
        ctx.Process(target=target, args=(name, barrier, out, *args), daemon=True) for name, args in per_process.items()
    ]
    for p in procs:
        p.start()
    results = [out.get(timeout=timeout) for _ in procs]
    for p in procs:
        p.join(timeout=30)
        assert p.exitcode == 0, f"worker exited with {p.exitcode}"
    return results


def _check(results: list[tuple[list[str], int, str, str]]) -> list[list[str]]:
    """Every command either succeeded or failed with the clear ConcurrentEdit error; return the successes."""
    ok = []
    for args, code, _stdout, stderr in results:
        if code == 0:
            ok.append(args)
        else:
            assert CONCURRENT in stderr, f"{args}: {stderr!r}"
            assert len(stderr.splitlines()) == 1
    return ok


def topics(path: str) -> dict[str, dict]:
    r: Run = run_cli("stream", "topic", "list", "-path", path, "-json")
    assert r.code == 0, r
    return {row["topic"]: row for row in r.data()}


def info(path: str) -> dict:
    r = run_cli("stream", "info", "-path", path, "-json")
    assert r.code == 0, r
    return r.data()[0]  # type: ignore[no-any-return]


def test_two_processes_add_topics_to_the_same_stream(clusters: EphemeralClusters) -> None:
    path = unique_path(stem="race")
    assert run_cli("stream", "create", "-path", path).code == 0

    def jobs(who: str) -> list[list[str]]:
        return [["stream", "topic", "create", "-path", path, "-topic", f"{who}{i}"] for i in range(ROUNDS)]

    results = _race(_worker, {"a": (jobs("a"),), "b": (jobs("b"),)})
    ok = [args[-1] for _, runs in results for args in _check(runs)]
    present = topics(path)
    # No edit is silently lost: every topic whose command succeeded is there, and only those.
    assert sorted(present) == sorted(ok)
    assert len(ok) >= ROUNDS, f"only {len(ok)} of {2 * ROUNDS} succeeded"
    assert info(path)["numtopics"] == len(ok)


def test_two_processes_edit_different_aces_of_the_same_stream(clusters: EphemeralClusters) -> None:
    path = unique_path(stem="race")
    assert run_cli("stream", "create", "-path", path).code == 0
    me = info(path)["creator"]

    def jobs(perm: str, who: str) -> list[list[str]]:
        # Keep adminperm for the creator so that every edit is allowed.
        return [["stream", "edit", "-path", path, f"-{perm}", f"u:{who}{i} | u:{me}"] for i in range(ROUNDS)]

    results = dict(_race(_worker, {"p": (jobs("produceperm", "a"),), "c": (jobs("consumeperm", "b"),)}))
    row = info(path)
    for perm, name in (("produceperm", "p"), ("consumeperm", "c")):
        ok = _check(results[name])
        assert ok, f"no {perm} edit succeeded"
        # Each process's last successful write is what the stream shows.
        assert row[perm] == ok[-1][-1], (perm, row[perm], ok[-1])


def test_metastore_update_loses_no_increment(clusters: EphemeralClusters) -> None:
    path = unique_path(stem="race")
    assert run_cli("stream", "create", "-path", path).code == 0
    rounds = 15
    inner = path.split("/", 2)[2]
    results = _race(
        _store_worker,
        {"a": ("sanfrancisco", f"/{inner}", rounds), "b": ("sanfrancisco", f"/{inner}", rounds)},
    )
    from streamrepl import registry
    from streamrepl.metastore import MetaStore

    rec = MetaStore(registry.load(os.environ["STREAMREPL_CLUSTERS"]).get("sanfrancisco")).get(f"/{inner}")
    assert rec is not None
    done = {name: n for name, n, _ in results}
    assert rec.extra["counters"] == {k: v for k, v in done.items() if v}
    assert rec.extra["total"] == sum(done.values())
    assert sum(done.values()) + sum(r for _, _, r in results) == 2 * rounds


def test_two_processes_create_the_same_stream(clusters: EphemeralClusters) -> None:
    paths = [unique_path(stem="twin") for _ in range(5)]
    jobs = [["stream", "create", "-path", p, "-ttl", "60"] for p in paths]
    results = dict(_race(_worker, {"x": (jobs,), "y": (jobs,)}))
    for i, p in enumerate(paths):
        outcomes = sorted((results[w][i][1], results[w][i][3]) for w in ("x", "y"))
        # Exactly one creates it; the other is told it exists (or, at worst, to try again).
        assert outcomes[0][0] == 0, outcomes
        assert outcomes[1][0] != 0, f"{p} created twice: {outcomes}"
        assert "already exists" in outcomes[1][1] or CONCURRENT in outcomes[1][1], outcomes
        assert info(p)["ttl"] == 60
