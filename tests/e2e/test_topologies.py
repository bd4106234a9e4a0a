"""Replication topologies end to end: multi-master, many-to-one, intra-cluster, chains, conflicts,
pause/resume, new topics, removal, the two-way agreement and bad input for the replica verbs.

One set of brokers (sanfrancisco, newyork, tokyo) and one gateway per cluster serve the whole
module; every test works on streams of its own. Records are compared one by one.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from support.clusters import RECENT_MS
from support.env import Env, own_env
from support.histories import write
from support.streams import (
    Gateways,
    cli,
    cli_data,
    link,
    new_stream,
    new_topics,
    produce,
    read_all,
    replica_rows,
    same_ends,
    sp,
    tally,
    true_ends,
    uuid_of,
    wait_until,
)

from streamrepl.paths import kafka_topic_name

pytestmark = pytest.mark.noida

CLUSTERS = ["sanfrancisco", "newyork", "tokyo"]
THROTTLE_RATE = 40


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    # Brokers of its own: three clusters (tokyo too), with gateways for every one of them.
    with own_env(tmp_path_factory, CLUSTERS) as e:
        # A low throttle rate (records/s per partition) makes `-throttle true` visible in a short test.
        env = {"STREAMREPL_THROTTLE_RATE": str(THROTTLE_RATE)}
        gws = [Gateways(e.reg, c, e.logdir, env=env) for c in CLUSTERS]
        try:
            for g in gws:
                g.start()
            yield e
        finally:
            for g in gws:
                g.__exit__(None, None, None)


def name(stem: str) -> str:
    return f"{stem}{uuid.uuid4().hex[:6]}"


def produce_to(env: Env, path: str, topic: str, n: int, parts: int, start: int = 0, tag: str = "") -> None:
    produce(env.bs_of(path), sp(path), topic, n, parts, start=start, tag=tag)


def records(env: Env, path: str, topic: str, partition: int) -> list:
    return read_all(env.bs_of(path), sp(path), {topic: partition + 1})[(topic, partition)]


def all_records(env: Env, path: str, topics: dict[str, int]) -> list:
    return [r for recs in read_all(env.bs_of(path), sp(path), topics).values() for r in recs]


def assert_replica_of(env: Env, src: str, dst: str, topics: dict[str, int]) -> int:
    """The replica holds every source record at its offset, once, with the source's origin."""
    t = tally(env.bs_of(src), sp(src), uuid_of(env.reg, src), env.bs_of(dst), sp(dst), topics)
    assert t.ok, t
    return t.records


def wait_replicated(env: Env, src: str, dst: str, topics: dict[str, int], timeout: float = 60) -> None:
    wait_until(
        lambda: same_ends(env.bs_of(src), sp(src), env.bs_of(dst), sp(dst), topics),
        timeout,
        f"{dst} to catch up with {src}",
    )


def wait_uptodate(env: Env, *sources: str, timeout: float = 30) -> None:
    """Until `replica list` of every source says each replica is up to date."""
    deadline = time.monotonic() + timeout
    while True:
        rows = [r for s in sources for r in replica_rows(env.reg, s).values()]
        if rows and all(r["isUptodate"] for r in rows):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"replicas not up to date after {timeout}s: {rows}")
        time.sleep(0.5)


def fillers(env: Env, path: str, topics: dict[str, int]) -> int:
    return sum(r.filler for r in all_records(env, path, topics))


