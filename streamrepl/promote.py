"""`stream replica promote` (Cluster Linking's failover): the replica becomes the writable primary after its source
is lost.

Only the replica's half of each inbound link is removed (its upstream entries): the source's cluster may be
unreachable, and a link runs only while both halves agree, so that alone stops it. The command then waits until no
live gateway of the replica's cluster still writes into it (the status topic's reports, as a delete waits) before
calling it writable. It reports its cut (promotecut.py): per partition, the last record the replica got, the spread
across partitions and, when the lost source still answers (asked with a short timeout), what the replica lacks.
The consumer groups' cursors are already on the replica (cursor replication); nothing is done to
them. The replica's end of every partition at that moment, the promotion point, is kept in its metadata record:
failback (dr.py) needs it to tell the old primary's diverged tail from the history both share. The promoted stream
also takes over the UUID of the history it holds (the origin its records carry, policy.py): a copy's partition holds
records of one origin, so records written to it after the promotion must carry the same one, or it could never be
copied again. A replica of several upstreams is refused (which history it takes over is the operator's call).

promote is journaled: its intent and steps (journal.PROMOTE_STEPS) are written into the replica's own record before
the first change, each step is marked done, and a run that died (SIGKILL, a crash, the machine) is completed by the
next one; one run at a time holds the stream (oplock.py).

The promotion point kept in the promoted stream's record (model.Stream.promotion):
`{"from": [old primary paths], "at": ms, "ends": {topic: [end of partition 0, 1, ...]}, "uuid": previous uuid}`, and
the journal beside it: "state" ("running", then "complete"; records without it are complete), "steps" and "done",
"started" (ms), "upstreams" (the removed entries), "identity" (the uuid taken over), "cut" (the rows of
promotecut.py, reported again by a rerun).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from . import dr, kafka, oplock, policy, promoteconsistent, promotecut, replicas, settings, statustopic, streams
from .bulk.copystream import copystream
from .dr import Ends, Say, Waiter, ends_by_topic, quiet
from .errors import InvalidArgument, NotFound, StreamreplError, Unreachable
from .journal import PROMOTE_CONSISTENT_STEPS, PROMOTE_STEPS
from .journal import iso as _iso
from .journal import promoting as _running
from .model import Stream
from .paths import kafka_topic_name
from .registry import Cluster, Registry


def _writers(r: streams.Resolved) -> dict[str, tuple[Cluster, list[str]]]:
    """Who may write into stream `r`: the gateways of its own cluster, holding units `/cluster/stream:topic[p]`."""
    return {r.cluster.name: (r.cluster, [f"{r.path}:"])}


def _origins(r: streams.Resolved, rec: Stream, ends: dict[str, list[int]]) -> list[str]:
    """The origins of the records the stream's partitions end with (policy.origin_of)."""
    found: set[str] = set()
    c = kafka.consumer(r.cluster)
    try:
        for topic, per in ends.items():
            for p, end in enumerate(per):
                last = (
                    kafka.last_record(c, kafka.TopicPartition(kafka_topic_name(r.path, topic), p), end) if end else None
                )
                if last is not None:
                    found.add(policy.origin_of(last.headers(), rec.uuid))
    finally:
        c.close()
    return sorted(found)


def _refuse_other_origins(r: streams.Resolved, rec: Stream, ends: Ends) -> None:
    """A replica whose partitions hold records of a stream other than its one upstream (a many-to-one replica whose
    other upstreams were removed) cannot be promoted: it takes over that upstream's identity, and its records written
    after another origin's in a partition would mix two histories there, which no copy can carry."""
    if _running(rec) is not None or len(rec.upstreams) != 1 or not rec.upstreams[0].uuid:
        return
    src = rec.upstreams[0]
    point = ends_by_topic(r, rec, ends)
    foreign: list[str] = []
    c = kafka.consumer(r.cluster)
    try:
        for topic, per in point.items():
            for p, end in enumerate(per):
                tp = kafka.TopicPartition(kafka_topic_name(r.path, topic), p)
                last = kafka.last_record(c, tp, end) if end else None
                origin = policy.origin_of(last.headers(), rec.uuid) if last is not None else None
                if origin is not None and origin not in (src.uuid, rec.uuid):
                    foreign.append(f"{r.path}:{topic}[{p}] holds records of another stream (origin {origin})")
    finally:
        c.close()
    if foreign:
        raise InvalidArgument(
            f"{'; '.join(foreign[:3])}{' and more' if len(foreign) > 3 else ''}: promote takes over the history of"
            f" {src.path} alone, and its new records would follow another stream's in those partitions; nothing was"
            f" changed. Promote a replica that only {src.path} fed, or write to a new stream on this cluster"
            f" ('streamrepl stream create -path <new path> -copymetafrom {r.path}')"
        )


