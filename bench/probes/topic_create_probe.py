"""Probe: where a `stream topic create` spends its time as the cluster's topics grow (issue 15, item 4).

    .venv/bin/python bench/probes/topic_create_probe.py --background 0,1000 --topics 20

For each --background count, a fresh pair of embedded brokers: that many plain 4-partition Kafka topics made in
one CreateTopics request (the broker's load without any stream metadata), then one stream with --topics topics
created through the Python API, each create split into its steps by timing wrappers: reading the stream
(`load`), asking whether the Kafka topic exists, creating it, and the metadata write (reading the log on,
appending the record, reading it back). Beside them, the broker alone with the bare confluent-kafka admin client:
CreateTopics of one topic with a client kept for the run and with a new client each time (what
`kafka.create_topics` does). Medians in ms; not a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from streamrepl.local import EphemeralClusters  # noqa: E402

SRC = "sanfrancisco"


def timed(spent: dict[str, list[float]], name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*a: Any, **k: Any) -> Any:
        t = time.perf_counter()
        try:
            return fn(*a, **k)
        finally:
            spent[name].append(1000 * (time.perf_counter() - t))

    return wrapper


def bare_create(bootstrap: str, prefix: str, n: int, kept: bool) -> list[float]:
    out = []
    client = AdminClient({"bootstrap.servers": bootstrap})
    for i in range(n):
        if not kept:
            client = AdminClient({"bootstrap.servers": bootstrap})
        t = time.perf_counter()
        for f in client.create_topics([NewTopic(f"{prefix}{i}", 4, -1)], request_timeout=10).values():
            f.result()
        out.append(1000 * (time.perf_counter() - t))
    return out


def run(background: int, topics: int) -> dict[str, float]:
    with EphemeralClusters([SRC]) as ec:
        os.environ["STREAMREPL_CLUSTERS"] = str(ec.registry_path)
        from streamrepl import kafka, metastore, registry, stream_ops
        from streamrepl import topics as topics_api

        bootstrap = ec.brokers[SRC].bootstrap
        if background:
            admin = AdminClient({"bootstrap.servers": bootstrap})
            for start in range(0, background, 500):
                new = [NewTopic(f"bg{i}", 4, -1) for i in range(start, min(background, start + 500))]
                for f in admin.create_topics(new, request_timeout=60).values():
                    f.result()
        reg = registry.load()
        spent: dict[str, list[float]] = defaultdict(list)
        patches = [
            (topics_api, "load", "load the stream"),
            (metastore.MetaStore, "partitions_of", "does the Kafka topic exist"),
            (kafka, "create_topics", "create the Kafka topic"),
            (metastore.MetaStore, "update", "metadata write (all)"),
            (metastore.MetaStore, "_read", "  read the log on"),
            (metastore.MetaStore, "_append", "  append the record"),
            (metastore.MetaStore, "_won", "  read it back"),
            (topics_api, "create", "topic create (all)"),
        ]
        saved = [(obj, attr, getattr(obj, attr)) for obj, attr, _ in patches]
        stream_ops.create(reg, f"/{SRC}/probe", {"defaultpartitions": 4})
        for obj, attr, name in patches:
            setattr(obj, attr, timed(spent, name, getattr(obj, attr)))
        try:
            for j in range(topics):
                topics_api.create(reg, f"/{SRC}/probe", f"t{j}")
        finally:
            for obj, attr, fn in saved:
                setattr(obj, attr, fn)
        out = {name: statistics.median(v) for name, v in spent.items()}
        out["bare CreateTopics, kept client"] = statistics.median(bare_create(bootstrap, "kept", topics, True))
        out["bare CreateTopics, new client"] = statistics.median(bare_create(bootstrap, "new", topics, False))
        metastore.close_clients()
        return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--background", default="0,1000", help="comma-separated counts of plain topics made first")
    ap.add_argument("--topics", type=int, default=20, help="topics created in the probe's stream")
    a = ap.parse_args()
    counts = [int(x) for x in a.background.split(",") if x.strip()]
    rows = {n: run(n, a.topics) for n in counts}
    names = list(next(iter(rows.values())))
    print("median ms".ljust(32) + "".join(f"{n:>10} topics" for n in counts))
    for name in names:
        print(name.ljust(32) + "".join(f"{rows[n].get(name, float('nan')):>17.1f}" for n in counts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
