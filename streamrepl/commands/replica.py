"""`streamrepl stream replica ...` and `streamrepl stream upstream ...`."""

from __future__ import annotations

from typing import Any

import click

from ..cli import CONTEXT_SETTINGS
from ..output import Listing
from .common import BOOL, COMPRESSIONS, app, handles_errors, listing, opt, output, require, sigterm_interrupts


@click.group(context_settings=CONTEXT_SETTINGS)
def replica() -> None:
    """Register, change and inspect the replicas of a stream."""


def _link(f: click.decorators.FC) -> click.decorators.FC:
    f = opt("replica", metavar="PATH", help="Replica stream path.")(f)
    return opt("path", metavar="PATH", help="Source stream path.")(f)


@replica.command("add", context_settings=CONTEXT_SETTINGS)
@_link
@opt("paused", type=BOOL, default=False, help="Register the replica paused (default false).")
@opt("throttle", type=BOOL, default=False, help="Cap the replication rate of this link (default false).")
@opt(
    "synchronous",
    type=BOOL,
    default=False,
    help="Acknowledge records only once they are in this replica (default false). Honoured by streamrepl's own"
    " producer (produce, StreamProducer) and by any Kafka producer that writes through 'streamrepl proxy start'"
    " (acks 1 or all; a transactional producer's records are not waited for); it falls back to asynchronous,"
    " with a warning, when the replica does not keep up within its timeout, and returns once it has caught up.",
)
@opt("networkencryption", type=BOOL, default=False, help="Require TLS to both clusters (default false).")
@opt(
    "networkcompression",
    type=COMPRESSIONS,
    metavar="off|lz4|zlib|snappy|zstd",
    help="Recorded with the link; what crosses it is compressed as the source stream stores it (stream -compression).",
)
@handles_errors
def add_cmd(path: str, replica: str, **kw: object) -> None:
    """Register an existing stream as a replica of this stream (needs adminperm)."""
    from .. import replicas

    replicas.add(app().registry, require(path, "path"), require(replica, "replica"), **kw)  # type: ignore[arg-type]
    output([])


@replica.command("edit", context_settings=CONTEXT_SETTINGS)
@_link
@opt("newreplica", metavar="PATH", help="A new replica stream to replicate to instead.")
@opt("throttle", type=BOOL, help="Cap the replication rate of this link.")
@opt(
    "synchronous",
    type=BOOL,
    help="Acknowledge records only once they are in this replica. Honoured by streamrepl's own"
    " producer (produce, StreamProducer) and by any Kafka producer that writes through 'streamrepl proxy start'"
    " (acks 1 or all; a transactional producer's records are not waited for); it falls back to asynchronous,"
    " with a warning, when the replica does not keep up within its timeout, and returns once it has caught up.",
)
@opt("networkencryption", type=BOOL, help="Require TLS to both clusters.")
@opt(
    "networkcompression",
    type=COMPRESSIONS,
    metavar="off|lz4|zlib|snappy|zstd",
    help="Recorded with the link; what crosses it is compressed as the source stream stores it (stream -compression).",
)
@handles_errors
def edit_cmd(path: str, replica: str, **kw: object) -> None:
    """Change how messages are replicated to a replica (needs adminperm)."""
    from .. import replicas

    replicas.edit(app().registry, require(path, "path"), require(replica, "replica"), **kw)  # type: ignore[arg-type]
    output([])


@replica.command("remove", context_settings=CONTEXT_SETTINGS)
@_link
@handles_errors
def remove_cmd(path: str, replica: str) -> None:
    """Unregister a replica; the replica stream itself stays (needs adminperm)."""
    from .. import replicas

    replicas.remove(app().registry, require(path, "path"), require(replica, "replica"))
    output([])


@replica.command("pause", context_settings=CONTEXT_SETTINGS)
@_link
@handles_errors
def pause_cmd(path: str, replica: str) -> None:
    """Pause replication to a replica."""
    from .. import replicas

    replicas.set_paused(app().registry, require(path, "path"), require(replica, "replica"), True)
    output([])


@replica.command("resume", context_settings=CONTEXT_SETTINGS)
@_link
@handles_errors
def resume_cmd(path: str, replica: str) -> None:
    """Resume replication to a replica from where it stopped.

    A link in ERROR that is not paused is not restarted by resume: the command says why it is in
    ERROR (see docs/operations.md, "A link in ERROR").
    """
    from .. import replicas
    from ..errors import StreamreplError
    from ..streams import resolve

    reg = app().registry
    target = str(resolve(reg, require(replica, "replica")).path)
    try:
        paused, error = replicas.link_error(reg, require(path, "path"), target)
    except StreamreplError:  # the link's state cannot be read now (a cluster down): resume all the same
        paused, error = True, None
    replicas.set_paused(reg, path, replica, False)
    if not paused and error is not None:
        raise StreamreplError(
            f"replica {target} was not paused: its link is in ERROR ({error}); resume restarts only a"
            " paused link: deal with the cause first (see docs/operations.md, 'A link in ERROR')"
        )
    output([])


