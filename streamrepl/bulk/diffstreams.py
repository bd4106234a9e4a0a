"""diffstreams: compare two streams partition by partition (in threads here when they are small, else a Spark
job: `inprocess.choose`).

Per partition: counts, the first differing offset and a digest of the records (offset, key, value, user
headers, timestamp); a partition that only one stream has differs from offset 0 (`absent` names the stream that
lacks it), even when the other's is empty. Replication's own headers are ignored, and a filler on one side matches a gap (no
visible record) on the other, so a replica that copystream or the gateways made compares equal to its
source.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import struct
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from .. import kafka, policy, streams
from ..errors import InvalidArgument, StreamreplError
from ..kafka import Consumer, Message, TopicPartition
from ..model import Stream
from ..paths import kafka_topic_name
from ..registry import Cluster, Registry
from . import inprocess, spark
from .access import check_any_perm
from .progress import ProgressBar, task_progress
from .reader import CONSUMER_TUNING, READ_UNCOMMITTED, Clients, batches

DIFF_COLUMNS = ("topic", "partition", "srccount", "dstcount", "firstdiff", "srcdigest", "dstdigest", "match")


# -- the tasks: one partition each ------------------------------------------------------------
def _encode(m: Message, headers: Any) -> bytes:
    """The compared content of a record: timestamp, key, value and user headers."""
    key, value = m.key(), m.value()
    parts = [
        struct.pack(">qii", m.timestamp()[1], -1 if key is None else len(key), -1 if value is None else len(value)),
        key or b"",
        value or b"",
    ]
    for k, v in policy.user_headers(headers):
        kb = k.encode()
        parts += [struct.pack(">ii", len(kb), -1 if v is None else len(v)), kb, v or b""]
    return b"".join(parts)


def _visible(c: Consumer | None, kt: str | None, part: int, end: int, label: str) -> Iterator[tuple[int, bytes | None]]:
    """(offset, content) of each record before `end`; content None for a filler."""
    if c is None or kt is None or end <= 0:
        return
    # Offset 0, not OFFSET_BEGINNING: librdkafka looks the beginning up first, 0.5 s more per partition (measured);
    # a log that starts later resets to its earliest offset all the same (auto.offset.reset=earliest).
    for good, _ in batches(c, TopicPartition(kt, part, 0), end, label):
        for m in good:
            headers = m.headers()
            yield cast(int, m.offset()), (None if headers and policy.is_filler(headers) else _encode(m, headers))


def diff_partition(spec: dict[str, Any], item: dict[str, Any], clients: Clients = kafka) -> dict[str, Any]:
    """Compare one partition of the two streams (runs in a Spark task)."""
    src = Cluster(spec["src_cluster"], spec["src_props"])
    dst = Cluster(spec["dst_cluster"], spec["dst_props"])
    part = item["partition"]
    label = f"{item['topic']}[{part}]"
    hs, hd = hashlib.blake2b(digest_size=16), hashlib.blake2b(digest_size=16)
    counts = [0, 0]
    firstdiff = -1
    error = None
    cs = clients.consumer(src, **CONSUMER_TUNING) if item["src"] else None
    cd = clients.consumer(dst, **CONSUMER_TUNING) if item["dst"] else None

    def take(it: Iterator[tuple[int, bytes | None]], h: Any, side: int) -> tuple[int, bytes | None] | None:
        nxt = next(it, None)
        if nxt is not None and nxt[1] is not None:
            counts[side] += 1
            h.update(struct.pack(">qi", nxt[0], len(nxt[1])))
            h.update(nxt[1])
        return nxt

    try:
        si = _visible(cs, item["src"], part, item["src_end"], f"{spec['src_path']}:{label}")
        di = _visible(cd, item["dst"], part, item["dst_end"], f"{spec['dst_path']}:{label}")
        s, d = take(si, hs, 0), take(di, hd, 1)
        while s is not None or d is not None:
            if d is None or (s is not None and s[0] < d[0]):
                assert s is not None
                at, differs = s[0], s[1] is not None  # a source record where the destination has a gap
                s = take(si, hs, 0)
            elif s is None or d[0] < s[0]:
                at, differs = d[0], d[1] is not None
                d = take(di, hd, 1)
            else:
                at, differs = s[0], s[1] != d[1]
                s, d = take(si, hs, 0), take(di, hd, 1)
            if differs and firstdiff < 0:
                firstdiff = at
                if spec["first_exit"]:
                    break
    except Exception as e:  # noqa: BLE001 - reported in the row
        error = f"{label}: {spark.describe(e, src.secrets() + dst.secrets())}"
    finally:
        for c in (cs, cd):
            if c is not None:
                c.close()
    # A partition one stream lacks is a difference from its start, whatever the other holds (empty or not).
    absent = spec["dst_path"] if item["dst"] is None else spec["src_path"] if item["src"] is None else None
    if absent is not None:
        firstdiff = 0
    row = {
        "topic": item["topic"],
        "partition": part,
        "srccount": counts[0],
        "dstcount": counts[1],
        "firstdiff": firstdiff,
        "srcdigest": hs.hexdigest(),
        "dstdigest": hd.hexdigest(),
        "match": firstdiff < 0 and error is None,
    }
    if absent is not None:
        row["absent"] = absent
    if error:
        row["error"] = error
    return row


def _diff_task(
    spec: dict[str, Any], items: Iterable[dict[str, Any]], clients: Clients = kafka
) -> Iterator[dict[str, Any]]:
    for item in items:
        yield diff_partition(spec, item, clients)


# -- the driver: planning, then the job -------------------------------------------------------
@dataclass
class DiffResult:
    src: str
    dst: str
    rows: list[dict[str, Any]]
    partitions: int
    seconds: float = 0.0
    spark_seconds: float = 0.0
    stopped_early: bool = False
    engine: inprocess.Engine | None = None

    @property
    def match(self) -> bool:
        return len(self.rows) == self.partitions and all(r["match"] for r in self.rows)

    def first_difference(self) -> dict[str, Any] | None:
        return next((r for r in self.rows if not r["match"]), None)

    def document(self) -> dict[str, Any]:
        return {
            "src": self.src,
            "dst": self.dst,
            "timestamp": int(time.time() * 1000),
            "match": self.match,
            "partitions": self.partitions,
            "compared": len(self.rows),
            "seconds": round(self.seconds, 3),
            "data": self.rows,
        }


def _plan_diff(
    src_r: streams.Resolved, src_rec: Stream, dst_r: streams.Resolved, dst_rec: Stream
) -> list[dict[str, Any]]:
    names = sorted(set(src_rec.topics) | set(dst_rec.topics))
    src_present = kafka.topics(src_r.cluster)
    dst_present = kafka.topics(dst_r.cluster)
    items: list[dict[str, Any]] = []
    ends = {
        "s": kafka.consumer(src_r.cluster, **READ_UNCOMMITTED),
        "d": kafka.consumer(dst_r.cluster, **READ_UNCOMMITTED),
    }
    try:
        for topic in names:
            skt, dkt = kafka_topic_name(src_r.path, topic), kafka_topic_name(dst_r.path, topic)
            ns, nd = src_present.get(skt, 0), dst_present.get(dkt, 0)
            # Every partition of a topic at once: one by one, each end costs a round of fetches.
            src_ends = kafka.true_ends(ends["s"], [TopicPartition(skt, p) for p in range(ns)]) if ns else {}
            dst_ends = kafka.true_ends(ends["d"], [TopicPartition(dkt, p) for p in range(nd)]) if nd else {}
            for p in range(max(ns, nd)):
                items.append(
                    {
                        "topic": topic,
                        "partition": p,
                        "src": skt if p < ns else None,
                        "dst": dkt if p < nd else None,
                        "src_end": src_ends.get((skt, p), 0),
                        "dst_end": dst_ends.get((dkt, p), 0),
                    }
                )
    finally:
        for c in ends.values():
            c.close()
    return items


def diffstreams(
    reg: Registry,
    src: str,
    dst: str,
    *,
    first_exit: bool = False,
    master: str | None = None,
    numthreads: int | None = None,
    conf: dict[str, str] | None = None,
    mapreduce: bool | None = None,
    progress: bool | None = None,
    say: Callable[[str], None] | None = None,
    warn: Callable[[str], None] | None = None,
) -> DiffResult:
    """Compare two streams partition by partition; see the module doc."""
    warn = warn or (lambda text: print(f"diffstreams: warning: {text}", file=sys.stderr))
    spark.check_spark_options(master, numthreads)
    inprocess.check_engine_options(mapreduce, master)
    if str(streams.resolve(reg, src).path) == str(streams.resolve(reg, dst).path):
        raise InvalidArgument(
            f"-src {src} and -dst {dst} are the same stream; compare a stream with its replica or copy"
        )
    src_r, src_rec = streams.load(reg, src)
    dst_r, dst_rec = streams.load(reg, dst)
    check_any_perm(src_rec, ("copyperm", "consumeperm"), src_r, "compare it")
    check_any_perm(dst_rec, ("copyperm", "consumeperm"), dst_r, "compare it")
    secrets = src_r.cluster.secrets() + dst_r.cluster.secrets()
    items = _plan_diff(src_r, src_rec, dst_r, dst_rec)
    result = DiffResult(str(src_r.path), str(dst_r.path), [], len(items))
    if not items:
        return result
    show = sys.stderr.isatty() if progress is None else progress
    records = sum(i["src_end"] + i["dst_end"] for i in items)
    result.engine = inprocess.choose(records, inprocess.DIFF_LIMIT, mapreduce, master)
    inprocess.announce("diffstreams", result.engine.line("comparing", records), say, show)
    unused = inprocess.unused_sparkconf(result.engine, conf)
    if unused:
        warn(unused)
    spec = {
        "src_cluster": src_r.cluster.name,
        "src_props": dict(src_r.cluster.properties),
        "dst_cluster": dst_r.cluster.name,
        "dst_props": dict(dst_r.cluster.properties),
        "src_path": str(src_r.path),
        "dst_path": str(dst_r.path),
        "first_exit": first_exit,
    }
    label = f"diffstreams {src_r.path} {dst_r.path}"
    try:
        if result.engine.spark:
            _diff_on_spark(result, items, spec, label, master, numthreads, conf, secrets, show)
        else:
            threads: inprocess.Threads[dict[str, Any], dict[str, Any]] = inprocess.Threads(
                numthreads or inprocess.THREADS
            )
            bar = ProgressBar(show, label, len(items), lambda: len(threads.rows))
            t0 = time.monotonic()
            try:
                result.rows = threads.run(
                    lambda clients, item: [diff_partition(spec, item, clients)],
                    items,
                    bar.tick,
                    enough=(lambda row: not row["match"]) if first_exit else None,
                )
            finally:
                bar.close()
            result.seconds = time.monotonic() - t0
            result.stopped_early = len(result.rows) < len(items)
    except KeyboardInterrupt as e:
        raise type(e)(
            f"the comparison of {src_r.path} and {dst_r.path} stopped part way; nothing was written"
        ) from None
    result.rows.sort(key=lambda r: (r["topic"], r["partition"]))
    return result


def _diff_on_spark(
    result: DiffResult,
    items: list[dict[str, Any]],
    spec: dict[str, Any],
    label: str,
    master: str | None,
    numthreads: int | None,
    conf: dict[str, str] | None,
    secrets: list[str],
    show: bool,
) -> None:
    with spark.starting(show, f"starting Spark ({master or 'local'})"):
        handle = spark.start_spark(f"streamrepl {label}", master, numthreads, conf, secrets)
    result.spark_seconds = handle.seconds
    try:
        sc = handle.sc
        task = functools.partial(_diff_task, spec)
        bar = task_progress(show, sc, len(items), label)
        t0 = time.monotonic()
        # With -first_exit the partitions are compared in waves, and no wave starts after a difference.
        wave = max(1, sc.defaultParallelism) if spec["first_exit"] else len(items)
        try:
            for i in range(0, len(items), wave):
                chunk = items[i : i + wave]
                bar.base = i
                result.rows += spark.run_job(
                    sc,
                    lambda chunk=chunk: sc.parallelize(chunk, len(chunk)).mapPartitions(task),  # type: ignore[misc]
                    bar.tick,
                )
                if spec["first_exit"] and not all(r["match"] for r in result.rows):
                    result.stopped_early = i + wave < len(items)
                    break
        except Exception as e:  # noqa: BLE001
            raise StreamreplError(f"the Spark job failed: {spark.describe(e, secrets)}") from None
        finally:
            bar.close()
        result.seconds = time.monotonic() - t0
    finally:
        handle.stop()


def check_outdir(outdir: str) -> None:
    """Refuse an -outdir that `write_outdir` could not write, before the job runs (and without creating it)."""
    d = Path(outdir).expanduser().absolute()
    existing = next(p for p in (d, *d.parents) if p.exists() or p == p.parent)
    if not existing.is_dir():
        what = "is not a directory" if existing == d else f"cannot be made: {existing} is not a directory"
        raise InvalidArgument(f"-outdir {outdir} {what}; give a writable directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise InvalidArgument(
            f"-outdir {outdir} cannot be written ({existing} is not writable); give a writable directory"
        )


def write_outdir(outdir: str, result: DiffResult) -> Path:
    """Write the comparison as JSON: `<outdir>/diffstreams.json` (on the machine that runs the command)."""
    d = Path(outdir).expanduser()
    try:
        d.mkdir(parents=True, exist_ok=True)
        path = d / "diffstreams.json"
        tmp = d / f".diffstreams.json.{os.getpid()}"
        tmp.write_text(json.dumps(result.document(), indent=1) + "\n")
        os.replace(tmp, path)
    except OSError as e:
        raise InvalidArgument(f"-outdir {outdir} cannot be written ({e.strerror}); give a writable directory") from None
    return path
