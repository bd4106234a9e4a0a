"""Output that reads one way only, against the shared brokers: replica list's columns and errors, groups and records with control characters or bytes that are not UTF-8, timestamps of empty records, stream settings as given."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from support import RECENT_MS, Run, one_error_line, run_in_terminal, run_proc

from streamrepl import registry
from streamrepl.local import EphemeralClusters
from streamrepl.paths import parse_stream


def _commit(clusters: EphemeralClusters, path: str, group: str) -> None:
    """`group` commits offset 1 of partition 0 of topic t of `path` (a raw Kafka client: any name goes)."""
    from confluent_kafka import Consumer, TopicPartition

    from streamrepl.paths import kafka_topic_name

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

    from streamrepl.paths import kafka_topic_name

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
    from streamrepl import streams

    rec = streams.load(registry.load(None), path)[1]
    kept = {k: getattr(rec.settings, k) for k in ("mincompactionlag", "deleteretention")}
    assert kept == {"mincompactionlag": 5000, "deleteretention": 7}, kept
    line = one_error_line(cli("stream", "create", "-path", new_path(), "-deleteretention", "-1"))
    assert "-deleteretention -1 is negative" in line, line


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


def test_replica_list_has_the_same_columns_with_and_without_errors(cli, new_path) -> None:  # type: ignore[no-untyped-def]
    """`errorPartitions` appeared only when a partition was in error, so `cut -f` positions shifted."""
    src, dst = new_path(), new_path("newyork")
    assert cli("stream", "create", "-path", src).code == 0
    assert cli("stream", "create", "-path", dst).code == 0
    assert cli("stream", "topic", "create", "-path", src, "-topic", "t").code == 0
    assert cli("stream", "replica", "add", "-path", src, "-replica", dst, "-paused", "true").code == 0
    rows = cli("stream", "replica", "list", "-path", src, "-json").data()
    assert rows[0]["errorPartitions"] == 0, rows
    header = cli("stream", "replica", "list", "-path", src).stdout.splitlines()[0].split("\t")
    assert "errorPartitions" in header


def test_a_replica_deleted_and_created_again_is_an_error_in_replica_list(cli, new_path) -> None:  # type: ignore[no-untyped-def]
    """The re-created stream is another stream (new uuid, none of the replicated records); replica list kept showing
    the old uuid as if nothing had happened."""
    src, dst = new_path(), new_path("newyork")
    for path in (src, dst):
        assert cli("stream", "create", "-path", path).code == 0
    assert cli("stream", "replica", "add", "-path", src, "-replica", dst, "-paused", "true").code == 0
    assert cli("stream", "delete", "-path", dst).code == 0
    assert cli("stream", "create", "-path", dst).code == 0
    row = cli("stream", "replica", "list", "-path", src, "-json").data()[0]
    assert row["replicaState"] == "REPLICA_STATE_ERROR", row
    assert "created again" in row["lasterror"] and "replica remove" in row["lasterror"], row
    assert row["isUptodate"] is False


# -- what a terminal shows: the columns an operator reads first, one line a row -----------------------------------
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _terminal_lines(args: list[str], width: int) -> list[str]:
    run = run_in_terminal(args, width)
    assert run.code == 0, run
    lines = ANSI.sub("", run.stdout).splitlines()
    assert lines and all(len(line) <= width for line in lines), "\n".join(lines)
    return lines


@pytest.mark.parametrize("width", [80, 100])
def test_replica_list_on_a_terminal_fits_its_width_with_path_and_state_whole(
    cli: Callable[..., Run], new_path: Callable[..., str], width: int
) -> None:
    """19 columns wrapped into slivers of 2-3 characters at 80 and 100 columns."""
    from streamrepl.commands.replica import REPLICA_LIST

    src, ok, gone = new_path(), new_path("newyork"), new_path("newyork")
    for path in (src, ok, gone):
        assert cli("stream", "create", "-path", path).code == 0
    assert cli("stream", "topic", "create", "-path", src, "-topic", "t").code == 0
    for dst in (ok, gone):
        assert cli("stream", "replica", "add", "-path", src, "-replica", dst, "-paused", "true").code == 0
    assert cli("stream", "delete", "-path", gone).code == 0  # an ERROR with a long message
    assert cli("stream", "create", "-path", gone).code == 0
    rows = cli("stream", "replica", "list", "-path", src, "-json").data()
    assert [list(r) for r in rows] == [list(REPLICA_LIST.fields)] * 2  # what -columns is checked against
    lines = _terminal_lines(["stream", "replica", "list", "-path", src], width)
    assert lines[0].split() == ["replica", "state", "uptodate", "pending", "lagsec", "error"], lines
    assert len(lines) == 3, lines
    shown = {line.split()[0]: line.split()[1] for line in lines[1:]}
    assert shown == {r["replicaPath"]: r["replicaState"].removeprefix("REPLICA_STATE_") for r in rows}, lines
    assert shown[gone] == "ERROR"
    error = next(r["lasterror"] for r in rows if r["replicaPath"] == gone)
    [line] = [line for line in lines if line.startswith(gone)]
    assert line.endswith("…") and error[:4] in line, line  # cut to fit
    wide = _terminal_lines(["stream", "replica", "list", "-path", src, "-columns", "all"], width)
    assert "\n".join(wide).count("networkcompression") == 2  # a record at a time: nothing cut
    chosen = _terminal_lines(["stream", "replica", "list", "-path", src, "-columns", "replicaPath,uuid"], width)
    assert chosen[0].split() == ["replica", "uuid"]
    # what scripts read is unchanged: every field, tab-separated, on a terminal too with -noheader
    noheader = run_in_terminal(["stream", "replica", "list", "-path", src, "-noheader"], width)
    assert [len(line.split("\t")) for line in noheader.stdout.splitlines()] == [20, 20], noheader


def test_every_wide_listing_fits_an_80_column_terminal(cli: Callable[..., Run], new_path: Callable[..., str]) -> None:
    src = new_path()
    assert cli("stream", "create", "-path", src).code == 0
    assert cli("stream", "topic", "create", "-path", src, "-topic", "clicks-by-region-and-hour").code == 0
    assert run_proc(["produce", "-path", f"{src}:clicks-by-region-and-hour"], stdin="a\n").code == 0
    for command, header in [
        (["stream", "list"], ["path", "topics", "partitions", "replicas", "upstreams"]),
        (["stream", "topic", "list", "-path", src], ["topic", "partitions", "consumers", "maxlag", "kafkatopic"]),
        (["stream", "cursor", "list", "-path", src], ["group", "topic", "partition", "produced", "committed"]),
        (["cluster", "gateway", "list"], ["cluster", "gateway", "host", "partitions", "errors", "lastseen"]),
    ]:
        lines = _terminal_lines(command, 80)
        assert lines[0].split()[: len(header)] == header, (command, lines[0])
    [row] = _terminal_lines(["stream", "topic", "list", "-path", src], 80)[1:]
    assert row.startswith("clicks-by-region-and-hour "), row
