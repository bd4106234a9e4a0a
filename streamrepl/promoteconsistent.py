"""`replica promote -consistent true`: one cut for the whole stream instead of one per partition.

Each partition of a replica stops where its gateway let go of it, so the per-partition cut (promotecut.py) keeps, in
one partition, records written after records that another partition lacks. The consistent cut keeps, in every
partition, the records up to one timestamp T, and sets aside what lies past it:

- T is as late as every partition allows: the oldest of the partitions' last records (not fillers), among the
  partitions that were not caught up at their gateway's last report (replication/reports.py "caughtup": the writer
  had applied all its source's last fetch showed, and the partition still ends where that report says). A caught-up
  partition holds everything its source had then, so it does not hold T back; a partition that was not caught up and
  holds no record at all would put T before every record: promote refuses (-consistent false cuts per partition).
- Timestamps need not grow within a partition: a partition's kept prefix ends before its first record later than T
  (so a record at or before T after it is set aside too). Found by reading every partition from its start.
- Kafka cannot truncate a partition: the replica is first copied whole into `<replica>.aside-<yyyymmddHHMM>` and the
  copy checked (dr.py's set-aside, as failback and resync do); then each topic with a partition to cut is deleted,
  created again empty, and its kept prefixes copied back from the set-aside copy, offsets kept (the way resync
  re-creates its topics). Nothing is dropped: the records past the cut are in the set-aside stream.
- Consumer groups' committed cursors on the cut topics, read before the topics are re-created, are committed again,
  those past a partition's kept end moved back to it; the groups moved are reported.

A replica with replicas of its own is refused: they read the topics that would be re-created.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, cast

from . import kafka, policy, statustopic
from .bulk.copystream import copy_partition
from .dr import recreate_topic
from .errors import InvalidArgument, StreamreplError
from .journal import iso
from .model import Stream
from .paths import kafka_topic_name
from .registry import Registry
from .streams import Resolved, kafka_configs, resolve

#: The columns a consistent cut adds to promote's rows.
COLUMNS = ("cutts", "caughtup", "keptend", "setaside", "aside", "groupsmoved")


@dataclass
class Keep:
    """One partition's part in the consistent cut."""

    topic: str
    partition: int
    #: where the partition ended when the cut was planned (the per-partition cut)
    end: int
    #: the offset its kept prefix ends at: its first record later than T (end: none)
    keptend: int
    #: its records (not fillers) past the kept prefix, set aside
    setaside: int
    #: caught up at its gateway's last report (does not hold T back)
    caughtup: bool


def check(rec: Stream, path: str) -> None:
    """Refuse, before anything changes, what a consistent cut cannot do right."""
    if rec.replicas:
        raise InvalidArgument(
            f"stream {path} has replicas of its own ({', '.join(e.path for e in rec.replicas)}): a consistent cut"
            " re-creates topics they read; remove them first ('streamrepl stream replica remove'), or promote"
            " with -consistent false; nothing was changed"
        )


def caught_up(r: Resolved, sources: list[str], point: dict[str, list[int]]) -> set[tuple[str, int]]:
    """The partitions caught up at their gateway's last report and still ending where it said."""
    out: set[tuple[str, int]] = set()
    for key, body in statustopic.read(r.cluster, f"unit|{r.path}|").items():
        parts = key.split("|")
        if len(parts) != 5 or parts[2] not in sources or not parts[4].isdigit():
            continue
        topic, p = parts[3], int(parts[4])
        ends = point.get(topic) or []
        if body.get("caughtup") and p < len(ends) and body.get("next") == ends[p]:
            out.add((topic, p))
    return out


