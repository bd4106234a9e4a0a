"""`stream replica promote -consistent true`: one cut at a timestamp T for the whole stream (promoteconsistent.py).

T is the oldest last record of the partitions that were not caught up at their gateway's last report; a partition's
kept prefix ends before its first record later than T (timestamps need not grow); what lies past is set aside in
`<replica>.aside-<stamp>`, never dropped; committed cursors past the cut move back to it. Checked record by record
against the source and the set-aside copy, at every crash point of its journal (marked `drcrash` but one), and under
a steady producer with real gateway reports.

The gateway reports say whether each partition was caught up (replication/reports.py); a test writes the report of a
partition that was not, as a gateway that fell behind would have, so that T is known in advance.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from support import one_error_line
from support.clusters import RECENT_MS, registered_clusters
from support.dr import crash_run, record
from support.streams import Gateways, SteadyProducer, cli, link, new_stream, new_topics, read_all, sp, wait_until

from streamrepl import kafka, registry, statustopic, streams
from streamrepl.journal import PROMOTE_CONSISTENT_STEPS
from streamrepl.local import EphemeralClusters
from streamrepl.oplock import OpLock
from streamrepl.paths import kafka_topic_name

TOPICS = {"t": 2}
#: the records' timestamps (past RECENT_MS) per partition: t[0]'s are not in order, t[1] falls behind at 2500
STAMPS = {("t", 0): [1000, 2000, 9000, 3000, 4000], ("t", 1): [1500, 2500]}
CUT = RECENT_MS + 2500
#: what each partition keeps: t[0] up to its first record later than T (9000), so 3000 and 4000 are set aside too
KEPT = {("t", 0): 2, ("t", 1): 2}


@pytest.fixture(scope="module")
def ec() -> Iterator[EphemeralClusters]:
    with registered_clusters(["sanfrancisco", "newyork"]) as clusters:
        yield clusters


def bs(ec: EphemeralClusters, path: str) -> str:
    return ec.brokers[sp(path).cluster].bootstrap


def cluster(ec: EphemeralClusters, path: str) -> kafka.Cluster:
    return registry.load(str(ec.registry_path)).get(sp(path).cluster)


def report(ec: EphemeralClusters, ny: str, sf: str, topic: str, p: int, caughtup: bool, nxt: int) -> None:
    """The unit report a gateway writes (reports.py), written by hand."""
    body = {"state": "ok", "error": "", "gateway": "gw-test", "next": nxt, "caughtup": caughtup, "updated": 1}
    pr = Producer({"bootstrap.servers": bs(ec, ny)})
    pr.produce(statustopic.STATUS_TOPIC, key=statustopic.unit_key(ny, sf, topic, p).encode(), value=json.dumps(body))
    pr.flush(30)


def units(ec: EphemeralClusters, ny: str) -> dict[str, dict]:
    return statustopic.read(cluster(ec, ny), f"unit|{ny}|")


def commit(ec: EphemeralClusters, ny: str, group: str, offsets: dict[tuple[str, int], int]) -> None:
    tps = [kafka.TopicPartition(kafka_topic_name(sp(ny), t), p, o) for (t, p), o in offsets.items()]
    assert kafka.commit_offsets(kafka.admin_client(cluster(ec, ny)), group, tps) == []


def committed(ec: EphemeralClusters, ny: str, group: str) -> dict[tuple[str, int], int]:
    c = cluster(ec, ny)
    found = kafka.committed_offsets(c, kafka.admin_client(c), [group])
    return {(t.rsplit(".", 1)[-1], p): o for (t, p), o in found[group][0].items()}


def fallen_behind(ec: EphemeralClusters, tmp_path: Path) -> tuple[str, str]:
    """A replicated pair whose gateway reported t[0] caught up and (written by hand) t[1] behind; two groups'
    cursors on the replica, one past the cut."""
    reg = ec.registry_path
    name = f"k{uuid.uuid4().hex[:6]}"
    sf, ny = new_stream(reg, f"/sanfrancisco/{name}"), f"/newyork/{name}"
    new_topics(reg, sf, TOPICS)
    pr = Producer({"bootstrap.servers": bs(ec, sf), "enable.idempotence": True})
    for (t, p), stamps in STAMPS.items():
        for i, ts in enumerate(stamps):
            pr.produce(
                kafka_topic_name(sp(sf), t), key=f"k{p}-{i}", value=f"v{p}-{i}", timestamp=RECENT_MS + ts, partition=p
            )
    pr.flush(30)
    cli("stream", "replica", "autosetup", "-path", sf, "-replica", ny, registry=reg)
    with Gateways(reg, "newyork", tmp_path) as gws:
        gws.start()
        # The gateway's own reports: every partition where it ends. Whether they say caught up depends on what the
        # gateway knows of the source's watermark (SourceFeeds.caught_up; unit-tested), so the test writes them.
        wait_until(
            lambda: (
                {(k.split("|")[3], int(k.split("|")[4])): b.get("next") for k, b in units(ec, ny).items()}
                == {tp: len(s) for tp, s in STAMPS.items()}
            ),
            120,
            "the gateway's reports",
        )
        gws.stop_all()
    for (t, p), stamps in STAMPS.items():
        report(ec, ny, sf, t, p, (t, p) != ("t", 1), len(stamps))
    report(ec, ny, sf, "t", 1, False, 2)
    commit(ec, ny, "g-past", {("t", 0): 5, ("t", 1): 2})
    commit(ec, ny, "g-before", {("t", 0): 1, ("t", 1): 0})
    return sf, ny


def check_cut(ec: EphemeralClusters, sf: str, ny: str, rows: list[dict]) -> None:
    reg = ec.registry_path
    src, dst = read_all(bs(ec, sf), sp(sf), TOPICS), read_all(bs(ec, ny), sp(ny), TOPICS)
    p = record(reg, ny).promotion
    assert p is not None and p["state"] == "complete" and p["done"] == list(PROMOTE_CONSISTENT_STEPS)
    aside = p["aside"]
    assert aside.startswith(f"{ny}.aside-")
    kept_aside = read_all(bs(ec, ny), sp(aside), TOPICS)
    rec = record(reg, ny)
    assert rec.uuid == record(reg, sf).uuid and rec.upstreams == [] and rec.oplock is None
    assert p["ends"] == {"t": [KEPT[("t", 0)], KEPT[("t", 1)]]}
    assert p["replicatedends"] == {"t": [5, 2]}

    def key(rs: list) -> list:
        """A record as both sides hold it: the source's records carry no origin header, their copies its uuid."""
        return [(r.offset, r.key, r.value, r.timestamp, r.origin or rec.uuid) for r in rs]

    for tp in STAMPS:
        # The kept prefix is the source's, record by record; the set-aside copy holds the replica whole.
        assert key(dst[tp]) == key(src[tp][: KEPT[tp]])
        assert [(r.offset, r.key, r.value, r.timestamp) for r in kept_aside[tp]] == [
            (r.offset, r.key, r.value, r.timestamp) for r in src[tp]
        ]
    by = {(r["topic"], r["partition"]): r for r in rows}
    assert {tp: (r["cutts"], r["keptend"], r["setaside"], r["caughtup"]) for tp, r in by.items()} == {
        ("t", 0): (CUT, 2, 3, True),
        ("t", 1): (CUT, 2, 0, False),
    }
    assert {tp: r["groupsmoved"] for tp, r in by.items()} == {("t", 0): "g-past", ("t", 1): ""}
    assert {r["aside"] for r in rows} == {aside}
    assert committed(ec, ny, "g-past") == {("t", 0): 2, ("t", 1): 2}
    assert committed(ec, ny, "g-before") == {("t", 0): 1, ("t", 1): 0}


