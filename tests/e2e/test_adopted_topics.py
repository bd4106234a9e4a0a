"""Topics that a plain Kafka client creates under a stream's prefix belong to the stream (issue: every topic of a
stream is replicated). With `autocreate true` they are adopted into its metadata, shown by the topic verbs and
replicated; with `autocreate false` they are reported, never silently left out of a replica."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from support import unique_path
from support.clusters import ON_NOIDA

from streamrepl.local import EphemeralClusters
from streamrepl.paths import StreamPath, kafka_topic_name

pytestmark = pytest.mark.noida


def _plain_topic(clusters: EphemeralClusters, cluster: str, kafka_topic: str, records: int = 10) -> None:
    """What a plain Kafka application does: create the topic by name (or have the broker create it) and write."""
    bootstrap = clusters.brokers[cluster].bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(kafka_topic, 2, 1)]).values():
        f.result()
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(records):
        p.produce(kafka_topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 2)
    assert p.flush(30) == 0


def _kafka_name(path: str, topic: str) -> str:
    cluster, _, inner = path[1:].partition("/")
    return kafka_topic_name(StreamPath(cluster, "/" + inner), topic)


def test_a_topic_written_by_a_plain_client_is_adopted_and_listed(cli, clusters: EphemeralClusters) -> None:  # type: ignore[no-untyped-def]
    path = unique_path()
    assert cli("stream", "create", "-path", path).code == 0
    kt = _kafka_name(path, "views")
    _plain_topic(clusters, "sanfrancisco", kt)
    rows = {r["topic"]: r for r in cli("stream", "topic", "list", "-path", path, "-json").data()}
    assert rows["views"]["partitions"] == 2 and rows["views"]["kafkatopic"] == kt, rows
    info = cli("stream", "topic", "info", "-path", path, "-topic", "views", "-json").data()
    assert [r["maxoffset"] for r in info] == [4, 4]
    run = cli("consume", "-path", f"{path}:views", "-json", "-timeout", "5")
    assert run.code == 0, run


def test_topic_create_adopts_a_topic_that_already_exists_in_kafka(cli, clusters: EphemeralClusters) -> None:  # type: ignore[no-untyped-def]
    path = unique_path()
    assert cli("stream", "create", "-path", path, "-autocreate", "false").code == 0
    kt = _kafka_name(path, "views")
    _plain_topic(clusters, "sanfrancisco", kt)
    run = cli("stream", "topic", "create", "-path", path, "-topic", "views")
    assert run.code == 0, run
    rows = {r["topic"]: r for r in cli("stream", "topic", "list", "-path", path, "-json").data()}
    assert rows["views"]["partitions"] == 2, rows


def test_with_autocreate_false_a_stray_topic_is_reported_not_ignored(cli, clusters: EphemeralClusters) -> None:  # type: ignore[no-untyped-def]
    src, dst = unique_path(), unique_path("newyork")
    assert cli("stream", "create", "-path", src, "-autocreate", "false").code == 0
    assert cli("stream", "create", "-path", dst).code == 0
    assert cli("stream", "replica", "add", "-path", src, "-replica", dst, "-paused", "true").code == 0
    assert cli("stream", "upstream", "add", "-path", dst, "-upstream", src).code == 0
    kt = _kafka_name(src, "views")
    _plain_topic(clusters, "sanfrancisco", kt)
    listed = cli("stream", "topic", "list", "-path", src)
    assert "views" in listed.stderr and "autocreate false" in listed.stderr, listed
    row = cli("stream", "replica", "list", "-path", src, "-json").data()[0]
    assert row["isUptodate"] is False, row
    assert "views" in row["lasterror"] and "stream topic create" in row["lasterror"], row


def test_a_topic_the_broker_autocreated_gets_the_streams_partitions_or_topic_list_says_it_differs(
    cli, clusters
) -> None:  # type: ignore[no-untyped-def]
    """A plain producer writing to a new name has the broker create the topic with the broker's default partition
    count, not the stream's defaultpartitions. Adopting it adds the missing partitions where the broker can (noida-db
    takes CreatePartitions); where it cannot (Tansu refuses), `stream topic list` says that the topic differs."""
    path = unique_path()
    # More than either broker's default (Tansu 4, noida-db 1).
    assert cli("stream", "create", "-path", path, "-defaultpartitions", "6").code == 0
    kt = _kafka_name(path, "clicks")
    bootstrap = clusters.brokers["sanfrancisco"].bootstrap
    p = Producer({"bootstrap.servers": bootstrap})  # no CreateTopics: the broker's autocreate makes the topic
    p.produce(kt, value=b"v")
    assert p.flush(30) == 0
    admin = AdminClient({"bootstrap.servers": bootstrap})

    def in_kafka() -> int:
        return len(admin.list_topics(kt, timeout=10).topics[kt].partitions)

    made = in_kafka()
    assert made < 6, "the broker's default partition count (the test needs one below the stream's)"
    for _ in range(2):  # adopted by the first listing; the second still says so
        listed = cli("stream", "topic", "list", "-path", path, "-json")
        assert listed.code == 0, listed
        rows = {r["topic"]: r for r in listed.data()}
        assert rows["clicks"]["partitions"] == in_kafka(), rows
        if ON_NOIDA:
            assert in_kafka() == 6 and "clicks" not in listed.stderr, listed.stderr
        else:
            assert in_kafka() == made
            assert f"topic 'clicks' of stream {path} has {made} partition" in listed.stderr, listed.stderr
            assert "defaultpartitions 6" in listed.stderr, listed.stderr