def _lag_seconds(row: dict[str, Any]) -> int:
    """How old the oldest record not yet replicated is, in seconds (0: nothing pending)."""
    import time

    oldest = row.get("minPendingTS") or 0
    return max(int(time.time() - oldest / 1000), 0) if row.get("putsPending") and oldest else 0


REPLICA_LIST = Listing(
    fields=(
        "cluster",
        "stream",
        "type",
        "replicaPath",
        "replicaState",
        "paused",
        "throttle",
        "idx",
        "networkencryption",
        "synchronous",
        "networkcompression",
        "uuid",
        "isUptodate",
        "putsPending",
        "bytesPending",
        "minPendingTS",
        "maxPendingTS",
        "lasterror",
        "errorPartitions",
        "syncFallback",
    ),
    default=("replicaPath", "replicaState", "isUptodate", "putsPending", "lagSeconds", "lasterror"),
    cut=("lasterror",),
    keep=("replicaPath", "replicaState"),
    middle=("replicaPath",),
    labels={
        "replicaPath": "replica",
        "replicaState": "state",
        "isUptodate": "uptodate",
        "putsPending": "pending",
        "lagSeconds": "lagsec",
        "lasterror": "error",
    },
    show={"replicaState": lambda v: str(v).removeprefix("REPLICA_STATE_")},
    derived={"lagSeconds": _lag_seconds},
)


@replica.command("list", context_settings=CONTEXT_SETTINGS)
@opt("path", metavar="PATH", help="Source stream path.")
@opt("refreshnow", type=BOOL, default=False, help="Accepted for maprcli scripts; figures are always live.")
@handles_errors
@listing(REPLICA_LIST)
def list_cmd(path: str, refreshnow: bool) -> None:
    """List the replicas of a stream, their state and pending work.

    On a terminal: the replica's path, its state (without REPLICA_STATE_), whether it is up to date, the records
    pending, lagSeconds (the age in seconds of the oldest of them) and the last error, cut to fit, under shorter
    headers (replica, state, uptodate, pending, lagsec, error); -columns chooses others, by field or header.
    """
    from .. import replicas

    output(replicas.list_replicas(app().registry, require(path, "path"), refreshnow))


@click.group(context_settings=CONTEXT_SETTINGS)
def upstream() -> None:
    """Declare which streams may replicate into a stream."""


def _up(f: click.decorators.FC) -> click.decorators.FC:
    f = opt("upstream", metavar="PATH", help="Upstream (source) stream path.")(f)
    return opt("path", metavar="PATH", help="Stream path (the replica).")(f)


@upstream.command("add", context_settings=CONTEXT_SETTINGS)
@_up
@handles_errors
def upstream_add_cmd(path: str, upstream: str) -> None:
    """Accept a stream as an upstream source of this stream (needs adminperm)."""
    from .. import replicas

    replicas.upstream_add(app().registry, require(path, "path"), require(upstream, "upstream"))
    output([])


@upstream.command("remove", context_settings=CONTEXT_SETTINGS)
@_up
@handles_errors
def upstream_remove_cmd(path: str, upstream: str) -> None:
    """Stop accepting a stream as an upstream source (needs adminperm)."""
    from .. import replicas

    replicas.upstream_remove(app().registry, require(path, "path"), require(upstream, "upstream"))
    output([])


@upstream.command("list", context_settings=CONTEXT_SETTINGS)
@opt("path", metavar="PATH", help="Stream path.")
@handles_errors
def upstream_list_cmd(path: str) -> None:
    """List the streams that replicate into this stream."""
    from .. import replicas

    output(replicas.upstream_list(app().registry, require(path, "path")))