def test_multimaster_both_sides_identical_and_no_loops(env: Env) -> None:
    n = name("mm")
    a = new_stream(env.reg, f"/sanfrancisco/{n}")
    b = new_stream(env.reg, f"/newyork/{n}", copyfrom=a)
    new_topics(env.reg, a, {"west": 3})
    new_topics(env.reg, b, {"east": 2})
    link(env.reg, a, b)
    link(env.reg, b, a)
    produce_to(env, a, "west", 600, 3, tag="a")
    produce_to(env, b, "east", 400, 2, tag="b")
    wait_replicated(env, a, b, {"west": 3})
    wait_replicated(env, b, a, {"east": 2})
    # More on both sides once the gateways run (records then flow both ways at once).
    produce_to(env, a, "west", 900, 3, start=600, tag="a")
    produce_to(env, b, "east", 500, 2, start=400, tag="b")
    wait_replicated(env, a, b, {"west": 3})
    wait_replicated(env, b, a, {"east": 2})
    wait_uptodate(env, a, b)
    time.sleep(2.5)  # a loop would show now: records applied back, fillers appended
    assert assert_replica_of(env, a, b, {"west": 3}) == 1500
    assert assert_replica_of(env, b, a, {"east": 2}) == 900
    ua, ub = uuid_of(env.reg, a), uuid_of(env.reg, b)
    for path, topic, parts, count, origin in (
        (a, "west", 3, 1500, None),
        (b, "west", 3, 1500, ua),
        (b, "east", 2, 900, None),
        (a, "east", 2, 900, ub),
    ):
        recs = all_records(env, path, {topic: parts})
        assert len(recs) == count, f"{path}:{topic} holds {len(recs)} records, {count} were produced"
        assert {r.origin for r in recs} == {origin}, f"{path}:{topic} origins"
        assert not any(r.filler for r in recs)
    # Each side lists the other's topic too.
    for path in (a, b):
        names = {r["topic"] for r in cli_data("stream", "topic", "list", "-path", path, registry=env.reg)}
        assert names == {"west", "east"}


def test_many_to_one(env: Env) -> None:
    n = name("m2o")
    asia = new_stream(env.reg, f"/tokyo/{n}")
    europe = new_stream(env.reg, f"/newyork/{n}")
    na = new_stream(env.reg, f"/sanfrancisco/{n}")
    new_topics(env.reg, asia, {"orders.asia": 3})
    new_topics(env.reg, europe, {"orders.eu": 2})
    link(env.reg, asia, na)
    link(env.reg, europe, na)
    produce_to(env, asia, "orders.asia", 1200, 3, tag="asia")
    produce_to(env, europe, "orders.eu", 800, 2, tag="eu")
    wait_replicated(env, asia, na, {"orders.asia": 3})
    wait_replicated(env, europe, na, {"orders.eu": 2})
    assert assert_replica_of(env, asia, na, {"orders.asia": 3}) == 1200
    assert assert_replica_of(env, europe, na, {"orders.eu": 2}) == 800
    names = {r["topic"]: r["partitions"] for r in cli_data("stream", "topic", "list", "-path", na, registry=env.reg)}
    assert names == {"orders.asia": 3, "orders.eu": 2}
    assert fillers(env, na, {"orders.asia": 3, "orders.eu": 2}) == 0


def test_intra_cluster(env: Env) -> None:
    n = name("intra")
    a1 = new_stream(env.reg, f"/sanfrancisco/{n}a1", "-defaultpartitions", "2")
    a2 = new_stream(env.reg, f"/sanfrancisco/{n}a2", copyfrom=a1)
    new_topics(env.reg, a1, {"events": 2})
    link(env.reg, a1, a2)
    produce_to(env, a1, "events", 700, 2)
    produce_to(env, a1, "events", 20, 2, start=700)
    wait_replicated(env, a1, a2, {"events": 2})
    assert assert_replica_of(env, a1, a2, {"events": 2}) == 720


def test_chain_of_three_and_the_direct_path_land_once(env: Env) -> None:
    n = name("chain")
    a = new_stream(env.reg, f"/tokyo/{n}")
    b = new_stream(env.reg, f"/newyork/{n}")
    c = new_stream(env.reg, f"/sanfrancisco/{n}")
    new_topics(env.reg, a, {"t": 3})
    link(env.reg, a, b)
    link(env.reg, b, c)
    link(env.reg, a, c)
    produce_to(env, a, "t", 900, 3)
    wait_replicated(env, a, b, {"t": 3})
    wait_replicated(env, a, c, {"t": 3})
    produce_to(env, a, "t", 300, 3, start=900)
    wait_replicated(env, a, c, {"t": 3})
    wait_replicated(env, a, b, {"t": 3})
    time.sleep(2)
    assert assert_replica_of(env, a, b, {"t": 3}) == 1200
    # C holds every record of A exactly once, with A as origin, whichever path brought it.
    assert assert_replica_of(env, a, c, {"t": 3}) == 1200
    assert fillers(env, c, {"t": 3}) == 0
    assert all(r["isUptodate"] for r in replica_rows(env.reg, b).values())