def cut_time(path: str, cuts: list[dict[str, Any]], caught: set[tuple[str, int]]) -> int:
    """T: the oldest last record of the partitions not caught up (`cuts`: promotecut's rows); the newest last record
    when every partition was caught up (nothing is set aside then)."""
    held = [k for k in cuts if (k["topic"], k["partition"]) not in caught]
    empty = [f"{k['topic']}[{k['partition']}]" for k in held if not k["lasttimestamp"]]
    if empty:
        raise InvalidArgument(
            f"partitions of {path} got no record and were not caught up at their gateway's last report"
            f" ({', '.join(empty[:5])}): a consistent cut would set aside every record; promote with -consistent"
            " false (each partition keeps what it got)"
        )
    stamps = [k["lasttimestamp"] for k in (held or cuts) if k["lasttimestamp"]]
    if not stamps:
        return 0
    return min(stamps) if held else max(stamps)


def _scan(c: kafka.Consumer, kt: str, p: int, end: int, t: int) -> tuple[int, int]:
    """(kept end, records set aside): the offset of the first record later than `t`, and the records from it on."""
    kept, aside = end, 0
    if end <= 0:
        return end, 0
    for m in kafka.read_partition(c, kafka.TopicPartition(kt, p, 0)):
        offset = cast(int, m.offset())
        if offset >= end:
            break
        if policy.is_filler(m.headers()):
            continue
        if kept == end and m.timestamp()[1] > t:
            kept = offset
        if offset >= kept:
            aside += 1
    return kept, aside


def plan(r: Resolved, point: dict[str, list[int]], t: int, caught: set[tuple[str, int]]) -> list[Keep]:
    out = []
    c = kafka.consumer(r.cluster)
    try:
        for topic, ends in sorted(point.items()):
            kt = kafka_topic_name(r.path, topic)
            for p, end in enumerate(ends):
                kept, aside = _scan(c, kt, p, end, t)
                out.append(Keep(topic, p, end, kept, aside, (topic, p) in caught))
    finally:
        c.close()
    return out


def changed_topics(rows: list[dict[str, Any]]) -> list[str]:
    """The topics with a partition to cut (`rows`: those of `rows`)."""
    return sorted({k["topic"] for k in rows if k["keptend"] < k["cutoffset"]})


def cursors(r: Resolved, topics: list[str]) -> dict[str, list[list[Any]]]:
    """group -> [[topic, partition, committed offset]] of the stream's `topics`."""
    if not topics:
        return {}
    names = {kafka_topic_name(r.path, t): t for t in topics}
    admin = kafka.GroupAdmin(r.cluster)
    found = kafka.committed_offsets(r.cluster, admin, kafka.list_groups(r.cluster, admin), lambda kt: kt in names)
    out: dict[str, list[list[Any]]] = {}
    for g, (offs, _) in sorted(found.items()):
        rows = [[names[kt], p, off] for (kt, p), off in sorted(offs.items()) if kt in names and off >= 0]
        if rows:
            out[g] = rows
    return out


def rebuild(reg: Registry, r: Resolved, rec: Stream, aside: str, keeps: list[dict[str, Any]], say: Any) -> None:
    """Re-create each cut topic empty and copy its kept prefixes back from the set-aside copy, offsets kept. Done
    again whole by a rerun (the set-aside copy holds everything)."""
    a = resolve(reg, aside)
    arec = a.store.get(a.path.path)
    if arec is None:
        raise StreamreplError(f"the set-aside copy {aside} is gone; the cut cannot be rebuilt from it")
    spec = {
        "src_cluster": a.cluster.name,
        "src_props": dict(a.cluster.properties),
        "dst_cluster": r.cluster.name,
        "dst_props": dict(r.cluster.properties),
        "src_uuid": arec.uuid,
        "dst_uuid": rec.uuid,
        "dst_path": str(r.path),
    }
    for topic in changed_topics(keeps):
        meta = rec.topics[topic]
        kt = kafka_topic_name(r.path, topic)
        recreate_topic(r.cluster, kt, meta.partitions, kafka_configs(rec.settings, meta.timestamptype))
        for k in (k for k in keeps if k["topic"] == topic):
            item = {
                "topic": topic,
                "partition": k["partition"],
                "end": k["keptend"],
                "dst": kt,
                "src": kafka_topic_name(a.path, topic),
                "stable": True,
            }
            got = copy_partition(spec, item) if k["keptend"] > 0 else {"error": None}
            if got["error"]:
                raise StreamreplError(f"copying the kept records of {r.path}:{topic} back failed: {got['error']}")
        ends = kafka.topic_ends(r.cluster, [kt])
        wrong = [k for k in keeps if k["topic"] == topic and ends.get((kt, k["partition"])) != k["keptend"]]
        if wrong:
            k = wrong[0]
            raise StreamreplError(
                f"{r.path}:{topic}[{k['partition']}] ends at {ends.get((kt, k['partition']))} after its rebuild, not"
                f" at {k['keptend']}"
            )
        say(f"rebuilt {r.path}:{topic}: each partition keeps its records up to the cut")


