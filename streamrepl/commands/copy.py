"""`streamrepl copystream` and `streamrepl diffstreams`: the bulk jobs, in this process when small, else on Spark."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from ..cli import CONTEXT_SETTINGS
from ..errors import InvalidArgument
from ..output import envelope
from .common import BOOL, app, handles_errors, opt, output, require, sigterm_interrupts

#: maprcli's "input/output error", for partitions not copied and streams that differ.
EIO = 5


def parse_sparkconf(pairs: tuple[str, ...]) -> dict[str, str]:
    conf: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise InvalidArgument(f"-sparkconf '{pair}' is not KEY=VALUE; e.g. -sparkconf spark.executor.memory=2g")
        conf[key.strip()] = value
    return conf


def _spark_options(f: Any) -> Any:
    f = opt(
        "mapreduce",
        type=BOOL,
        help="Run on Spark (true) or in threads of this process (false). Default: in this process when the job is"
        " small (the line printed says which and why), on Spark when it is large or -master is given.",
    )(f)
    f = opt(
        "sparkconf",
        metavar="KEY=VALUE",
        multiple=True,
        help="A Spark setting (repeatable), e.g. -sparkconf spark.executor.memory=2g.",
    )(f)
    f = opt(
        "master", metavar="URL", help="Run on this Spark master (default local[*]), e.g. spark://host:7077 or yarn."
    )(f)
    return opt(
        "numthreads",
        type=int,
        help="Parallel tasks: threads in this process, local[N] on Spark; with -master, at most N cores of the"
        " cluster.",
    )(f)


def _fail(command: str, row: list[dict[str, Any]], problems: list[str]) -> None:
    """Report partial failure: one envelope in -json mode, else one ERROR line per problem; exit 1."""
    if app().mode.json:
        doc = envelope(row)
        doc["status"] = "ERROR"
        doc["errors"] = [{"id": EIO, "desc": f"{command}: {p}"} for p in problems]
        sys.stdout.write(json.dumps(doc, indent=1, default=str) + "\n")
    else:
        for p in problems:
            sys.stderr.write(f"ERROR ({EIO}) - {command}: {p}\n")
    sys.exit(1)


@click.command("copystream", context_settings=CONTEXT_SETTINGS)
@opt("src", metavar="PATH", help="The stream to copy messages from: /<cluster>/<path>.")
@opt("dst", metavar="PATH", help="The stream to copy into; created from the source's metadata if missing.")
@_spark_options
@handles_errors
def copystream(
    src: str, dst: str, numthreads: int | None, master: str | None, sparkconf: tuple[str, ...], mapreduce: bool | None
) -> None:
    """Copy every topic of a stream into another stream, offsets preserved.

    \b
    A destination that does not exist is created with the source's metadata; into one that
    exists only data is copied. Each partition continues where its copy ends, so running
    the command again copies only what is new; two runs on one destination at once are
    refused. Progress shows on a terminal; a one-line summary ends the run. The exit status
    is 0 only when every partition was copied up to the source's end at the start. A small
    copy runs in threads of this process, a large one (or one given -master) on Spark.

    \b
    streamrepl copystream -src /sanfrancisco/activity -dst /newyork/activity
    streamrepl copystream -src /sf/a -dst /ny/a -master spark://spark1:7077 -sparkconf spark.executor.memory=2g
    """
    from ..bulk import copystream as job  # imports confluent_kafka: not for --help

    with sigterm_interrupts():
        res = job.copystream(
            app().registry,
            require(src, "src"),
            require(dst, "dst"),
            master=master,
            numthreads=numthreads,
            conf=parse_sparkconf(sparkconf),
            mapreduce=mapreduce,
        )
    if not app().mode.json:
        sys.stdout.write(res.summary() + "\n")
        sys.stdout.flush()
    if not res.complete:
        _fail("copystream", [res.row()], res.failures + res.stopped)
    if app().mode.json:
        output([res.row()])


@click.command("diffstreams", context_settings=CONTEXT_SETTINGS)
@opt("src", metavar="PATH", help="One stream.")
@opt("dst", metavar="PATH", help="The other stream (usually a replica or copy of -src).")
@opt("outdir", metavar="DIR", help="Also write the comparison to DIR/diffstreams.json.")
@opt(
    "first_exit",
    type=BOOL,
    is_flag=False,
    flag_value=True,
    default=False,
    metavar="[true|false]",
    help="Stop at the first difference found.",
)
@_spark_options
@handles_errors
def diffstreams(
    src: str,
    dst: str,
    outdir: str | None,
    first_exit: bool,
    numthreads: int | None,
    master: str | None,
    sparkconf: tuple[str, ...],
    mapreduce: bool | None,
) -> None:
    """Compare two streams partition by partition; exit 0 only when they match.

    \b
    For each topic partition: the record counts, the first offset where they differ (-1 when
    equal) and a digest of each side's records (offset, key, value, user headers, timestamp).
    Replication's own headers are ignored and a filler record matches a gap on the other side.

    \b
    streamrepl diffstreams -src /sanfrancisco/activity -dst /newyork/activity -outdir /tmp/diff
    """
    from ..bulk import diffstreams as job  # imports confluent_kafka: not for --help

    if outdir:
        job.check_outdir(outdir)  # before the job: its result would be lost
    with sigterm_interrupts():
        res = job.diffstreams(
            app().registry,
            require(src, "src"),
            require(dst, "dst"),
            first_exit=first_exit,
            master=master,
            numthreads=numthreads,
            conf=parse_sparkconf(sparkconf),
            mapreduce=mapreduce,
        )
    if outdir:
        job.write_outdir(outdir, res)
    columns = list(job.DIFF_COLUMNS) + [c for c in ("absent", "error") if any(c in r for r in res.rows)]
    if res.match:
        output(res.rows, columns)
        return
    problems = [r["error"] for r in res.rows if "error" in r]
    diff = res.first_difference()
    differing = sum(1 for r in res.rows if not r["match"] and "error" not in r)
    if differing and diff is not None:
        first = next(r for r in res.rows if not r["match"] and "error" not in r)
        where = (
            f"which {first['absent']} does not have"
            if "absent" in first
            else f"at offset {first['firstdiff']} ({first['srccount']} records vs {first['dstcount']})"
        )
        problems.insert(
            0,
            f"{res.src} and {res.dst} differ in {differing} of {len(res.rows)} partitions compared;"
            f" first: topic '{first['topic']}' partition {first['partition']} {where}",
        )
    if res.stopped_early:
        problems.append(f"stopped at the first difference: {res.partitions - len(res.rows)} partitions not compared")
    if not app().mode.json:
        output(res.rows, columns)
    _fail("diffstreams", res.rows, problems)
