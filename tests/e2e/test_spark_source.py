"""The Spark data source: a stream read as a DataFrame, with topic, offset and time ranges."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from confluent_kafka import Producer
from support.copying import TS0, send
from support.env import Env, own_env

from streamrepl import policy
from streamrepl.bulk.spark import start_spark

pytestmark = pytest.mark.spark

# Spark's Python data sources hand batches over as Arrow: no pyarrow, no data source.
pytest.importorskip("pyarrow", reason="the Spark data source needs pyarrow (pip install pyarrow)")

SRC = "/sanfrancisco/analytics"


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    # One cluster, with the records the data source reads.
    with own_env(tmp_path_factory, ["sanfrancisco"]) as e:
        e.make_stream(SRC, ["a", "b"], 2)
        bs = e.bs("sanfrancisco")
        send(bs, e.kt(SRC, "a"), 400, 2, tag="a")
        send(bs, e.kt(SRC, "b"), 6, 2, single=True, tag="b")
        p = Producer({"bootstrap.servers": bs, "log_level": 0})
        p.produce(e.kt(SRC, "b"), partition=0, headers=policy.filler_headers(e.uuid(SRC)), timestamp=0)
        assert p.flush(10) == 0
        yield e


@pytest.fixture(scope="module")
def spark(env: Env) -> Iterator[Any]:
    from streamrepl.bulk.spark_source import register

    handle = start_spark("streamrepl data source test", numthreads=2, conf={"spark.sql.shuffle.partitions": "2"})
    register(handle.spark)
    yield handle.spark
    handle.stop()


def read(spark: Any, env: Env, **options: str) -> Any:
    r = spark.read.format("streamrepl").option("clusters", env.registry_path)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load(SRC)


def test_reads_a_stream_with_every_column(spark: Any, env: Env) -> None:
    df = read(spark, env)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("topic", "string"),
        ("partition", "int"),
        ("offset", "bigint"),
        ("key", "binary"),
        ("value", "binary"),
        ("timestamp", "timestamp"),
        ("timestampType", "int"),
        ("headers", "array<struct<key:string,value:binary>>"),
    ]
    assert df.rdd.getNumPartitions() == 4  # one per Kafka partition
    rows = df.collect()
    assert len(rows) == 406  # the filler is left out
    r = next(x for x in rows if x.topic == "a" and x.partition == 1 and x.offset == 4)
    i = 9  # the 5th record of partition 1
    assert (bytes(r.key), bytes(r.value)) == (f"ak{i}".encode(), f"av{i}-".encode() * 5)
    assert round(r.timestamp.timestamp() * 1000) == TS0 + 7 * i  # naive local time, as Spark returns it
    assert r.timestampType == 0
    assert [(h.key, h.value) for h in r.headers] == [("seq", b"9"), ("tag", b"a"), ("empty", None)]
    counts = {(x.topic, x.partition): x["count"] for x in df.groupBy("topic", "partition").count().collect()}
    assert counts == {("a", 0): 200, ("a", 1): 200, ("b", 0): 3, ("b", 1): 3}


def test_topic_offset_and_time_options(spark: Any, env: Env) -> None:
    assert {r.topic for r in read(spark, env, topics="b").select("topic").distinct().collect()} == {"b"}
    df = read(spark, env, topics="a", startingOffset="10", endingOffset="20")
    offsets = sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())
    assert offsets == [(p, o) for p in (0, 1) for o in range(10, 20)]
    # Records 100..149 of topic a by their timestamps (TS0 + 7 i), one bound as ISO-8601.
    start = datetime.fromtimestamp((TS0 + 7 * 100) / 1000, tz=UTC).isoformat()
    df = read(spark, env, topics="a", startingTimestamp=start, endingTimestamp=str(TS0 + 7 * 150))
    keys = sorted(int(bytes(r.key)[2:]) for r in df.select("key").collect() if r.key is not None)
    assert keys == [i for i in range(100, 150) if i % 11 != 5]
    assert df.count() == 50
    assert read(spark, env, topics="b", includeFillers="true").count() == 7


def test_bad_options_are_clear(spark: Any, env: Env) -> None:
    with pytest.raises(Exception, match="has no topic 'nosuch'"):
        read(spark, env, topics="nosuch").count()
    with pytest.raises(Exception, match="is not an offset"):
        read(spark, env, startingOffset="soon").count()