def test_conflict_same_topic_written_on_both_sides(env: Env) -> None:
    n = name("cf")
    a = new_stream(env.reg, f"/sanfrancisco/{n}")
    b = new_stream(env.reg, f"/newyork/{n}", copyfrom=a)
    new_topics(env.reg, a, {"t": 1})
    new_topics(env.reg, b, {"t": 1})
    produce_to(env, a, "t", 50, 1, tag="a")
    produce_to(env, b, "t", 30, 1, tag="b")
    before_a, before_b = records(env, a, "t", 0), records(env, b, "t", 0)
    link(env.reg, a, b)
    link(env.reg, b, a)

    def both_errors() -> bool:
        ra, rb = replica_rows(env.reg, a)[b], replica_rows(env.reg, b)[a]
        return ra["replicaState"] == rb["replicaState"] == "REPLICA_STATE_ERROR"

    wait_until(both_errors, 30, "both links to report the conflict")
    row = replica_rows(env.reg, a)[b]
    assert f"{n}:t[0]" in row["lasterror"] and "stopped" in row["lasterror"], row["lasterror"]
    assert row["isUptodate"] is False
    produce_to(env, a, "t", 10, 1, start=50, tag="a")
    time.sleep(3)
    # Nothing overwritten, nothing added: each side holds exactly what was produced on it.
    assert records(env, b, "t", 0) == before_b
    assert records(env, a, "t", 0)[:50] == before_a
    assert len(records(env, a, "t", 0)) == 60
    # Pretty output names the error too.
    out = cli("stream", "replica", "list", "-path", a, registry=env.reg).stdout
    assert "REPLICA_STATE_ERROR" in out


def test_conflict_stray_producer_in_a_replica(env: Env) -> None:
    n = name("stray")
    a = new_stream(env.reg, f"/sanfrancisco/{n}")
    b = new_stream(env.reg, f"/newyork/{n}", copyfrom=a)
    new_topics(env.reg, a, {"t": 2})
    link(env.reg, a, b)
    produce_to(env, a, "t", 100, 2)
    wait_replicated(env, a, b, {"t": 2})
    p = Producer({"bootstrap.servers": env.bs_of(b)})
    p.produce(kafka_topic_name(sp(b), "t"), key=b"stray", value=b"written straight into the replica", partition=0)
    p.flush(10)
    before = records(env, b, "t", 0)
    assert before[-1].key == b"stray" and before[-1].offset == 50
    produce_to(env, a, "t", 100, 2, start=100)

    def error_row() -> dict | None:
        row = replica_rows(env.reg, a)[b]
        return row if row["replicaState"] == "REPLICA_STATE_ERROR" else None

    row = wait_until(error_row, 30, "the link to report the stray record")
    assert f"{n}:t[0]" in row["lasterror"], row["lasterror"]
    time.sleep(2)
    # The stray record is not overwritten and nothing was written after it; the other partition goes on.
    assert records(env, b, "t", 0) == before
    assert [r.offset for r in records(env, b, "t", 1)] == list(range(100))
    assert true_ends(env.bs_of(b), sp(b), {"t": 2})[("t", 1)] == 100


def test_conflict_stray_producer_in_the_copy_of_a_multimaster_topic(env: Env) -> None:
    """sanfrancisco writes into its copy of a topic that newyork publishes: the partition would hold records
    of two origins; newyork's gateway must stop it instead of applying them."""
    n = name("mmstray")
    a = new_stream(env.reg, f"/sanfrancisco/{n}")
    b = new_stream(env.reg, f"/newyork/{n}", copyfrom=a)
    new_topics(env.reg, b, {"t": 1})
    link(env.reg, a, b)
    link(env.reg, b, a)
    wait_until(
        lambda: [r["topic"] for r in cli_data("stream", "topic", "list", "-path", a, registry=env.reg)] == ["t"],
        20,
        "sanfrancisco's copy of the topic",
    )
    time.sleep(3)  # newyork's gateway sees it at its next refresh and takes the (empty) partition
    produce_to(env, b, "t", 30, 1, tag="b")
    wait_replicated(env, b, a, {"t": 1})
    before = records(env, b, "t", 0)
    produce_to(env, a, "t", 20, 1, start=30, tag="stray")  # straight into sanfrancisco's copy

    def error_row() -> dict | None:
        row = replica_rows(env.reg, a)[b]
        return row if row["replicaState"] == "REPLICA_STATE_ERROR" else None

    row = wait_until(error_row, 20, "newyork's gateway to report the second origin")
    assert f"{n}:t[0]" in row["lasterror"], row["lasterror"]
    time.sleep(1)
    assert records(env, b, "t", 0) == before