@replica.command("autosetup", context_settings=CONTEXT_SETTINGS)
@_link
@opt("multimaster", type=BOOL, default=False, help="Also replicate back from the replica (default false).")
@opt(
    "synchronous",
    type=BOOL,
    default=False,
    help="Acknowledge records only once they are in this replica. Honoured by streamrepl's own"
    " producer (produce, StreamProducer) and by any Kafka producer that writes through 'streamrepl proxy start'"
    " (acks 1 or all; a transactional producer's records are not waited for); it falls back to asynchronous,"
    " with a warning, when the replica does not keep up within its timeout, and returns once it has caught up.",
)
@opt("throttle", type=BOOL, default=False, help="Cap the replication rate of the link(s).")
@opt("networkencryption", type=BOOL, default=False, help="Require TLS to both clusters.")
@opt(
    "networkcompression",
    type=COMPRESSIONS,
    metavar="off|lz4|zlib|snappy|zstd",
    help="Recorded with the link; what crosses it is compressed as the source stream stores it (stream -compression).",
)
@opt(
    "directcopy",
    type=BOOL,
    default=True,
    help="Copy existing data now (true, default; in this process or on Spark, see -mapreduce) or leave it to the"
    " gateways (false).",
)
@opt("useexistingreplica", type=BOOL, default=False, help="Use the replica stream if it exists (default false).")
@opt("master", metavar="URL", help="Run the initial copy on this Spark master (default: see -mapreduce).")
@opt(
    "mapreduce",
    type=BOOL,
    help="Run the initial copy on Spark (true) or in this process (false); default: in this process when it is small.",
)
@handles_errors
def autosetup_cmd(path: str, replica: str, **kw: Any) -> None:
    """Create the replica, copy the existing data and start replication, in one step."""
    import sys

    from ..autosetup import autosetup

    def say(text: str) -> None:
        print(f"autosetup: {text}", file=sys.stderr)

    with sigterm_interrupts():
        row = autosetup(
            app().registry,
            require(path, "path"),
            require(replica, "replica"),  # type: ignore[arg-type]
            say=say if sys.stderr.isatty() else (lambda _: None),
            **kw,
        )
    output([row])


def _say_to_stderr(command: str) -> Any:
    import sys

    return lambda text: print(f"{command}: {text}", file=sys.stderr)


@replica.command("promote", context_settings=CONTEXT_SETTINGS)
@opt("path", metavar="PATH", help="The replica stream to make the writable primary.")
@opt("dryrun", type=BOOL, default=False, help="Only print what would be done (default false).")
@opt(
    "consistent",
    type=BOOL,
    default=None,
    help="One cut for the whole stream at the latest timestamp every partition allows; records past it are set"
    " aside into <path>.aside-<yyyymmddHHMM> and cursors past it moved back (default false: each partition keeps"
    " what it got; a rerun of an interrupted promote follows its first run).",
)
@handles_errors
def promote_cmd(path: str, dryrun: bool, consistent: bool | None) -> None:
    """Make a replica the writable primary after its source is lost: remove its upstreams (only on its own
    cluster) and wait until no gateway writes into it (needs adminperm)."""
    with sigterm_interrupts():  # its journal says what was done: a rerun completes it (set before the import: slow)
        try:
            from .. import promote
        except KeyboardInterrupt:
            raise KeyboardInterrupt(f"promote of {path} stopped before it began; nothing was changed") from None
        rows = promote.promote(
            app().registry,
            require(path, "path"),
            dryrun=dryrun,
            consistent=consistent,
            say=_say_to_stderr("promote"),
        )
    output(rows)


@replica.command("failback", context_settings=CONTEXT_SETTINGS)
@opt("path", metavar="PATH", help="The new primary (a promoted replica).")
@opt("replica", metavar="PATH", help="The old primary, to become a replica of -path.")
@opt("dryrun", type=BOOL, default=False, help="Only print the plan per partition (default false).")
@opt("master", metavar="URL", help="Run the copies on this Spark master (default: small copies in this process).")
@handles_errors
def failback_cmd(path: str, replica: str, dryrun: bool, master: str | None) -> None:
    """Make the old primary a replica of the new one: set its whole history aside into
    <old path>.aside-<yyyymmddHHMM>, then re-create it empty, copy and replicate (needs adminperm on both)."""
    from .. import failback

    say = _say_to_stderr("failback")
    with sigterm_interrupts():  # it rolls back, or its journal says what is left for a rerun
        rows = failback.failback(
            app().registry, require(path, "path"), require(replica, "replica"), dryrun=dryrun, master=master, say=say
        )
    output(rows)


@replica.command("resync", context_settings=CONTEXT_SETTINGS)
@_link
@opt("topic", metavar="TOPIC", help="Rebuild this topic (default: every topic with a diverged partition).")
@opt("dryrun", type=BOOL, default=False, help="Only print the plan per partition (default false).")
@opt("master", metavar="URL", help="Spark master for the copy set aside (default local[*]).")
@handles_errors
def resync_cmd(path: str, replica: str, topic: str | None, dryrun: bool, master: str | None) -> None:
    """Rebuild a replica's diverged topics from the source: pause the link, set the replica's records aside into
    <replica>.aside-<yyyymmddHHMM>, re-create the topics empty and resume (needs adminperm on the replica)."""
    from .. import resync

    say = _say_to_stderr("resync")
    with sigterm_interrupts():  # it rolls back, or its journal says what is left for a rerun
        rows = resync.resync(
            app().registry, require(path, "path"), replica, topic=topic, dryrun=dryrun, master=master, say=say
        )
    output(rows)
