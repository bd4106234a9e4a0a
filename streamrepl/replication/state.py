"""What the gateway keeps of one replica partition it applies (a UnitState): its writer and its feeds, and the marks
the pieces of the loop leave on it. A record with no behaviour of its own: the unit table (units.py) makes and
forgets it, and each field has one writer, named beside it (the others only read it)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..applier import OffsetPreservingWriter
from ..divergence import Tail
from ..kafka import TopicPartition
from .links import Link, Unit


@dataclass
class UnitState:
    unit: Unit
    writer: OffsetPreservingWriter
    #: link name -> (its link, the source partition it reads) (SourceFeeds)
    feeds: dict[str, tuple[Link, TopicPartition]] = field(default_factory=dict)
    #: when the throttled feeds resume (monotonic; 0: not throttled) (Mover)
    throttled_until: float = 0.0
    #: the state, offset and caught-up flag last written to the status topic (StatusReports)
    reported: tuple[str, int, bool] = ("", -1, False)
    #: feeds whose source end was compared with the replica's (SourceFeeds.recheck_lagging)
    rechecked: set[str] = field(default_factory=set)
    #: when records were last handed to the writer (monotonic; 0: never, since acquired) (Mover)
    last_write: float = 0.0
    #: the record at writer.next - 1 as replication sees it (None: not known), for the divergence checks (Mover;
    #: UnitTable when it makes the record)
    tail: Tail | None = None
    #: when the source was last checked for divergence (monotonic) (ReplicaGuard)
    checked_at: float = 0.0
    #: feeds not started yet because their source could not be compared with the replica (link name -> feed)
    #: (UnitTable)
    unverified: dict[str, tuple[Link, str]] = field(default_factory=dict)
    #: when the unit was acquired or its feed last moved between consumers (monotonic; see quiet.py) (SourceFeeds)
    active_at: float = field(default_factory=time.monotonic)

    @property
    def sole_feed(self) -> bool:
        return len(self.feeds) + len(self.unverified) == 1
