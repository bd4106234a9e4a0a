"""Small jobs in this process: which engine a job runs on, and the thread pool that runs copystream's and
diffstreams' own per-partition tasks (fake Kafka clients from tests/support/bulk.py: no broker, no Spark)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from support.bulk import DST_KT, SPEC, SRC_KT, FakeClusters, copy_item, diff_item, record

from streamrepl.bulk import inprocess
from streamrepl.bulk.copystream import _copy_task
from streamrepl.bulk.diffstreams import diff_partition
from streamrepl.bulk.reader import Clients
from streamrepl.errors import InvalidArgument
from streamrepl.registry import Cluster


def test_small_work_runs_in_process_large_work_and_master_on_spark() -> None:
    small = inprocess.choose(10_000, 2_000_000, None, None)
    assert not small.spark
    assert (
        small.line("copying", 10_000)
        == "copying 10,000 records in-process (below 2,000,000; -mapreduce true to use Spark)"
    )
    large = inprocess.choose(2_000_000, 2_000_000, None, None)
    assert large.spark and "-mapreduce false" in large.line("copying", 2_000_000)
    assert inprocess.choose(5, 2_000_000, None, "local[2]") == inprocess.Engine(True, "-master local[2]")
    assert inprocess.choose(5, 2_000_000, True, None).spark
    assert not inprocess.choose(10**9, 2_000_000, False, None).spark


def test_master_with_mapreduce_false_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="-master yarn names a Spark master but -mapreduce false"):
        inprocess.check_engine_options(False, "yarn")
    inprocess.check_engine_options(True, "yarn")


def partitions(fake: FakeClusters, n: int, records: int) -> list[dict[str, Any]]:
    items = []
    for p in range(n):
        fake.log("src", SRC_KT, p).extend(record(i) for i in range(records))
        items.append({**copy_item(end=records), "partition": p})
    return items


def test_threads_run_the_copy_tasks_of_every_partition() -> None:
    fake = FakeClusters()
    items = partitions(fake, 5, 7)
    threads: inprocess.Threads[dict[str, Any], dict[str, Any]] = inprocess.Threads(3, fake)  # type: ignore[arg-type]

    rows = threads.run(lambda clients, item: _copy_task(SPEC, [[item]], clients), items)

    assert sorted(r["partition"] for r in rows) == list(range(5))
    assert all(r["error"] is None and r["records"] == 7 for r in rows), rows
    for p in range(5):
        assert [r.key for r in fake.log("dst", DST_KT, p) if r is not None] == [b"k%d" % i for i in range(7)]


def test_a_stopped_run_stops_its_tasks_at_their_next_read() -> None:
    """The copy lock lost (or Ctrl-C): a task reading stops at its next read, and the run says it was cancelled."""
    fake = FakeClusters()
    items = partitions(fake, 2, 3)
    threads: inprocess.Threads[dict[str, Any], dict[str, Any]] = inprocess.Threads(2, fake)  # type: ignore[arg-type]
    reading = threading.Barrier(3)
    stopped_reads: list[int] = []

    def task(clients: Clients, item: dict[str, Any]) -> Iterator[dict[str, Any]]:
        consumer = clients.consumer(Cluster("src", {}))
        reading.wait(5)
        threads.stop.wait(5)
        try:
            consumer.consume(1, timeout=0)
        except inprocess.Cancelled:
            stopped_reads.append(item["partition"])
            raise
        yield {}

    def stop_when_both_read() -> None:
        reading.wait(5)
        threads.stop.set()

    threading.Thread(target=stop_when_both_read).start()
    with pytest.raises(inprocess.Cancelled):
        threads.run(task, items, tick=0.01)
    assert sorted(stopped_reads) == [0, 1]


def test_an_interrupt_stops_the_tasks_and_waits_for_them() -> None:
    fake = FakeClusters()
    items = partitions(fake, 2, 3)
    threads: inprocess.Threads[dict[str, Any], dict[str, Any]] = inprocess.Threads(2, fake)  # type: ignore[arg-type]
    finished: list[str] = []

    def task(clients: Clients, item: dict[str, Any]) -> Iterator[dict[str, Any]]:
        try:
            threads.stop.wait(5)
            yield {}
        finally:
            finished.append("flushed")  # a copy task's finally flushes its producer

    def interrupt() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        threads.run(task, items, on_tick=interrupt, tick=0.01)
    assert threads.stop.is_set() and finished == ["flushed", "flushed"]


def test_a_task_failure_is_raised_and_stops_the_others() -> None:
    threads: inprocess.Threads[int, int] = inprocess.Threads(2)

    def task(clients: Clients, k: int) -> Iterator[int]:
        if k == 0:
            raise RuntimeError("boom")
        threads.stop.wait(5)
        yield k

    with pytest.raises(RuntimeError, match="boom"):
        threads.run(task, [0, 1], tick=0.01)


def test_enough_starts_no_further_chunk() -> None:
    """diffstreams -first_exit: no partition is compared after a difference was found."""
    fake = FakeClusters()
    for p in range(4):
        fake.log("src", SRC_KT, p).extend(record(i) for i in range(3))
        fake.log("dst", DST_KT, p).extend(record(i + (p == 0)) for i in range(3))  # partition 0 differs
    items = [{**diff_item(3, 3), "partition": p} for p in range(4)]
    threads: inprocess.Threads[dict[str, Any], dict[str, Any]] = inprocess.Threads(1, fake)  # type: ignore[arg-type]

    rows = threads.run(
        lambda clients, item: [diff_partition(SPEC, item, clients)], items, enough=lambda row: not row["match"]
    )

    assert [(r["partition"], r["match"]) for r in rows] == [(0, False)]