def test_multimaster_with_the_same_topic_written_on_both_sides_names_what_landed_wrong(env: Env) -> None:
    """The documents forbid it: a Kafka produce cannot be conditional, so a gateway learns that the other side wrote
    at the offsets it copies to only when its batch has landed after those records. Each partition goes to ERROR,
    and its error says where the replica stops matching its source and how many copied records landed wrong."""
    n = name("mmboth")
    a = new_stream(env.reg, f"/sanfrancisco/{n}")
    b = new_stream(env.reg, f"/newyork/{n}", copyfrom=a)
    new_topics(env.reg, a, {"t": 1})
    link(env.reg, a, b)
    link(env.reg, b, a)
    produce_to(env, a, "t", 30, 1, tag="a")
    wait_replicated(env, a, b, {"t": 1})
    # sanfrancisco writes on, one record at a time, so that its gateway into newyork is never idle (no end check
    # before its writes): newyork's own records, written meanwhile, are found by the delivery check after a batch.
    stop = threading.Event()

    def write_on() -> None:
        p = Producer({"bootstrap.servers": env.bs_of(a), "linger.ms": 0})
        kt, i = kafka_topic_name(sp(a), "t"), 0
        while not stop.is_set():
            p.produce(kt, key=f"a2-{i}".encode(), value=b"a2", partition=0, timestamp=RECENT_MS + i)
            p.flush(10)
            i += 1

    busy = threading.Thread(target=write_on)
    busy.start()
    try:
        time.sleep(1.0)
        produce_to(env, b, "t", 20, 1, start=30, tag="b")
        time.sleep(1.0)
    finally:
        stop.set()
        busy.join()

    def error_of(src: str, dst: str) -> str:
        row = replica_rows(env.reg, src)[dst]
        return str(row["lasterror"]) if row["replicaState"] == "REPLICA_STATE_ERROR" else ""

    for src, dst in ((a, b), (b, a)):
        error = wait_until(lambda: error_of(src, dst), 30, f"the link {src} -> {dst} to stop")  # noqa: B023
        # Record by record: the first offset where the replica holds another record than the source is where it stops
        # matching; the source's records in the replica after it landed at wrong offsets, and the error counts them.
        src_uuid, dst_uuid = uuid_of(env.reg, src), uuid_of(env.reg, dst)
        theirs = {r.offset: (r.key, r.value, r.origin or src_uuid) for r in records(env, src, "t", 0)}
        ours = [(r.offset, (r.key, r.value, r.origin or dst_uuid)) for r in records(env, dst, "t", 0)]
        first_foreign = next(o for o, rec in ours if theirs.get(o) != rec)
        wrong = [o for o, rec in ours if o > first_foreign and rec[2] == src_uuid]
        if f"offset {first_foreign} comes from stream {src_uuid}" in error:
            # Refused before anything was written: the record it would copy there is of another origin than the
            # partition's records (the replica's own); nothing landed wrong.
            assert "the same topic is written in two streams" in error and not wrong, error
            continue
        assert f"from offset {first_foreign}," in error, error
        if src == a:  # sanfrancisco's gateway into newyork was busy: its batch landed after newyork's records
            assert wrong, error
        if wrong:
            said = (
                f"1 record of {src} landed at a wrong offset, offset {wrong[0]};"
                if len(wrong) == 1
                else f"{len(wrong)} records of {src} landed at wrong offsets, the first at offset {wrong[0]};"
            )
            assert said in error, error
        else:  # the gateway saw the other side's records before it wrote (its end check)
            assert f"no record of {src} landed at a wrong offset" in error, error
        assert "stream replica resync" in error, error


