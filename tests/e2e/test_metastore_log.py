"""The metadata log is read on from where this process read it last, and from scratch when it is no longer the log
that was read (deleted and re-created, a broker restarted empty or without its last records).

Every MetaStore of a cluster in one process shares what was read (metastore._log_of); a store of the same cluster
with one more client property (`_other_process`) has a log of its own, as another process would: it stands for
the other writers, and for a reader folding the whole log afresh.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator

import pytest
from support.clusters import crash_broker

from streamrepl import kafka, metastore, registry
from streamrepl.errors import ConcurrentEdit, Unreachable
from streamrepl.local import EphemeralClusters
from streamrepl.metastore import MetaStore
from streamrepl.model import Stream
from streamrepl.paths import METADATA_TOPIC
from streamrepl.registry import Cluster

# Brokers of its own: the tests delete the metadata topic and restart the broker, which would take every other
# module's streams with them.
NAME = "metalog"


@pytest.fixture(scope="module")
def cluster() -> Iterator[tuple[EphemeralClusters, Cluster]]:
    with EphemeralClusters([NAME]) as ec:
        yield ec, registry.load(str(ec.registry_path)).get(NAME)


def _other_process(cluster: Cluster) -> Cluster:
    return Cluster(cluster.name, {**cluster.properties, "client.id": f"other-{uuid.uuid4().hex[:8]}"})


def _create(store: MetaStore, path: str) -> None:
    store.update(path, lambda _: Stream(path=path, cluster=store.cluster.name, uuid=str(uuid.uuid4())))


def _bump(rec: Stream | None) -> Stream:
    assert rec is not None
    rec.extra["total"] = rec.extra.get("total", 0) + 1
    return rec


def _from_scratch(cluster: Cluster) -> dict[str, Stream]:
    return MetaStore(_other_process(cluster)).streams()


def _delete_metadata_topic(cluster: Cluster) -> None:
    kafka.delete_topics(cluster, [METADATA_TOPIC])
    for _ in range(100):
        if METADATA_TOPIC not in kafka.topics(cluster):
            return
        threading.Event().wait(0.05)
    raise AssertionError("the metadata topic was not deleted")


def test_a_write_reads_only_the_records_written_since(cluster: tuple[EphemeralClusters, Cluster]) -> None:
    _, c = cluster
    store = MetaStore(c)
    base = f"/{uuid.uuid4().hex[:6]}"
    for i in range(20):
        _create(store, f"{base}/s{i}")
    log = metastore._log_of(c)
    before = log.records_read
    for _ in range(10):
        MetaStore(c).update(f"{base}/s0", _bump)
    # Each write: the last record read (still there?), then its own record. Reading the whole log, as before,
    # took 2 x 20 records and more per write.
    assert log.records_read - before <= 10 * 3
    before = log.records_read
    assert MetaStore(c).get(f"{base}/s0").extra["total"] == 10  # type: ignore[union-attr]
    assert log.records_read - before == 1
    assert MetaStore(c).streams() == _from_scratch(c)


def test_a_write_right_after_what_was_read_is_not_read_back(cluster: tuple[EphemeralClusters, Cluster]) -> None:
    """Its record's offset says nothing lies between it and what was read: each write then fetches only the last
    record read (is the log still the one read?), where it read its own record back with a new consumer too (a new
    client's first request costs in proportion to the cluster's topics on Tansu)."""
    _, c = cluster
    path = f"/{uuid.uuid4().hex[:6]}/alone"
    _create(MetaStore(c), path)
    log = metastore._log_of(c)
    log.read_at = float("-inf")  # each write reads first: what is measured here is the read back
    before = log.records_read
    for _ in range(10):
        MetaStore(c).update(path, _bump)
        log.read_at = float("-inf")
    assert log.records_read - before == 10
    assert MetaStore(c).get(path).extra["total"] == 10  # type: ignore[union-attr]
    assert MetaStore(c).streams() == _from_scratch(c)


def test_a_write_just_after_a_read_writes_on_what_was_read(
    cluster: tuple[EphemeralClusters, Cluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A command reads the stream, checks it and writes its change: the write reads nothing again (each read has a
    new consumer, whose first request costs in proportion to the cluster's topics on Tansu). A state that was stale
    after all only loses the write, which reads and tries again."""
    _, c = cluster
    monkeypatch.setattr(metastore, "FRESH_FOR_WRITE", 60.0)  # how fresh is fresh enough is not what is tested
    path = f"/{uuid.uuid4().hex[:6]}/fresh"
    _create(MetaStore(c), path)
    log = metastore._log_of(c)
    for _ in range(5):
        MetaStore(c).get(path)
        before = log.records_read
        MetaStore(c).update(path, _bump)
        assert log.records_read == before
    # Stale: another process wrote since this one read; the write loses, reads, and wins on its second try.
    MetaStore(c).get(path)
    MetaStore(_other_process(c)).update(path, _bump)
    MetaStore(c).update(path, _bump)
    assert MetaStore(c).get(path).extra["total"] == 7  # type: ignore[union-attr]
    assert MetaStore(c).streams() == _from_scratch(c)


