"""The planner (replication/links.py, plan.py) on stream records given by the test: no broker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from streamrepl.errors import StreamreplError
from streamrepl.model import Stream
from streamrepl.paths import StreamPath, kafka_topic_name
from streamrepl.registry import Cluster, Registry
from streamrepl.replication.links import Unit
from streamrepl.replication.plan import Planner

CLUSTERS = {name: Cluster(name, {"bootstrap.servers": "127.0.0.1:1"}) for name in ("sf", "ny", "tokyo")}
REG = Registry(Path("clusters.yaml"), "ny", CLUSTERS)


def upstream(cluster: str, stream: str) -> dict[str, str]:
    return {"cluster": cluster, "stream": stream, "path": f"/{cluster}{stream}"}


STREAMS: dict[str, dict[str, Any]] = {
    "ny": {
        "/s": {"uuid": "S-NY", "upstreams": [upstream("sf", "/s"), upstream("tokyo", "/s")]},
        "/paused": {"uuid": "P-NY", "upstreams": [upstream("sf", "/paused")]},
        "/copying": {"uuid": "C-NY", "upstreams": [upstream("sf", "/copying")]},
        "/orphan": {"uuid": "O-NY", "upstreams": [upstream("sf", "/gone"), upstream("mars", "/x")]},
        "/own": {"uuid": "OWN"},
    },
    "sf": {
        "/s": {
            "uuid": "S-SF",
            "replicas": [{"path": "/ny/s", "state": "REPLICA_STATE_REPLICATING", "throttle": True, "added": 5}],
            "topics": {"t": {"partitions": 2}},
        },
        "/paused": {
            "uuid": "P-SF",
            "replicas": [{"path": "/ny/paused", "paused": True}],
            "topics": {"t": {"partitions": 1}},
        },
        "/copying": {
            "uuid": "C-SF",
            "replicas": [{"path": "/ny/copying", "state": "REPLICA_STATE_COPYING"}],
            "topics": {"t": {"partitions": 1}},
        },
    },
    # Lists no replica /ny/s: the two halves of that link do not agree, so it does not run.
    "tokyo": {"/s": {"uuid": "S-TK", "replicas": [], "topics": {"t": {"partitions": 3}}}},
}


def read_streams(cluster: Cluster) -> dict[str, Stream]:
    return {path: Stream.from_json(rec) for path, rec in STREAMS[cluster.name].items()}


def test_the_plan_holds_the_running_links_and_their_partitions() -> None:
    plan = Planner(REG, CLUSTERS["ny"], read_streams=read_streams).discover()
    ((link),) = plan.links
    dst = StreamPath("ny", "/s")
    assert (link.name, link.src_uuid, link.dst_uuid, link.throttle, link.added) == (
        "/sf/s->/ny/s",
        "S-SF",
        "S-NY",
        True,
        5,
    )
    assert plan.units == {Unit(dst, "t", p): [(link, kafka_topic_name(link.src, "t"))] for p in range(2)}
    assert plan.topics == {(dst, "t"): 2}
    assert sorted(plan.problems) == [
        "upstream /mars/x of /ny/orphan: unknown cluster 'mars' (known: ny, sf, tokyo); add it to the registry"
        " clusters.yaml",
        "upstream /sf/gone of /ny/orphan does not exist",
    ]
    assert sorted(c.name for c in plan.clusters) == ["ny", "sf", "tokyo"]


def test_replica_topics_that_exist_are_left_alone() -> None:
    created: list[Any] = []
    present = {kafka_topic_name(StreamPath("ny", "/s"), "t"): 2, "other": 1}
    planner = Planner(
        REG,
        CLUSTERS["ny"],
        list_topics=lambda cluster: present,
        create_topics=lambda cluster, specs: created.append(specs),
        read_streams=read_streams,
    )
    planner.ensure_topics(planner.discover())
    assert created == []
    assert planner.present() == set(present)


class ReplicaStore:
    """The replica stream's metadata as the planner reads it when it records the topics it made: its uuid."""

    def get(self, path: str) -> Stream:
        return Stream.from_json({"uuid": "S-NY"})


class ReplicaResolved:
    """streams.Resolved for a replica stream, on ReplicaStore."""

    def __init__(self, path: StreamPath, cluster: Cluster) -> None:
        self.path, self.cluster, self.store = path, cluster, ReplicaStore()


