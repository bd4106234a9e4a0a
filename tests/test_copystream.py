"""copystream against real brokers: offsets preserved record by record, reruns copy only what is new,
gaps become fillers, and a second run on the same destination is refused."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from support import RECENT_MS, Run
from support.clusters import registered_clusters

from streamrepl import kafka, policy, stream_ops, streams, topics
from streamrepl.bulk.lock import CopyLock, CopyLocked
from streamrepl.cli import main
from streamrepl.local import EphemeralClusters
from streamrepl.paths import kafka_topic_name
from streamrepl.registry import Registry, load

#: Copies this small run in this process; the tests marked spark run on Spark (-mapreduce true).
pytestmark = [pytest.mark.e2e]

SRC, DST = "/sanfrancisco/activity", "/newyork/activity"
TS0 = RECENT_MS  # recent: noida-db deletes records older than retention.ms (7 days)


# -- helpers shared with the other Spark test modules ------------------------------------------
class Env:
    def __init__(self, ec: EphemeralClusters):
        self.ec = ec
        self.registry_path = str(ec.registry_path)
        self.reg: Registry = load(self.registry_path)

    def bootstrap(self, cluster: str) -> str:
        return self.ec.brokers[cluster].bootstrap

    def kt(self, stream: str, topic: str) -> str:
        return kafka_topic_name(streams.resolve(self.reg, stream).path, topic)

    def uuid(self, stream: str) -> str:
        return streams.load(self.reg, stream)[1].uuid

    def make_stream(self, path: str, topic_names: list[str], partitions: int) -> None:
        stream_ops.create(self.reg, path, {"defaultpartitions": partitions})
        for t in topic_names:
            topics.create(self.reg, path, t)


@pytest.fixture(scope="module")
def env() -> Iterator[Env]:
    with registered_clusters(["sanfrancisco", "newyork"]) as ec:
        yield Env(ec)


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """Run the CLI in this process (Spark's JVM is started once and reused); (exit, stdout, stderr)."""
    code = 0
    try:
        main(list(args))
    except SystemExit as e:
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def send(
    bootstrap: str,
    kt: str,
    n: int,
    partitions: int,
    start: int = 0,
    single: bool = False,
    tag: str = "",
    plain: bool = False,
) -> None:
    """n records spread over the partitions: keys, headers, explicit timestamps; `single` flushes each
    one (one record per batch), otherwise they go in large batches (the Tansu watermark quirk)."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0 if single else 50, "log_level": 0})
    for i in range(start, start + n):
        kwargs: dict[str, Any] = {"partition": i % partitions, "timestamp": TS0 + 7 * i}
        if not plain and i % 11 != 5:
            kwargs["key"] = f"{tag}k{i}".encode()
            kwargs["headers"] = [("seq", str(i).encode()), ("tag", tag.encode()), ("empty", None)]
        p.produce(kt, value=(f"{tag}v{i}-".encode() * 5) if i % 13 != 7 else None, **kwargs)
        if single:
            p.flush(10)
    assert p.flush(30) == 0


Row = tuple[int, bytes | None, bytes | None, tuple, int, int, bool, str | None]


def records(bootstrap: str, kt: str, partition: int) -> list[Row]:
    """Every committed record of a partition: (offset, key, value, user headers, ts, ts type, filler, origin)."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "test-reader",
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
            "fetch.wait.max.ms": 20,
            "log_level": 0,
        }
    )
    out: list[Row] = []
    try:
        c.assign([TopicPartition(kt, partition, 0)])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            for m in c.consume(10000, timeout=0.2):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        return out
                    continue
                hs = m.headers() or []
                origin = next((v.decode() for k, v in hs if k == policy.ORIGIN), None)
                ts_type, ts = m.timestamp()
                row = (m.offset(), m.key(), m.value(), tuple(policy.user_headers(hs)), ts, ts_type)
                out.append((*row, policy.is_filler(hs), origin))  # type: ignore[arg-type]
        raise AssertionError(f"reading {kt}[{partition}] timed out")
    finally:
        c.close()


