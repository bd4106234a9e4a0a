"""What `replica promote` reports of its cut: per partition, the last record the replica got (its offset and
timestamp) and how far it lags the partition that got the newest one (the spread: each partition stopped on its
own, as the gateways let go of them one by one); and, when the lost source can still be read, what the replica is
known to lack: the source's records past the promotion point, how many and their time range.

The source is asked with a short timeout (it is usually down when promote runs); when it does not answer, what the
replica lacks is unknown (-1), and promote says so. The rows are kept in the promotion record (Stream.promotion
"cut"), so that a rerun of a finished promote reports the same cut.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, cast

from . import kafka, policy
from .errors import StreamreplError
from .journal import iso
from .paths import StreamPath, kafka_topic_name
from .registry import Cluster, Registry
from .streams import Resolved

#: How long promote waits for the lost source to answer before it calls what the replica lacks unknown.
SOURCE_TIMEOUT = 3.0
#: How far back from a partition's end the last record (not a filler) is looked for.
LOOKBACK = 20


@dataclass
class PartitionCut:
    topic: str
    partition: int
    #: the promotion point: the partition's end
    cutoffset: int
    #: the last record the replica holds (-1, 0: none)
    lastoffset: int = -1
    lasttimestamp: int = 0
    #: how far its last record's timestamp is behind the newest partition's (ms)
    behindms: int = 0
    #: the source's end, and its records past the cut: count, first and last timestamp (-1: the source did not answer)
    sourceend: int = -1
    missing: int = -1
    missingfromts: int = 0
    missingtots: int = 0


#: The columns of a partition's cut, in the order promote shows them (kept records come back in another order).
COLUMNS = (*(f.name for f in fields(PartitionCut)), "spreadms")


def _last_real(c: kafka.Consumer, tp: kafka.TopicPartition, end: int) -> kafka.Message | None:
    """The partition's last record that is not a filler (nor a marker), looking back at most LOOKBACK offsets."""
    for offset in range(end, max(0, end - LOOKBACK), -1):
        m = kafka.last_record(c, kafka.TopicPartition(tp.topic, tp.partition), offset)
        if m is not None and not policy.is_filler(m.headers()):
            return m
    return None


def _past_cut(c: kafka.Consumer, tp: kafka.TopicPartition, start: int, end: int) -> tuple[int, int, int]:
    """(records, first timestamp, last timestamp) of the source's records (not fillers) in [start, end)."""
    count = first = last = 0
    if start >= end:
        return 0, 0, 0
    for m in kafka.read_partition(c, kafka.TopicPartition(tp.topic, tp.partition, start)):
        offset = cast(int, m.offset())
        if offset >= end:
            break
        if policy.is_filler(m.headers()):
            continue
        ts = m.timestamp()[1]
        count += 1
        first = ts if not first else min(first, ts)
        last = max(last, ts)
    return count, first, last


def measure(reg: Registry, r: Resolved, point: dict[str, list[int]], source: str | None) -> list[PartitionCut]:
    """The cut at `point` (topic -> end of each partition) of the replica `r`, against `source` (its one lost
    upstream, `/cluster/stream`) when it answers."""
    cuts = []
    c = kafka.consumer(r.cluster)
    try:
        for topic, ends in sorted(point.items()):
            kt = kafka_topic_name(r.path, topic)
            for p, end in enumerate(ends):
                cut = PartitionCut(topic, p, end)
                last = _last_real(c, kafka.TopicPartition(kt, p), end) if end else None
                if last is not None:
                    cut.lastoffset, cut.lasttimestamp = cast(int, last.offset()), last.timestamp()[1]
                cuts.append(cut)
    finally:
        c.close()
    newest = max((k.lasttimestamp for k in cuts), default=0)
    for k in cuts:
        k.behindms = newest - k.lasttimestamp if k.lasttimestamp else 0
    if source is not None:
        _against_source(reg, source, cuts)
    return cuts


def _against_source(reg: Registry, source: str, cuts: list[PartitionCut]) -> None:
    cluster, _, path = source.lstrip("/").partition("/")
    if cluster not in reg.clusters:
        return
    src: Cluster = reg.get(cluster)
    if not kafka.ping(src, timeout=SOURCE_TIMEOUT):
        return
    sp = StreamPath(cluster, "/" + path)
    try:
        ends = kafka.topic_ends(src, sorted({kafka_topic_name(sp, k.topic) for k in cuts}))
        c = kafka.consumer(src)
        try:
            for k in cuts:
                kt = kafka_topic_name(sp, k.topic)
                if (kt, k.partition) not in ends:
                    continue
                end = ends[(kt, k.partition)]
                n, first, last = _past_cut(c, kafka.TopicPartition(kt, k.partition), k.cutoffset, end)
                k.sourceend, k.missing, k.missingfromts, k.missingtots = end, n, first, last
        finally:
            c.close()
    except (StreamreplError, TimeoutError):
        return  # the source went away meanwhile: what it holds stays unknown (partitions not read keep -1)


def rows(cuts: list[PartitionCut]) -> list[dict[str, Any]]:
    spread = spread_ms(cuts)
    return [{**asdict(k), "spreadms": spread} for k in cuts]


def spread_ms(cuts: list[PartitionCut]) -> int:
    stamps = [k.lasttimestamp for k in cuts if k.lasttimestamp]
    return max(stamps) - min(stamps) if stamps else 0


def describe(path: str, source: str, cut: list[dict[str, Any]]) -> list[str]:
    """What promote says of its cut (`cut`: the rows of `rows`)."""
    if not cut:
        return []
    stamps = [k["lasttimestamp"] for k in cut if k["lasttimestamp"]]
    out = []
    if stamps:
        out.append(
            f"cut: each partition of {path} keeps the records it got; their last records span"
            f" {max(stamps) - min(stamps)} ms across {len(cut)} partitions ({iso(min(stamps))} to {iso(max(stamps))})"
        )
    known = [k for k in cut if k["missing"] >= 0]
    if not known:
        out.append(f"{source} does not answer: what {path} lacks of it cannot be known")
        return out
    missing = sum(k["missing"] for k in known)
    if missing:
        first = min(k["missingfromts"] for k in known if k["missing"])
        last = max(k["missingtots"] for k in known if k["missing"])
        out.append(
            f"{path} lacks {missing} records that {source} holds past the cut (timestamps {iso(first)} to"
            f" {iso(last)}); they stay on {source} only"
        )
    else:
        out.append(f"{path} lacks no record that {source} holds")
    if len(known) < len(cut):
        out.append(f"{len(cut) - len(known)} partitions of {source} could not be read: what they hold is unknown")
    return out