def test_missing_replica_topics_are_made_in_one_request_and_recorded_in_one_write(monkeypatch: Any) -> None:
    """One create request and one metadata write per replica stream, not per topic: at 1,000 replica topics the
    per-topic requests and writes (each write reads the whole metadata log) took minutes before any partition was
    acquired (bench/scale.py, 50 streams x 20 topics)."""
    from streamrepl.replication import plan as plan_module

    created: list[Any] = []
    registered: list[Any] = []

    monkeypatch.setattr(plan_module, "Resolved", ReplicaResolved)
    monkeypatch.setattr(plan_module.topics, "register_many", lambda r, wanted: registered.append((r.path, wanted)))
    listed: list[str] = []
    planner = Planner(
        REG,
        CLUSTERS["ny"],
        list_topics=lambda cluster: listed.append(cluster.name) or {},  # type: ignore[func-returns-value]
        create_topics=lambda cluster, specs: created.append([(name, n) for name, n, _ in specs]),
        read_streams=read_streams,
    )
    plan = planner.discover()
    present = planner.ensure_topics(plan)
    by_stream: dict[StreamPath, list[tuple[str, int]]] = {}
    for (dst, topic), n in plan.topics.items():
        by_stream.setdefault(dst, []).append((topic, n))
    assert sorted(created) == sorted([(kafka_topic_name(d, t), n) for t, n in w] for d, w in by_stream.items())
    assert sorted(registered) == sorted(by_stream.items())
    # What it made is there: not listed again (a listing took 60-70 ms at 200 topics on Tansu, between a new topic
    # and its first record)
    assert present == {kafka_topic_name(d, t) for d, t in plan.topics} and listed == ["ny"]


def test_a_pass_lists_the_destination_topics_once_and_says_what_is_there() -> None:
    """ensure_topics answers which topics are there: the watcher listed them a second time for that (each
    listing with a new client took about 50 ms on Tansu, between a `replica resume` and its first record)."""
    listed: list[str] = []
    present = {kafka_topic_name(StreamPath("ny", "/s"), "t"): 2, "other": 1}

    def list_topics(cluster: Cluster) -> dict[str, int]:
        listed.append(cluster.name)
        return present

    planner = Planner(REG, CLUSTERS["ny"], list_topics=list_topics, read_streams=read_streams)
    assert planner.ensure_topics(planner.discover()) == set(present)
    assert listed == ["ny"]


def test_the_topic_listings_keep_one_client_per_cluster(monkeypatch: Any) -> None:
    """A new admin client for every listing cost a connection and its first request (about 50 ms on Tansu) three
    times a pass; the planner keeps one per cluster, and makes a new one after a failed listing."""
    from streamrepl.replication import plan as plan_module

    made: list[str] = []
    failing = {"now": False}

    class Topic:
        partitions = {0: None}
        error = None

    class FakeAdmin:
        def list_topics(self, timeout: float) -> Any:
            if failing["now"]:
                raise plan_module.kafka.KafkaException("down")
            return type("Md", (), {"topics": {"a": Topic()}})()

    def admin_client(cluster: Cluster) -> FakeAdmin:
        made.append(cluster.name)
        return FakeAdmin()

    monkeypatch.setattr(plan_module.kafka, "admin_client", admin_client)
    planner = Planner(REG, CLUSTERS["ny"], read_streams=read_streams)
    for _ in range(3):
        assert planner.present() == {"a"}
    assert made == ["ny"]
    failing["now"] = True
    with pytest.raises(StreamreplError):
        planner.present()
    failing["now"] = False
    assert planner.present() == {"a"}
    assert made == ["ny", "ny"]
    planner.close()


def test_replica_topics_are_made_with_the_kept_client_of_the_destination(monkeypatch: Any) -> None:
    """A new admin client for every CreateTopics cost a connection whose first request Tansu answers with every
    topic of the cluster (about 15 ms at 4,000 partitions): the planner makes them with the client it lists the
    destination with, and makes a new one after a create that found the broker gone."""
    from streamrepl.errors import AlreadyExists, Unreachable
    from streamrepl.replication import plan as plan_module

    made: list[object] = []
    used: list[object] = []
    failure: dict[str, Exception | None] = {"next": None}

    def admin_client(cluster: Cluster) -> object:
        assert cluster.name == "ny"
        made.append(object())
        return made[-1]

    def create_topics(cluster: Cluster, specs: Any, client: object = None) -> None:
        used.append(client)
        err, failure["next"] = failure["next"], None
        if err is not None:
            raise err

    monkeypatch.setattr(plan_module, "Resolved", ReplicaResolved)
    monkeypatch.setattr(plan_module.topics, "register_many", lambda r, wanted: None)
    monkeypatch.setattr(plan_module.kafka, "admin_client", admin_client)
    monkeypatch.setattr(plan_module.kafka, "create_topics", create_topics)
    planner = Planner(REG, CLUSTERS["ny"], list_topics=lambda cluster: {}, read_streams=read_streams)
    plan = planner.discover()
    for _ in range(3):
        planner.ensure_topics(plan)
    assert len(made) == 1 and used == [made[0]] * 3
    failure["next"] = AlreadyExists("another gateway made it")  # the broker answered: the client is fine
    planner.ensure_topics(plan)
    failure["next"] = Unreachable("ny does not answer")
    planner.ensure_topics(plan)
    planner.ensure_topics(plan)
    assert len(made) == 2 and used == [made[0]] * 5 + [made[1]]
    planner.close()
    planner.ensure_topics(plan)
    assert len(made) == 3 and used[-1] is made[2]


def test_a_listing_covers_a_plan_when_it_holds_every_replica_topic_the_plan_needs() -> None:
    planner = Planner(REG, CLUSTERS["ny"], list_topics=lambda cluster: {}, read_streams=read_streams)
    plan = planner.discover()
    needed = {kafka_topic_name(dst, topic) for dst, topic in plan.topics}
    assert needed
    assert planner.covers(plan, needed | {"other"})
    assert not planner.covers(plan, needed - {next(iter(needed))})


