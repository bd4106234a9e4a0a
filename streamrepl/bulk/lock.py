"""Locks kept in a field of a stream's metadata record (owner, since, expires; refreshed while the holder runs, so
that the lock of a run that died expires): the copy lock keeps two copystream runs from writing the same destination
at once; `RecordLock` is the mechanism, which the DR operations' lock (oplock.py) shares."""

from __future__ import annotations

import abc
import contextlib
import errno
import getpass
import os
import re
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from .. import streams
from ..errors import NotFound, StreamreplError
from ..model import Stream

#: A lock not refreshed for this long belongs to a run that died; the next run takes it over.
LOCK_TTL = 120.0
LOCK_REFRESH = 20.0


class CopyLocked(StreamreplError):
    """Another copystream run holds the destination."""

    code = errno.EBUSY


def _now_ms() -> int:
    return int(time.time() * 1000)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="seconds")


class _Unchanged(Exception):
    """Raised inside a metadata edit to leave the record as it is."""


def _dead_here(held: dict[str, Any]) -> bool:
    """True when the lock's owner ran Spark in local mode on this host and its process is gone (killed,
    crashed): its tasks died with it (PySpark's JVM exits when its parent does), so a rerun from cron on
    the same host need not wait for the lock to expire. A run on a Spark cluster may leave executors
    writing for a while after its driver dies: its lock is waited for. Owners are `user@host:pid:nonce`."""
    if not held.get("local"):
        return False
    m = re.fullmatch(r"[^@]*@(.*):(\d+):[0-9a-f]+", str(held.get("owner", "")))
    if m is None or m.group(1) != socket.gethostname():
        return False
    pid = int(m.group(2))
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # alive, under another user
    return _zombie(pid)


def _zombie(pid: int) -> bool:
    """A process that exited and was not reaped yet by its parent: kill(pid, 0) still reaches it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False  # no /proc here: kill(pid, 0) is all there is to go by
    # "pid (comm) STATE ...": comm may hold spaces and parentheses, so split after the last ")"
    return stat.rsplit(")", 1)[-1].split()[:1] == ["Z"]


class RecordLock(abc.ABC):
    """A lock in the field `FIELD` of a stream's metadata record (compare-and-set). Subclasses name the field, the
    error a refused run gets and what else the lock records."""

    FIELD: ClassVar[str]
    #: how messages name it
    NAME: ClassVar[str]
    ERROR: ClassVar[type[StreamreplError]]

    def __init__(self, r: streams.Resolved, ttl: float = LOCK_TTL, local: bool = True):
        self.r = r
        #: nothing of the run outlives its process (Spark in local mode, or no Spark): see _dead_here
        self.local = local
        self.ttl_ms = int(ttl * 1000)
        self.owner = f"{getpass.getuser()}@{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.since = 0
        self.lost: str | None = None

    def _details(self) -> dict[str, Any]:
        """What the lock records besides its owner and times."""
        return {}

    @abc.abstractmethod
    def _refuse(self, held: dict[str, Any]) -> StreamreplError:
        """The error that refuses a run while `held` (the lock's record) is another live run's."""

    def _held(self, current: Stream | None) -> dict[str, Any] | None:
        value = getattr(current, self.FIELD) if current is not None else None
        return value if isinstance(value, dict) else None

    def _take(self, current: Stream | None) -> Stream:
        if current is None:
            raise NotFound(f"stream {self.r.path} does not exist")
        held = self._held(current)
        now = _now_ms()
        if held and held.get("owner") != self.owner and int(held.get("expires", 0)) > now and not _dead_here(held):
            raise self._refuse(held)
        since = int(held["since"]) if held and held.get("owner") == self.owner else now
        value = {"owner": self.owner, "since": since, "expires": now + self.ttl_ms, **self._details()}
        setattr(current, self.FIELD, {**value, "local": self.local})
        self.since = since
        return current

    def acquire(self) -> None:
        self.r.store.update(self.r.path.path, self._take)

    def refresh(self) -> bool:
        """Extend the lock; False (and `lost` set) when another run has taken it over."""

        def extend(current: Stream | None) -> Stream:
            held = self._held(current)
            if not held or held.get("owner") != self.owner:
                other = held.get("owner") if held else "nobody"
                raise self.ERROR(f"the {self.NAME} on {self.r.path} was taken over by {other}")
            return self._take(current)

        try:
            self.r.store.update(self.r.path.path, extend)
            return True
        except self.ERROR as e:
            self.lost = e.message
            return False

    def release(self) -> None:
        def drop(current: Stream | None) -> Stream:
            held = self._held(current)
            if current is None or not held or held.get("owner") != self.owner:
                raise _Unchanged
            setattr(current, self.FIELD, None)
            return current

        with contextlib.suppress(_Unchanged):
            self.r.store.update(self.r.path.path, drop)


class CopyLock(RecordLock):
    """The `copylock` field of a destination stream's metadata record."""

    FIELD = "copylock"
    NAME = "copy lock"
    ERROR = CopyLocked

    def __init__(self, r: streams.Resolved, source: str, ttl: float = LOCK_TTL, local: bool = True):
        super().__init__(r, ttl, local)
        self.source = source

    def _details(self) -> dict[str, Any]:
        return {"source": self.source}

    def _refuse(self, held: dict[str, Any]) -> CopyLocked:
        return CopyLocked(
            f"destination {self.r.path} is being copied by another run (owner {held.get('owner')},"
            f" since {_iso(int(held.get('since', 0)))}); wait for it to finish, or, if that run died,"
            f" for its lock to expire at {_iso(int(held.get('expires', 0)))}"
        )


class LockRefresher(threading.Thread):
    """Refreshes a held lock every `every` seconds; calls `on_lost` once if another run takes it over."""

    def __init__(self, lock: RecordLock, on_lost: Callable[[], object], every: float = LOCK_REFRESH):
        super().__init__(daemon=True, name=f"{lock.FIELD}-refresher")
        self.lock, self.on_lost, self.every = lock, on_lost, every
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.every):
            try:
                if not self.lock.refresh():
                    self.on_lost()
                    return
            except StreamreplError:
                continue  # the destination is briefly unreachable; the lock has slack for that

    def stop(self) -> None:
        self.stopped.set()
