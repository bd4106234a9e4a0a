"""The journals the DR commands keep in a stream's metadata record, and what other commands make of them.

`replica promote` keeps its journal in Stream.promotion (promote.py writes it), `replica resync` in Stream.resync
(resync.py writes it), `replica failback` in the new primary's Stream.failback (failback.py writes it; the old
primary is deleted on the way): the steps, those done, and what a rerun needs to complete (or roll back) a run that died.
Readers elsewhere (`replica list`, failback) go through the functions here, which know the shapes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .errors import StreamreplError
from .model import Stream
from .oplock import interrupt_in

#: The steps of promote, in order; the crash hook ($STREAMREPL_CRASH_AFTER_STEP=promote:<k>) counts them from 1.
PROMOTE_STEPS = ("journal", "upstreams", "released", "point", "identity")
#: The steps of promote -consistent true (promoteconsistent.py): the cut is planned, the replica set aside, the cut
#: topics rebuilt and the cursors moved back between the promotion point and the identity.
PROMOTE_CONSISTENT_STEPS = (
    "journal",
    "upstreams",
    "released",
    "point",
    "cut",
    "aside",
    "rebuild",
    "cursors",
    "identity",
)
#: The steps of resync, in order. Until "rebuild" the replica is as it was: a run that cannot go on rolls back.
RESYNC_STEPS = ("journal", "pause", "released", "aside", "rebuild", "resume")
#: The steps of failback, in order. Until "delete" the old primary is as it was: a run that cannot go on rolls back.
FAILBACK_STEPS = ("journal", "aside", "delete", "setup")


def iso(ms: Any) -> str:
    return datetime.fromtimestamp(int(ms or 0) / 1000, tz=UTC).isoformat(timespec="seconds")


def promoting(rec: Stream | None) -> dict[str, Any] | None:
    """The journal of a promote of the stream that has not finished (records written before journals existed hold
    finished promotions only)."""
    p = rec.promotion if rec is not None else None
    return p if isinstance(p, dict) and p.get("state") == "running" else None


def promoted(rec: Stream | None) -> dict[str, Any] | None:
    """The stream's finished promotion."""
    p = rec.promotion if rec is not None else None
    return p if isinstance(p, dict) and p.get("state") != "running" else None


def resyncing(rec: Stream | None) -> dict[str, Any] | None:
    """The journal of a resync of the replica that has not finished or rolled back."""
    j = rec.resync if rec is not None else None
    return j if isinstance(j, dict) else None


def failing_back(rec: Stream | None) -> dict[str, Any] | None:
    """The journal of a failback into the stream (the new primary) that has not finished or rolled back."""
    j = rec.failback if rec is not None else None
    return j if isinstance(j, dict) else None


def failback_note(new: str, rec: Stream, old: str) -> str:
    """What `replica list` of the new primary `new` (its record `rec`) says of its replica `old` while a failback of
    `old` did not finish; "" otherwise."""
    j = failing_back(rec)
    if j is None or j.get("old") != old:
        return ""
    kept = f"; the history of {old} is set aside in {j.get('aside')}" if "aside" in j.get("done", []) else ""
    return (
        f"a failback of {old} from {new} did not finish (started {iso(j.get('started'))}, done:"
        f" {', '.join(j.get('done', []))}){kept}: run 'streamrepl stream replica failback -path {new} -replica {old}'"
        " again to complete it or roll it back"
    )


def promotion_note(src: str, replica: str, uuid: str, drec: Stream) -> str:
    """What `replica list` says of the link from `src` to `replica` (registered with `uuid`) when the replica `drec`
    was promoted, or is being promoted, from `src`; "" otherwise."""
    for p, finished in ((promoted(drec), True), (promoting(drec), False)):
        if p is None or src not in p.get("from", []) or (uuid and uuid != p.get("uuid")):
            continue
        if not finished:
            return (
                f"replica stream {replica} is being promoted to a writable primary (promote started"
                f" {iso(p.get('started'))} and did not finish): run 'streamrepl stream replica promote -path {replica}'"
                " to complete it"
            )
        return (
            f"replica stream {replica} was promoted to a writable primary at {iso(p.get('at'))} and no longer takes"
            f" records from {src}: to make {src} its replica, run 'streamrepl stream replica failback -path {replica}"
            f" -replica {src}'; to drop this link, run 'streamrepl stream replica remove -path {src} -replica {replica}'"
        )
    return ""


def resync_note(src: str, replica: str, drec: Stream) -> str:
    """What `replica list` says of the link from `src` to the replica `drec` while a resync of it from `src` did not
    finish; "" otherwise."""
    j = resyncing(drec)
    if j is None or j.get("source") != src:
        return ""
    return (
        f"a resync of {replica} from {src} did not finish (started {iso(j.get('started'))}, done:"
        f" {', '.join(j.get('done', []))}): run 'streamrepl stream replica resync -path {src} -replica {replica}'"
        " again to complete it or roll it back"
    )


def _interrupt_or(e: BaseException) -> StreamreplError | KeyboardInterrupt:
    """`e` as the step's failure or interrupt; any other SystemError goes on up."""
    if isinstance(e, StreamreplError):
        return e
    found = interrupt_in(e)
    if found is None:
        raise e
    return found


@dataclass
class TwoPhase:
    """What a run of resync or failback says when its steps stop: before its point of no return it rolls back, past
    it its journal keeps the steps done for a rerun."""

    #: "the resync of /a from /b" (a resumed run says "the interrupted ...")
    what: str
    #: the stream a roll back leaves as it was
    subject: str
    #: the command that completes or rolls back
    again: str
    #: where the point of no return lies: "after <...>"
    past: str
    #: what else stays as it is past that point: " and the links stay paused"
    kept: str = ""


def run_two_phase(
    phase: TwoPhase,
    prepare: Callable[[], None],
    roll_back: Callable[[], str],
    finish: Callable[[], None],
    say: Callable[[str], None],
    resumed: bool,
) -> None:
    """Run `prepare` (its steps change nothing that cannot be undone), then `finish`. A failure or an interrupt in
    `prepare` is undone by `roll_back` (which says what it undid and clears the journal); one in `finish` leaves the
    journal for a rerun. An interrupt stays a KeyboardInterrupt (the CLI reports "interrupted: ..."), with the text."""
    what = f"{'the interrupted' if resumed else 'the'} {phase.what}"
    try:
        prepare()
    except (StreamreplError, KeyboardInterrupt, SystemError) as e:
        e = _interrupt_or(e)
        undone = roll_back()
        text = f"rolled back {what}: {undone}; nothing of {phase.subject} was changed: run {phase.again} again"
        if isinstance(e, KeyboardInterrupt):
            raise type(e)(text) from None
        raise StreamreplError(f"{e}; {text}") from None
    try:
        finish()
    except (StreamreplError, KeyboardInterrupt, SystemError) as e:
        e = _interrupt_or(e)
        why = f" ({e})" if isinstance(e, StreamreplError) else ""
        text = (
            f"{what} stopped {phase.past}{why}; its journal keeps the steps done{phase.kept}: run {phase.again} again"
            " to complete it"
        )
        if isinstance(e, KeyboardInterrupt):
            raise type(e)(text) from None
        raise StreamreplError(text) from None
    if resumed:
        say(f"completed {what}")