def test_pause_resume_new_topic_and_remove(env: Env) -> None:
    n = name("life")
    a = new_stream(env.reg, f"/sanfrancisco/{n}")
    b = new_stream(env.reg, f"/tokyo/{n}", copyfrom=a)
    new_topics(env.reg, a, {"t": 2})
    link(env.reg, a, b)
    produce_to(env, a, "t", 200, 2)
    wait_replicated(env, a, b, {"t": 2})

    # Pause: nothing applied, replica list says paused with the pending count; resume goes on.
    cli("stream", "replica", "pause", "-path", a, "-replica", b, registry=env.reg)
    time.sleep(3)  # the gateway sees the pause at its next metadata refresh (every 2 s)
    produce_to(env, a, "t", 100, 2, start=200)
    time.sleep(2.5)
    assert true_ends(env.bs_of(b), sp(b), {"t": 2}) == {("t", 0): 100, ("t", 1): 100}
    row = replica_rows(env.reg, a)[b]
    assert row["paused"] is True and row["putsPending"] == 100 and row["isUptodate"] is False
    cli("stream", "replica", "resume", "-path", a, "-replica", b, registry=env.reg)
    wait_replicated(env, a, b, {"t": 2})

    # A topic created on the source later shows in the replica's topic list and replicates.
    new_topics(env.reg, a, {"late": 3})
    produce_to(env, a, "late", 300, 3)

    def replica_topics() -> dict:
        rows = cli_data("stream", "topic", "list", "-path", b, registry=env.reg)
        return {r["topic"]: r["partitions"] for r in rows}

    wait_until(lambda: replica_topics() == {"t": 2, "late": 3}, 30, "the new topic in the replica")
    wait_replicated(env, a, b, {"t": 2, "late": 3})
    assert assert_replica_of(env, a, b, {"t": 2, "late": 3}) == 600

    # Remove: the link stops.
    cli("stream", "replica", "remove", "-path", a, "-replica", b, registry=env.reg)
    assert replica_rows(env.reg, a) == {}
    time.sleep(3)
    produce_to(env, a, "t", 100, 2, start=300)
    time.sleep(2.5)
    assert true_ends(env.bs_of(b), sp(b), {"t": 2, "late": 3}) == {
        ("t", 0): 150,
        ("t", 1): 150,
        ("late", 0): 100,
        ("late", 1): 100,
        ("late", 2): 100,
    }


def test_throttle_edits_take_effect_without_a_restart(env: Env) -> None:
    n = name("thr")
    a = new_stream(env.reg, f"/sanfrancisco/{n}")
    b = new_stream(env.reg, f"/newyork/{n}", copyfrom=a)
    new_topics(env.reg, a, {"t": 1})
    link(env.reg, a, b)
    produce_to(env, a, "t", 100, 1)
    wait_replicated(env, a, b, {"t": 1})

    def replicated() -> int:
        # The broker's high watermark, not the true end: a throttled link writes a slice every 0.2 s, and on Tansu a
        # reader of the last records sees no end of partition while records keep coming (true_ends timed out). The
        # watermark falls short of the true end by less than a slice (8 records); without the throttle it is near 700.
        c = Consumer({"bootstrap.servers": env.bs_of(b), "group.id": "streamtools-hw"})
        try:
            return int(c.get_watermark_offsets(TopicPartition(kafka_topic_name(sp(b), "t"), 0), timeout=10)[1])
        finally:
            c.close()

    cli("stream", "replica", "edit", "-path", a, "-replica", b, "-throttle", "true", registry=env.reg)
    time.sleep(3)  # a metadata refresh
    produce_to(env, a, "t", 600, 1, start=100)
    time.sleep(3)
    assert replicated() < 100 + 6 * THROTTLE_RATE, "-throttle true had no effect"
    cli("stream", "replica", "edit", "-path", a, "-replica", b, "-throttle", "false", registry=env.reg)
    wait_replicated(env, a, b, {"t": 1}, timeout=8)
    assert assert_replica_of(env, a, b, {"t": 1}) == 700


