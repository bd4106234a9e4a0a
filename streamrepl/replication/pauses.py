"""Whether this gateway's process stood still (SIGSTOP, a VM pause, a machine starved for seconds).

A gateway frozen for longer than its group session may have lost its slots to another gateway without knowing it
yet: the broker expired it (or, where the broker never expires a member, another gateway adopted its seat and the
broker fenced it; membership.py). What it queued before the freeze, and what its loop produces right after it, must
not be written before the group has told it so. A thread ticks every TICK seconds; a tick that comes much later than
due is a freeze, which the gateway's loop takes (`take()`) before it moves records: it throws its writes away and
takes its partitions up again from their real ends after a grace in which the group's answer arrives
(WriteSession.restart). Measured with a thread rather than the loop's own passes, which can be long on purpose (a
plan of thousands of partitions applied, a drain before slots are given up).
"""

from __future__ import annotations

import threading
import time

TICK = 0.2


class PauseWatch:
    def __init__(self, limit: float, clock=time.monotonic) -> None:  # type: ignore[no-untyped-def]
        #: a gap between ticks longer than this (seconds) is a freeze
        self.limit = limit
        self._clock = clock
        self._last = clock()
        self._longest = 0.0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def tick(self) -> None:
        now = self._clock()
        with self._lock:
            gap, self._last = now - self._last, now
            if gap > self.limit:
                self._longest = max(self._longest, gap)

    def take(self) -> float:
        """The longest freeze since the last call (seconds), 0.0 if none."""
        self.tick()
        with self._lock:
            longest, self._longest = self._longest, 0.0
        return longest

    def start(self) -> PauseWatch:
        def run() -> None:
            while not self._stop.wait(TICK):
                self.tick()

        self._last = self._clock()
        self._thread = threading.Thread(target=run, name="stall-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
