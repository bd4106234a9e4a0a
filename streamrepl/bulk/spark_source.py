"""A Spark data source for streams: read a stream (or some of its topics) as a DataFrame.

    from streamrepl.bulk.spark_source import register
    register(spark)
    df = (spark.read.format("streamrepl")
          .option("topics", "clicks,views")
          .option("startingTimestamp", "2026-01-01T00:00:00Z")
          .load("/sanfrancisco/activity"))

Columns: topic (the stream's topic name), partition, offset, key and value (binary),
timestamp, timestampType (0 CreateTime, 1 LogAppendTime, as Spark's Kafka source) and headers
(array of struct<key: string, value: binary>). One input partition per Kafka partition; the
end of each partition is taken when the query is planned. Filler records (see
`streamrepl.policy`) are left out unless `includeFillers` is true.

Options (names are case-insensitive):
    topics              comma-separated topic names (default: every topic of the stream)
    startingOffset      first offset of every partition: a number, or earliest (default)
    endingOffset        offset to stop before in every partition: a number, or latest (default)
    startingTimestamp   first record with a timestamp at or after this: milliseconds since
                        the epoch or an ISO-8601 time (UTC unless it says otherwise)
    endingTimestamp     stop before the first record with a timestamp at or after this
    clusters            the cluster registry file (default: as the CLI: $STREAMREPL_CLUSTERS, ...)
    includeFillers      true to keep filler records (default false)

Reading needs consumeperm or copyperm on the stream. Only committed records are read.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, cast

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from .. import kafka, policy, streams
from ..errors import InvalidArgument, NotFound
from ..kafka import TopicPartition
from ..paths import kafka_topic_name
from ..registry import Cluster, load
from .access import check_any_perm
from .reader import CONSUMER_TUNING, READ_UNCOMMITTED, batches, snapshot_end

SCHEMA = (
    "topic string, partition int, offset long, key binary, value binary, timestamp timestamp,"
    " timestampType int, headers array<struct<key:string,value:binary>>"
)
NAME = "streamrepl"
BATCH = 10_000


def register(spark: Any) -> None:
    """Make `spark.read.format("streamrepl")` available in this Spark session."""
    spark.dataSource.register(StreamreplDataSource)


class KafkaSlice(InputPartition):
    """One Kafka partition of a stream topic, between two offsets."""

    def __init__(
        self, topic: str, kafka_topic: str, partition: int, start: int, end: int, cluster: str, props: dict[str, str]
    ):
        super().__init__((kafka_topic, partition))
        self.topic = topic
        self.kafka_topic = kafka_topic
        self.partition = partition
        self.start = start
        self.end = end
        self.cluster = cluster
        self.props = props
        #: Time bounds: the slice starts at the first record stamped at or after from_ms, and ends
        #: before the first record after that stamped at or after to_ms (Kafka's offsets-for-times).
        self.from_ms: int | None = None
        self.to_ms: int | None = None

    def __repr__(self) -> str:  # never the properties: they may hold secrets
        return f"KafkaSlice({self.kafka_topic}[{self.partition}] {self.start}..{self.end})"


def _offset_option(options: Any, name: str) -> int | None:
    raw = options.get(name)
    if raw is None or str(raw).strip().lower() in ("", "earliest", "latest"):
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidArgument(f"option {name} '{raw}' is not an offset; give a number, earliest or latest") from None
    return value


def _time_option(options: Any, name: str) -> int | None:
    raw = options.get(name)
    if raw is None or str(raw).strip() == "":
        return None
    text = str(raw).strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        t = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidArgument(
            f"option {name} '{raw}' is not a time; give milliseconds since the epoch or ISO-8601"
        ) from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return int(t.timestamp() * 1000)


def _true(options: Any, name: str) -> bool:
    return str(options.get(name, "false")).strip().lower() in ("true", "yes", "1", "on")


class StreamreplDataSource(DataSource):
    """`spark.read.format("streamrepl").load("/cluster/stream")`."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return StreamreplReader(dict(self.options), schema)