def assert_copied(env: Env, src: str, dst: str, topic_parts: dict[str, int]) -> tuple[int, int]:
    """Every source record sits at the same offset of the copy with the same key, value, user headers
    and timestamp; the copy has no holes and fillers only where the source shows no record.
    Returns (records, fillers) of the copy."""
    src_cluster, dst_cluster = src.split("/")[1], dst.split("/")[1]
    src_uuid = env.uuid(src)
    total = fillers = 0
    for topic, parts in topic_parts.items():
        for p in range(parts):
            a = records(env.bootstrap(src_cluster), env.kt(src, topic), p)
            b = records(env.bootstrap(dst_cluster), env.kt(dst, topic), p)
            assert [r[0] for r in b] == list(range(len(b))), f"{topic}[{p}]: the copy has holes"
            by_offset = {r[0]: r for r in b}
            for r in a:
                got = by_offset.get(r[0])
                assert got is not None, f"{topic}[{p}] offset {r[0]} missing from the copy"
                assert got[:5] == r[:5], f"{topic}[{p}] offset {r[0]} differs: {r[:5]} != {got[:5]}"
                assert got[5] == 1 and not got[6] and got[7] == src_uuid
            src_offsets = {r[0] for r in a}
            extra = [r for r in b if r[0] not in src_offsets]
            assert all(r[6] for r in extra), f"{topic}[{p}]: records in the copy that the source does not show"
            if a:
                assert len(b) >= a[-1][0] + 1
            total += len(a)
            fillers += len(extra)
    return total, fillers


def copied(out: str) -> int:
    m = re.search(r"copied (\d+) records", out)
    assert m, f"no summary in {out!r}"
    return int(m.group(1))


# -- tests -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "option"),
    [
        ("badthreads", ["-numthreads", "-4"]),
        ("badmaster", ["-master", "bogus://x"]),
        ("twoengines", ["-master", "local[2]", "-mapreduce", "false"]),
    ],
)
def test_bad_spark_options_are_refused_before_anything_changes(
    env: Env, capsys: pytest.CaptureFixture[str], name: str, option: list[str]
) -> None:
    """Issue 16, item 6: the destination stream and its topics are not created for a job that cannot run."""
    src, dst = f"/sanfrancisco/{name}", f"/newyork/{name}"
    env.make_stream(src, ["t"], 1)
    code, out, err = cli(capsys, "copystream", "-src", src, "-dst", dst, *option)
    assert code != 0 and out == ""
    assert len(err.strip().splitlines()) == 1 and option[1] in err, err
    d = streams.resolve(env.reg, dst)
    assert d.store.get(d.path.path) is None
    assert env.kt(dst, "t") not in kafka.topics(env.reg.get("newyork"))