def test_consistent_promote_cuts_every_partition_at_one_time_and_sets_the_rest_aside(
    ec: EphemeralClusters, tmp_path: Path
) -> None:
    reg = ec.registry_path
    sf, ny = fallen_behind(ec, tmp_path)
    dry = cli(
        "stream", "replica", "promote", "-path", ny, "-consistent", "true", "-dryrun", "true", "-json", registry=reg
    )
    assert [(r["keptend"], r["setaside"]) for r in dry.json()["data"]] == [(2, 3), (2, 0)]
    assert record(reg, ny).upstreams != [] and record(reg, ny).promotion is None  # a dry run changes nothing
    run = cli("stream", "replica", "promote", "-path", ny, "-consistent", "true", "-json", registry=reg, check=False)
    assert run.code == 0, run.stdout
    check_cut(ec, sf, ny, run.json()["data"])
    assert "consistent cut of" in run.stderr and "3 records past the cut are set aside in" in run.stderr, run.stderr
    assert "moved back to it: g-past" in run.stderr, run.stderr
    again = cli("stream", "replica", "promote", "-path", ny, "-json", registry=reg)
    assert again.json()["data"] == run.json()["data"]


@pytest.mark.parametrize(
    "step",
    [
        pytest.param(k, marks=[] if k == 6 else [pytest.mark.drcrash])
        for k in range(1, len(PROMOTE_CONSISTENT_STEPS) + 1)
    ],
)
def test_consistent_promote_crashed_after_each_step_is_completed_by_the_next_run(
    ec: EphemeralClusters, tmp_path: Path, step: int
) -> None:
    reg = ec.registry_path
    sf, ny = fallen_behind(ec, tmp_path)
    crash_run(reg, f"promote:{step}", "stream", "replica", "promote", "-path", ny, "-consistent", "true")
    p = record(reg, ny).promotion
    assert p is not None and p["done"] == list(PROMOTE_CONSISTENT_STEPS[:step])
    again = cli("stream", "replica", "promote", "-path", ny, "-json", registry=reg)
    check_cut(ec, sf, ny, again.json()["data"])


