"""diffstreams against real brokers: equal streams exit 0, a planted difference is found at its offset."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from confluent_kafka import Producer
from support.copying import TS0, cli, records, send
from support.env import Env

from streamrepl.bulk.diffstreams import DIFF_COLUMNS

SRC, DST = "/sanfrancisco/orders", "/newyork/orders"


@pytest.mark.spark
def test_equal_streams_match_and_a_planted_difference_is_found(
    env: Env, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    env.make_stream(SRC, ["a", "b"], 2)
    bs = env.bs("sanfrancisco")
    send(bs, env.kt(SRC, "a"), 1500, 2, tag="a")
    send(bs, env.kt(SRC, "b"), 6, 2, single=True, tag="b")
    tp = Producer({"bootstrap.servers": bs, "transactional.id": "diff-test", "log_level": 0})
    tp.init_transactions(10)
    tp.begin_transaction()
    tp.produce(env.kt(SRC, "b"), value=b"tx", partition=1, timestamp=TS0)
    tp.commit_transaction(10)  # a marker: a filler in the copy, which must still compare equal
    send(bs, env.kt(SRC, "b"), 4, 2, start=6, single=True, tag="b")
    code, out, err = cli(capsys, "copystream", "-src", SRC, "-dst", DST, "-numthreads", "2")
    assert code == 0, err

    outdir = tmp_path / "diff"
    code, out, err = cli(
        capsys,
        "diffstreams",
        "-src",
        SRC,
        "-dst",
        DST,
        "-outdir",
        str(outdir),
        "-numthreads",
        "2",
        "-mapreduce",
        "true",
    )
    assert code == 0, err
    lines = out.strip().splitlines()
    assert lines[0].split("\t") == list(DIFF_COLUMNS)
    rows = [dict(zip(DIFF_COLUMNS, line.split("\t"), strict=True)) for line in lines[1:]]
    assert len(rows) == 4 and all(r["match"] == "true" and r["firstdiff"] == "-1" for r in rows)
    assert all(r["srcdigest"] == r["dstdigest"] for r in rows)
    assert sum(int(r["srccount"]) for r in rows) == 1500 + 11
    doc = json.loads((outdir / "diffstreams.json").read_text())
    assert doc["match"] is True and doc["src"] == SRC and len(doc["data"]) == 4

    # From here on in this process (small): the same rows.
    # The copy is changed: a foreign record where the source gets another one, in b[1] only.
    b1_end = len(records(env.bs("newyork"), env.kt(DST, "b"), 1))
    p = Producer({"bootstrap.servers": env.bs("newyork"), "log_level": 0})
    p.produce(env.kt(DST, "b"), value=b"planted", key=b"x", partition=1, timestamp=TS0)
    assert p.flush(10) == 0
    send(bs, env.kt(SRC, "b"), 1, 2, start=101, single=True, tag="late")  # b[1] gets one record

    code, out, err = cli(capsys, "diffstreams", "-src", SRC, "-dst", DST, "-json", "-numthreads", "2")
    assert code != 0
    doc = json.loads(out)
    assert doc["status"] == "ERROR"
    bad = [r for r in doc["data"] if not r["match"]]
    assert [(r["topic"], r["partition"], r["firstdiff"]) for r in bad] == [("b", 1, b1_end)]
    assert bad[0]["srcdigest"] != bad[0]["dstdigest"]
    assert "differ in 1 of 4 partitions" in doc["errors"][0]["desc"]
    assert f"at offset {b1_end}" in doc["errors"][0]["desc"]

    # A record only on one side is a difference too (b[0] gets a record the copy lacks).
    send(bs, env.kt(SRC, "b"), 1, 2, start=102, single=True, tag="late")
    code, out, err = cli(capsys, "diffstreams", "-src", SRC, "-dst", DST, "-first_exit", "-numthreads", "2")
    assert code != 0
    assert "ERROR (5) - diffstreams:" in err and "differ in" in err
    b0_end = len(records(env.bs("newyork"), env.kt(DST, "b"), 0))
    got = {(r.split("\t")[0], r.split("\t")[1]): r.split("\t")[4] for r in out.strip().splitlines()[1:]}
    assert got.get(("b", "0"), str(b0_end)) == str(b0_end)


def test_missing_stream_is_an_error(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    # A source of its own: the test must not depend on an earlier one having made SRC (-m "not spark" skips it).
    env.make_stream("/sanfrancisco/alone", ["a"], 1)
    code, _, err = cli(capsys, "diffstreams", "-src", "/sanfrancisco/alone", "-dst", "/newyork/nosuch")
    assert code != 0 and "stream /newyork/nosuch does not exist" in err


def _partition_counts_differ(env: Env, capsys: pytest.CaptureFixture[str], name: str, *engine: str) -> None:
    """Two streams of 2 and 3 partitions, all empty: the third partition is a difference, not an empty match."""
    src, dst = f"/sanfrancisco/{name}", f"/newyork/{name}"
    env.make_stream(src, ["a"], 2)
    env.make_stream(dst, ["a"], 3)
    code, out, err = cli(capsys, "diffstreams", "-src", src, "-dst", dst, "-json", *engine)
    assert code != 0, out
    doc = json.loads(out)
    assert [(r["partition"], r["match"], r.get("absent")) for r in doc["data"]] == [
        (0, True, None),
        (1, True, None),
        (2, False, src),
    ]
    assert f"first: topic 'a' partition 2 which {src} does not have" in doc["errors"][0]["desc"]


def test_a_partition_one_stream_lacks_is_a_difference(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    _partition_counts_differ(env, capsys, "threeparts")


@pytest.mark.spark
def test_a_partition_one_stream_lacks_is_a_difference_on_spark(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    _partition_counts_differ(env, capsys, "threeparts-spark", "-mapreduce", "true")
