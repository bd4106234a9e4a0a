"""The progress bar a bulk job shows on stderr while Spark works: copystream counts offsets the destination
holds (its cheap, possibly low, watermarks), diffstreams counts partitions compared (Spark's status tracker)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from .. import kafka
from ..kafka import KafkaException, TopicPartition
from ..registry import Cluster


class ProgressBar:
    """A transient rich bar: `count()` is asked at most every `every` seconds, from the job's on_tick.

    `base` is added to the count: what earlier jobs of the same run completed. `close` is called once
    when the bar goes (it releases what `count` reads from). Disabled, it does nothing at all.
    """

    def __init__(
        self,
        enabled: bool,
        label: str,
        total: int,
        count: Callable[[], int],
        *,
        every: float = 0.0,
        rate: bool = False,
        close: Callable[[], object] | None = None,
    ):
        self.enabled, self.count, self.every, self.rate, self._close = enabled, count, every, rate, close
        self.base = 0
        self.last = 0.0
        if not enabled:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn

        columns: list[str | ProgressColumn] = [
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
        ]
        if rate:
            columns.append(TextColumn("{task.fields[rate]}"))
        columns.append(TimeElapsedColumn())
        self.bar = Progress(*columns, console=Console(stderr=True), transient=True)
        self.task = self.bar.add_task(label, total=total, rate="")
        self.t0 = time.monotonic()
        self.bar.start()

    def tick(self) -> None:
        if not self.enabled or time.monotonic() - self.last < self.every:
            return
        self.last = time.monotonic()
        done = self.base + self.count()
        if self.rate:
            rate = done / max(1e-3, time.monotonic() - self.t0)
            self.bar.update(self.task, completed=done, rate=f"{rate:,.0f} rec/s")
        else:
            self.bar.update(self.task, completed=done)

    def close(self) -> None:
        if self.enabled:
            self.bar.stop()
            if self._close is not None:
                self._close()


def copy_progress(enabled: bool, dst: Cluster, items: list[dict[str, Any]], label: str) -> ProgressBar:
    """Offsets copied so far of every work item, read from the destination's watermarks."""
    if not (enabled and items):
        return ProgressBar(False, label, 0, lambda: 0)
    consumer = kafka.consumer(dst)

    def copied() -> int:
        done = 0
        for i in items:
            try:
                _, high = consumer.get_watermark_offsets(
                    TopicPartition(i["dst"], i["partition"]), timeout=2, cached=False
                )
            except KafkaException:
                continue
            done += max(0, min(high, i["end"]) - i["est"])
        return done

    total = sum(i["end"] - i["est"] for i in items)
    every = max(0.5, len(items) / 100)
    return ProgressBar(True, label, total, copied, every=every, rate=True, close=consumer.close)


def task_progress(enabled: bool, sc: Any, total: int, label: str) -> ProgressBar:
    """Tasks completed in the running job's stages, from Spark's status tracker (one task per partition)."""

    def completed() -> int:
        st = sc.statusTracker()
        done = 0
        for sid in st.getActiveStageIds():
            info = st.getStageInfo(sid)
            if info is not None:
                done += info.numCompletedTasks
        return done

    return ProgressBar(enabled, label, total, completed)
