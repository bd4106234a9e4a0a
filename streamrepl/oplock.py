"""What the journaled DR commands (`replica promote`, `replica resync`) share: the lock one run of them holds on
the stream it changes, and the test hook that makes the process die right after a step.

The lock is bulk/lock.py's mechanism in the field `oplock` of the stream's metadata record: a second run refuses
while the first runs; the lock of a run that died expires after `LOCK_TTL`, or at once when its process ran on this
host and is gone. Each command keeps its journal itself (its steps, those done) in the same record, so that a run
that died is completed, or rolled back, by the next one.
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

from . import settings, streams
from .bulk.lock import LockRefresher, RecordLock
from .errors import StreamreplError

#: The exit status of a process the crash hook ended (not one a signal or an error gives).
CRASH_EXIT = 86


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="seconds")


class OpLocked(StreamreplError):
    """Another run of a DR command holds the stream."""

    code = errno.EBUSY


class OpLock(RecordLock):
    """The `oplock` field: held by one promote or resync of the stream at a time."""

    FIELD = "oplock"
    NAME = "lock"
    ERROR = OpLocked

    def __init__(self, r: streams.Resolved, command: str):
        super().__init__(r)
        self.command = command

    def _details(self) -> dict[str, Any]:
        return {"command": self.command}

    def _refuse(self, held: dict[str, Any]) -> OpLocked:
        return OpLocked(
            f"a {held.get('command', 'command')} of {self.r.path} is running (owner {held.get('owner')}, since"
            f" {_iso(int(held.get('since', 0)))}); nothing was changed: wait for it to finish, or, if that run died"
            f" on another host, for its lock to expire at {_iso(int(held.get('expires', 0)))}, and run"
            f" {self.command} again"
        )


@contextlib.contextmanager
def holding(r: streams.Resolved, command: str) -> Iterator[OpLock]:
    """Hold the lock on `r` for `command`, refreshed while the block runs; `lost` is set if another run took it."""
    lock = OpLock(r, command)
    lock.acquire()
    refresher = LockRefresher(lock, lambda: None)
    refresher.start()
    try:
        yield lock
    finally:
        refresher.stop()
        lock.release()


def interrupt_in(e: BaseException) -> KeyboardInterrupt | None:
    """The interrupt (Ctrl-C, or SIGTERM under sigterm_interrupts) that `e` is, or that ended as a SystemError: a
    signal's exception raised while confluent_kafka ran a Python callback comes back wrapped so ("<method ...>
    returned a result with an exception set"), and must stop the command as the interrupt it is."""
    seen: BaseException | None = e
    for _ in range(4):
        if isinstance(seen, KeyboardInterrupt):
            return seen
        if not isinstance(seen, SystemError):
            return None
        seen = seen.__cause__ or seen.__context__
    return None


def step_done(command: str, step: int) -> None:
    """The test hook: exit hard, as a crash or SIGKILL would, right after `command`'s step `step` when
    $STREAMREPL_CRASH_AFTER_STEP names it (no clean-up, no lock released, nothing flushed but this line)."""
    if settings.crash_after_step() == (command, step):
        print(f"{command}: crash hook: exiting after step {step} ({settings.CRASH_AFTER_STEP})", file=sys.stderr)
        sys.stderr.flush()
        os._exit(CRASH_EXIT)
