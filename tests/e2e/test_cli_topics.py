"""`streamrepl stream topic create|edit|delete|info|list` end to end, against the session's brokers."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource
from support.cli import Run, one_error_line, unique_path

from streamrepl.local import EphemeralClusters

Cli = Callable[..., Run]
ALICE_ENG = {"STREAMREPL_IDENTITY": "user=alice;groups=eng"}
ALICE_QA = {"STREAMREPL_IDENTITY": "user=alice;groups=qa"}


def make_stream(cli: Cli, *options: str, cluster: str = "sanfrancisco") -> str:
    path = unique_path(cluster)
    r = cli("stream", "create", "-path", path, *options)
    assert r.code == 0, r
    return path


def topics_of(cli: Cli, path: str) -> dict[str, dict]:
    r = cli("stream", "topic", "list", "-path", path, "-json")
    assert r.code == 0, r
    return {row["topic"]: row for row in r.data()}


def bootstrap(clusters: EphemeralClusters, cluster: str = "sanfrancisco") -> str:
    return clusters.brokers[cluster].bootstrap


def describe(clusters: EphemeralClusters, kafka_topic: str, cluster: str = "sanfrancisco") -> dict[str, str]:
    admin = AdminClient({"bootstrap.servers": bootstrap(clusters, cluster)})
    [fut] = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, kafka_topic)]).values()
    try:
        return {k: v.value for k, v in fut.result(timeout=10).items()}
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"broker does not report topic configs: {e}")


def test_create_list_and_plain_kafka_client_round_trip(cli: Cli, clusters: EphemeralClusters) -> None:
    path = make_stream(cli, "-defaultpartitions", "3", "-ttl", "86400")
    r = cli("stream", "topic", "create", "-path", path, "-topic", "clicks")
    assert (r.code, r.stdout, r.stderr) == (0, "", ""), r
    row = topics_of(cli, path)["clicks"]
    assert row["partitions"] == 3
    assert {"topic", "partitions", "consumers", "maxlag", "kafkatopic"} <= set(row)
    kt = row["kafkatopic"]
    assert re.fullmatch(r"[A-Za-z0-9._-]{1,249}", kt)

    # A plain Kafka client, knowing nothing of streamrepl, writes and reads the topic.
    sent = [(f"k{i}".encode(), uuid.uuid4().bytes, i % 3) for i in range(9)]
    p = Producer({"bootstrap.servers": bootstrap(clusters), "log_level": 0})
    for key, value, part in sent:
        p.produce(kt, value=value, key=key, partition=part)
    assert p.flush(10) == 0
    c = Consumer(
        {
            "bootstrap.servers": bootstrap(clusters),
            "group.id": f"plain-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "log_level": 0,
        }
    )
    got = []
    try:
        c.assign([TopicPartition(kt, part, 0) for part in range(3)])
        deadline = time.monotonic() + 15
        while len(got) < len(sent) and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append((m.key(), m.value(), m.partition()))
        # Commit, so that the topic now has a consumer group.
        c.commit(offsets=[TopicPartition(kt, part, 1) for part in range(3)], asynchronous=False)
    finally:
        c.close()
    assert sorted(got) == sorted(sent)

    row = topics_of(cli, path)["clicks"]
    assert row["consumers"] == 1
    assert row["maxlag"] == 2  # 3 records per partition, committed at 1

    info = cli("stream", "topic", "info", "-path", path, "-topic", "clicks", "-json").data()
    assert [r["partitionid"] for r in info] == [0, 1, 2]
    for r in info:
        assert r["maxoffset"] == 2
        assert r["mintimestamp"] and r["maxtimestamp"]
        assert r["mintimestamp"] <= r["maxtimestamp"]


def test_topic_info_of_an_empty_topic(cli: Cli) -> None:
    path = make_stream(cli)
    assert cli("stream", "topic", "create", "-path", path, "-topic", "empty", "-partitions", "2").code == 0
    rows = cli("stream", "topic", "info", "-path", path, "-topic", "empty", "-json").data()
    assert [(r["partitionid"], r["maxoffset"]) for r in rows] == [(0, -1), (1, -1)]
    assert all(r["mintimestamp"] is None and r["maxtimestamp"] is None for r in rows)


def test_ttl_and_compression_applied_to_the_kafka_topic(cli: Cli, clusters: EphemeralClusters) -> None:
    path = make_stream(cli, "-ttl", "3600", "-compression", "zlib")
    assert cli("stream", "topic", "create", "-path", path, "-topic", "t").code == 0
    conf = describe(clusters, topics_of(cli, path)["t"]["kafkatopic"])
    assert conf.get("retention.ms") == "3600000"
    assert conf.get("compression.type") == "gzip"
    assert conf.get("message.timestamp.type") == "CreateTime"


def test_timestamptype_of_a_topic(cli: Cli, clusters: EphemeralClusters) -> None:
    path = make_stream(cli, "-defaulttimestamptype", "logappendtime")
    assert cli("stream", "topic", "create", "-path", path, "-topic", "a").code == 0
    r = cli("stream", "topic", "create", "-path", path, "-topic", "b", "-timestamptype", "createtime")
    assert r.code == 0, r
    rows = topics_of(cli, path)
    assert rows["a"]["timestamptype"] == "logappendtime"
    assert rows["b"]["timestamptype"] == "createtime"
    assert describe(clusters, rows["a"]["kafkatopic"]).get("message.timestamp.type") == "LogAppendTime"
    r = cli("stream", "topic", "edit", "-path", path, "-topic", "b", "-timestamptype", "logappendtime")
    assert r.code == 0, r
    assert topics_of(cli, path)["b"]["timestamptype"] == "logappendtime"


def test_edit_partitions_same_number_is_accepted(cli: Cli) -> None:
    path = make_stream(cli)
    assert cli("stream", "topic", "create", "-path", path, "-topic", "t", "-partitions", "2").code == 0
    assert cli("stream", "topic", "edit", "-path", path, "-topic", "t", "-partitions", "2").code == 0
    assert topics_of(cli, path)["t"]["partitions"] == 2


def test_edit_adding_partitions_grows_or_says_why_not(cli: Cli, clusters: EphemeralClusters) -> None:
    path = make_stream(cli)
    assert cli("stream", "topic", "create", "-path", path, "-topic", "t", "-partitions", "1").code == 0
    r = cli("stream", "topic", "edit", "-path", path, "-topic", "t", "-partitions", "3")
    row = topics_of(cli, path)["t"]
    admin = AdminClient({"bootstrap.servers": bootstrap(clusters)})
    actual = len(admin.list_topics(row["kafkatopic"], timeout=10).topics[row["kafkatopic"]].partitions)
    if r.code == 0:
        assert row["partitions"] == 3 == actual
    else:  # Tansu refuses CreatePartitions: a clear error, and the record still matches the broker
        assert "cannot grow" in one_error_line(r) or "refused" in r.stderr
        assert row["partitions"] == 1 == actual


def test_delete_topic(cli: Cli, clusters: EphemeralClusters) -> None:
    path = make_stream(cli)
    for t in ("a", "b"):
        assert cli("stream", "topic", "create", "-path", path, "-topic", t).code == 0
    kt = topics_of(cli, path)["a"]["kafkatopic"]
    assert cli("stream", "topic", "delete", "-path", path, "-topic", "a").code == 0
    assert set(topics_of(cli, path)) == {"b"}
    admin = AdminClient({"bootstrap.servers": bootstrap(clusters)})
    assert kt not in admin.list_topics(timeout=10).topics
    assert cli("stream", "info", "-path", path, "-json").data()[0]["numtopics"] == 1
    # The name can be used again.
    assert cli("stream", "topic", "create", "-path", path, "-topic", "a").code == 0


def test_same_topic_name_in_two_streams_and_two_clusters(cli: Cli) -> None:
    a, b, c = make_stream(cli), make_stream(cli), make_stream(cli, cluster="newyork")
    kts = set()
    for p in (a, b, c):
        assert cli("stream", "topic", "create", "-path", p, "-topic", "same").code == 0
        kts.add((p.split("/")[1], topics_of(cli, p)["same"]["kafkatopic"]))
    assert len(kts) == 3


def test_list_noheader_and_table(cli: Cli) -> None:
    path = make_stream(cli)
    assert cli("stream", "topic", "create", "-path", path, "-topic", "x").code == 0
    r = cli("stream", "topic", "list", "-path", path)
    header, row = r.stdout.splitlines()
    assert header.split("\t")[:2] == ["topic", "partitions"]
    assert row.split("\t")[:2] == ["x", "1"]
    assert cli("stream", "topic", "list", "-path", path, "-noheader").stdout.splitlines() == [row]


def test_topicperm_enforced(cli: Cli) -> None:
    path = make_stream(cli, "-topicperm", "g:eng", "-adminperm", "u:root")
    r = cli("stream", "topic", "create", "-path", path, "-topic", "t", env=ALICE_QA)
    line = one_error_line(r)
    assert re.match(r"^ERROR \(1\) - stream topic create: user 'alice' lacks topicperm", line), line
    assert topics_of(cli, path) == {}

    assert cli("stream", "topic", "create", "-path", path, "-topic", "t", env=ALICE_ENG).code == 0
    assert "lacks topicperm" in one_error_line(
        cli("stream", "topic", "delete", "-path", path, "-topic", "t", env=ALICE_QA)
    )
    assert "lacks topicperm" in one_error_line(
        cli("stream", "topic", "edit", "-path", path, "-topic", "t", "-partitions", "1", env=ALICE_QA)
    )
    assert set(topics_of(cli, path)) == {"t"}
    assert cli("stream", "topic", "delete", "-path", path, "-topic", "t", env=ALICE_ENG).code == 0
    assert topics_of(cli, path) == {}


def test_adminperm_includes_topicperm(cli: Cli) -> None:
    path = make_stream(cli, "-topicperm", "u:nobody", "-adminperm", "g:ops", "-force", "true")
    env = {"STREAMREPL_IDENTITY": "user=olga;groups=ops"}
    assert cli("stream", "topic", "create", "-path", path, "-topic", "t", env=env).code == 0


def test_delete_of_a_topic_missing_on_the_broker_still_cleans_the_record(cli: Cli, clusters: EphemeralClusters) -> None:
    path = make_stream(cli)
    assert cli("stream", "topic", "create", "-path", path, "-topic", "gone").code == 0
    kt = topics_of(cli, path)["gone"]["kafkatopic"]
    admin = AdminClient({"bootstrap.servers": bootstrap(clusters)})
    admin.delete_topics([kt])[kt].result(10)
    assert cli("stream", "topic", "delete", "-path", path, "-topic", "gone").code == 0
    assert topics_of(cli, path) == {}


def test_topic_info_missing_topic_is_one_line(cli: Cli) -> None:
    path = make_stream(cli)
    line = one_error_line(cli("stream", "topic", "info", "-path", path, "-topic", "nope"))
    assert line.startswith("ERROR (2) - stream topic info: topic 'nope' does not exist")


def test_kafka_error_text_is_one_line(cli: Cli) -> None:
    # Whatever the broker says, the user sees one line.
    path = make_stream(cli)
    assert cli("stream", "topic", "create", "-path", path, "-topic", "dup").code == 0
    r = cli("stream", "topic", "create", "-path", path, "-topic", "dup")
    assert "already exists" in one_error_line(r)


def test_topic_create_racing_a_stream_delete(
    cli: Cli, clusters: EphemeralClusters, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The stream is deleted (Kafka topics first) between the Kafka topic's creation and the record
    update: the user hears that the stream went away, not about the clean-up."""
    from streamrepl import metastore
    from streamrepl.errors import NotFound

    path = make_stream(cli)
    admin = AdminClient({"bootstrap.servers": bootstrap(clusters)})

    def concurrent_delete(self: metastore.MetaStore, p: str, edit: Any) -> None:
        doomed = [t for t in admin.list_topics(timeout=10).topics if t.startswith("sr.") and t.endswith(".late")]
        for fut in admin.delete_topics(doomed).values():
            fut.result(10)
        raise NotFound(f"stream {p} was deleted meanwhile")

    monkeypatch.setattr(metastore.MetaStore, "update", concurrent_delete)
    r = cli("stream", "topic", "create", "-path", path, "-topic", "late")
    assert "was deleted meanwhile" in one_error_line(r)
