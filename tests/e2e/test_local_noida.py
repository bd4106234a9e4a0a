"""`streamrepl local` with noida-db brokers: up/status/down, data kept across down/up, a registry mixing
noida and Tansu, and the choice of broker (-broker, $STREAMREPL_LOCAL_BROKER)."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from support.cli import STREAMREPL_BIN, Run, one_error_line, run_cli
from support.local import alive, round_trip
from support.streams import (
    Gateways,
    caught_up,
    link,
    new_stream,
    new_topics,
    produce,
    same_ends,
    sp,
    tally,
    uuid_of,
    wait_until,
)

from streamrepl import local, settings
from streamrepl.errors import InvalidArgument
from streamrepl.local_brokers import KINDS


@pytest.fixture
def state_dir(tmp_path: Path) -> Iterator[Path]:
    sd = tmp_path / "local"
    yield sd
    for row in local.status(sd):
        if row["running"]:
            local.thaw(row["cluster"], sd)
    local.down(sd)


def _ok(run: Run) -> Run:
    assert run.code == 0, run
    return run


def _status(sd: Path) -> list[dict]:
    return json.loads(_ok(run_cli("local", "status", "-dir", sd, "-json")).stdout)["data"]


def test_up_status_down_on_noida(state_dir: Path) -> None:
    up = json.loads(
        _ok(run_cli("local", "up", "-clusters", "a,b", "-broker", "noida", "-dir", state_dir, "-json")).stdout
    )
    assert [(r["cluster"], r["broker"]) for r in up["data"]] == [("a", "noida"), ("b", "noida")]
    rows = _status(state_dir)
    assert [(r["cluster"], r["broker"], r["running"]) for r in rows] == [("a", "noida", True), ("b", "noida", True)]
    for row in rows:
        round_trip(row["bootstrap"])
    header = _ok(run_cli("local", "status", "-dir", state_dir)).stdout.splitlines()[0].split("\t")
    assert header == ["cluster", "broker", "bootstrap", "pid", "running", "log"]

    assert sorted(local.down(state_dir)) == ["a", "b"]
    assert not any(alive(r["pid"]) for r in rows)
    # Stopped with SIGTERM, noida saved what it had.
    assert all((local.data_dir(state_dir, name) / "kafka.json").is_file() for name in ("a", "b"))
    assert _status(state_dir) == []


def _streamrepl(state_dir: Path, *args: str, stdin: str | None = None) -> str:
    """A streamrepl command of its own, against this state directory's registry; its stdout."""
    env = dict(os.environ, STREAMREPL_CLUSTERS=str(local.registry_path(state_dir)))
    p = subprocess.run([STREAMREPL_BIN, *args], input=stdin, capture_output=True, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stderr + p.stdout
    return p.stdout


def _data(out: str) -> list[dict]:
    return json.loads(out)["data"]  # type: ignore[no-any-return]


def _records(out: str) -> list[tuple[int, int, str]]:
    return [(r["partition"], r["offset"], r["value"]) for r in map(json.loads, out.splitlines())]


def test_streams_topics_records_and_cursors_survive_down_and_up(state_dir: Path) -> None:
    _ok(run_cli("local", "up", "-clusters", "sf", "-broker", "noida", "-dir", state_dir))
    path = f"/sf/keep-{uuid.uuid4().hex[:6]}"
    _streamrepl(state_dir, "stream", "create", "-path", path, "-ttl", "86400")
    _streamrepl(state_dir, "stream", "topic", "create", "-path", path, "-topic", "clicks", "-partitions", "2")
    _streamrepl(state_dir, "produce", "-path", f"{path}:clicks", "-partition", "1", stdin="v0\nv1\nv2\nv3\nv4\n")
    read = _streamrepl(state_dir, "consume", "-path", f"{path}:clicks", "-group", "billing", "-count", "3", "-json")
    assert _records(read) == [(1, 0, "v0"), (1, 1, "v1"), (1, 2, "v2")]

    local.down(state_dir)
    # Without -broker the cluster comes back on the broker whose data the directory keeps.
    _ok(run_cli("local", "up", "-clusters", "sf", "-dir", state_dir))
    assert [(r["cluster"], r["broker"]) for r in _status(state_dir)] == [("sf", "noida")]

    assert [row["ttl"] for row in _data(_streamrepl(state_dir, "stream", "info", "-path", path, "-json"))] == [86400]
    topics = _data(_streamrepl(state_dir, "stream", "topic", "list", "-path", path, "-json"))
    assert [(t["topic"], t["partitions"]) for t in topics] == [("clicks", 2)]
    cursors = _data(
        _streamrepl(state_dir, "stream", "cursor", "list", "-path", path, "-consumergroup", "billing", "-json")
    )
    assert [(c["partitionid"], c["committedoffset"], c["produceroffset"]) for c in cursors] == [(1, 3, 4)]
    # The group goes on from its committed offset, and every record kept its offset.
    rest = _streamrepl(state_dir, "consume", "-path", f"{path}:clicks", "-group", "billing", "-count", "2", "-json")
    assert _records(rest) == [(1, 3, "v3"), (1, 4, "v4")]
    again = _streamrepl(state_dir, "consume", "-path", f"{path}:clicks", "-offset", "earliest", "-count", "5", "-json")
    assert _records(again) == [(1, i, f"v{i}") for i in range(5)]


def test_a_registry_mixes_tansu_and_noida(state_dir: Path) -> None:
    (a,) = local.up(["a"], state_dir, broker="tansu")
    (b,) = local.up(["b"], state_dir, broker="noida")
    assert (a.broker, b.broker) == ("tansu", "noida")
    registry = yaml.safe_load(local.registry_path(state_dir).read_text())
    assert registry == {
        "default": "a",
        "clusters": {
            "a": {"bootstrap.servers": a.bootstrap},
            "b": {"bootstrap.servers": b.bootstrap},
        },
    }
    assert [(r["cluster"], r["broker"], r["running"]) for r in local.status(state_dir)] == [
        ("a", "tansu", True),
        ("b", "noida", True),
    ]
    for broker in (a, b):
        round_trip(broker.bootstrap)
    # Each is reused as it is; another broker for a running cluster is refused, not started beside it.
    assert local.up(["a", "b"], state_dir) == [a, b]
    with pytest.raises(InvalidArgument, match="already runs on tansu"):
        local.up(["a"], state_dir, broker="noida")
    assert sorted(local.down(state_dir)) == ["a", "b"]
    assert not alive(a.pid) and not alive(b.pid)


def test_ephemeral_clusters_on_noida() -> None:
    with local.EphemeralClusters(["x"], broker="noida") as ec:
        assert ec.brokers["x"].broker == "noida"
        round_trip(ec.brokers["x"].bootstrap)
        pid, sd = ec.brokers["x"].pid, ec.state_dir
    assert not alive(pid) and not sd.exists()


@pytest.mark.parametrize("value", ["kafka", "Noida", "x" * 200])
def test_a_bad_broker_is_a_one_line_error(state_dir: Path, value: str) -> None:
    line = one_error_line(run_cli("local", "up", "-clusters", "a", "-broker", value, "-dir", state_dir))
    assert line.startswith("ERROR (22) - local up: unknown broker") and "use tansu or noida" in line
    line = one_error_line(
        run_cli("local", "up", "-clusters", "a", "-dir", state_dir, env={"STREAMREPL_LOCAL_BROKER": value})
    )
    assert "STREAMREPL_LOCAL_BROKER=" in line and "use tansu or noida" in line
    assert not (state_dir / "state.json").exists()


def test_the_broker_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STREAMREPL_LOCAL_BROKER", raising=False)
    assert settings.local_broker() == "tansu"
    monkeypatch.setenv("STREAMREPL_LOCAL_BROKER", " noida ")
    assert settings.local_broker() == "noida"
    monkeypatch.setenv("STREAMREPL_LOCAL_BROKER", "")
    assert settings.local_broker() == "tansu"
    assert tuple(KINDS) == settings.LOCAL_BROKERS


def test_a_gateway_running_across_down_and_up_replicates_again_on_noida(state_dir: Path, tmp_path: Path) -> None:
    """A gateway keeps the bootstrap it read at its start: `up` after `down` must bring the clusters back on the
    same ports (the gateway's connections leave them in TIME_WAIT), and noida-db keeps the data, so it goes on."""
    before = {b.cluster: b for b in local.up(["sf", "ny"], state_dir, broker="noida")}
    reg = local.registry_path(state_dir)
    src, dst = f"/sf/across-{uuid.uuid4().hex[:6]}", "/ny/across"
    new_stream(reg, src)
    new_stream(reg, dst)
    new_topics(reg, src, {"t": 2})
    link(reg, src, dst)
    bs = {name: b.bootstrap for name, b in before.items()}
    with Gateways(reg, "ny", tmp_path) as gws:
        gws.start("across")
        produce(bs["sf"], sp(src), "t", 100, 2)
        wait_until(lambda: same_ends(bs["sf"], sp(src), bs["ny"], sp(dst), {"t": 2}), 120, "the first records")

        assert sorted(local.down(state_dir)) == ["ny", "sf"]
        after = {b.cluster: b for b in local.up(["sf", "ny"], state_dir)}
        assert {n: b.bootstrap for n, b in after.items()} == bs
        assert all(after[n].pid != before[n].pid for n in bs)

        produce(bs["sf"], sp(src), "t", 100, 2, start=100)
        wait_until(lambda: same_ends(bs["sf"], sp(src), bs["ny"], sp(dst), {"t": 2}), 180, "the gateway to go on")
        t = tally(bs["sf"], sp(src), uuid_of(reg, src), bs["ny"], sp(dst), {"t": 2})
        assert t.ok and t.records == 200, t
        wait_until(lambda: caught_up(reg, src), 60, "replica list to say the replica is up to date")


def test_up_without_names_brings_back_the_clusters_the_directory_knew(
    state_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`local up -dir D` after `local down -dir D` brings back D's own clusters (names and broker), not the default
    pair: a registry without the user's clusters, and their data left behind unsaid, was the finding."""
    monkeypatch.setenv("STREAMREPL_LOCAL_BROKER", "noida")  # the kinds come from D, not from the variable
    _ok(run_cli("local", "up", "-clusters", "east,west", "-broker", "noida", "-dir", state_dir))
    _ok(run_cli("local", "up", "-clusters", "lab", "-broker", "tansu", "-dir", state_dir))
    path = f"/east/kept-{uuid.uuid4().hex[:6]}"
    _streamrepl(state_dir, "stream", "create", "-path", path)
    _ok(run_cli("local", "down", "-dir", state_dir))

    again = json.loads(_ok(run_cli("local", "up", "-dir", state_dir, "-json")).stdout)["data"]
    assert [(r["cluster"], r["broker"]) for r in again] == [("east", "noida"), ("west", "noida"), ("lab", "tansu")]
    registry = yaml.safe_load(local.registry_path(state_dir).read_text())
    assert list(registry["clusters"]) == ["east", "west", "lab"] and registry["default"] == "east"
    assert [r["path"] for r in _data(_streamrepl(state_dir, "stream", "info", "-path", path, "-json"))] == [path]


def test_up_of_other_clusters_says_which_data_it_leaves(state_dir: Path) -> None:
    """Clusters named on the command line are the ones started; the noida-db data of the others is left where it
    is, and `up` says so (and how to bring them back) instead of leaving it unsaid."""
    _ok(run_cli("local", "up", "-clusters", "east,west", "-broker", "noida", "-dir", state_dir))
    _ok(run_cli("local", "down", "-dir", state_dir))
    run = _ok(run_cli("local", "up", "-clusters", "lab", "-broker", "tansu", "-dir", state_dir))
    registry = yaml.safe_load(local.registry_path(state_dir).read_text())
    assert list(registry["clusters"]) == ["lab"]
    warning = " ".join(run.stderr.split())
    assert "east, west" in warning and str(local.data_dir(state_dir, "east").parent) in warning, run.stderr
    assert "local up -clusters east,west" in warning, run.stderr