def test_two_way_agreement_needed(env: Env) -> None:
    n = name("agree")
    a = new_stream(env.reg, f"/sanfrancisco/{n}")
    b = new_stream(env.reg, f"/newyork/{n}", copyfrom=a)
    c = new_stream(env.reg, f"/tokyo/{n}", copyfrom=a)
    new_topics(env.reg, a, {"t": 2})
    link(env.reg, a, b, upstream=False)  # replica add only
    cli("stream", "upstream", "add", "-path", c, "-upstream", a, registry=env.reg)  # upstream add only
    produce_to(env, a, "t", 100, 2)
    row = replica_rows(env.reg, a)[b]
    assert row["replicaState"] == "REPLICA_STATE_WAITING_FOR_UPSTREAM"
    assert "upstream add" in row["lasterror"] and row["isUptodate"] is False
    time.sleep(4.5)  # two metadata refreshes of the gateways
    # The gateways applied nothing: the replicas do not even have the topic.
    assert cli_data("stream", "topic", "list", "-path", b, registry=env.reg) == []
    assert cli_data("stream", "topic", "list", "-path", c, registry=env.reg) == []
    # With both halves it runs.
    cli("stream", "upstream", "add", "-path", b, "-upstream", a, registry=env.reg)
    wait_replicated(env, a, b, {"t": 2})
    assert assert_replica_of(env, a, b, {"t": 2}) == 100


# -- bad input ------------------------------------------------------------------------------
def metadata(env: Env, *paths: str) -> str:
    """Everything the replica verbs could change, as one comparable text."""
    out = []
    for p in paths:
        info = cli_data("stream", "info", "-path", p, registry=env.reg)[0]
        reps = [
            {k: v for k, v in r.items() if k in ("replicaPath", "paused", "throttle", "idx", "networkcompression")}
            for r in cli_data("stream", "replica", "list", "-path", p, registry=env.reg)
        ]
        ups = cli_data("stream", "upstream", "list", "-path", p, registry=env.reg)
        out.append(json.dumps([info, reps, ups], sort_keys=True))
    return "\n".join(out)


def one_line_error(env: Env, *args: str) -> str:
    p = cli(*args, registry=env.reg, check=False)
    assert p.returncode != 0, f"{args} succeeded"
    assert "Traceback" not in p.stderr + p.stdout, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, f"{args}: expected one line on stderr, got {lines!r}"
    return lines[0]


def test_bad_input_for_replica_verbs(env: Env) -> None:
    n = name("bad")
    a = new_stream(env.reg, f"/sanfrancisco/{n}")
    b = new_stream(env.reg, f"/newyork/{n}", copyfrom=a)
    c = new_stream(env.reg, f"/newyork/{n}c", copyfrom=a)
    link(env.reg, a, b)
    before = metadata(env, a, b, c)
    cases = [
        (["stream", "replica", "add", "-path", a, "-replica", f"/newyork/{n}missing"], "does not exist"),
        (["stream", "replica", "add", "-path", f"/sanfrancisco/{n}missing", "-replica", b], "does not exist"),
        (["stream", "replica", "add", "-path", a, "-replica", b], "already a replica"),
        (["stream", "replica", "add", "-path", a, "-replica", a], "own replica"),
        (["stream", "replica", "add", "-path", a, "-replica", f"/mapr/sanfrancisco/{n}"], "own replica"),
        (["stream", "upstream", "add", "-path", b, "-upstream", a], "already an upstream"),
        (["stream", "upstream", "add", "-path", b, "-upstream", b], "own upstream"),
        (["stream", "upstream", "add", "-path", b, "-upstream", f"/tokyo/{n}missing"], "does not exist"),
        (["stream", "replica", "pause", "-path", a, "-replica", c], "not a replica"),
        (["stream", "replica", "resume", "-path", a, "-replica", c], "not a replica"),
        (["stream", "replica", "edit", "-path", a, "-replica", c, "-throttle", "true"], "not a replica"),
        (["stream", "replica", "remove", "-path", a, "-replica", c], "not a replica"),
        (["stream", "replica", "remove", "-path", a, "-replica", f"/newyork/{n}missing"], "not a replica"),
        (["stream", "upstream", "remove", "-path", c, "-upstream", a], "not an upstream"),
        (["stream", "replica", "pause", "-path", a], "replica"),
        (["stream", "replica", "add", "-path", a, "-replica", f"/nowhere{n}/x"], ""),
        (["stream", "replica", "edit", "-path", a, "-replica", b], "nothing to change"),
        (["stream", "replica", "edit", "-path", a, "-replica", b, "-newreplica", a], "own replica"),
        (["stream", "replica", "add", "-path", a, "-replica", c, "-paused", "maybe"], "boolean"),
        (["stream", "replica", "list", "-path", f"/sanfrancisco/{n}missing"], "does not exist"),
    ]
    for args, words in cases:
        line = one_line_error(env, *args)
        assert words in line, f"{args}: {line}"
    assert metadata(env, a, b, c) == before