def move_cursors(
    r: Resolved, saved: dict[str, list[list[Any]]], keeps: list[dict[str, Any]]
) -> dict[str, list[tuple[str, int]]]:
    """Commit the saved cursors of the cut topics again, those past a partition's kept end moved back to it; returns
    the groups moved, with the partitions they moved on."""
    kept = {(k["topic"], k["partition"]): k["keptend"] for k in keeps}
    admin = kafka.GroupAdmin(r.cluster)
    moved: dict[str, list[tuple[str, int]]] = {}
    for group, rows in sorted(saved.items()):
        offsets = []
        for topic, p, off in rows:
            end = kept.get((topic, p), off)
            offsets.append(kafka.TopicPartition(kafka_topic_name(r.path, topic), p, min(off, end)))
            if off > end:
                moved.setdefault(group, []).append((topic, p))
        try:
            bad = kafka.commit_offsets(admin, group, offsets)
        except kafka.KafkaException as e:
            raise StreamreplError(
                f"the cursors of consumer group {group} on {r.path} could not be committed ({e}); stop its consumers"
                " and run promote again"
            ) from None
        if bad:
            raise StreamreplError(
                f"the cursors of consumer group {group} on {r.path} could not be committed ({bad[0].error}); stop its"
                " consumers and run promote again"
            )
    return moved


def rows(cut: list[dict[str, Any]], t: int, keeps: list[Keep], aside: str) -> list[dict[str, Any]]:
    """promotecut's rows with the consistent cut's columns (groupsmoved filled in once the cursors moved)."""
    by = {(k.topic, k.partition): asdict(k) for k in keeps}
    cut_any = any(k.keptend < k.end for k in keeps)
    out = []
    for row in cut:
        k = by.get((row["topic"], row["partition"]), {})
        out.append(
            {
                **row,
                "cutts": t,
                "caughtup": bool(k.get("caughtup")),
                "keptend": k.get("keptend", row["cutoffset"]),
                "setaside": k.get("setaside", 0),
                "aside": aside if cut_any else "",
                "groupsmoved": "",
            }
        )
    return out


def describe(path: str, cut: list[dict[str, Any]]) -> list[str]:
    if not cut or "cutts" not in cut[0]:
        return []
    t = cut[0]["cutts"]
    aside = sum(k["setaside"] for k in cut)
    caught = sum(1 for k in cut if k["caughtup"])
    out = [
        f"consistent cut of {path} at {iso(t)} ({t} ms): every partition keeps its records up to it ({caught} of"
        f" {len(cut)} partitions were caught up at their last report and did not hold it back)"
    ]
    if aside:
        where = ", ".join(f"{k['topic']}[{k['partition']}]: {k['setaside']}" for k in cut if k["setaside"])
        out.append(f"{aside} records past the cut are set aside in {cut[0]['aside']} ({where})")
    else:
        out.append("no record lies past the cut: nothing is set aside")
    return out