def test_the_clusters_of_the_last_plan_are_read_at_the_same_time() -> None:
    """After a change, the stream records of every cluster the last plan was made from are read at once, not one
    cluster after the other (each read makes a client and asks for the log's end: 15 ms a cluster on Tansu)."""
    import threading

    together = threading.Barrier(3, timeout=10)  # a hang guard: read one after the other, the reads never meet

    def read_together(cluster: Cluster) -> dict[str, Stream]:
        together.wait()
        return read_streams(cluster)

    alone = Planner(REG, CLUSTERS["ny"], list_topics=lambda cluster: {}, read_streams=read_streams).discover()
    planner = Planner(REG, CLUSTERS["ny"], list_topics=lambda cluster: {}, read_streams=read_together)
    plan = planner.discover(alone.clusters)
    assert len(alone.clusters) == 3
    assert (plan.units, plan.topics, plan.problems) == (alone.units, alone.topics, alone.problems)


@pytest.mark.parametrize("known", [0, 3], ids=["first-read", "together"])
def test_each_read_is_given_the_end_its_caller_saw(known: int) -> None:
    """The plan watcher's change poll took each metadata log's end: the read may stop there (issue 28). A cluster
    without one is read as before (a reader given only the cluster keeps working)."""
    given: dict[str, int | None] = {}

    def read(cluster: Cluster, seen_end: int | None = None) -> dict[str, Stream]:
        given[cluster.name] = seen_end
        return read_streams(cluster)

    planner = Planner(REG, CLUSTERS["ny"], list_topics=lambda cluster: {}, read_streams=read)
    clusters = [CLUSTERS["ny"], CLUSTERS["sf"], CLUSTERS["tokyo"]][:known]
    planner.discover(clusters, {"ny": 4, "sf": 9})
    assert given == {"ny": 4, "sf": 9, "tokyo": None}


def test_a_cluster_that_cannot_be_read_is_read_once_and_named() -> None:
    # Read again after the reads at the same time, a cluster that does not answer would cost its timeout twice.
    reads: list[str] = []

    def flaky(cluster: Cluster) -> dict[str, Stream]:
        reads.append(cluster.name)
        if cluster.name == "tokyo":
            raise StreamreplError("tokyo does not answer")
        return read_streams(cluster)

    planner = Planner(REG, CLUSTERS["ny"], list_topics=lambda cluster: {}, read_streams=flaky)
    plan = planner.discover([CLUSTERS["ny"], CLUSTERS["sf"], CLUSTERS["tokyo"]])
    assert sorted(reads) == ["ny", "sf", "tokyo"]
    assert any("tokyo does not answer" in p for p in plan.problems)


def test_a_destination_that_cannot_be_read_fails_the_read_as_before() -> None:
    def down(cluster: Cluster) -> dict[str, Stream]:
        if cluster.name == "ny":
            raise StreamreplError("ny does not answer")
        return read_streams(cluster)

    planner = Planner(REG, CLUSTERS["ny"], list_topics=lambda cluster: {}, read_streams=down)
    with pytest.raises(StreamreplError, match="ny does not answer"):
        planner.discover([CLUSTERS["ny"], CLUSTERS["sf"]])


def test_a_link_with_networkencryption_does_not_run_over_a_plaintext_connection() -> None:
    # maprcli: "-networkencryption true requires all participating clusters to be secure". `replica add` checks the
    # registry of whoever adds the link; a gateway's own registry may give a cluster no TLS: it does not run the link.
    tls = {"bootstrap.servers": "127.0.0.1:1", "security.protocol": "SSL"}
    streams = {
        "ny": {"/enc": {"uuid": "E-NY", "upstreams": [upstream("sf", "/enc")]}},
        "sf": {
            "/enc": {
                "uuid": "E-SF",
                "replicas": [{"path": "/ny/enc", "networkencryption": True}],
                "topics": {"t": {"partitions": 2}},
            }
        },
    }

    def read(cluster: Cluster) -> dict[str, Stream]:
        return {path: Stream.from_json(rec) for path, rec in streams[cluster.name].items()}

    def plan_with(sf: dict[str, str], ny: dict[str, str]) -> Any:
        clusters = {"sf": Cluster("sf", sf), "ny": Cluster("ny", ny)}
        return Planner(Registry(Path("c.yaml"), "ny", clusters), clusters["ny"], read_streams=read).discover()

    plan = plan_with(tls, {"bootstrap.servers": "127.0.0.1:2"})
    assert plan.links == [] and plan.units == {}
    assert plan.problems == [
        "link /sf/enc -> /ny/enc not replicated: it has -networkencryption true, and this gateway's registry gives"
        " cluster 'ny' no TLS; set security.protocol SSL or SASL_SSL for it there"
    ]
    plan = plan_with(tls, dict(tls, **{"security.protocol": "sasl_ssl"}))
    assert [link.name for link in plan.links] == ["/sf/enc->/ny/enc"] and not plan.problems
    assert len(plan.units) == 2
