"""What the gateway keeps of one replica partition it applies (a UnitState): its writer and its feeds, and the marks
the pieces of the loop leave on it. A record with no behaviour of its own: the unit table (units.py) makes and
forgets it; the source feeds (feeds.py) keep its feeds, the guard (guard.py) its last check, the mover its throttle
and last write."""

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
    feeds: dict[str, tuple[Link, TopicPartition]] = field(default_factory=dict)  # link name -> source tp
    throttled_until: float = 0.0
    reported: tuple[str, int] = ("", -1)
    #: feeds whose source end was compared with the replica's (see SourceFeeds.recheck_lagging)
    rechecked: set[str] = field(default_factory=set)
    #: when records were last handed to the writer (monotonic; 0: never, since acquired)
    last_write: float = 0.0
    #: the record at writer.next - 1 as replication sees it (None: not known), for the divergence checks
    tail: Tail | None = None
    #: when the source was last checked for divergence (monotonic)
    checked_at: float = 0.0
    #: feeds not started yet because their source could not be compared with the replica (link name -> feed)
    unverified: dict[str, tuple[Link, str]] = field(default_factory=dict)
    #: when the unit was acquired or its feed last moved between consumers (monotonic; see quiet.py)
    active_at: float = field(default_factory=time.monotonic)

    @property
    def sole_feed(self) -> bool:
        return len(self.feeds) + len(self.unverified) == 1
