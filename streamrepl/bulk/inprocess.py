"""Small bulk jobs without Spark: which engine a job runs on, and running its tasks in threads of this process.

Spark costs seconds to start (3.5 s on an idle machine, far more on a busy one) and wins them back only on
large jobs: a job with less work than a measured limit runs the very same per-partition tasks (copystream's
`copy_partition`, diffstreams' `diff_partition`) in threads here, like maprcli's `-mapreduce false`. Larger
jobs, and any run given `-master`, go to Spark; `-mapreduce true|false` overrides the choice. The limits come
from bench/smalljobs.py (BENCHMARKS.md).

A task stops at its next read once the run is stopped (Ctrl-C, SIGTERM, the copy lock lost): its consumer
raises `Cancelled`, a BaseException, so the task's own error handling does not record it as a partition's
failure; the task's `finally` blocks still run (a copy task flushes what it queued, so every destination
partition ends with an unbroken run of records). The run waits for its threads before it gives up.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar, cast

from .. import kafka
from ..errors import InvalidArgument
from ..kafka import Consumer, Producer
from ..registry import Cluster
from .reader import Clients

#: Records to copy (source offsets past each copy's end) below which copystream runs in this process. The threads
#: won every run below it, Spark's start-up included (bench/smalljobs.py; BENCHMARKS.md); on 2 cores they still won
#: at 5,000,000, but they use one core and Spark all of them, so a machine with more cores favours Spark sooner.
COPY_LIMIT = 2_000_000
#: Records to read (both streams together) below which diffstreams runs in this process (on 2 cores Spark overtook
#: the threads between 2,000,000 and 5,000,000 records per stream).
DIFF_LIMIT = 2_000_000
#: Threads of an in-process job unless -numthreads says otherwise.
THREADS = 4
#: How long an interrupted run waits for its threads to flush and stop.
STOP_WAIT = 30.0

Chunk = TypeVar("Chunk")
Row = TypeVar("Row")


class Cancelled(BaseException):
    """The run was stopped; raised in a task at its next read (BaseException: not a partition's failure)."""


@dataclass(frozen=True)
class Engine:
    """Where one job runs, and why (the line the command prints)."""

    spark: bool
    why: str

    @property
    def name(self) -> str:
        return "on Spark" if self.spark else "in-process"

    def line(self, doing: str, records: int) -> str:
        return f"{doing} {records:,} records {self.name} ({self.why})"


def check_engine_options(mapreduce: bool | None, master: str | None) -> None:
    """Refuse options that contradict each other, before a job creates or locks anything."""
    if mapreduce is False and master:
        raise InvalidArgument(
            f"-master {master} names a Spark master but -mapreduce false runs the job in this process;"
            " leave one of them out"
        )


def choose(records: int, limit: int, mapreduce: bool | None, master: str | None) -> Engine:
    """Spark when asked for (-mapreduce true, -master) or when the work reaches `limit` records."""
    check_engine_options(mapreduce, master)
    if master:
        return Engine(True, f"-master {master}")
    if mapreduce is not None:
        return Engine(mapreduce, f"-mapreduce {'true' if mapreduce else 'false'}")
    if records >= limit:
        return Engine(True, f"{limit:,} or more; -mapreduce false to run in-process")
    return Engine(False, f"below {limit:,}; -mapreduce true to use Spark")


def unused_sparkconf(engine: Engine, conf: dict[str, str] | None) -> str | None:
    """The warning for -sparkconf given to a job that runs in this process, where nothing reads it; else None."""
    if engine.spark or not conf:
        return None
    return f"-sparkconf {', '.join(sorted(conf))} ignored: the job runs in this process ({engine.why})"


def announce(command: str, text: str, say: Callable[[str], None] | None, show: bool) -> None:
    """The engine line: to `say` when the caller gives one (autosetup), else on stderr when it is a terminal."""
    if say is not None:
        say(text)
    elif show:
        print(f"{command}: {text}", file=sys.stderr)


class _StoppableConsumer:
    """A consumer whose reads raise `Cancelled` once the run is stopped; everything else passes through."""

    def __init__(self, consumer: Consumer, stop: threading.Event):
        self._consumer, self._stop = consumer, stop

    def consume(self, num_messages: int = 1, timeout: float = -1) -> Any:
        if self._stop.is_set():
            raise Cancelled
        return self._consumer.consume(num_messages, timeout=timeout)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)


class StoppableClients:
    """The tasks' Kafka clients (the `kafka` package unless a test gives fakes), their reads stoppable."""

    def __init__(self, stop: threading.Event, clients: Clients = kafka):
        self.stop, self.clients = stop, clients

    def consumer(self, cluster: Cluster, group: str | None = None, **extra: Any) -> Consumer:
        return cast(Consumer, _StoppableConsumer(self.clients.consumer(cluster, group, **extra), self.stop))

    def producer(self, cluster: Cluster, **extra: Any) -> Producer:
        return self.clients.producer(cluster, **extra)


class Threads(Generic[Chunk, Row]):
    """Runs a job's tasks, one chunk of work at a time per thread; `rows` fills as tasks finish."""

    def __init__(self, threads: int, clients: Clients = kafka):
        self.threads = max(1, threads)
        self.stop = threading.Event()
        self.clients = StoppableClients(self.stop, clients)
        self.rows: list[Row] = []
        self._errors: list[BaseException] = []
        self._lock = threading.Lock()

    def run(
        self,
        task: Callable[[Clients, Chunk], Iterable[Row]],
        chunks: Sequence[Chunk],
        on_tick: Callable[[], None] | None = None,
        enough: Callable[[Row], bool] | None = None,
        tick: float = 0.5,
    ) -> list[Row]:
        """Every chunk's rows; no chunk starts after a row for which `enough` is true (-first_exit).

        Raises `Cancelled` when the run was stopped from outside (the copy lock lost); an interrupt here
        (Ctrl-C, SIGTERM) stops the tasks, waits for them, and goes on up."""
        pending = list(reversed(chunks))
        done = threading.Event()  # `enough` was met: take no more chunks

        def work() -> None:
            try:
                while not self.stop.is_set() and not done.is_set():
                    with self._lock:
                        if not pending:
                            return
                        chunk = pending.pop()
                    for row in task(self.clients, chunk):
                        with self._lock:
                            self.rows.append(row)
                        if enough is not None and enough(row):
                            done.set()
            except Cancelled:
                return
            except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
                with self._lock:
                    self._errors.append(e)
                self.stop.set()

        workers = [
            threading.Thread(target=work, daemon=True, name=f"streamrepl-task-{k}")
            for k in range(min(self.threads, len(chunks)))
        ]
        for t in workers:
            t.start()
        try:
            for t in workers:
                while t.is_alive():
                    t.join(tick)
                    if on_tick is not None:
                        on_tick()
        except BaseException:
            self.stop.set()
            for t in workers:
                t.join(STOP_WAIT)
            raise
        if self._errors:
            raise self._errors[0]
        if self.stop.is_set():
            raise Cancelled
        return self.rows