@pytest.mark.parametrize("after", [1, 8], ids=["shorter", "longer"])
def test_a_recreated_log_is_read_from_scratch(cluster: tuple[EphemeralClusters, Cluster], after: int) -> None:
    _, c = cluster
    base = f"/{uuid.uuid4().hex[:6]}"
    for i in range(4):
        _create(MetaStore(c), f"{base}/old{i}")
    assert f"{base}/old3" in MetaStore(c).streams()
    other = MetaStore(_other_process(c))
    _delete_metadata_topic(c)
    for i in range(after):
        _create(other, f"{base}/new{i}")
    seen = MetaStore(c).streams()
    assert sorted(seen) == [f"{base}/new{i}" for i in range(after)]
    assert seen == _from_scratch(c)


@pytest.mark.parametrize("seen", [False, True], ids=["command", "watcher"])
def test_reads_share_one_consumer_that_survives_the_log_deleted_right_after_a_read(
    cluster: tuple[EphemeralClusters, Cluster], monkeypatch: pytest.MonkeyPatch, seen: bool
) -> None:
    """The reads of a process share one consumer (a new client's first request costs in proportion to the cluster's
    topics on Tansu). The log deleted the moment a read returns, while that consumer's last fetch may still be on
    the wire, and re-created longer than what was read: a kept consumer that fetched on with the topic id it knew,
    or whose last fetch came back for a deleted topic, crashed the whole process (SIGSEGV in librdkafka 2.16's
    metadata cache, on Tansu). `watcher`: reads given the end their caller saw, whose settle runs in a thread of
    its own once they return: the next read waits for it."""
    _, c = cluster
    made: list[object] = []
    real_consumer = kafka.consumer

    def counted(*args: object, **kwargs: object) -> kafka.Consumer:
        if args[0] is c:
            made.append(args)
        return real_consumer(*args, **kwargs)  # type: ignore[arg-type]

    base = f"/{uuid.uuid4().hex[:6]}"
    _create(MetaStore(c), f"{base}/first")
    monkeypatch.setattr(kafka, "consumer", counted)
    for round_ in range(4):
        assert MetaStore(c).streams(seen_end=_end(c) if seen else None)  # a read, its fetches just done
        _delete_metadata_topic(c)
        names = [f"{base}/r{round_}n{i}" for i in range(4)]
        other = MetaStore(_other_process(c))  # a store that saw the log deleted would not create it again
        for name in names:
            _create(other, name)
        assert sorted(MetaStore(c).streams()) == names
    assert made == []  # every read of the process used the consumer of its first