def _check_promote(r: streams.Resolved, rec: Stream) -> None:
    journal = _running(rec)
    if journal is None and not rec.upstreams and not rec.promotion:
        raise InvalidArgument(f"stream {r.path} is not a replica of any stream; there is nothing to promote")
    streams.check_perm(rec, "adminperm", r.path, "promote it")
    if journal is None and not rec.upstreams:
        return  # promoted already: promote says so and does nothing
    if journal is None and len(rec.upstreams) > 1:
        # It takes over the history of one lost source (its identity, its promotion point); which one is the
        # operator's call, and the upstreams of the sources still there must keep feeding it or be removed knowingly.
        raise InvalidArgument(
            f"stream {r.path} has several upstreams ({', '.join(e.path for e in rec.upstreams)}); promote takes over"
            f" the history of one lost source: remove the upstreams of the other sources first ('streamrepl stream"
            f" upstream remove -path {r.path} -upstream <path>'), then promote again (refused while its partitions"
            " hold records of the removed ones: those would mix with the promoted history); nothing was changed"
        )
    others = [e.path for e in rec.upstreams if journal is not None and e.path not in journal.get("from", [])]
    if others:
        raise InvalidArgument(
            f"an interrupted promote of {r.path} from {', '.join(journal.get('from', []) if journal else [])} is"
            f" pending, and {r.path} has upstreams it did not plan to remove ({', '.join(others)}): remove them"
            f" ('streamrepl stream upstream remove -path {r.path} -upstream <path>'), then promote again to complete it"
        )