def test_consistent_promote_past_its_cut_cannot_change_its_mind(ec: EphemeralClusters, tmp_path: Path) -> None:
    reg = ec.registry_path
    sf, ny = fallen_behind(ec, tmp_path)
    crash_run(reg, "promote:5", "stream", "replica", "promote", "-path", ny, "-consistent", "true")
    held = record(reg, ny).to_json()
    run = cli("stream", "replica", "promote", "-path", ny, "-consistent", "false", registry=reg, check=False)
    assert "cut it consistently already" in one_error_line(run)
    assert record(reg, ny).to_json() == held
    check_cut(ec, sf, ny, cli("stream", "replica", "promote", "-path", ny, "-json", registry=reg).json()["data"])


def test_consistent_promote_refuses_what_it_cannot_cut_and_changes_nothing(ec: EphemeralClusters) -> None:
    reg = ec.registry_path
    name = f"r{uuid.uuid4().hex[:6]}"
    sf, ny = new_stream(reg, f"/sanfrancisco/{name}"), new_stream(reg, f"/newyork/{name}")
    new_topics(reg, sf, TOPICS)
    new_topics(reg, ny, TOPICS)
    link(reg, sf, ny)
    report(ec, ny, sf, "t", 0, False, 0)  # behind, and holds no record: T would be before every record
    held = record(reg, ny).to_json()
    run = cli("stream", "replica", "promote", "-path", ny, "-consistent", "true", registry=reg, check=False)
    line = one_error_line(run)
    assert "got no record and were not caught up" in line and "t[0]" in line and "-consistent false" in line, line
    assert record(reg, ny).to_json() == held
    # A replica with replicas of its own: the cut would re-create topics they read.
    third = new_stream(reg, f"/newyork/{name}-3")
    new_topics(reg, third, TOPICS)
    link(reg, ny, third)
    held = record(reg, ny).to_json()
    run = cli("stream", "replica", "promote", "-path", ny, "-consistent", "true", "-json", registry=reg, check=False)
    assert run.code != 0 and "has replicas of its own" in run.json()["errors"][0]["desc"]
    assert record(reg, ny).to_json() == held