def test_a_reader_that_failed_is_dropped_and_made_anew(
    cluster: tuple[EphemeralClusters, Cluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its connection may be what failed (a broker gone): the next read must not go on with it."""
    _, c = cluster
    path = f"/{uuid.uuid4().hex[:6]}/retry"
    _create(MetaStore(c), path)
    log = metastore._log_of(c)
    failed = log.reader
    assert failed is not None

    def broken(*args: object, **kwargs: object) -> Iterator[kafka.Message]:
        raise kafka.KafkaException(kafka.KafkaError(kafka.KafkaError._TRANSPORT))

    with monkeypatch.context() as m:
        m.setattr(kafka, "read_partition", broken)
        with pytest.raises(Unreachable):
            MetaStore(c).streams()
    assert log.reader is None
    assert path in MetaStore(c).streams()
    assert log.reader is not None and log.reader is not failed


def test_a_store_that_saw_the_log_reads_it_deleted_as_no_streams(
    cluster: tuple[EphemeralClusters, Cluster],
) -> None:
    """Whether the log exists is asked once per process, not once per store (the plan watcher's store per read paid
    a round trip for it before every read, issue 28): deleted after that, a read finds no streams, as a store that
    never saw the log does, and not an error."""
    _, c = cluster
    store = MetaStore(c)
    _create(store, f"/{uuid.uuid4().hex[:6]}/gone")
    assert store.streams()
    _delete_metadata_topic(c)
    assert store.streams() == {}
    assert MetaStore(c).streams() == {}
    _create(MetaStore(c), f"/{uuid.uuid4().hex[:6]}/back")  # a write makes the log again
    assert len(MetaStore(c).streams()) == 1


def test_a_log_the_reader_does_not_find_but_the_cluster_has_is_an_error(
    cluster: tuple[EphemeralClusters, Cluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The broker the reader asked does not know the log yet (another broker of the cluster told of it): not "no
    streams", which would empty a gateway's plan, but an error, as before; the lookup client is asked to tell."""
    _, c = cluster
    path = f"/{uuid.uuid4().hex[:6]}/known"
    _create(MetaStore(c), path)
    assert path in MetaStore(c).streams()
    log = metastore._log_of(c)
    real = kafka.partitions_of

    def reader_blind(consumer: kafka.Consumer, topic: str, timeout: float = kafka.REQUEST_TIMEOUT) -> int | None:
        if consumer is log.reader and topic == METADATA_TOPIC:
            return None
        return real(consumer, topic, timeout)

    with monkeypatch.context() as m:
        m.setattr(kafka, "partitions_of", reader_blind)
        with pytest.raises(Unreachable):
            MetaStore(c).streams()
    assert path in MetaStore(c).streams()


def test_a_read_asks_whether_the_log_exists_once_per_process(
    cluster: tuple[EphemeralClusters, Cluster], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, c = cluster
    _create(MetaStore(c), f"/{uuid.uuid4().hex[:6]}/once")
    asked: list[Cluster] = []
    real = metastore._Log.exists

    def counted(self: metastore._Log, on: Cluster) -> bool:
        asked.append(on)
        return real(self, on)

    monkeypatch.setattr(metastore._Log, "exists", counted)
    for _ in range(3):
        assert MetaStore(c).streams()
    assert asked == []


def _end(cluster: Cluster, make: Callable[..., kafka.Consumer] = kafka.consumer) -> int:
    """The metadata log's end, asked by a consumer of its own (`make`: the real one, also where a test counts)."""
    c = make(cluster)
    try:
        return kafka.watermarks(c, kafka.TopicPartition(METADATA_TOPIC, 0))[1]
    finally:
        c.close()


def test_a_read_may_stop_at_the_end_its_caller_saw(cluster: tuple[EphemeralClusters, Cluster]) -> None:
    """The plan watcher's change poll saw the end move: the read stops after the record before that end instead of
    fetching until a fetch comes back empty (end-of-partition: a round trip more, issue 28). What was written after
    it is the next read's."""
    _, c = cluster
    base = f"/{uuid.uuid4().hex[:6]}"
    _create(MetaStore(c), f"{base}/a")
    assert f"{base}/a" in MetaStore(c).streams()
    other = MetaStore(_other_process(c))
    _create(other, f"{base}/b")
    end = _end(c)
    _create(other, f"{base}/c")
    seen = MetaStore(c).streams(seen_end=end)
    assert f"{base}/b" in seen and f"{base}/c" not in seen
    assert MetaStore(c).streams() == _from_scratch(c)
    assert f"{base}/c" in MetaStore(c).streams(seen_end=end)  # an end read already: read on to the end


@pytest.mark.parametrize("after", [0, 1, 40], ids=["deleted", "shorter", "longer"])
def test_a_seen_end_from_before_the_log_was_recreated(cluster: tuple[EphemeralClusters, Cluster], after: int) -> None:
    """The end was taken, then the log deleted and made again (another process): the read finds the new log, at
    once, without the watermarks it no longer asks for (past the end, a Tansu fetch gets nothing and no
    end-of-partition: such a read waited for its timeout and failed)."""
    _, c = cluster
    base = f"/{uuid.uuid4().hex[:6]}"
    for i in range(30):
        _create(MetaStore(c), f"{base}/old{i}")
    assert f"{base}/old29" in MetaStore(c).streams()
    other = MetaStore(_other_process(c))
    _create(other, f"{base}/last")
    end = _end(c)
    _delete_metadata_topic(c)
    other = MetaStore(_other_process(c))
    for i in range(after):
        _create(other, f"{base}/new{i}")
    seen = MetaStore(c).streams(seen_end=end)
    if after < 30:
        assert sorted(seen) == sorted(f"{base}/new{i}" for i in range(after))
    else:  # the new log may be read up to the end that was seen; the old streams never
        assert not any("/old" in p or p.endswith("/last") for p in seen)
    assert MetaStore(c).streams() == _from_scratch(c)


def test_a_broker_restart_is_read_from_scratch(cluster: tuple[EphemeralClusters, Cluster]) -> None:
    ec, c = cluster
    base = f"/{uuid.uuid4().hex[:6]}"
    for i in range(3):
        _create(MetaStore(c), f"{base}/old{i}")
    assert len(MetaStore(c).streams()) >= 3
    # Tansu comes back empty; noida-db without what it took since its last save (perhaps nothing).
    crash_broker(ec, NAME, down_seconds=0.2)
    for i in range(5):
        _create(MetaStore(_other_process(c)), f"{base}/new{i}")
    seen = MetaStore(c).streams()
    assert seen == _from_scratch(c)
    assert {f"{base}/new{i}" for i in range(5)} <= set(seen)
    if ec.brokers[NAME].broker == "tansu":
        assert not {f"{base}/old{i}" for i in range(3)} & set(seen)


def test_threads_and_processes_racing_lose_no_increment(cluster: tuple[EphemeralClusters, Cluster]) -> None:
    """Two threads share the process's log (as the gateway's plan watcher and its main thread do), a third writer
    has its own (another process): every write they were told succeeded is in the record, and no other."""
    _, c = cluster
    path = f"/{uuid.uuid4().hex[:6]}/race"
    _create(MetaStore(c), path)
    rounds = 8
    barrier = threading.Barrier(3)
    done: dict[str, int] = {}

    def writer(name: str, on: Cluster) -> None:
        n = 0
        for _ in range(rounds):
            barrier.wait(timeout=60)

            def bump(rec: Stream | None) -> Stream:
                assert rec is not None
                counters = rec.extra.setdefault("counters", {})
                counters[name] = counters.get(name, 0) + 1
                return rec

            try:
                MetaStore(on).update(path, bump)
                n += 1
            except ConcurrentEdit:
                pass
        done[name] = n

    threads = [
        threading.Thread(target=writer, args=("a", c)),
        threading.Thread(target=writer, args=("b", c)),
        threading.Thread(target=writer, args=("c", _other_process(c))),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(done) == 3
    for rec in (MetaStore(c).get(path), _from_scratch(c)[path]):
        assert rec is not None
        assert rec.extra["counters"] == {k: v for k, v in done.items() if v}
