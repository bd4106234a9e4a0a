"""A gateway whose registry gives a source a wrong address says so (issue 38: it took its slots and logged nothing for
75 s, and `replica list` said REPLICATING): in its log, again while it lasts, and in `replica list` of the link, which
names the gateway and what to mend."""

from __future__ import annotations

from pathlib import Path

import yaml
from support.env import Env
from support.streams import Gateways, link, new_stream, new_topics, produce, replica_rows, sp, wait_until


def test_a_gateway_that_cannot_read_a_source_says_so_in_replica_list_and_its_log(env: Env, tmp_path: Path) -> None:
    src, dst = "/sanfrancisco/unreach", "/newyork/unreach"
    new_stream(env.reg, src)
    new_stream(env.reg, dst)
    new_topics(env.reg, src, {"t": 2})
    link(env.reg, src, dst)
    produce(env.bs("sanfrancisco"), sp(src), "t", 10, 2)
    doc = yaml.safe_load(env.reg.read_text())
    doc["clusters"]["sanfrancisco"]["bootstrap.servers"] = "127.0.0.1:1"  # nothing listens there
    wrong = tmp_path / "wrong.yaml"
    wrong.write_text(yaml.safe_dump(doc))
    with Gateways(wrong, "newyork", tmp_path) as gws:
        name = gws.start()

        def row() -> dict | None:
            r = replica_rows(env.reg, src)[dst]
            return r if f"gateway {name} cannot read the source" in r["lasterror"] else None

        r = wait_until(row, 60, "replica list to say the gateway cannot read the source")
        assert r["replicaState"] == "REPLICA_STATE_ERROR" and not r["isUptodate"], r
        assert "127.0.0.1:1" in r["lasterror"], r
        log = (tmp_path / f"{name}.log").read_text()
        assert f"upstream {src} of {dst}" in log and "not replicated until it is mended" in log, log[-2000:]
