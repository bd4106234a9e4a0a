"""What streamrepl prints, read one way only: table cells with control characters, a header when there are no rows, man page headers within 80 columns."""

from __future__ import annotations

import io
import json
import re
import time
from pathlib import Path

import pytest
from support import run_cli


def test_local_status_with_nothing_running_prints_the_header(tmp_path: Path) -> None:
    run = run_cli("local", "status", "-dir", str(tmp_path))
    assert run.code == 0, run
    assert run.stdout.splitlines()[0].split("\t")[0] == "cluster", run
    run = run_cli("local", "status", "-dir", str(tmp_path), "-json")
    assert json.loads(run.stdout)["data"] == []


def test_every_man_page_header_fits_80_columns() -> None:
    """man prints the title(section) on both sides of the header line and the manual's name between them; when the
    three do not fit in 80 columns they overlap (`STREAMREPL-STREAM-REPLICA-AUTOSstreamrep...`)."""
    import shlex

    for page in sorted(Path(__file__).resolve().parents[2].joinpath("man").glob("*.1")):
        th = next(line for line in page.read_text().splitlines() if line.startswith(".TH"))
        _, title, section, _, _, center = shlex.split(th.replace("\\-", "-"))
        side = len(f"{title}({section})")
        assert 2 * side + len(center) + 4 <= 80, f"{page.name}: {th}"


def test_table_cells_escape_backslashes_and_control_characters() -> None:
    from streamrepl.output import escape_bytes, escape_text

    assert escape_text("plain text, é") == "plain text, é"
    assert escape_text("a\\b") == "a\\\\b"
    assert escape_text("a\nb\tc\x1b[31m") == "a\\nb\\tc\\x1b[31m"
    assert escape_bytes(b"\xff") != escape_bytes(b"\\xff")


# -- wide listings on a terminal: the columns an operator reads first, one line per row --------------------------
ANSI = re.compile(r"\x1b\[[0-9;]*m")


class Terminal(io.StringIO):
    """What emit writes to a terminal (its width from $COLUMNS, as rich and shutil take it)."""

    def isatty(self) -> bool:
        return True


def replica_row(path: str, state: str = "REPLICA_STATE_REPLICATING", error: str = "", pending: int = 0) -> dict:
    """A row of `stream replica list` with every field it has (19), in its order."""
    return {
        "cluster": "newyork",
        "stream": path.split("/", 2)[2],
        "type": "Stream",
        "replicaPath": path,
        "replicaState": state,
        "paused": False,
        "throttle": False,
        "idx": 1,
        "networkencryption": False,
        "synchronous": False,
        "networkcompression": "lz4",
        "uuid": "3f0c8a1e-7f9b-4c55-a1d2-9a7b6c5d4e3f",
        "isUptodate": not pending and not error,
        "putsPending": pending,
        "bytesPending": pending * 100,
        # an hour old: lagsec says 3600 or a little more
        "minPendingTS": int(time.time() * 1000) - 3_600_000 if pending else 0,
        "maxPendingTS": int(time.time() * 1000) if pending else 0,
        "lasterror": error,
        "errorPartitions": 1 if error else 0,
    }


LONG_ERROR = (
    "partition t/0: the source stream diverged from the replica at offset 1234 (the source lost records the replica"
    " holds); run diffstreams -src /sanfrancisco/activity -dst /newyork/activity, then replica resync"
)
ROWS = [
    replica_row("/newyork/activity"),
    replica_row("/newyork/apps/web-clicks", "REPLICA_STATE_WAITING_FOR_UPSTREAM", pending=120_000),
    replica_row("/newyork/activity-copy", "REPLICA_STATE_ERROR", LONG_ERROR, pending=5),
]


def on_terminal(rows: list[dict], width: int, monkeypatch: pytest.MonkeyPatch, **mode: object) -> list[str]:
    from streamrepl.commands.replica import REPLICA_LIST
    from streamrepl.output import OutputMode, emit

    monkeypatch.setenv("COLUMNS", str(width))
    out = Terminal()
    emit(rows, OutputMode(listing=REPLICA_LIST, **mode), out=out)  # type: ignore[arg-type]
    return ANSI.sub("", out.getvalue()).splitlines()