def _promoted_row(
    r: streams.Resolved, sources: list[str], writable: bool, dryrun: bool, cut: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """One row per partition with its cut (promotecut.py), or one row when there is none (no partition, or a
    promotion recorded before cuts were)."""
    head = {"path": str(r.path), "promotedfrom": ",".join(sources), "writable": writable, "dryrun": dryrun}
    if not cut:
        return [head]
    columns = promotecut.COLUMNS + (promoteconsistent.COLUMNS if "cutts" in cut[0] else ())
    return [{**head, **{c: k.get(c) for c in columns}} for k in cut]


def _mode(r: streams.Resolved, rec: Stream, consistent: bool | None) -> bool:
    """Whether this run cuts consistently: as asked, or as the interrupted run's journal says when not asked; a run
    past its cut cannot change its mind."""
    journal = _running(rec)
    if journal is None:
        return bool(consistent)
    planned = bool(journal.get("consistent"))
    if consistent is None or consistent == planned:
        return planned
    if "cut" in journal.get("done", []):
        raise InvalidArgument(
            f"the interrupted promote of {r.path} cut it consistently already (set aside in {journal.get('aside')}):"
            f" run 'streamrepl stream replica promote -path {r.path}' without -consistent to complete it"
        )
    return consistent


def _preview(
    reg: Registry, r: streams.Resolved, rec: Stream, sources: list[str], ends: Ends, scan: bool
) -> list[dict[str, Any]]:
    """The consistent cut as it would be now (the gateways may still be writing); refuses what it cannot do. Its
    kept ends only with `scan` (a dry run): finding them reads every partition whole, which the run does again at
    its cut."""
    promoteconsistent.check(rec, str(r.path))
    point = ends_by_topic(r, rec, ends)
    source = sources[0] if len(sources) == 1 and scan else None
    cut = promotecut.rows(promotecut.measure(reg, r, point, source))
    caught = promoteconsistent.caught_up(r, sources, point)
    t = promoteconsistent.cut_time(str(r.path), cut, caught)
    return promoteconsistent.rows(cut, t, promoteconsistent.plan(r, point, t, caught) if scan else [], dr.aside_path(r))


def promote(
    reg: Registry,
    path: str,
    *,
    dryrun: bool = False,
    consistent: bool | None = None,
    say: Say = quiet,
    ends: Ends = kafka.topic_ends,
    wait_released: Waiter = statustopic.wait_released,
    copy: Any = copystream,
) -> list[dict[str, Any]]:
    """Make the replica `path` the writable primary; see the module doc. Its source is only read, with a short
    timeout, to report what the replica lacks. `consistent`: one cut for the whole stream (promoteconsistent.py);
    None: as an interrupted run planned, else per partition."""
    settings.crash_after_step()  # a bad value of the test hook is refused before anything, not after step 1
    try:
        r, rec = streams.load(reg, path)
    except KeyboardInterrupt as e:
        raise type(e)(not_begun(path)) from None
    try:
        _check_promote(r, rec)
        _refuse_other_origins(r, rec, ends)
        mode = _mode(r, rec, consistent)
        if mode and rec.upstreams and _running(rec) is None:
            # refuses before anything changes
            preview = _preview(reg, r, rec, [e.path for e in rec.upstreams], ends, scan=dryrun)
            if dryrun:
                _promote_plan(reg, r, rec, say, ends, dryrun=True)
                for line in promoteconsistent.describe(str(r.path), preview):
                    say(line)
                return _promoted_row(r, [e.path for e in rec.upstreams], False, True, preview)
        if dryrun:
            return _promote_plan(reg, r, rec, say, ends, dryrun=True)
        # One run at a time; what the run before this one left is read once the lock is held (taken even when promoted
        # already: the lock of a run that died after its last step goes with it).
        return _locked(reg, r, path, consistent, say, ends, wait_released, copy)
    except KeyboardInterrupt as e:
        raise e if str(e) else type(e)(_stopped(r)) from None


def _locked(
    reg: Registry,
    r: streams.Resolved,
    path: str,
    consistent: bool | None,
    say: Say,
    ends: Ends,
    wait_released: Waiter,
    copy: Any,
) -> list[dict[str, Any]]:
    with oplock.holding(r, "promote") as lock:
        r, rec = streams.load(reg, path)
        _check_promote(r, rec)
        mode = _mode(r, rec, consistent)
        return _promote_plan(
            reg,
            r,
            rec,
            say,
            ends,
            dryrun=False,
            steps=lambda sources: _promote(reg, r, rec, sources, lock, say, ends, wait_released, mode, copy),
        )


def _promote_plan(
    reg: Registry,
    r: streams.Resolved,
    rec: Stream,
    say: Say,
    ends: Ends,
    dryrun: bool,
    steps: Callable[[list[str]], list[dict[str, Any]]] | None = None,
) -> list[dict[str, Any]]:
    """Say what promote does (or that it is done), and do it with `steps` unless a dry run."""
    journal = _running(rec)
    if journal is None and not rec.upstreams and rec.promotion:
        sources = list(rec.promotion.get("from", []))
        say(f"{r.path} was promoted from {', '.join(sources)} at {_iso(rec.promotion.get('at'))}: nothing left to do")
        return _promoted_row(r, sources, True, dryrun, rec.promotion.get("cut"))
    sources = list(journal["from"]) if journal else [e.path for e in rec.upstreams]
    done = list(journal.get("done", [])) if journal else []
    if journal:
        say(
            f"an interrupted promote of {r.path} (started {_iso(journal.get('started'))}) did"
            f" {', '.join(done)}; the other steps follow"
        )
    if "upstreams" not in done:
        for src in sources:
            say(f"remove upstream {src} from {r.path}: replication from it stops (its cluster is not contacted)")
    if "released" not in done:
        say(f"wait until no gateway of cluster {r.cluster.name} writes into {r.path}")
    if "point" not in done:
        say(f"record the end of every partition of {r.path} as its promotion point; cursors stay as replicated")
    if dryrun or steps is None:
        # The cut as it would be now (the gateways may still be writing): what the replica holds and lacks.
        cut = (journal or {}).get("cut") or promotecut.rows(
            promotecut.measure(reg, r, ends_by_topic(r, rec, ends), sources[0] if len(sources) == 1 else None)
        )
        for line in promotecut.describe(str(r.path), ", ".join(sources), cut):
            say(line)
        return _promoted_row(r, sources, False, True, cut)
    return steps(sources)


def not_begun(path: str) -> str:
    """What a promote interrupted before it read its stream says."""
    return f"promote of {path} stopped before it began; nothing was changed: run promote again"


def _stopped(r: streams.Resolved) -> str:
    """What an interrupted promote says: the steps its journal shows done (read again: the step under way when the
    signal came may have finished)."""
    try:
        rec = r.store.get(r.path.path)
    except (StreamreplError, KeyboardInterrupt):
        rec = None
    if rec is None:
        return (
            f"promote of {r.path} stopped part way; what it did cannot be read now (its cluster does not answer); its"
            " journal (in its metadata) keeps the steps done: run promote again to complete it"
        )
    p = rec.promotion
    if isinstance(p, dict) and _running(rec) is None and "done" in p:
        return f"promote of {r.path} finished before it stopped: {r.path} is writable"
    if not isinstance(p, dict) or _running(rec) is None:
        return f"promote of {r.path} stopped before it changed anything; nothing was changed: run promote again"
    done = list(p.get("done", []))
    # A step under way when it stopped is not marked done: what it did already is told too.
    removed = [s for s in p.get("from", []) if "upstreams" not in done and rec.upstream(s) is None]
    also = f"; removed the upstream {', '.join(removed)}" if removed else ""
    return (
        f"promote of {r.path} stopped part way (done: {', '.join(done)}{also}); its journal (in its metadata) keeps"
        " the steps done: run promote again to complete it"
    )


def _promote(
    reg: Registry,
    r: streams.Resolved,
    rec: Stream,
    sources: list[str],
    lock: oplock.OpLock,
    say: Say,
    ends: Ends,
    wait_released: Waiter,
    consistent: bool,
    copy: Any,
) -> list[dict[str, Any]]:
    """The steps of promote not done yet (PROMOTE_STEPS, or PROMOTE_CONSISTENT_STEPS), each marked done in the
    journal once it is."""
    journal = _running(rec)
    resumed = journal is not None
    order = PROMOTE_CONSISTENT_STEPS if consistent else PROMOTE_STEPS

    def mark(step: str, **fields: Any) -> Stream:
        def apply(current: Stream | None) -> Stream:
            p = _running(current)
            if current is None or p is None:
                raise StreamreplError(f"the journal of the promote of {r.path} vanished meanwhile; run promote again")
            if lock.lost:
                raise oplock.OpLocked(f"promote of {r.path} stopped: {lock.lost}")
            p.update(fields)
            p["done"] = [*p.get("done", []), step]
            return current

        out = r.store.update(r.path.path, apply)
        assert out is not None
        oplock.step_done("promote", order.index(step) + 1)
        return out

    def switch(current: Stream | None) -> Stream:
        """A rerun asked for the other cut, before the cut was planned: the journal's steps become its."""
        p = _running(current)
        if current is None or p is None:
            raise StreamreplError(f"the journal of the promote of {r.path} vanished meanwhile; run promote again")
        p["consistent"], p["steps"] = consistent, list(order)
        return current

    try:
        if journal is None:

            def begin(current: Stream | None) -> Stream:
                if current is None:
                    raise NotFound(f"stream {r.path} was deleted meanwhile")
                current.promotion = {
                    "state": "running",
                    "from": sources,
                    # the removed entries, for the record, and for the uuid of their history (see "point")
                    "upstreams": [e.to_json() for e in current.upstreams if e.path in sources],
                    "uuid": current.uuid,
                    "started": int(time.time() * 1000),
                    "steps": list(order),
                    "consistent": consistent,
                    "done": ["journal"],
                }
                return current

            rec = r.store.update(r.path.path, begin) or rec
            oplock.step_done("promote", 1)
        elif bool(journal.get("consistent")) != consistent:
            rec = r.store.update(r.path.path, switch) or rec
        journal = _running(rec) or {}
        done = set(journal.get("done", []))
        if "upstreams" not in done:
            for src in sources:
                if rec.upstream(src) is not None:
                    replicas.upstream_remove(reg, str(r.path), src)
            rec = mark("upstreams")
        if "released" not in done:
            held = wait_released(_writers(r))
            if held:
                raise StreamreplError(
                    f"gateways still write into {r.path} after {statustopic.RELEASE_TIMEOUT:.0f} s"
                    f" ({', '.join(held)}); its upstreams are removed: stop those gateways ('streamrepl gateway list"
                    f" -cluster {r.cluster.name}'), then run promote again to complete it"
                )
            rec = mark("released")
        if "point" not in done:
            point = ends_by_topic(r, rec, ends)
            found = _origins(r, rec, point)
            removed = [e.get("uuid", "") for e in journal.get("upstreams", [])]
            identity = found[0] if len(found) == 1 else (removed[0] if removed else rec.uuid)
            if len(found) > 1:
                say(f"warning: the partitions of {r.path} hold records of several origins ({', '.join(found)})")
            cut = promotecut.rows(promotecut.measure(reg, r, point, sources[0] if len(sources) == 1 else None))
            rec = mark("point", ends=point, identity=identity, cut=cut)
        if consistent:
            rec = _consistent(reg, r, rec, sources, mark, say, ends, copy)
        cut = list((_running(rec) or {}).get("cut") or [])
        for line in promotecut.describe(str(r.path), ", ".join(sources), cut):
            say(line)
        for line in promoteconsistent.describe(str(r.path), cut):
            say(line)
        identity = str((_running(rec) or {}).get("identity", rec.uuid))
        say(f"{r.path} takes over the identity {identity} of the history it holds")

        def finish(current: Stream | None) -> Stream:
            p = _running(current)
            if current is None or p is None:
                raise StreamreplError(f"the journal of the promote of {r.path} vanished meanwhile; run promote again")
            # Every copy of a partition holds records of one origin (policy.py): records written here from now on
            # are the same history's, so they must carry its origin, or no copy of this stream could ever be made.
            current.uuid = identity
            p["at"] = int(time.time() * 1000)
            p["state"] = "complete"
            p["done"] = [*p.get("done", []), "identity"]
            return current

        r.store.update(r.path.path, finish)
        oplock.step_done("promote", len(order))
    except KeyboardInterrupt as e:
        raise type(e)(_stopped(r)) from None
    except Unreachable as e:
        # A broker that stopped answering part way: the journal says what is left.
        raise Unreachable(f"{e.message}; {_stopped(r)}") from None
    if resumed:
        say(f"completed an interrupted promote of {r.path}")
    say(f"{r.path} is writable")
    return _promoted_row(r, sources, True, False, cut)


def _consistent(
    reg: Registry,
    r: streams.Resolved,
    rec: Stream,
    sources: list[str],
    mark: Callable[..., Stream],
    say: Say,
    ends: Ends,
    copy: Any,
) -> Stream:
    """The steps of the consistent cut (promoteconsistent.py) not done yet: plan it, set the replica aside, rebuild
    the cut topics, move the cursors back. The promotion point ("ends") becomes the kept ends: failback's fork."""
    journal = _running(rec) or {}
    done = set(journal.get("done", []))
    if "cut" not in done:
        point: dict[str, list[int]] = journal["ends"]
        caught = promoteconsistent.caught_up(r, sources, point)
        t = promoteconsistent.cut_time(str(r.path), journal.get("cut") or [], caught)
        aside = dr.aside_path(r)
        rows = promoteconsistent.rows(journal.get("cut") or [], t, promoteconsistent.plan(r, point, t, caught), aside)
        changed = promoteconsistent.changed_topics(rows)
        if changed:
            a = streams.resolve(reg, aside)
            if a.store.get(a.path.path) is not None:
                raise InvalidArgument(
                    f"stream {aside} exists already: the records past the cut cannot be set aside into it; nothing"
                    " of the records was changed: run promote again in a minute (the set-aside name has a new stamp)"
                )
        kept = {t_: [k["keptend"] for k in rows if k["topic"] == t_] for t_ in point}
        saved = promoteconsistent.cursors(r, changed)
        rec = mark("cut", cut=rows, replicatedends=point, ends=kept, aside=aside if changed else "", cursors=saved)
        journal, done = _running(rec) or {}, set()
    rows = list(journal.get("cut") or [])
    aside = str(journal.get("aside") or "")
    if "aside" not in done:
        if aside:
            planned = [
                dr.PartitionPlan(t_, p, end, 0, 0)
                for t_, per in journal["replicatedends"].items()
                for p, end in enumerate(per)
            ]
            dr.set_aside(reg, r, rec, aside, planned, ends, copy, None, "promote")
            say(f"set aside: {aside} holds {r.path} whole")
        rec = mark("aside")
    if "rebuild" not in done:
        if aside:
            promoteconsistent.rebuild(reg, r, rec, aside, rows, say)
        rec = mark("rebuild")
    if "cursors" not in done:
        moved = promoteconsistent.move_cursors(r, journal.get("cursors") or {}, rows)
        for k in rows:
            k["groupsmoved"] = ",".join(g for g, parts in moved.items() if (k["topic"], k["partition"]) in parts)
        if moved:
            say(f"consumer groups whose cursors were past the cut, moved back to it: {', '.join(sorted(moved))}")
        rec = mark("cursors", cut=rows, moved=sorted(moved))
    return rec
