"""The gateways' cursor sync (MirrorMaker 2's checkpoint task): contract point 6.

Every CURSOR_SYNC_SECONDS the committed offsets of the consumer groups reading each source
stream are carried to its replica, through one `cursors.CursorReplicator` per link. That
class decides what moves: never backwards, never a group active on the destination cluster,
never past what the replica partition holds.

Where it runs
    In a worker process of the gateway (CursorSyncProcess), so that librdkafka aborting its
    process (seen with frozen brokers) costs a round of cursor sync, not the gateway. A thread
    of the gateway hands the worker, every period, the destination cluster and the links the
    gateway owns (one JSON line on its stdin), and reads back what the round did (one line on
    its stdout); a worker that died is started again at the next round. The worker runs the
    rounds with CursorSync, one per request line.

Which gateway does a link
    Exactly one live gateway of the destination cluster: the one whose slots contain
    crc32(link name) % SLOTS, the same slot scheme that spreads the partitions. When the
    slots move (a gateway joined, died or stopped), the link's cursors move with them; for a
    moment two gateways may both sync a link, which is harmless (a commit only ever moves a
    cursor forward to a value both read from the source).

What it is given is a function that returns the links the gateway owns now (owned_links of
its plan and slots) and the destination cluster; it never touches the producer or the
consumers of the hot loop (each CursorReplicator has its own clients, in the worker). A
round that fails is logged (one line, the link named) and retried the next round.
"""

from __future__ import annotations

import abc
import json
import logging
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import IO, Any, Self

from .. import settings
from ..cursors import CursorReplicator
from ..cursors.replicator import SourceCommits
from ..errors import StreamreplError
from ..paths import StreamPath
from ..registry import Cluster
from . import links
from .membership import SLOTS, slot_of_link

log = logging.getLogger("streamrepl.cursors")


def owned_links(plan: links.Plan | None, slots: set[int]) -> list[links.Link]:
    """The links of `plan` whose slot is in `slots` (copied, not shared: the plan and slots are the gateway loop's)."""
    if plan is None:
        return []
    mine = set(slots)  # one C-level copy: safe while the loop replaces or shrinks it
    seen: dict[str, links.Link] = {}
    for link in list(plan.links):
        if slot_of_link(link, SLOTS) in mine:
            seen.setdefault(link.name, link)
    return list(seen.values())


class _Rounds(abc.ABC):
    """What both cursor syncs share: `run_once()` every `period` in a daemon thread until stop(). A failing
    round is counted in `errors` and logged, never the end of the thread. Waits a full period from the start
    of each round, and at least a tenth of one: never spins. `committed` counts the destination offsets
    moved, `errors` the failed rounds (both read by the metrics endpoint). `dst_cluster` is the cluster of the
    replicas; `owned()` the links to sync, asked for at each round."""

    def __init__(
        self, dst_cluster: Cluster, owned: Callable[[], list[links.Link]], period: float | None = None
    ) -> None:
        self.dst_cluster = dst_cluster
        self.owned = owned
        #: seconds between two rounds (a commit on the source reaches the replica within about this long)
        self.period = settings.CURSOR_SYNC_SECONDS.read() if period is None else period
        self.committed = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @abc.abstractmethod
    def run_once(self) -> int:
        """One round: the destination offsets it moved."""

    def _finish(self) -> None:  # noqa: B027 - a hook: nothing to do unless a subclass has something
        """In the thread, after its last round."""

    def _interrupt(self) -> None:  # noqa: B027 - a hook, as _finish
        """From stop(), before the thread is waited for."""

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.run_once()
            except Exception:  # noqa: BLE001 - never dies
                self.errors += 1
                log.exception("cursor sync round failed")
            self._stop.wait(max(self.period / 10, self.period - (time.monotonic() - started)))
        self._finish()

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._loop, name="cursor-sync", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread and wait for it (a round in progress ends at its next link)."""
        self._stop.set()
        self._interrupt()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                log.warning("cursor sync did not stop within %.0f s", timeout)
            self._thread = None


class CursorSync(_Rounds):
    """Runs the cursor replication of the links `owned()` returns, one round per run_once() (in the worker
    process, or in a daemon thread of its own with start()); errors count failed link rounds."""

    def __init__(
        self, dst_cluster: Cluster, owned: Callable[[], list[links.Link]], period: float | None = None
    ) -> None:
        super().__init__(dst_cluster, owned, period)
        self.rounds = 0
        self._replicators: dict[str, CursorReplicator] = {}
        #: link name -> the last error of its rounds, while they fail
        self._failing: dict[str, str] = {}

    # -- one round ----------------------------------------------------------------------------
    def run_once(self) -> int:
        """Sync every owned link once; returns the number of offsets committed."""
        self.rounds += 1
        try:
            owned = self.owned()
        except Exception as e:  # noqa: BLE001 - the thread must outlive anything
            self.errors += 1
            log.warning("cursor sync: cannot read the links this gateway owns: %s", e)
            return 0
        names = {link.name for link in owned}
        for name in [n for n in self._replicators if n not in names]:
            self._close(name)
        for name in [n for n in self._failing if n not in names]:
            del self._failing[name]
        moved = 0
        # What the groups of each source cluster committed, read once a round for every link out of it (20 links of
        # one source cluster asked it for its groups 20 times a round), or why it could not be read.
        commits: dict[str, SourceCommits | StreamreplError] = {}

        def source_of(r: CursorReplicator) -> Callable[[], SourceCommits]:
            def read() -> SourceCommits:
                got = commits.get(r.src_cluster.name)
                if got is None:
                    try:
                        got = r.source_commits()
                    except StreamreplError as e:
                        got = e
                    commits[r.src_cluster.name] = got
                if isinstance(got, StreamreplError):
                    raise got  # every link of the cluster fails its round, as it would on its own
                return got

            return read

        for link in owned:
            if self._stop.is_set():
                break
            try:
                r = self._replicators.get(link.name)
                if r is None or (r.src_cluster, r.dst_stream) != (link.src_cluster, link.dst):
                    self._close(link.name)
                    r = self._replicators[link.name] = CursorReplicator(
                        link.src_cluster, self.dst_cluster, link.src, link.dst
                    )
                changed = r.run_once(source=source_of(r))
            except Exception as e:  # noqa: BLE001 - logged, retried next round
                self.errors += 1
                why = (str(e).splitlines() or [repr(e)])[0]
                # One line per link while the same error goes on (a source down for an hour: not 1800 lines).
                level = logging.DEBUG if self._failing.get(link.name) == why else logging.WARNING
                log.log(level, "cursor sync of %s failed: %s; retrying every %g s", link.name, why, self.period)
                self._failing[link.name] = why
                if not isinstance(e, StreamreplError):
                    self._close(link.name)  # something unexpected: fresh clients next round
                continue
            if self._failing.pop(link.name, None) is not None:
                log.info("cursor sync of %s works again", link.name)
            for ch in changed:
                log.info(
                    "cursor %s %s:%s[%d] -> %d (source %d)",
                    ch["group"],
                    link.dst,
                    ch["topic"],
                    ch["partition"],
                    ch["offset"],
                    ch["source"],
                )
            moved += len(changed)
        self.committed += moved
        return moved

    def _close(self, name: str) -> None:
        r = self._replicators.pop(name, None)
        if r is not None:
            try:
                r.close()
            except Exception:  # noqa: BLE001 - closing a broken client
                pass

    def _finish(self) -> None:
        self.close()

    def close(self) -> None:
        """Close every link's replicator (its clients)."""
        for name in list(self._replicators):
            self._close(name)