@pytest.mark.parametrize("width", [80, 100])
def test_replica_list_on_a_terminal_is_one_line_a_row_within_the_width(
    width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = on_terminal(ROWS, width, monkeypatch)
    assert len(lines) == 1 + len(ROWS), lines
    assert all(len(line) <= width for line in lines), lines
    assert lines[0].split() == ["replica", "state", "uptodate", "pending", "lagsec", "error"]
    for line, row in zip(lines[1:], ROWS, strict=True):
        assert line.startswith(row["replicaPath"] + " "), line  # the path whole
        assert row["replicaState"].removeprefix("REPLICA_STATE_") in line.split(), line  # the state whole
    assert "part" in lines[3] and lines[3].endswith("…"), lines[3]  # the error cut to fit
    if width == 100:
        assert "partition t/0: the sour" in lines[3]
    pending, lagsec = lines[2].split()[3:5]
    assert pending == "120000" and int(lagsec) >= 3600


def test_columns_chooses_what_a_terminal_shows(monkeypatch: pytest.MonkeyPatch) -> None:
    lines = on_terminal(ROWS, 80, monkeypatch, columns=("replicaPath", "uuid"))
    assert lines[0].split() == ["replica", "uuid"]
    assert lines[1].split() == ["/newyork/activity", "3f0c8a1e-7f9b-4c55-a1d2-9a7b6c5d4e3f"]


def test_columns_all_on_a_narrow_terminal_shows_each_row_as_lines_of_name_and_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """19 columns cannot share 80: a row becomes one line a field, values wrapped, nothing lost or cut."""
    lines = on_terminal(ROWS, 80, monkeypatch, columns=("all",))
    assert all(len(line) <= 80 for line in lines), lines
    text = "\n".join(lines)
    assert text.count("errorPartitions") == 3 and text.count("\nreplica ") == 3
    assert "WAITING_FOR_UPSTREAM" in text
    joined = " ".join(" ".join(lines).split())
    assert " ".join(LONG_ERROR.split()) in joined


def test_scripts_get_every_field_as_before(monkeypatch: pytest.MonkeyPatch) -> None:
    """Not a terminal, -noheader and -json: every field of every row, values as they are."""
    from streamrepl.commands.replica import REPLICA_LIST
    from streamrepl.output import OutputMode, emit

    pipe = io.StringIO()
    emit(ROWS, OutputMode(listing=REPLICA_LIST), out=pipe)
    lines = pipe.getvalue().splitlines()
    assert lines[0].split("\t") == list(ROWS[0]) and lines[3].split("\t")[3:5] == [
        "/newyork/activity-copy",
        "REPLICA_STATE_ERROR",
    ]
    pipe = Terminal()
    emit(ROWS, OutputMode(listing=REPLICA_LIST, noheader=True), out=pipe)
    assert [line.split("\t") for line in pipe.getvalue().splitlines()] == [lines[i].split("\t") for i in (1, 2, 3)]
    pipe = Terminal()
    emit(ROWS, OutputMode(listing=REPLICA_LIST, json=True), out=pipe)
    assert json.loads(pipe.getvalue())["data"] == ROWS


def test_columns_given_to_a_script_keep_those_fields_in_that_order() -> None:
    from streamrepl.commands.replica import REPLICA_LIST
    from streamrepl.output import OutputMode, emit

    pipe = io.StringIO()
    emit(ROWS, OutputMode(listing=REPLICA_LIST, columns=("replicaState", "replicaPath")), out=pipe)
    assert pipe.getvalue().splitlines()[:2] == [
        "replicaState\treplicaPath",
        "REPLICA_STATE_REPLICATING\t/newyork/activity",
    ]
    pipe = io.StringIO()
    emit(ROWS, OutputMode(listing=REPLICA_LIST, json=True, columns=("replicaPath",)), out=pipe)
    assert json.loads(pipe.getvalue())["data"][0] == {"replicaPath": "/newyork/activity"}


def test_a_bad_column_name_is_an_error_naming_the_columns() -> None:
    from streamrepl.errors import InvalidArgument
    from streamrepl.output import choose_columns

    known = ["replicaPath", "replicaState", "lasterror"]
    assert choose_columns(" replicaState , replicaPath ", known) == ("replicaState", "replicaPath")
    assert choose_columns("all", known) == tuple(known)
    assert choose_columns("state,lasterror", known, {"replicaState": "state"}) == ("replicaState", "lasterror")
    for bad in ("replicapath", "replicaPath,bogus", ",", ""):
        with pytest.raises(InvalidArgument) as e:
            choose_columns(bad, known)
        assert "replicaPath, replicaState, lasterror" in e.value.message and "all" in e.value.message
        assert "\n" not in e.value.message


def test_fitting_cuts_the_columns_named_first_and_keeps_the_kept_ones() -> None:
    from streamrepl.output import fit_widths

    headers = ["path", "state", "n", "error"]
    natural = [20, 20, 5, 60]
    assert fit_widths(headers, natural, 200) == natural
    # 6 for the gaps: the error gives up its room first
    assert fit_widths(headers, natural, 80, cut=("error",)) == [20, 20, 5, 29]
    # then the widest other column, never one kept while another can give
    assert fit_widths(headers, natural, 60, cut=("error",), keep=("state",)) == [20, 20, 5, 9]
    assert fit_widths(headers, natural, 50, cut=("error",), keep=("state",)) == [14, 20, 5, 5]
    # a header is never cut: no room for all of them is None (the caller shows the rows another way)
    assert fit_widths(headers, natural, 20, cut=("error",)) is None


def test_cut_keeps_the_ends_of_a_path_and_counts_wide_characters() -> None:
    from streamrepl.output import cut_text

    assert cut_text("short", 10) == "short"
    assert cut_text("a long error message", 10) == "a long er…"
    assert cut_text("/newyork/very/long/path/activity", 20, middle=True) == "/newyork/v…/activity"
    assert cut_text("日本語のテキスト", 7) == "日本語…"


def test_each_wide_listing_declares_the_fields_its_command_prints() -> None:
    """The fields a listing checks -columns against are the columns its command gives scripts (replica list's are
    checked against a real `-json` in tests/e2e/test_cli_output.py)."""
    from streamrepl import streams, topics
    from streamrepl.commands.cursor import CURSOR_LIST
    from streamrepl.commands.gateway import GATEWAY_LIST
    from streamrepl.commands.stream import STREAM_LIST
    from streamrepl.commands.topic import TOPIC_LIST
    from streamrepl.cursors.operations import CURSOR_COLUMNS
    from streamrepl.replication.live import COLUMNS

    assert STREAM_LIST.fields == streams.INFO_COLUMNS + streams.PERMS
    assert GATEWAY_LIST.fields == COLUMNS
    assert CURSOR_LIST.fields == CURSOR_COLUMNS
    assert TOPIC_LIST.fields == topics.LIST_COLUMNS
    from streamrepl.commands.replica import REPLICA_LIST

    for listing in (STREAM_LIST, GATEWAY_LIST, CURSOR_LIST, TOPIC_LIST, REPLICA_LIST):
        names = {*listing.fields, *listing.derived}
        assert set(listing.default) <= names
        assert {*listing.cut, *listing.keep, *listing.middle, *listing.labels, *listing.show} <= names
        assert len(set(listing.labels.values())) == len(listing.labels)
        assert not set(listing.labels.values()) & names  # a header names one column only


@pytest.mark.parametrize(
    "command",
    [
        ["stream", "list"],
        ["stream", "replica", "list", "-path", "/a/s"],
        ["cluster", "gateway", "list"],
        ["stream", "cursor", "list", "-path", "/a/s"],
        ["stream", "topic", "list", "-path", "/a/s"],
    ],
    ids=lambda c: " ".join(c[:-2] if c[-2:-1] == ["-path"] else c),
)
def test_a_bad_column_is_one_line_naming_the_columns_before_any_broker_is_asked(
    command: list[str], tmp_path: Path
) -> None:
    """The registry names a port nothing listens on: the error comes before any connection is tried."""
    registry_file = tmp_path / "clusters.yaml"
    registry_file.write_text("clusters:\n  a:\n    bootstrap.servers: 127.0.0.1:9\n")
    run = run_cli(*command, "-clusters", str(registry_file), "-columns", "bogus,all")
    assert run.code != 0, run
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr, run
    assert run.stderr.startswith("ERROR (22) - ") and "no column 'bogus'" in run.stderr and "(or all)" in run.stderr
    run = run_cli(*command, "-clusters", str(registry_file), "-columns", "bogus", "-json")
    assert run.code != 0, run
    [error] = json.loads(run.stdout)["errors"]
    assert "no column 'bogus'" in error["desc"], error


def test_long_on_a_terminal_cuts_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """maprcli's -long shows values whole: rows a record at a time when the table would cut one, else the table."""
    lines = on_terminal(ROWS, 80, monkeypatch, long=True)
    assert all(len(line) <= 80 for line in lines), lines
    assert " ".join(LONG_ERROR.split()) in " ".join(" ".join(lines).split())
    assert "replicaPath" not in "\n".join(lines)  # the default columns, by their headers
    lines = on_terminal(ROWS[:1], 80, monkeypatch, long=True)
    assert lines[0].split() == ["replica", "state", "uptodate", "pending", "lagsec", "error"]


def test_each_listings_fields_are_the_library_columns_it_names() -> None:
    """The commands name their fields themselves (`--help` imports no Kafka client, which the library modules do):
    they must stay the columns the library gives, in its order."""
    from streamrepl import streams, topics
    from streamrepl.commands.cursor import CURSOR_LIST
    from streamrepl.commands.gateway import GATEWAY_LIST
    from streamrepl.commands.stream import STREAM_LIST
    from streamrepl.commands.topic import TOPIC_LIST
    from streamrepl.cursors.operations import CURSOR_COLUMNS
    from streamrepl.replication.live import COLUMNS as GATEWAY_COLUMNS

    assert tuple(CURSOR_LIST.fields) == tuple(CURSOR_COLUMNS)
    assert tuple(GATEWAY_LIST.fields) == tuple(GATEWAY_COLUMNS)
    assert tuple(TOPIC_LIST.fields) == tuple(topics.LIST_COLUMNS)
    assert tuple(STREAM_LIST.fields) == (*streams.INFO_COLUMNS, *streams.PERMS)