@pytest.mark.spark
def test_copy_preserves_offsets_and_reruns_copy_only_new(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    """The first copy on Spark, the rerun in this process: either engine continues what the other copied."""
    env.make_stream(SRC, ["clicks", "views", "orders"], 4)
    bs = env.bootstrap("sanfrancisco")
    send(bs, env.kt(SRC, "clicks"), 12, 4, single=True, tag="c")
    send(bs, env.kt(SRC, "clicks"), 4000, 4, start=12, tag="c")
    send(bs, env.kt(SRC, "views"), 3000, 4, tag="v")
    send(bs, env.kt(SRC, "views"), 8, 4, start=3000, single=True, tag="v")
    send(bs, env.kt(SRC, "orders"), 9, 4, single=True, tag="o", plain=True)
    first = 12 + 4000 + 3000 + 8 + 9

    code, out, err = cli(capsys, "copystream", "-src", SRC, "-dst", DST, "-numthreads", "2", "-mapreduce", "true")
    assert code == 0, err
    assert err == ""  # quiet without a terminal
    assert len(out.strip().splitlines()) == 1 and copied(out) == first
    assert re.search(r"in [\d.]+ s, \d+ records/s; Spark start-up [\d.]+ s; 12 partitions$", out.strip())

    # The destination was created from the source's metadata, with the same topics and partition counts.
    _, dst_rec = streams.load(env.reg, DST)
    _, src_rec = streams.load(env.reg, SRC)
    assert dst_rec.uuid != src_rec.uuid and dst_rec.settings.defaultpartitions == 4
    assert {t: m.partitions for t, m in dst_rec.topics.items()} == {"clicks": 4, "views": 4, "orders": 4}
    assert dst_rec.copylock is None  # released
    parts = {"clicks": 4, "views": 4, "orders": 4}
    assert assert_copied(env, SRC, DST, parts) == (first, 0)

    # More records arrive, singles and batches: a rerun copies exactly those.
    send(bs, env.kt(SRC, "clicks"), 5, 4, start=5000, single=True, tag="c2")
    send(bs, env.kt(SRC, "views"), 2500, 4, start=5000, tag="v2")
    code, out, err = cli(capsys, "copystream", "-src", SRC, "-dst", DST, "-numthreads", "2")
    assert code == 0 and err == "", err
    assert copied(out) == 2505
    assert out.strip().endswith("; in-process (below 2,000,000; -mapreduce true to use Spark); 12 partitions"), out
    assert assert_copied(env, SRC, DST, parts) == (first + 2505, 0)

    # Nothing new: nothing copied, and Spark is not even started.
    code, out, err = cli(capsys, "copystream", "-src", SRC, "-dst", DST, "-json")
    assert code == 0, err
    assert '"records": 0' in out and '"sparkstartupseconds": 0' in out


def test_gaps_become_fillers_and_later_offsets_line_up(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    src, dst = "/sanfrancisco/tx", "/newyork/tx"
    env.make_stream(src, ["t"], 1)
    bs, kt = env.bootstrap("sanfrancisco"), env.kt(src, "t")
    send(bs, kt, 3, 1, single=True)  # 0..2
    tp = Producer({"bootstrap.servers": bs, "transactional.id": "copy-test", "log_level": 0})
    tp.init_transactions(10)
    tp.begin_transaction()
    for i in range(3):
        tp.produce(kt, value=b"tx%d" % i, key=b"k", partition=0, timestamp=TS0 + i)
    tp.commit_transaction(10)  # 3..5, commit marker at 6
    send(bs, kt, 2, 1, start=100, single=True)  # 7, 8
    tp.begin_transaction()
    tp.produce(kt, value=b"aborted", partition=0)
    tp.flush(10)
    tp.abort_transaction(10)  # an aborted record and its marker
    tp.begin_transaction()
    tp.produce(kt, value=b"last", partition=0, timestamp=TS0)
    tp.commit_transaction(10)  # the partition ends with a marker

    visible = [r[0] for r in records(bs, kt, 0)]
    end = visible[-1] + 2
    # Markers take offsets that no consumer sees. (Tansu also shows aborted records to read_committed
    # consumers; a copy shows what the source's consumers see.)
    assert visible[:8] == [0, 1, 2, 3, 4, 5, 7, 8] and end - 1 not in visible
    gaps = sorted(set(range(end)) - set(visible))

    code, out, err = cli(capsys, "copystream", "-src", src, "-dst", dst, "-numthreads", "2")
    assert code == 0, err
    assert copied(out) == len(visible) and f"{len(gaps)} fillers" in out
    assert assert_copied(env, src, dst, {"t": 1}) == (len(visible), len(gaps))
    copy = records(env.bootstrap("newyork"), env.kt(dst, "t"), 0)
    assert [r[0] for r in copy if r[6]] == gaps
    assert len(copy) == end  # the trailing marker has its filler too

    # Records written after the gap land at the same offsets in the copy.
    send(bs, kt, 3, 1, start=200, single=True)
    code, out, err = cli(capsys, "copystream", "-src", src, "-dst", dst, "-numthreads", "2")
    assert code == 0 and copied(out) == 3, err
    assert assert_copied(env, src, dst, {"t": 1}) == (len(visible) + 3, len(gaps))
    assert [r[0] for r in records(env.bootstrap("newyork"), env.kt(dst, "t"), 0)][-3:] == [end, end + 1, end + 2]


def test_an_open_transaction_stops_the_copy_until_it_is_decided(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    src, dst = "/sanfrancisco/open", "/newyork/open"
    env.make_stream(src, ["t"], 1)
    bs, kt = env.bootstrap("sanfrancisco"), env.kt(src, "t")
    send(bs, kt, 4, 1, single=True)  # 0..3
    tp = Producer({"bootstrap.servers": bs, "transactional.id": "copy-open", "log_level": 0})
    tp.init_transactions(10)
    tp.begin_transaction()
    tp.produce(kt, value=b"undecided", partition=0, timestamp=TS0)
    tp.flush(10)  # offset 4: may still commit or abort
    send(bs, kt, 2, 1, start=10, single=True)  # 5, 6: behind the open transaction
    code, out, err = cli(capsys, "copystream", "-src", src, "-dst", dst, "-json")
    assert code != 0
    assert "stopped at offset 4 behind a transaction still open in the source" in out
    assert [r[0] for r in records(env.bootstrap("newyork"), env.kt(dst, "t"), 0)] == [0, 1, 2, 3]

    tp.commit_transaction(10)
    code, out, err = cli(capsys, "copystream", "-src", src, "-dst", dst)
    assert code == 0, err
    assert copied(out) == 3
    assert assert_copied(env, src, dst, {"t": 1}) == (7, 1)  # the commit marker's filler


def test_second_run_on_the_same_destination_is_refused(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    """Another run holds the destination (a lock of a live process on this host): refused, nothing copied; once
    it lets go, the run copies. The lock is the same whichever engine copies."""
    src, dst = "/sanfrancisco/busy", "/newyork/busy"
    env.make_stream(src, ["t"], 2)
    send(env.bootstrap("sanfrancisco"), env.kt(src, "t"), 3000, 2)
    code, out, err = cli(capsys, "copystream", "-src", src, "-dst", dst)
    assert code == 0 and copied(out) == 3000, err
    send(env.bootstrap("sanfrancisco"), env.kt(src, "t"), 100, 2, start=3000)
    store = streams.resolve(env.reg, dst).store
    other = CopyLock(streams.resolve(env.reg, dst), "/sanfrancisco/elsewhere")
    other.acquire()
    try:
        code, out, err = cli(capsys, "copystream", "-src", src, "-dst", dst)
        assert code != 0
        assert re.search(
            r"copystream: destination /newyork/busy is being copied by another run \(owner \S+, since ", err
        )
        kt = env.kt(dst, "t")
        assert sum(len(records(env.bootstrap("newyork"), kt, p)) for p in range(2)) == 3000  # nothing copied
    finally:
        other.release()
    code, out, err = cli(capsys, "copystream", "-src", src, "-dst", dst)
    assert code == 0 and copied(out) == 100, err
    assert assert_copied(env, src, dst, {"t": 2}) == (3100, 0)
    assert getattr(store.get("/busy"), "copylock", None) is None


def test_a_record_written_into_the_copy_is_reported_even_with_nothing_new_to_copy(
    env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    """Something writes into the copy and the source gains as many records: the two partitions end at the same
    offset, so nothing looks new; copystream must still say that the copy is not the source's, and exit 1."""
    src, dst = "/sanfrancisco/strayed", "/newyork/strayed"
    env.make_stream(src, ["t"], 1)
    send(env.bootstrap("sanfrancisco"), env.kt(src, "t"), 5, 1)
    code, _, err = cli(capsys, "copystream", "-src", src, "-dst", dst)
    assert code == 0, err
    send(env.bootstrap("newyork"), env.kt(dst, "t"), 1, 1, start=100, plain=True)
    send(env.bootstrap("sanfrancisco"), env.kt(src, "t"), 1, 1, start=5)
    code, out, err = cli(capsys, "copystream", "-src", src, "-dst", dst)
    assert code != 0
    assert "/newyork/strayed:t[0]: the record at offset 5 of the copy did not come from the source" in err
    assert err.count("/newyork/strayed:t[0]:") == 1, err
    # The copy ahead of the source.
    send(env.bootstrap("newyork"), env.kt(dst, "t"), 2, 1, start=200, plain=True)
    code, out, err = cli(capsys, "copystream", "-src", src, "-dst", dst)
    assert code != 0
    assert "/newyork/strayed:t[0]: the copy ends at offset 8, past the source's end 6" in err


def test_a_dead_runs_lock_expires(env: Env) -> None:
    env.make_stream("/newyork/locked", [], 1)
    r = streams.resolve(env.reg, "/newyork/locked")
    dead = CopyLock(r, "/sanfrancisco/x", ttl=0.5)
    dead.acquire()
    with pytest.raises(CopyLocked, match="being copied by another run"):
        CopyLock(r, "/sanfrancisco/y").acquire()
    time.sleep(0.6)
    taker = CopyLock(r, "/sanfrancisco/y")
    taker.acquire()
    assert not dead.refresh() and dead.lost and "taken over" in dead.lost
    taker.release()
    assert getattr(r.store.get("/locked"), "copylock", None) is None


def test_the_lock_of_a_run_killed_on_this_host_is_taken_at_once(env: Env) -> None:
    """A local-mode copy run killed (kill -9, a crash) on this host leaves its lock behind; the next run on this
    host sees that the process is gone and takes the lock without waiting for it to expire. The lock of a run on
    a Spark cluster (executors may outlive the driver for a while) is waited for."""
    env.make_stream("/newyork/crashed", [], 1)
    r = streams.resolve(env.reg, "/newyork/crashed")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    crashed = CopyLock(r, "/sanfrancisco/x")
    crashed.owner = crashed.owner.replace(f":{os.getpid()}:", f":{gone.pid}:")
    crashed.acquire()
    taker = CopyLock(r, "/sanfrancisco/y")
    taker.acquire()  # no CopyLocked, though the crashed run's lock had 120 s to go
    rec = r.store.get("/crashed")
    assert rec is not None and rec.copylock is not None and rec.copylock["owner"] == taker.owner
    taker.release()
    on_cluster = CopyLock(r, "/sanfrancisco/x", local=False)
    on_cluster.owner = crashed.owner
    on_cluster.acquire()
    with pytest.raises(CopyLocked, match="being copied by another run"):
        CopyLock(r, "/sanfrancisco/y").acquire()


def test_a_live_holder_on_this_host_keeps_its_lock(env: Env) -> None:
    env.make_stream("/newyork/held", [], 1)
    r = streams.resolve(env.reg, "/newyork/held")
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        holder = CopyLock(r, "/sanfrancisco/x")
        holder.owner = holder.owner.replace(f":{os.getpid()}:", f":{live.pid}:")
        holder.acquire()
        with pytest.raises(CopyLocked, match="being copied by another run"):
            CopyLock(r, "/sanfrancisco/y").acquire()
    finally:
        live.kill()
        live.wait()


def test_permissions_are_checked(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    env.make_stream("/sanfrancisco/private", ["t"], 1)
    stream_ops.edit(env.reg, "/sanfrancisco/private", {"copyperm": "u:nobody", "consumeperm": "u:nobody"})
    code, _, err = cli(capsys, "copystream", "-src", "/sanfrancisco/private", "-dst", "/newyork/private")
    assert code != 0 and "lacks copyperm or consumeperm on stream /sanfrancisco/private" in err
    assert streams.resolve(env.reg, "/newyork/private").store.get("/private") is None
    code, _, err = cli(capsys, "copystream", "-src", "/sanfrancisco/nosuch", "-dst", "/newyork/x")
    assert code != 0 and "stream /sanfrancisco/nosuch does not exist" in err
    code, _, err = cli(capsys, "copystream", "-src", SRC, "-dst", DST, "-sparkconf", "novalue")
    assert code != 0 and "is not KEY=VALUE" in err


#: copystream's -json row, whichever engine copied.
ROW_KEYS = [
    "src",
    "dst",
    "dstcreated",
    "partitions",
    "records",
    "fillers",
    "bytes",
    "seconds",
    "recordspersecond",
    "sparkstartupseconds",
    "failed",
]


def _signal_after(args: list[str], registry: str, marker: bytes, sig: signal.Signals) -> Run:
    """Run streamrepl with stderr on a terminal (a pty: the engine line and the progress bar show) and send `sig`
    as soon as `marker` appears there; (exit status, stdout, what the terminal showed, escapes removed)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamrepl", *args],
        stdout=subprocess.PIPE,
        stderr=slave,
        env=dict(os.environ, STREAMREPL_CLUSTERS=registry),
    )
    os.close(slave)
    shown, sent = b"", False
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # the process closed the terminal
                    break
                if not chunk:
                    break
                shown += chunk
            elif proc.poll() is not None:
                break
            if not sent and marker in shown:
                proc.send_signal(sig)
                sent = True
        assert sent, shown.decode(errors="replace")
        out = proc.communicate(timeout=60)[0]
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown.decode(errors="replace"))  # the bar's escapes
    return Run(proc.returncode, out.decode(), plain)


@pytest.mark.parametrize(("sig", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_copy_leaves_each_partition_whole_and_a_rerun_finishes(
    env: Env, capsys: pytest.CaptureFixture[str], sig: signal.Signals, status: int
) -> None:
    """In-process, Ctrl-C or SIGTERM in the middle of a copy (at the engine line, printed as the copy starts): the
    tasks stop, what they queued is flushed, the lock is released, one line says what was left. A rerun copies the
    rest, and the copy is then exact record by record: what the interrupted run wrote was an unbroken prefix."""
    src, dst = f"/sanfrancisco/stopped{sig.value}", f"/newyork/stopped{sig.value}"
    n = 20_000  # 0.2 s of copying at least: the signal lands within milliseconds of the line
    env.make_stream(src, ["t"], 2)
    send(env.bootstrap("sanfrancisco"), env.kt(src, "t"), n, 2)
    run = _signal_after(
        ["copystream", "-src", src, "-dst", dst], env.registry_path, f"copying {n:,} records in-process".encode(), sig
    )
    assert run.code == status, run.stderr
    assert run.stdout == ""
    errors = [line for line in run.stderr.splitlines() if line.startswith("ERROR")]
    assert len(errors) == 1, run.stderr
    assert errors[0].startswith(f"ERROR (4) - copystream: interrupted: the copy into {dst} stopped part way;")
    assert errors[0].rstrip().endswith("run copystream again to copy the rest"), errors
    assert getattr(streams.resolve(env.reg, dst).store.get(f"/stopped{sig.value}"), "copylock", None) is None

    code, out, err = cli(capsys, "copystream", "-src", src, "-dst", dst, "-json")
    assert code == 0, err
    row = json.loads(out)["data"][0]
    assert list(row) == ROW_KEYS and row["sparkstartupseconds"] == 0
    assert 0 < row["records"]  # the interrupted run had not finished
    assert assert_copied(env, src, dst, {"t": 2}) == (n, 0)
