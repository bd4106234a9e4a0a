"""`stream replica failback`, journaled and locked: the old primary becomes a replica of the new one (dr.py's module
doc says how: set aside whole, deleted, set up again by autosetup's flow).

The journal is kept in the new primary's record (Stream.failback): the old primary is deleted on the way, and the
new primary is the stream both sides' operators act on. It is written before the first change, with the plan (the
set-aside stream's name, the old primary's ends and uuid, the rows printed); each step of journal.FAILBACK_STEPS is
marked done once it is. A rerun after a run that died completes it; before the old primary is deleted, a run that
cannot go on (its copy failed or was interrupted, the old primary changed since its copy) rolls back instead: the
set-aside copy it made is deleted and the journal cleared, and it says so. Once the delete began, only completing is
possible, and the set-aside copy is never deleted.

One run at a time: the lock (oplock.py) is held on the new primary, and on the old one while it exists (a resync or
another failback of it refuses meanwhile).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from . import dr, journal, kafka, oplock, settings, stream_ops, streams
from .autosetup import autosetup
from .bulk.copystream import copystream
from .errors import AlreadyExists, InvalidArgument, NotFound, StreamreplError
from .model import ReplicaState, Stream
from .registry import Registry
from .streams import Resolved


def command(new: str, old: str) -> str:
    return f"'streamrepl stream replica failback -path {new} -replica {old}'"


def _announce(
    new_r: Resolved,
    old_r: Resolved,
    old_rec: Stream,
    plan: list[dr.PartitionPlan],
    known: bool,
    aside: str,
    say: dr.Say,
) -> None:
    if not known:
        say(f"{new_r.path} has no promotion point from {old_r.path}: its current ends stand for the fork")
    say(f"copy {old_r.path} whole into {aside} (offsets kept) and check it partition by partition")
    for pp in plan:
        say(
            f"  {pp.topic}[{pp.partition}]: {old_r.path} ends at {pp.old_end}, {new_r.path} at {pp.new_end};"
            f" {pp.diverged} records past offset {pp.fork} are set aside"
        )
    others = [e.path for e in old_rec.replicas if e.path != str(new_r.path)]
    if others:
        say(f"{old_r.path} loses its replica entries ({', '.join(others)}): add them again on {new_r.path}")
    say(f"delete {old_r.path}, create it again as a replica of {new_r.path}, copy and start replication")
    say(f"its consumer groups' cursors come back from {new_r.path} once a gateway of {old_r.cluster.name} runs")


def _resuming(new_r: Resolved, old_r: Resolved, j: dict[str, Any], say: dr.Say) -> None:
    left = [s for s in journal.FAILBACK_STEPS if s not in j.get("done", [])]
    say(
        f"an interrupted failback of {old_r.path} from {new_r.path} (started {journal.iso(j.get('started'))})"
        f" did {', '.join(j.get('done', []))}; left: {', '.join(left)}"
    )


def failback(
    reg: Registry,
    path: str,
    replica: str,
    *,
    dryrun: bool = False,
    master: str | None = None,
    say: dr.Say = dr.quiet,
    ends: dr.Ends = kafka.topic_ends,
    copy: Callable[..., Any] = copystream,
    setup: Callable[..., dict[str, Any]] = autosetup,
) -> list[dict[str, Any]]:
    """Make the old primary `replica` a replica of the new primary `path`; see the module doc."""
    settings.crash_after_step()  # a bad value of the test hook is refused before anything, not after step 1
    new_r, new_rec = streams.load(reg, path)
    old_r = streams.resolve(reg, replica)
    pending = journal.failing_back(new_rec)
    begun: dict[str, Any] = {}
    if pending is not None:
        streams.check_perm(new_rec, "adminperm", new_r.path, "add replicas")
        if pending.get("old") != str(old_r.path):
            raise InvalidArgument(
                f"an interrupted failback of {pending.get('old')} from {new_r.path} is pending (started"
                f" {journal.iso(pending.get('started'))}): run {command(str(new_r.path), str(pending.get('old')))}"
                " to complete it or roll it back first"
            )
        rows: list[dict[str, Any]] = dr.in_order(list(pending.get("rows", [])), dr.FAILBACK_COLUMNS)
        if dryrun:
            _resuming(new_r, old_r, pending, say)
            return rows
    else:
        old_rec = old_r.store.get(old_r.path.path)
        if old_rec is None:
            raise NotFound(
                f"stream {old_r.path} does not exist, and no failback of it from {new_r.path} is pending; to make a"
                f" new stream {old_r.path} a replica of {new_r.path}, run 'streamrepl stream replica autosetup -path"
                f" {new_r.path} -replica {old_r.path}'"
            )
        streams.check_perm(new_rec, "adminperm", new_r.path, "add replicas")
        streams.check_perm(old_rec, "adminperm", old_r.path, "delete it")
        dr.check_failback(reg, new_r, new_rec, old_r, old_rec)
        plan, known = dr.plan_failback(old_r, old_rec, new_r, new_rec, ends)
        aside = dr.aside_path(old_r)
        _announce(new_r, old_r, old_rec, plan, known, aside, say)
        rows = [pp.row(str(old_r.path), str(new_r.path), aside) for pp in plan]
        if dryrun:
            return rows
        aside_r = streams.resolve(reg, aside)
        begun = {
            "old": str(old_r.path),
            "olduuid": old_rec.uuid,
            "aside": aside,
            # deleted on a roll back only when this failback made it
            "asidenew": aside_r.store.get(aside_r.path.path) is None,
            # the old primary's ends when planned: its set-aside copy must end there, and it must not move after
            "ends": {t: [pp.old_end for pp in plan if pp.topic == t] for t in dict.fromkeys(pp.topic for pp in plan)},
            "rows": rows,
            "steps": list(journal.FAILBACK_STEPS),
            "done": ["journal"],
        }
    with contextlib.ExitStack() as held:
        # One run at a time; what the run before this one left is read once the locks are held.
        lock = held.enter_context(oplock.holding(new_r, "failback"))
        new_r, new_rec = streams.load(reg, path)
        found = journal.failing_back(new_rec)
        if (found is None) != (pending is None) or (
            found and pending and found.get("started") != pending.get("started")
        ):
            raise StreamreplError(
                f"another failback of {old_r.path} from {new_r.path} ran meanwhile; nothing was changed: run"
                f" {command(str(new_r.path), str(old_r.path))} again"
            )
        old_rec = old_r.store.get(old_r.path.path)
        if found is None:
            if old_rec is None:
                raise NotFound(f"stream {old_r.path} was deleted meanwhile; nothing was changed")
            dr.check_failback(reg, new_r, new_rec, old_r, old_rec)  # again: another run may have finished meanwhile
            made = streams.resolve(reg, str(begun["aside"]))
            if begun["asidenew"] and made.store.get(made.path.path) is not None:
                # another run made it since the plan: this one must neither copy over it nor delete it on a roll back
                raise StreamreplError(
                    f"{made.path} was made since this failback planned it (another failback ran meanwhile?); nothing"
                    f" was changed: see 'streamrepl stream replica list -path {new_r.path}'"
                )
        if old_rec is not None and not old_rec.deleting and (found is None or old_rec.uuid == found.get("olduuid")):
            held.enter_context(oplock.holding(old_r, "failback"))  # gone with the old primary once it is deleted
        if found is None:
            j = {**begun, "started": int(time.time() * 1000)}

            def begin(current: Stream | None) -> Stream:
                if current is None:
                    raise StreamreplError(f"stream {new_r.path} was deleted meanwhile; nothing was changed")
                current.failback = j
                return current

            new_r.store.update(new_r.path.path, begin)
            oplock.step_done("failback", 1)
        else:
            j = found
            _resuming(new_r, old_r, j, say)  # once the lock is held: a run that holds it is not interrupted
        _Run(reg, new_r, old_r, j, lock, say, ends, copy, setup, master).run(resumed=pending is not None)
    return rows


class _Run:
    """The steps of one failback (journal.FAILBACK_STEPS) not done yet, each marked done in its journal once it is."""

    def __init__(
        self,
        reg: Registry,
        new_r: Resolved,
        old_r: Resolved,
        j: dict[str, Any],
        lock: oplock.OpLock,
        say: dr.Say,
        ends: dr.Ends,
        copy: Callable[..., Any],
        setup: Callable[..., dict[str, Any]],
        master: str | None,
    ):
        self.reg, self.new_r, self.old_r, self.j, self.lock = reg, new_r, old_r, j, lock
        self.say, self.ends, self.copy, self.setup, self.master = say, ends, copy, setup, master
        self.new, self.old, self.aside = str(new_r.path), str(old_r.path), str(j.get("aside", ""))

    def done(self, step: str) -> bool:
        return step in self.j.get("done", [])

    def mark(self, step: str) -> None:
        def apply(current: Stream | None) -> Stream:
            if current is None or journal.failing_back(current) is None:
                raise StreamreplError(f"the journal of the failback of {self.old} vanished meanwhile")
            if self.lock.lost:
                raise oplock.OpLocked(f"failback of {self.old} stopped: {self.lock.lost}")
            assert current.failback is not None
            current.failback["done"] = [*current.failback.get("done", []), step]
            return current

        self.new_r.store.update(self.new_r.path.path, apply)
        self.j["done"] = [*self.j.get("done", []), step]
        oplock.step_done("failback", journal.FAILBACK_STEPS.index(step) + 1)

    def _clear(self) -> None:
        def drop(current: Stream | None) -> Stream:
            if current is None:
                raise StreamreplError(f"stream {self.new} was deleted meanwhile")
            current.failback = None
            return current

        self.new_r.store.update(self.new_r.path.path, drop)

    def run(self, resumed: bool) -> None:
        phase = journal.TwoPhase(
            f"failback of {self.old} from {self.new}",
            self.old,
            command(self.new, self.old),
            f"after the history of {self.old} was set aside in {self.aside}",
        )
        journal.run_two_phase(phase, self._prepare, self._roll_back, self._finish, self.say, resumed)

    def _old(self) -> Stream | None:
        """The old primary as the journal planned it: None once its delete began (or it is another stream now)."""
        rec = self.old_r.store.get(self.old_r.path.path)
        if rec is None or rec.deleting or rec.uuid != self.j.get("olduuid"):
            return None
        return rec

    def _planned(self) -> list[dr.PartitionPlan]:
        return [
            dr.PartitionPlan(t, p, end, 0, 0) for t, per in self.j.get("ends", {}).items() for p, end in enumerate(per)
        ]

    def _prepare(self) -> None:
        """The steps that change nothing of the old primary: set it aside; before its delete, check it did not move."""
        if self.done("delete"):
            return
        rec = self._old()
        if rec is None:
            return  # its delete began: only completing is possible
        if not self.done("aside"):
            dr.set_aside(self.reg, self.old_r, rec, self.aside, self._planned(), self.ends, self.copy, self.master)
            self.say(f"set aside: {self.aside} holds {self.old} whole")
            self.mark("aside")
            return
        now = dr.ends_by_topic(self.old_r, rec, self.ends)
        for pp in self._planned():
            still = (now.get(pp.topic) or [])[pp.partition : pp.partition + 1]
            if still != [pp.old_end]:
                raise StreamreplError(
                    f"{self.old}:{pp.topic}[{pp.partition}] ends at {still[0] if still else 'nothing'}, not at"
                    f" {pp.old_end} where its copy {self.aside} ends: something wrote to it since"
                )

    def _roll_back(self) -> str:
        """Undo what the steps before "delete" did, clear the journal; says what was undone."""
        undone = []
        if self.aside and self.j.get("asidenew"):
            a = streams.resolve(self.reg, self.aside)
            if a.store.get(a.path.path) is not None:
                stream_ops.delete(self.reg, self.aside)
                undone.append(f"deleted its copy {self.aside}")
        self._clear()
        return ", ".join(undone) or "nothing to undo"

    def _finish(self) -> None:
        """The steps past the point of no return: delete the old primary, set it up again as a replica, clear."""
        if not self.done("delete"):
            rec = self.old_r.store.get(self.old_r.path.path)
            # Not a stream made since under its name (autosetup run by hand): that one is already the replica.
            if rec is not None and (rec.deleting or rec.uuid == self.j.get("olduuid")):
                stream_ops.delete(self.reg, self.old)
                self.say(f"deleted {self.old}")
            self.mark("delete")
        if not self.done("setup"):
            try:
                self.setup(self.reg, self.new, self.old, master=self.master, say=self.say, useexistingreplica=True)
            except AlreadyExists:
                # set up already (the run before this one, or autosetup run by hand, finished it)
                _, rec = streams.load(self.reg, self.new)
                entry = rec.replica(self.old)
                if entry is None or entry.state != ReplicaState.REPLICATING:
                    raise
            self.mark("setup")
        self._clear()