def test_consistent_promote_under_load(ec: EphemeralClusters, tmp_path: Path) -> None:
    """With real reports of gateways under a steady producer: every partition keeps a prefix of its source up to
    its first record later than T, T is the oldest last record among the partitions not caught up, the rest is in
    the set-aside copy."""
    reg = ec.registry_path
    topics = {"t": 2, "u": 2}
    name = f"l{uuid.uuid4().hex[:6]}"
    sf, ny = new_stream(reg, f"/sanfrancisco/{name}"), new_stream(reg, f"/newyork/{name}")
    new_topics(reg, sf, topics)
    new_topics(reg, ny, topics)
    link(reg, sf, ny)
    with Gateways(reg, "newyork", tmp_path) as gws:
        gws.start()
        producer = SteadyProducer(bs(ec, sf), sp(sf), topics, rate=300).start()
        try:
            wait_until(lambda: all(len(v) >= 30 for v in read_all(bs(ec, ny), sp(ny), topics).values()), 120, "copies")
            run = cli("stream", "replica", "promote", "-path", ny, "-consistent", "true", "-json", registry=reg)
        finally:
            producer.stop()
        gws.stop_all()
    rows = run.json()["data"]
    p = record(reg, ny).promotion
    assert p is not None
    src, dst = read_all(bs(ec, sf), sp(sf), topics), read_all(bs(ec, ny), sp(ny), topics)
    aside = read_all(bs(ec, ny), sp(p["aside"]), topics) if p["aside"] else None
    t = rows[0]["cutts"]
    behind = [r["lasttimestamp"] for r in rows if not r["caughtup"]]
    assert t == (min(behind) if behind else max(r["lasttimestamp"] for r in rows))
    for r in rows:
        tp = (r["topic"], r["partition"])
        replicated = src[tp][: r["cutoffset"]]
        later = [x.offset for x in replicated if x.timestamp > t]
        assert r["keptend"] == (later[0] if later else r["cutoffset"])
        assert [(x.offset, x.key, x.value, x.timestamp) for x in dst[tp]] == [
            (x.offset, x.key, x.value, x.timestamp) for x in replicated[: r["keptend"]]
        ]
        assert r["setaside"] == r["cutoffset"] - r["keptend"]
        if aside is not None:
            assert [(x.offset, x.key, x.value) for x in aside[tp]] == [(x.offset, x.key, x.value) for x in replicated]


def test_a_consistent_promote_refuses_while_another_run_holds_the_stream_and_changes_nothing(
    ec: EphemeralClusters, tmp_path: Path
) -> None:
    reg = ec.registry_path
    sf, ny = fallen_behind(ec, tmp_path)
    running = OpLock(streams.resolve(registry.load(str(reg)), ny), "promote")  # a live run, as far as it can tell
    running.acquire()
    try:
        held = record(reg, ny).to_json()
        run = cli("stream", "replica", "promote", "-path", ny, "-consistent", "true", registry=reg, check=False)
        line = one_error_line(run)
        assert f"a promote of {ny} is running (owner {running.owner}" in line and "nothing was changed" in line, line
        assert record(reg, ny).to_json() == held
        assert {tp: len(v) for tp, v in read_all(bs(ec, ny), sp(ny), TOPICS).items()} == {
            tp: len(s) for tp, s in STAMPS.items()
        }
    finally:
        running.release()
    run = cli("stream", "replica", "promote", "-path", ny, "-consistent", "true", "-json", registry=reg)
    check_cut(ec, sf, ny, run.json()["data"])
