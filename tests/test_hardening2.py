"""Misuse found by the third hardening round, each a test before its fix: signals while Spark starts, names that
collide with streamrepl's own, output that reads two ways, and writes that break a replica."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
from support import RECENT_MS, STREAMREPL_BIN, Run, one_error_line, run_cli, run_proc

from streamrepl.local import EphemeralClusters


# -- 1. a signal while Spark starts stops its JVM and removes its log -------------------------------------------
def _marked_pids(marker: str) -> list[int]:
    """Processes (ours and the JVMs they started, reparented or not) whose environment holds `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in environ.split(b"\0"):
            found.append(int(entry))
    return found


def _is_java(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(b"java")
    except OSError:
        return False


@pytest.mark.spark
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the JVM through /proc")
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_while_spark_starts_stops_the_jvm_and_removes_its_log(
    cli: Callable[..., Run], new_path: Callable[..., str], tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    src, dst = new_path("sanfrancisco"), new_path("newyork")
    assert cli("stream", "create", "-path", src).code == 0
    assert cli("stream", "topic", "create", "-path", src, "-topic", "t").code == 0
    assert run_proc(["produce", "-path", f"{src}:t"], stdin="a\nb\nc\n").code == 0
    marker = f"STREAMREPL_TEST_RUN={uuid.uuid4().hex}"
    name, _, value = marker.partition("=")
    # Files, not pipes: a JVM left behind would hold a pipe open and communicate() would wait for it.
    out_file, err_file = tmp_path.parent / f"{tmp_path.name}.out", tmp_path.parent / f"{tmp_path.name}.err"
    with out_file.open("w") as out_fd, err_file.open("w") as err_fd:
        proc = subprocess.Popen(
            [STREAMREPL_BIN, "copystream", "-src", src, "-dst", dst, "-numthreads", "1", "-mapreduce", "true"],
            stdout=out_fd,
            stderr=err_fd,
            env=dict(os.environ, TMPDIR=str(tmp_path), **{name: value}),
        )
    try:
        deadline = time.monotonic() + 60
        while not any(_is_java(p) for p in _marked_pids(marker)):
            assert proc.poll() is None, err_file.read_text()
            assert time.monotonic() < deadline, "Spark's JVM never started"
            time.sleep(0.05)
        time.sleep(0.5)  # the JVM is starting, not yet up
        proc.send_signal(sig)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out, err = out_file.read_text(), err_file.read_text()
    assert proc.returncode == code, err
    assert one_error_line(Run(proc.returncode, out, err)) == "ERROR (4) - copystream: interrupted"
    deadline = time.monotonic() + 15
    while (left := _marked_pids(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == [], "processes of the interrupted run are still running"
    assert list(tmp_path.glob("streamrepl-spark-*.log")) == []


# -- 2. streamrepl's own consumer groups are not for consume; cursor list shows every other group ----------------
def test_consume_refuses_a_group_of_streamrepl_itself(cli: Callable[..., Run], new_path: Callable[..., str]) -> None:
    src = new_path()
    assert cli("stream", "create", "-path", src).code == 0
    assert cli("stream", "topic", "create", "-path", src, "-topic", "t").code == 0
    line = one_error_line(cli("consume", "-path", f"{src}:t", "-group", "streamrepl-gateways-b", "-timeout", "1"))
    assert "streamrepl-" in line and "-group" in line, line


def _commit(clusters: EphemeralClusters, path: str, group: str) -> None:
    """`group` commits offset 1 of partition 0 of topic t of `path` (a raw Kafka client: any name goes)."""
    from confluent_kafka import Consumer, TopicPartition

    from streamrepl.paths import kafka_topic_name, parse_stream

    kt = kafka_topic_name(parse_stream(path, {"sanfrancisco", "newyork"}, "sanfrancisco"), "t")
    c = Consumer({"bootstrap.servers": clusters.brokers["sanfrancisco"].bootstrap, "group.id": group})
    try:
        c.commit(offsets=[TopicPartition(kt, 0, 1)], asynchronous=False)
    finally:
        c.close()


def test_cursor_list_shows_a_group_with_control_characters_and_hides_only_internal_groups(
    cli: Callable[..., Run], clusters: EphemeralClusters, new_path: Callable[..., str]
) -> None:
    src = new_path()
    assert cli("stream", "create", "-path", src, "-defaultpartitions", "1").code == 0
    assert cli("stream", "topic", "create", "-path", src, "-topic", "t").code == 0
    assert run_proc(["produce", "-path", f"{src}:t"], stdin="a\nb\n").code == 0
    _commit(clusters, src, "odd\ngroup\x07")
    _commit(clusters, src, "streamrepl-gateways-x")
    _commit(clusters, src, "plain")
    run = cli("stream", "cursor", "list", "-path", src, "-noheader")
    assert run.code == 0, run
    groups = [line.split("\t")[0] for line in run.stdout.splitlines()]
    assert groups == ["odd\\ngroup\\x07", "plain"], run.stdout
    data = cli("stream", "cursor", "list", "-path", src, "-json").data()
    assert sorted(r["consumergroup"] for r in data) == ["odd\ngroup\x07", "plain"]
    assert "streamrepl-" in " ".join(cli("stream", "cursor", "list", "-help").stdout.split())


# -- 3. a cell reads back one way only ----------------------------------------------------------------------------
def test_consume_shows_a_byte_and_its_escape_as_text_differently(
    cli: Callable[..., Run], clusters: EphemeralClusters, new_path: Callable[..., str]
) -> None:
    from confluent_kafka import Producer

    from streamrepl.paths import kafka_topic_name, parse_stream

    src = new_path()
    assert cli("stream", "create", "-path", src, "-defaultpartitions", "1").code == 0
    assert cli("stream", "topic", "create", "-path", src, "-topic", "t").code == 0
    kt = kafka_topic_name(parse_stream(src, {"sanfrancisco", "newyork"}, "sanfrancisco"), "t")
    p = Producer({"bootstrap.servers": clusters.brokers["sanfrancisco"].bootstrap, "log_level": 0})
    for key in (b"\xff\xfe", b"\\xff\\xfe", b"a\\tb", b"a\tb", b"bell\x07"):
        p.produce(kt, key=key, value=b"v")
    assert p.flush(10) == 0
    del p
    run = cli("consume", "-path", f"{src}:t", "-offset", "earliest", "-count", "5", "-timeout", "10")
    assert run.code == 0, run
    keys = [line.split("\t")[4] for line in run.stdout.splitlines()]
    assert keys == ["\\xff\\xfe", "\\\\xff\\\\xfe", "a\\\\tb", "a\\tb", "bell\\x07"], keys


def test_table_cells_escape_backslashes_and_control_characters() -> None:
    from streamrepl.output import escape_bytes, escape_text

    assert escape_text("plain text, é") == "plain text, é"
    assert escape_text("a\\b") == "a\\\\b"
    assert escape_text("a\nb\tc\x1b[31m") == "a\\nb\\tc\\x1b[31m"
    assert escape_bytes(b"\xff") != escape_bytes(b"\\xff")


# -- 4. gateway ids --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("gateway_id", ["bad\nid", "with space", "slash/id", "", "é"])
def test_gateway_start_refuses_an_id_outside_letters_digits_dot_underscore_dash(
    tmp_path: Path, gateway_id: str
) -> None:
    registry = tmp_path / "clusters.yaml"
    registry.write_text("clusters:\n  newyork:\n    bootstrap.servers: 127.0.0.1:1\n")
    # A process of its own: a gateway that takes the id runs until it is stopped.
    run = run_proc(["gateway", "start", "-cluster", "newyork", "-id", gateway_id, "-clusters", registry], timeout=30)
    line = one_error_line(run)
    assert "-id" in line and "letters, digits" in line, line


# -- 5. local up refuses what the registry would refuse -------------------------------------------------------------
@pytest.mark.parametrize("names", ["mapr", "sanfrancisco,mapr"])
def test_local_up_refuses_a_cluster_the_registry_refuses(tmp_path: Path, names: str) -> None:
    try:
        run = run_cli("local", "up", "-clusters", names, "-dir", str(tmp_path))
    finally:
        run_cli("local", "down", "-dir", str(tmp_path))  # brokers it should not have started
    line = one_error_line(run)
    assert "'mapr'" in line, line
    assert not (tmp_path / "clusters.yaml").exists()


# -- 6. diffstreams checks its arguments before Spark starts ------------------------------------------------------
#: A master that cannot start: an argument checked after Spark starts fails on it instead.
NO_SPARK = ["-master", "spark://127.0.0.1:1"]


def test_diffstreams_refuses_an_outdir_it_cannot_write_before_spark_starts(
    cli: Callable[..., Run], new_path: Callable[..., str], tmp_path: Path
) -> None:
    src, dst = new_path(), new_path("newyork")
    for path in (src, dst):
        assert cli("stream", "create", "-path", path).code == 0
        assert cli("stream", "topic", "create", "-path", path, "-topic", "t").code == 0
    blocker = tmp_path / "file"
    blocker.write_text("")
    line = one_error_line(cli("diffstreams", "-src", src, "-dst", dst, "-outdir", blocker / "out", *NO_SPARK))
    assert "-outdir" in line and "Spark" not in line, line
    run = cli("diffstreams", "-src", src, "-dst", dst, "-outdir", blocker, *NO_SPARK, "-json")
    assert run.code != 0 and "-outdir" in run.json()["errors"][0]["desc"], run
    assert blocker.read_text() == ""


def test_diffstreams_refuses_a_stream_compared_with_itself(
    cli: Callable[..., Run], new_path: Callable[..., str]
) -> None:
    src = new_path()
    assert cli("stream", "create", "-path", src).code == 0
    assert cli("stream", "topic", "create", "-path", src, "-topic", "t").code == 0
    for dst in (src, f"/mapr{src}"):
        line = one_error_line(cli("diffstreams", "-src", src, "-dst", dst, *NO_SPARK))
        assert "same stream" in line and "Spark" not in line, line


# -- 7. stream create takes the compaction settings stream edit takes -------------------------------------------
def test_stream_create_takes_the_compaction_settings(cli: Callable[..., Run], new_path: Callable[..., str]) -> None:
    path = new_path()
    made = cli(
        "stream", "create", "-path", path, "-compact", "true", "-mincompactionlag", "5000", "-deleteretention", "7"
    )
    assert made.code == 0, made
    [info] = cli("stream", "info", "-path", path, "-json").data()
    assert info["compact"] is True, info
    # stream info shows no compaction lag or delete retention: read them where the topics get them from.
    from streamrepl import registry, streams

    rec = streams.load(registry.load(None), path)[1]
    kept = {k: getattr(rec.settings, k) for k in ("mincompactionlag", "deleteretention")}
    assert kept == {"mincompactionlag": 5000, "deleteretention": 7}, kept
    line = one_error_line(cli("stream", "create", "-path", new_path(), "-deleteretention", "-1"))
    assert "-deleteretention -1 is negative" in line, line


# -- 8. a paused synchronous replica is not waited for, and produce says so ---------------------------------------
def test_produce_warns_once_that_a_paused_synchronous_replica_is_not_waited_for(
    cli: Callable[..., Run], new_path: Callable[..., str]
) -> None:
    src, dst = new_path(), new_path("newyork")
    for path in (src, dst):
        assert cli("stream", "create", "-path", path).code == 0
    assert cli("stream", "topic", "create", "-path", src, "-topic", "t").code == 0
    added = cli("stream", "replica", "add", "-path", src, "-replica", dst, "-synchronous", "true", "-paused", "true")
    assert added.code == 0, added
    run = run_proc(["produce", "-path", f"{src}:t"], stdin="a\nb\nc\n")
    assert run.code == 0, run
    warning = f"replica {dst} is synchronous but paused: records are acknowledged without waiting for it"
    assert [line for line in run.stderr.splitlines() if "paused" in line] == [f"warning: {warning}"], run.stderr


# -- 9. writes into a one-way replica, and cycles of one-way links ------------------------------------------------
def _link(cli: Callable[..., Run], src: str, dst: str) -> None:
    """Both halves of a link from `src` to `dst`."""
    added = cli("stream", "replica", "add", "-path", src, "-replica", dst, "-paused", "true")
    assert added.code == 0, added
    assert cli("stream", "upstream", "add", "-path", dst, "-upstream", src).code == 0


def test_produce_into_a_one_way_replica_is_refused(cli: Callable[..., Run], new_path: Callable[..., str]) -> None:
    src, dst = new_path(), new_path("newyork")
    for path in (src, dst):
        assert cli("stream", "create", "-path", path).code == 0
        assert cli("stream", "topic", "create", "-path", path, "-topic", "t").code == 0
    _link(cli, src, dst)
    run = run_proc(["produce", "-path", f"{dst}:t"], stdin="stray\n")
    line = one_error_line(run)
    assert "upstream" in line and src in line and "multi-master" in line, line
    read = cli("consume", "-path", f"{dst}:t", "-offset", "earliest", "-timeout", "1")
    assert read.code == 0 and read.stdout == "", read
    # Both ways, each stream's records are its own to write.
    _link(cli, dst, src)
    assert run_proc(["produce", "-path", f"{dst}:t"], stdin="mine\n").code == 0


def test_replica_add_refuses_to_close_a_cycle_of_one_way_links(
    cli: Callable[..., Run], new_path: Callable[..., str]
) -> None:
    a, b, c = new_path(stem="cy"), new_path("newyork", stem="cy"), new_path(stem="cy")
    for path in (a, b, c):
        assert cli("stream", "create", "-path", path).code == 0
    _link(cli, a, b)
    _link(cli, b, c)
    line = one_error_line(cli("stream", "replica", "add", "-path", c, "-replica", a))
    assert "cycle" in line and f"{a} -> {b} -> {c}" in line, line
    assert [r["replicaPath"] for r in cli("stream", "replica", "list", "-path", c, "-json").data()] == []
    # Two streams replicating to each other are a multi-master pair, not a cycle to refuse.
    assert cli("stream", "replica", "add", "-path", b, "-replica", a, "-paused", "true").code == 0


def test_upstream_add_refuses_to_close_a_cycle_of_one_way_links(
    cli: Callable[..., Run], new_path: Callable[..., str]
) -> None:
    """A link needs both halves; the last one added closes a cycle, and it may be the upstream half. Here the
    replica half c -> a passes replica add's check (a replica half b -> a made a and b look multi-master then), and
    `upstream add -path a -upstream c` would have closed the one-way cycle a -> b -> c -> a (issue 25)."""
    a, b, c = new_path(stem="up"), new_path("newyork", stem="up"), new_path(stem="up")
    for path in (a, b, c):
        assert cli("stream", "create", "-path", path).code == 0
    assert cli("stream", "replica", "add", "-path", b, "-replica", a, "-paused", "true").code == 0
    _link(cli, a, b)
    _link(cli, b, c)
    assert cli("stream", "replica", "add", "-path", c, "-replica", a, "-paused", "true").code == 0
    line = one_error_line(cli("stream", "upstream", "add", "-path", a, "-upstream", c))
    assert "cycle" in line and f"{a} -> {b} -> {c} -> {a}" in line, line
    assert cli("stream", "upstream", "list", "-path", a, "-json").data() == []
    # The other half of b -> a makes a and b a multi-master pair, which stays allowed.
    assert cli("stream", "upstream", "add", "-path", a, "-upstream", b).code == 0


def test_replica_edit_newreplica_refuses_to_close_a_cycle_of_one_way_links(
    cli: Callable[..., Run], new_path: Callable[..., str]
) -> None:
    a, b, c, x = (new_path(stem="ed") for _ in range(4))
    for path in (a, b, c, x):
        assert cli("stream", "create", "-path", path).code == 0
    _link(cli, a, b)
    _link(cli, b, c)
    assert cli("stream", "replica", "add", "-path", c, "-replica", x, "-paused", "true").code == 0
    line = one_error_line(cli("stream", "replica", "edit", "-path", c, "-replica", x, "-newreplica", a))
    assert "cycle" in line and f"{a} -> {b} -> {c}" in line, line
    assert [r["replicaPath"] for r in cli("stream", "replica", "list", "-path", c, "-json").data()] == [x]


def test_replica_resume_says_why_it_cannot_restart_a_link_in_error(
    cli: Callable[..., Run], new_path: Callable[..., str]
) -> None:
    src, dst = new_path(), new_path("newyork")
    for path in (src, dst):
        assert cli("stream", "create", "-path", path).code == 0
    assert cli("stream", "replica", "add", "-path", src, "-replica", dst).code == 0
    assert cli("stream", "upstream", "add", "-path", dst, "-upstream", src).code == 0
    # The replica deleted and created again is another stream: the link is in ERROR.
    assert cli("stream", "delete", "-path", dst).code == 0
    assert cli("stream", "create", "-path", dst).code == 0
    line = one_error_line(cli("stream", "replica", "resume", "-path", src, "-replica", dst))
    assert "ERROR" in line and "was deleted and created again" in line, line
    assert cli("stream", "replica", "pause", "-path", src, "-replica", dst).code == 0
    assert cli("stream", "replica", "resume", "-path", src, "-replica", dst).code == 0


def test_replica_resume_reads_the_links_state_not_its_pending_work(
    cli: Callable[..., Run], new_path: Callable[..., str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """resume needs to know whether the link is paused or in ERROR. It read every link of the stream as `replica
    list` does, pending work included: the partitions' ends on both sides and a sample of up to 20,000 pending
    records a partition (0.6-0.9 s with a backlog, and 0.17-0.34 s of the source broker's CPU; BENCHMARKS.md)."""
    from streamrepl import status

    src, dst = new_path(), new_path("newyork")
    for path in (src, dst):
        assert cli("stream", "create", "-path", path, "-defaultpartitions", "1").code == 0
    assert cli("stream", "topic", "create", "-path", src, "-topic", "t").code == 0
    assert cli("stream", "replica", "add", "-path", src, "-replica", dst, "-paused", "true").code == 0
    assert cli("stream", "upstream", "add", "-path", dst, "-upstream", src).code == 0

    def counted(*args: object, **kwargs: object) -> None:
        raise AssertionError("resume counted the link's pending work")

    monkeypatch.setattr(status, "_pending_detail", counted)
    monkeypatch.setattr(status.kafka, "partition_ends", counted)
    run = cli("stream", "replica", "resume", "-path", src, "-replica", dst)
    assert run.code == 0, run
    monkeypatch.undo()
    rows = cli("stream", "replica", "list", "-path", src, "-json").data()
    assert [r["paused"] for r in rows] == [False]


# -- bytes given on the command line ---------------------------------------------------------------------------------
def test_produce_writes_the_bytes_of_a_key_and_header_that_are_not_utf8(
    cli: Callable[..., Run], new_path: Callable[..., str]
) -> None:
    """`-key $'\\xff\\xfe'` was "unexpected UnicodeEncodeError": the shell hands over bytes, and those are the key."""
    src = new_path()
    assert cli("stream", "create", "-path", src, "-defaultpartitions", "1").code == 0
    assert cli("stream", "topic", "create", "-path", src, "-topic", "t").code == 0
    key = os.fsdecode(b"\xff\xfe")  # what the shell's $'\xff\xfe' reaches Python as
    header = "h=" + os.fsdecode(b"\xfa")
    run = run_proc(["produce", "-path", f"{src}:t", "-key", key, "-header", header], stdin="v\n")
    assert run.code == 0, run
    got = cli("consume", "-path", f"{src}:t", "-offset", "earliest", "-count", "1", "-timeout", "10")
    assert got.code == 0, got
    fields = got.stdout.splitlines()[0].split("\t")
    assert fields[4] == "\\xff\\xfe", fields
    assert fields[6] == "h=\\xfa", fields


# -- issue 25: what the options asked for is done, or said not to be ------------------------------------------------
def test_sparkconf_is_said_to_be_ignored_when_the_job_runs_in_this_process(
    cli: Callable[..., Run], new_path: Callable[..., str]
) -> None:
    src, dst = new_path(stem="sc"), new_path("newyork", stem="sc")
    assert cli("stream", "create", "-path", src).code == 0
    assert cli("stream", "topic", "create", "-path", src, "-topic", "t", "-partitions", "1").code == 0
    assert run_proc(["produce", "-path", f"{src}:t"], stdin="a\nb\n").code == 0
    conf = ["-sparkconf", "spark.executor.memory=2g", "-sparkconf", "spark.ui.enabled=false"]
    warning = (
        "warning: -sparkconf spark.executor.memory, spark.ui.enabled ignored: the job runs in this process"
        " (below 2,000,000; -mapreduce true to use Spark)"
    )
    copy = cli("copystream", "-src", src, "-dst", dst, *conf)
    assert copy.code == 0, copy
    assert f"copystream: {warning}" in copy.stderr.splitlines(), copy.stderr
    diff = cli("diffstreams", "-src", src, "-dst", dst, *conf, "-json")
    assert diff.code == 0, diff
    assert f"diffstreams: {warning}" in diff.stderr.splitlines(), diff.stderr
    # Without -sparkconf, nothing is said.
    again = cli("diffstreams", "-src", src, "-dst", dst)
    assert again.code == 0 and "warning" not in again.stderr, again


def test_topic_info_shows_the_timestamps_of_records_with_empty_or_null_values(
    cli: Callable[..., Run], new_path: Callable[..., str]
) -> None:
    """A record whose value is empty or null is falsy to Python (confluent_kafka's Message has a length): the first
    and last records' timestamps were left blank."""
    path = new_path(stem="ts")
    assert cli("stream", "create", "-path", path).code == 0
    assert cli("stream", "topic", "create", "-path", path, "-topic", "t", "-partitions", "1").code == 0
    lines = [
        f'{{"value":"","timestamp":{RECENT_MS}}}',
        '{"value":"x"}',
        f'{{"value":null,"timestamp":{RECENT_MS + 2000}}}',
    ]
    assert run_proc(["produce", "-path", f"{path}:t", "-format", "json"], stdin="\n".join(lines) + "\n").code == 0
    [row] = cli("stream", "topic", "info", "-path", path, "-topic", "t", "-json").data()

    def iso(ms: int) -> str:
        return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")

    assert (row["mintimestamp"], row["maxtimestamp"]) == (iso(RECENT_MS), iso(RECENT_MS + 2000)), row
