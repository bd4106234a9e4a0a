"""What one copystream run did: its counts, the partitions it could not copy, and the summary line."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .inprocess import Engine


@dataclass
class CopyResult:
    src: str
    dst: str
    created: bool = False
    partitions: int = 0
    records: int = 0
    fillers: int = 0
    bytes: int = 0
    seconds: float = 0.0
    spark_seconds: float = 0.0
    failures: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    details: list[dict[str, Any]] = field(default_factory=list)
    engine: Engine | None = None  # None: nothing to copy

    @property
    def complete(self) -> bool:
        return not self.failures and not self.stopped

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0

    def row(self) -> dict[str, Any]:
        return {
            "src": self.src,
            "dst": self.dst,
            # whether this run created the destination stream (not stream info's creation time)
            "dstcreated": self.created,
            "partitions": self.partitions,
            "records": self.records,
            "fillers": self.fillers,
            "bytes": self.bytes,
            "seconds": round(self.seconds, 3),
            "recordspersecond": round(self.rate),
            "sparkstartupseconds": round(self.spark_seconds, 3),
            "failed": len(self.failures) + len(self.stopped),
        }

    def _how(self) -> str:
        if self.engine is None:
            return "no copy ran"
        if not self.engine.spark:
            return f"in-process ({self.engine.why})"
        return f"Spark start-up {self.spark_seconds:.2f} s"

    def summary(self) -> str:
        fillers = f", {self.fillers} fillers" if self.fillers else ""
        failed = len(self.failures) + len(self.stopped)
        tail = f"; {failed} partitions NOT fully copied" if failed else ""
        return (
            f"copystream: {self.src} -> {self.dst}: copied {self.records} records ({self.bytes} bytes{fillers})"
            f" in {self.seconds:.2f} s, {self.rate:.0f} records/s; {self._how()}; {self.partitions} partitions{tail}"
        )
