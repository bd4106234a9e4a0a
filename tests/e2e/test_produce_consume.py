"""`streamrepl produce` and `streamrepl consume` round trips against real brokers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from support import RECENT_MS, Run, run_proc

from streamrepl import registry, stream_ops, topics
from streamrepl.local import EphemeralClusters

pytestmark = pytest.mark.noida


@pytest.fixture(scope="module")
def ec() -> Iterator[EphemeralClusters]:
    # Brokers of its own, not the session's shared ones: a test freezes sanfrancisco.
    with EphemeralClusters(["sanfrancisco", "newyork"]) as clusters:
        yield clusters


@pytest.fixture(scope="module")
def reg(ec: EphemeralClusters) -> registry.Registry:
    return registry.load(str(ec.registry_path))


@pytest.fixture
def stream(reg: registry.Registry) -> str:
    path = f"/sanfrancisco/pc{uuid.uuid4().hex[:6]}"
    stream_ops.create(reg, path, {"defaultpartitions": 2})
    topics.create(reg, path, "clicks")
    return path


def cli(ec: EphemeralClusters, *args: str, stdin: str | None = None) -> Run:
    return run_proc(args, env={"STREAMREPL_CLUSTERS": str(ec.registry_path)}, stdin=stdin)


def ok(p: Run) -> str:
    assert p.returncode == 0, p.stderr + p.stdout
    return p.stdout


def records(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines()]


def test_lines_round_trip_with_key_header_and_partition(ec: EphemeralClusters, stream: str) -> None:
    out = ok(cli(ec, "produce", "-path", f"{stream}:clicks", "-key", "user-1", "-header", "src=web",
                 "-header", "v=2", "-partition", "1", "-json", stdin="one\ntwo\tTAB\nthree\n"))  # fmt: skip
    acks = json.loads(out)["data"]
    assert [(a["partition"], a["offset"]) for a in acks] == [(1, 0), (1, 1), (1, 2)]

    got = records(ok(cli(ec, "consume", "-path", f"{stream}:clicks", "-offset", "earliest", "-count", "3", "-json")))
    assert [(r["partition"], r["offset"], r["key"], r["value"]) for r in got] == [
        (1, 0, "user-1", "one"),
        (1, 1, "user-1", "two\tTAB"),
        (1, 2, "user-1", "three"),
    ]
    assert all(r["headers"] == {"src": "web", "v": "2"} and r["topic"] == "clicks" for r in got)

    # Tab-separated by default, with tabs escaped so every record is one line of 7 fields.
    lines = ok(cli(ec, "consume", "-path", f"{stream}:clicks", "-partition", "1", "-offset", "1", "-count", "2"))
    fields = [line.split("\t") for line in lines.splitlines()]
    assert [f[:3] + f[4:] for f in fields] == [
        ["clicks", "1", "1", "user-1", "two\\tTAB", "src=web,v=2"],
        ["clicks", "1", "2", "user-1", "three", "src=web,v=2"],
    ]

    # The summary: one row per partition written.
    summary = ok(cli(ec, "produce", "-path", f"{stream}:clicks", "-partition", "0", stdin="a\nb\n"))
    assert summary.splitlines() == ["topic\tpartition\trecords\tfirstoffset\tlastoffset", "clicks\t0\t2\t0\t1"]


def test_json_input_offsets_timestamps_and_groups(ec: EphemeralClusters, stream: str) -> None:
    t0 = RECENT_MS  # recent: noida-db deletes records older than retention.ms (7 days)
    lines = [
        json.dumps({"key": f"k{i}", "value": f"v{i}", "headers": {"n": str(i)}, "partition": 0, "timestamp": t0 + i})
        for i in range(6)
    ]
    ok(cli(ec, "produce", "-path", f"{stream}:clicks", "-format", "json", stdin="\n".join(lines) + "\n"))

    got = records(
        ok(cli(ec, "consume", "-path", f"{stream}:clicks", "-timestamp", str(t0 + 3), "-timeout", "2", "-json"))
    )
    assert [(r["offset"], r["value"], r["timestamp"], r["headers"]) for r in got] == [
        (i, f"v{i}", t0 + i, {"n": str(i)}) for i in (3, 4, 5)
    ]
    got = records(ok(cli(ec, "consume", "-path", f"{stream}:clicks", "-offset", "-2", "-timeout", "2", "-json")))
    assert [r["offset"] for r in got] == [4, 5]

    # A group commits as it goes: a second run carries on where the first stopped.
    first = records(ok(cli(ec, "consume", "-path", f"{stream}:clicks", "-group", "ops", "-count", "4", "-json")))
    second = records(ok(cli(ec, "consume", "-path", f"{stream}:clicks", "-group", "ops", "-timeout", "3", "-json")))
    assert [r["offset"] for r in first] == [0, 1, 2, 3]
    assert [r["offset"] for r in second] == [4, 5]
    cursors = json.loads(ok(cli(ec, "stream", "cursor", "list", "-path", stream, "-consumergroup", "ops", "-json")))
    assert [(c["partitionid"], c["committedoffset"], c["lag"]) for c in cursors["data"]] == [(0, 6, 0)]


def test_a_json_value_is_written_as_the_line_gives_it(ec: EphemeralClusters, stream: str) -> None:
    values = ['{"price": 1.10,  "qty": 3}', "1.10", "12345678901234567890123", '["Zoë", true]']
    lines = "".join(f'{{"value": {v}, "headers": {{"h": {v}}}, "partition": 0}}\n' for v in values)
    ok(cli(ec, "produce", "-path", f"{stream}:clicks", "-format", "json", stdin=lines))
    got = records(ok(cli(ec, "consume", "-path", f"{stream}:clicks", "-offset", "earliest", "-timeout", "2", "-json")))
    assert [(r["value"], r["headers"]) for r in got] == [(v, {"h": v}) for v in values]


def test_consume_fails_over_to_the_replica_when_the_primary_is_down(
    ec: EphemeralClusters, reg: registry.Registry
) -> None:
    name = f"fo{uuid.uuid4().hex[:6]}"
    sf, ny = f"/sanfrancisco/{name}", f"/newyork/{name}"
    for path in (sf, ny):
        stream_ops.create(reg, path, {"defaultpartitions": 1})
        topics.create(reg, path, "clicks")
        ok(cli(ec, "produce", "-path", f"{path}:clicks", stdin="a\nb\nc\n"))
    ec.freeze("sanfrancisco")
    try:
        got = records(ok(cli(ec, "consume", "-path", f"{sf}:clicks", "-failover", ny, "-offset", "earliest",
                             "-count", "3", "-json")))  # fmt: skip
    finally:
        ec.thaw("sanfrancisco")
    assert [(r["stream"], r["offset"], r["value"]) for r in got] == [(ny, 0, "a"), (ny, 1, "b"), (ny, 2, "c")]


def test_usage_errors(ec: EphemeralClusters, stream: str) -> None:
    p = cli(ec, "produce", "-path", stream, stdin="x\n")
    assert p.returncode != 0 and "names no topic" in p.stderr
    p = cli(ec, "produce", "-path", f"{stream}:clicks", "-format", "json", stdin="not json\n")
    assert p.returncode != 0 and "line 1 is not JSON" in p.stderr
    p = cli(ec, "produce", "-path", f"{stream}:clicks", "-header", "novalue", stdin="x\n")
    assert p.returncode != 0 and "must be key=value" in p.stderr
    p = cli(ec, "consume", "-path", f"{stream}:clicks", "-offset", "5", "-timestamp", "9")
    assert p.returncode != 0 and "not both" in p.stderr
    p = cli(ec, "consume", "-path", f"{stream}:clicks", "-offset", "soon")
    assert p.returncode != 0 and "-offset 'soon'" in p.stderr
    p = cli(ec, "consume", "-path", f"{stream}:nope", "-count", "1", "-json")
    assert p.returncode != 0 and json.loads(p.stdout)["status"] == "ERROR"


def one_line_error(p: Run) -> str:
    assert p.returncode == 1, p.stderr + p.stdout
    lines = p.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ERROR ("), p.stderr
    return lines[0]


def test_a_failed_produce_says_what_it_wrote(ec: EphemeralClusters, stream: str) -> None:
    """Records are written as they are read (stdin may never end), so a bad line cannot undo the
    lines before it: the error says how many were written, and stdout lists them as a run that
    succeeded would."""
    lines = [json.dumps({"value": "a", "partition": 0}), json.dumps({"value": "b", "partition": 0}), "not json"]
    p = cli(ec, "produce", "-path", f"{stream}:clicks", "-format", "json", stdin="\n".join(lines) + "\n")
    err = one_line_error(p)
    assert "line 3 is not JSON" in err and "2 records before it were written (partition 0: offsets 0-1)" in err
    assert p.stdout.splitlines() == ["topic\tpartition\trecords\tfirstoffset\tlastoffset", "clicks\t0\t2\t0\t1"]

    p = cli(ec, "produce", "-path", f"{stream}:clicks", "-partition", "1", stdin="ok\n" + "x" * 1_100_000 + "\n")
    err = one_line_error(p)
    assert "line 2" in err and "too large" in err and "1 record before it was written (partition 1: offset 0)" in err
    assert p.stdout.splitlines()[1:] == ["clicks\t1\t1\t0\t0"]

    p = cli(ec, "produce", "-path", f"{stream}:clicks", "-json", stdin="ok\n" + "x" * 1_100_000 + "\n")
    doc = json.loads(p.stdout)
    assert p.returncode == 1 and doc["status"] == "ERROR" and "1 record before it was written" in p.stdout

    got = records(ok(cli(ec, "consume", "-path", f"{stream}:clicks", "-offset", "earliest", "-timeout", "2", "-json")))
    assert sorted(r["value"] for r in got) == ["a", "b", "ok", "ok"]


def test_a_lone_surrogate_stops_produce_at_its_line_and_the_lines_before_it_are_written(
    ec: EphemeralClusters, stream: str
) -> None:
    """A header name with a lone surrogate once crashed the process (SIGSEGV in the client) and took the
    valid lines before it along, unsaid."""
    lines = ['{"value":"a","partition":0}', '{"value":"b","partition":0}', '{"value":"v","headers":{"\\ud800":"x"}}']
    p = cli(ec, "produce", "-path", f"{stream}:clicks", "-format", "json", stdin="\n".join(lines) + "\n")
    err = one_line_error(p)
    assert "line 3: a header name holds a lone surrogate" in err, err
    assert "2 records before it were written (partition 0: offsets 0-1)" in err, err
    assert p.stdout.splitlines()[1:] == ["clicks\t0\t2\t0\t1"]
    got = records(ok(cli(ec, "consume", "-path", f"{stream}:clicks", "-offset", "earliest", "-timeout", "2", "-json")))
    assert [r["value"] for r in got] == ["a", "b"]


BAD_PRODUCE = [
    (["-partition", "-1"], "x\n", "-partition -1 is negative"),
    (["-timeout", "-1"], "x\n", "-timeout -1"),
    (["-timeout", "nan"], "x\n", "-timeout nan"),
    (["-format", "json", "-key", "k"], '{"value":"v"}\n', "-key"),
    (["-format", "json"], '{"value":"v","timestamp":-5}\n', "line 1: 'timestamp' -5"),
    (["-format", "json"], '{"value":"v","timestamp":1e30}\n', "line 1: 'timestamp' 1e+30"),
    (["-format", "json"], '{"value":"v","timestamp":"soon"}\n', "line 1: 'timestamp'"),
    (["-format", "json"], '{"value":"v","partition":-1}\n', "line 1: 'partition' -1"),
    # A lone UTF-16 surrogate is valid JSON but no text UTF-8 can hold (a header name with one crashed librdkafka).
    (["-format", "json"], '{"value":"\\ud800"}\n', "line 1: 'value' holds a lone surrogate"),
    (["-format", "json"], '{"key":"a\\udfffb","value":"v"}\n', "line 1: 'key' holds a lone surrogate"),
    (["-format", "json"], '{"value":"v","headers":{"\\ud800":"x"}}\n', "line 1: a header name holds a lone surrogate"),
    (["-format", "json"], '{"value":"v","headers":{"h":"\\ud800"}}\n', "line 1: header 'h' holds a lone surrogate"),
    (["-format", "json"], '{"value":"v","headers":[["\\ud800","x"]]}\n', "line 1: a header name holds a lone"),
    (["-format", "json"], '{"\\ud800":"v"}\n', "line 1: unknown field '\\ud800'"),
    # JSON would keep the last of two keys, and make 1e400 Infinity: neither is written in silence.
    (["-format", "json"], '{"value":"a","value":"b"}\n', "line 1: key 'value' is given twice"),
    (["-format", "json"], '{"value":{"n":1e400}}\n', "line 1: the number 1e400 is beyond what a 64-bit float holds"),
    (["-format", "json"], '{"value":NaN}\n', "line 1: NaN is not a JSON number"),
    (["-format", "json"], "[" * 100_000 + "]" * 100_000 + "\n", "line 1 is nested deeper than"),
    (["-format", "json"], '{"value":' + "[" * 100_000 + "]" * 100_000 + "}\n", "line 1 is nested deeper than"),
]


def test_bad_produce_options_and_fields_are_one_line_errors_before_anything_is_written(
    ec: EphemeralClusters, stream: str
) -> None:
    for args, stdin, message in BAD_PRODUCE:
        p = cli(ec, "produce", "-path", f"{stream}:clicks", *args, stdin=stdin)
        assert message in one_line_error(p), (args, stdin)
        assert p.stdout == "", (args, stdin)
    got = cli(ec, "consume", "-path", f"{stream}:clicks", "-offset", "earliest", "-timeout", "1", "-json")
    assert records(ok(got)) == []


def test_bad_consume_options_are_one_line_errors_before_anything_is_read(ec: EphemeralClusters, stream: str) -> None:
    ok(cli(ec, "produce", "-path", f"{stream}:clicks", stdin="a\n"))
    cases = [
        (["-failoverafter", "-1"], "-failoverafter -1"),
        (["-failoverafter", "nan"], "-failoverafter nan"),
        (["-failover", stream], f"-failover {stream} is the stream being read"),
        (["-failover", "/newyork/nosuch"], "stream /newyork/nosuch does not exist"),
        (["-timestamp", "-100"], "-timestamp -100 is negative"),
        (["-group", ""], "-group is empty"),
        (["-timeout", "-1"], "-timeout -1"),
    ]
    for args, message in cases:
        p = cli(ec, "consume", "-path", f"{stream}:clicks", "-offset", "earliest", "-timeout", "2", *args)
        assert message in one_line_error(p), args
        assert p.stdout == "", args


def test_a_line_that_fails_unexpectedly_still_says_what_was_written_before_it(
    ec: EphemeralClusters, stream: str
) -> None:
    """A JSON line nested 100,000 deep ended in 'unexpected RecursionError' without a word of the lines before it."""
    lines = ['{"value":"a","partition":1}', '{"value":"b","partition":1}', "[" * 100_000 + "]" * 100_000]
    p = cli(ec, "produce", "-path", f"{stream}:clicks", "-format", "json", stdin="\n".join(lines) + "\n")
    err = one_line_error(p)
    assert "line 3 is nested deeper than" in err and "2 records before it were written (partition 1" in err, err


@pytest.mark.parametrize("field", ["header name", "header value", "key", "value"])
def test_the_client_refuses_a_lone_surrogate_instead_of_crashing(
    ec: EphemeralClusters, stream: str, field: str
) -> None:
    """StreamProducer, used as a library: a str with a lone surrogate is an InvalidArgument naming the field (a
    header name holding one crashed the process in the Kafka client). Run as a process of its own, which a crash
    would end without taking the tests along."""
    kwargs = {
        "header name": "headers={'\\ud800': b'x'}",
        "header value": "headers={'h': '\\ud800'}",
        "key": "key='\\ud800'",
        "value": "value='\\ud800'",
    }[field]
    code = (
        "from streamrepl.client import StreamProducer\n"
        "from streamrepl.errors import InvalidArgument\n"
        f"p = StreamProducer('{stream}:clicks')\n"
        "try:\n"
        f"    p.produce({kwargs})\n"
        "except InvalidArgument as e:\n"
        "    print(e)\n"
        "p.close(5)\n"
    )
    env = dict(os.environ, STREAMREPL_CLUSTERS=str(ec.registry_path))
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run
    assert f"{field} holds a lone surrogate (\\ud800)" in run.stdout, run