def test_replica_and_upstream_limits(env: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    """The 65th replica or upstream is refused; the limit is lowered to 2 so that the test stays small."""
    from streamrepl import registry, replicas
    from streamrepl.errors import LimitExceeded
    from streamrepl.streams import load

    monkeypatch.setattr(replicas, "MAX_REPLICAS", 2)
    monkeypatch.setattr(replicas, "MAX_UPSTREAMS", 2)
    reg = registry.load(str(env.reg))
    n = name("lim")
    src = new_stream(env.reg, f"/sanfrancisco/{n}")
    dsts = [new_stream(env.reg, f"/newyork/{n}{i}") for i in range(3)]
    replicas.add(reg, src, dsts[0])
    replicas.add(reg, src, dsts[1])
    _, before = load(reg, src)
    with pytest.raises(LimitExceeded, match="already has 2 replicas"):
        replicas.add(reg, src, dsts[2])
    _, after = load(reg, src)
    assert after == before
    ups = [new_stream(env.reg, f"/tokyo/{n}{i}") for i in range(3)]
    replicas.upstream_add(reg, dsts[2], ups[0])
    replicas.upstream_add(reg, dsts[2], ups[1])
    _, before = load(reg, dsts[2])
    with pytest.raises(LimitExceeded, match="already has 2 upstreams"):
        replicas.upstream_add(reg, dsts[2], ups[2])
    _, after = load(reg, dsts[2])
    assert after == before


def plain_topic(env: Env, path: str, topic: str, parts: int) -> None:
    """What a plain Kafka tool does: make the Kafka topic by name, under the stream's prefix, outside streamrepl."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": env.bs_of(path)})
    for f in admin.create_topics([NewTopic(kafka_topic_name(sp(path), topic), parts, 1)]).values():
        f.result(30)


def test_topics_made_by_plain_kafka_clients_are_replicated_both_ways_and_many_to_one(env: Env) -> None:
    """Nobody runs a streamrepl command after the plain clients made their topics: the gateways adopt them."""
    n = name("plain")
    a = new_stream(env.reg, f"/sanfrancisco/{n}")
    b = new_stream(env.reg, f"/newyork/{n}", copyfrom=a)
    link(env.reg, a, b)
    link(env.reg, b, a)
    plain_topic(env, a, "views", 2)
    plain_topic(env, b, "clicks", 3)
    produce_to(env, a, "views", 300, 2, tag="a")
    produce_to(env, b, "clicks", 300, 3, tag="b")
    wait_replicated(env, a, b, {"views": 2}, timeout=120)
    wait_replicated(env, b, a, {"clicks": 3}, timeout=120)
    assert assert_replica_of(env, a, b, {"views": 2}) == 300
    assert assert_replica_of(env, b, a, {"clicks": 3}) == 300

    west, east = new_stream(env.reg, f"/sanfrancisco/{n}m"), new_stream(env.reg, f"/tokyo/{n}m")
    hub = new_stream(env.reg, f"/newyork/{n}m", copyfrom=west)
    link(env.reg, west, hub)
    link(env.reg, east, hub)
    plain_topic(env, west, "w", 2)
    plain_topic(env, east, "e", 2)
    produce_to(env, west, "w", 200, 2, tag="w")
    produce_to(env, east, "e", 200, 2, tag="e")
    wait_replicated(env, west, hub, {"w": 2}, timeout=120)
    wait_replicated(env, east, hub, {"e": 2}, timeout=120)
    assert assert_replica_of(env, west, hub, {"w": 2}) == 200
    assert assert_replica_of(env, east, hub, {"e": 2}) == 200
    wait_uptodate(env, a, b, west, east)


def test_many_to_one_clash_names_both_upstreams_stops_only_its_partitions_and_its_advice_keeps_both(
    env: Env,
) -> None:
    """Two upstreams write topic `shared` into one replica: the replica keeps the first one's records; the second's
    link says so by path, with what to do, on the clashing partitions alone (ahead of the replica on one, behind it
    on the other), while its other topic replicates; followed (the second upstream removed), both keep theirs."""
    n = name("clash")
    sf, lon, agg = f"/sanfrancisco/{n}", f"/tokyo/{n}", f"/newyork/{n}agg"
    for path in (sf, lon, agg):
        new_stream(env.reg, path)
    new_topics(env.reg, sf, {"shared": 2})
    new_topics(env.reg, lon, {"shared": 2, "lonly": 1})
    write(env.bs_of(sf), env.kt(sf, "shared"), {0: 20, 1: 20}, "sf")
    write(env.bs_of(lon), env.kt(lon, "shared"), {0: 30, 1: 5}, "lon")
    produce_to(env, lon, "lonly", 12, 1, tag="lonly")
    link(env.reg, sf, agg)
    wait_replicated(env, sf, agg, {"shared": 2})
    sf_held = read_all(env.bs_of(agg), sp(agg), {"shared": 2})
    link(env.reg, lon, agg)

    def clash_reported() -> dict | None:
        row = replica_rows(env.reg, lon)[agg]
        return row if row["errorPartitions"] == 2 else None

    row = wait_until(clash_reported, 60, "the clash on both partitions of lon's link")
    error = row["lasterror"]
    assert f"two upstreams write topic shared into {agg}, {sf} and {lon}" in error, error
    assert f"keeps the records of {sf}" in error and "diverged" not in error, error
    fix = f"'streamrepl stream replica remove -path {lon} -replica {agg}'"
    assert fix in error, error
    wait_replicated(env, lon, agg, {"lonly": 1})  # lon's other topic goes on
    produce_to(env, sf, "shared", 6, 2, start=100, tag="sf2")  # and so does sf into the clashing partitions
    wait_replicated(env, sf, agg, {"shared": 2})
    sf_row = replica_rows(env.reg, sf)[agg]
    assert (sf_row["replicaState"], sf_row["errorPartitions"]) == ("REPLICA_STATE_REPLICATING", 0), sf_row
    assert assert_replica_of(env, sf, agg, {"shared": 2}) == 46
    lon_recs = read_all(env.bs_of(lon), sp(lon), {"shared": 2})

    cli(*fix.strip("'").split()[1:], registry=env.reg)
    assert agg not in replica_rows(env.reg, lon)
    wait_uptodate(env, sf)
    assert assert_replica_of(env, sf, agg, {"shared": 2}) == 46
    held = read_all(env.bs_of(agg), sp(agg), {"shared": 2})
    assert all(held[tp][: len(sf_held[tp])] == sf_held[tp] for tp in sf_held), "nothing of sf's was overwritten"
    assert read_all(env.bs_of(lon), sp(lon), {"shared": 2}) == lon_recs


def test_topic_create_refuses_a_name_another_upstream_of_a_replica_writes_unless_forced(env: Env) -> None:
    n = name("tc")
    sf, lon, agg = f"/sanfrancisco/{n}", f"/tokyo/{n}", f"/newyork/{n}agg"
    for path in (sf, lon, agg):
        new_stream(env.reg, path)
    new_topics(env.reg, sf, {"shared": 1})
    link(env.reg, sf, agg, paused=True)
    link(env.reg, lon, agg, paused=True)
    refused = cli("stream", "topic", "create", "-path", lon, "-topic", "shared", registry=env.reg, check=False)
    assert refused.code != 0
    line = refused.stderr.strip()
    assert len(line.splitlines()) == 1, line
    assert f"topic shared of {lon} would clash in {agg}, a replica of {lon}: its upstream {sf} has a topic" in line
    assert "-force true" in line, line
    assert "shared" not in {r["topic"] for r in cli_data("stream", "topic", "list", "-path", lon, registry=env.reg)}
    cli("stream", "topic", "create", "-path", lon, "-topic", "other", registry=env.reg)  # no clash: no word
    forced = cli("stream", "topic", "create", "-path", lon, "-topic", "shared", "-force", "true", registry=env.reg)
    assert f"warning: topic shared of {lon} clashes in {agg}" in forced.stderr, forced.stderr
    assert "shared" in {r["topic"] for r in cli_data("stream", "topic", "list", "-path", lon, registry=env.reg)}