class StreamreplReader(DataSourceReader):
    def __init__(self, options: dict[str, str], schema: StructType):
        # Spark hands options with their case kept; ours are case-insensitive.
        self.options = {k.lower(): v for k, v in options.items()}
        self.schema = schema

    def partitions(self) -> list[InputPartition]:
        opts = self.options
        path = opts.get("path")
        if not path:
            raise InvalidArgument('no stream given; use spark.read.format("streamrepl").load("/cluster/stream")')
        reg = load(opts.get("clusters") or None)
        r, rec = streams.load(reg, path)
        check_any_perm(rec, ("consumeperm", "copyperm"), r, "read it")
        known = sorted(rec.topics)
        wanted = [t.strip() for t in str(opts.get("topics") or "").split(",") if t.strip()] or known
        missing = [t for t in wanted if t not in known]
        if missing:
            raise NotFound(f"stream {r.path} has no topic {', '.join(repr(t) for t in missing)}")
        first = _offset_option(opts, "startingoffset")
        last = _offset_option(opts, "endingoffset")
        t_from = _time_option(opts, "startingtimestamp")
        t_to = _time_option(opts, "endingtimestamp")
        present = kafka.topics(r.cluster)
        slices: list[InputPartition] = []
        committed = kafka.consumer(r.cluster)
        uncommitted = kafka.consumer(r.cluster, **READ_UNCOMMITTED)
        try:
            for topic in wanted:
                kt = kafka_topic_name(r.path, topic)
                for p in range(present.get(kt, 0)):
                    tp = TopicPartition(kt, p)
                    end, _ = snapshot_end(committed, uncommitted, tp)
                    low, _ = uncommitted.get_watermark_offsets(tp, timeout=kafka.REQUEST_TIMEOUT, cached=False)
                    start = max(low, first if first is not None else low)
                    stop = min(end, last) if last is not None else end
                    if t_from is not None:
                        # The broker's answer only bounds where to look: the reading task finds the record.
                        start = max(start, _offset_for_time(uncommitted, kt, p, t_from, end))
                    if start < stop:
                        s = KafkaSlice(topic, kt, p, start, stop, r.cluster.name, dict(r.cluster.properties))
                        s.from_ms, s.to_ms = t_from, t_to
                        slices.append(s)
        finally:
            committed.close()
            uncommitted.close()
        return slices

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark.sql.pandas.types import to_arrow_schema

        if not isinstance(partition, KafkaSlice):
            return  # Spark's stand-in when nothing is to be read
        s = partition
        schema = to_arrow_schema(self.schema, timezone="UTC")
        fillers = _true(self.options, "includefillers")
        c = kafka.consumer(Cluster(s.cluster, s.props), **CONSUMER_TUNING)
        label = f"{s.topic}[{s.partition}]"
        started = s.from_ms is None
        done = False
        try:
            for good, _ in batches(c, TopicPartition(s.kafka_topic, s.partition, s.start), s.end, label):
                cols: list[list[Any]] = [[] for _ in range(8)]
                for m in good:
                    headers = cast(list[tuple[str, Any]], m.headers() or [])
                    if not fillers and headers and policy.is_filler(headers):
                        continue
                    ts_type, ts = m.timestamp()
                    if not started:
                        if ts < s.from_ms:  # type: ignore[operator]
                            continue
                        started = True
                    if s.to_ms is not None and ts >= s.to_ms:
                        done = True
                        break
                    if any(k == policy.TSTYPE for k, _ in headers):
                        ts_type = 2  # a copy of a LogAppendTime record
                    cols[0].append(s.topic)
                    cols[1].append(s.partition)
                    cols[2].append(m.offset())
                    cols[3].append(m.key())
                    cols[4].append(m.value())
                    cols[5].append(ts * 1000 if ts_type else None)
                    cols[6].append(ts_type - 1 if ts_type else -1)
                    cols[7].append([{"key": k, "value": v} for k, v in headers])
                if cols[0]:
                    arrays = [pa.array(col, type=f.type) for col, f in zip(cols, schema, strict=True)]
                    yield pa.RecordBatch.from_arrays(arrays, schema=schema)
                if done:
                    return
        finally:
            c.close()


def _offset_for_time(c: Any, kt: str, p: int, ms: int, end: int) -> int:
    """Where the first record with a timestamp at or after `ms` is, or starts to be searched for.

    Apache Kafka answers exactly; Tansu answers with the start of the batch holding it, or 0.
    """
    got = c.offsets_for_times([TopicPartition(kt, p, ms)], timeout=kafka.REQUEST_TIMEOUT)
    off = got[0].offset if got else -1
    return min(end, off) if off >= 0 else end