def _link_to_json(link: links.Link) -> dict[str, Any]:
    return {
        "name": link.name,
        "src_cluster": link.src_cluster.name,
        "src_props": dict(link.src_cluster.properties),
        "src": link.src.path,
        "src_uuid": link.src_uuid,
        "dst_cluster": link.dst.cluster,
        "dst": link.dst.path,
        "dst_uuid": link.dst_uuid,
    }


def _link_from_json(d: dict[str, Any]) -> links.Link:
    return links.Link(
        StreamPath(d["src_cluster"], d["src"]),
        Cluster(d["src_cluster"], d["src_props"]),
        d["src_uuid"],
        StreamPath(d["dst_cluster"], d["dst"]),
        d["dst_uuid"],
        False,
        "",
        0,
    )


class CursorSyncProcess(_Rounds):
    """The gateway's cursor sync: a thread that hands the owned links to a worker process every period,
    and starts the worker again when it has died. `committed` and `errors` as in CursorSync."""

    def __init__(
        self, dst_cluster: Cluster, owned: Callable[[], list[links.Link]], period: float | None = None
    ) -> None:
        super().__init__(dst_cluster, owned, period)
        self.restarts = 0
        self._proc: subprocess.Popen[str] | None = None

    def _worker(self) -> subprocess.Popen[str]:
        if self._proc is not None and self._proc.poll() is None:
            return self._proc
        if self._proc is not None:
            self.restarts += 1
            log.warning("cursor sync worker exited (%s); starting it again", self._proc.returncode)
        level = logging.getLevelName(logging.getLogger().getEffectiveLevel())
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "streamrepl.replication.cursor_sync", "--worker", str(level), str(self.period)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        return self._proc

    def run_once(self, timeout: float = 120.0) -> int:
        owned = self.owned()
        proc = self._worker()
        ready: list[IO[str]] = []
        try:
            cluster = self.dst_cluster
            req = {
                "links": [_link_to_json(x) for x in owned],
                "dst_cluster": cluster.name,
                "dst_props": dict(cluster.properties),
            }
            assert proc.stdin is not None and proc.stdout is not None  # made with PIPEs
            proc.stdin.write(json.dumps(req) + "\n")
            proc.stdin.flush()
            ready, _, _ = select.select([proc.stdout], [], [], timeout)
            line = proc.stdout.readline() if ready else ""
        except (OSError, ValueError):
            line = ""
        if not line:
            self.errors += 1
            if proc.poll() is None and not ready:
                log.warning("cursor sync worker did not answer within %.0f s; starting it again", timeout)
                proc.kill()
                proc.wait()
            return 0
        reply = json.loads(line)
        self.committed += int(reply["committed"])
        self.errors += int(reply["errors"])
        return int(reply["committed"])

    def _finish(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def _interrupt(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()


def worker_main(level: str, period: float) -> None:
    """The worker: one request line in (the destination cluster and the links to sync), one round, one reply line
    out (the offsets it moved, the links that failed), until stdin closes."""
    logging.basicConfig(stream=sys.stderr, level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    requested: list[links.Link] = []
    sync: CursorSync | None = None
    for line in sys.stdin:
        req = json.loads(line)
        requested[:] = [_link_from_json(d) for d in req["links"]]  # what the sync's owned() returns from now on
        dst = Cluster(req["dst_cluster"], _dst_props(req))
        if sync is None or sync.dst_cluster != dst:
            if sync is not None:
                sync.close()  # a destination of other settings: fresh clients
            sync = CursorSync(dst, lambda: list(requested), period)
        before = (sync.committed, sync.errors)
        sync.run_once()
        print(json.dumps({"committed": sync.committed - before[0], "errors": sync.errors - before[1]}), flush=True)


def _dst_props(req: dict[str, Any]) -> dict[str, str]:
    return dict(req.get("dst_props") or {})


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker_main(sys.argv[2], float(sys.argv[3]))
