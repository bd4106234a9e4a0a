"""`streamrepl stream ...`: streams and, through sub-groups, their topics and replication."""

from __future__ import annotations

import click

from ..cli import CONTEXT_SETTINGS, LazyGroup
from ..output import Listing
from .common import BOOL, TIMESTAMP_TYPES, Words, app, handles_errors, listing, opt, output, require

SUBGROUPS = {
    "topic": "streamrepl.commands.topic:topic",
    "replica": "streamrepl.commands.replica:replica",
    "upstream": "streamrepl.commands.replica:upstream",
    "cursor": "streamrepl.commands.cursor:cursor",
    "assign": "streamrepl.commands.cursor:assign",
}

PERM_OPTIONS = ("produceperm", "consumeperm", "topicperm", "copyperm", "adminperm")


@click.group(cls=LazyGroup, lazy=SUBGROUPS, context_settings=CONTEXT_SETTINGS)
def stream() -> None:
    """Create, change and inspect streams, their topics and their replicas."""


def settings_options(f: click.decorators.FC) -> click.decorators.FC:
    for name in reversed(PERM_OPTIONS):
        f = opt(name, metavar="ACE", help=f"Access control expression for {name} (default u:<creator>).")(f)
    f = opt(
        "defaulttimestamptype", type=TIMESTAMP_TYPES, metavar="createtime|logappendtime", help="Default timestamp type."
    )(f)
    f = opt(
        "compression",
        type=Words("off", "lz4", "zlib", "snappy", "zstd", "inherit"),
        metavar="off|lz4|zlib|snappy|zstd",
        help="Compression of the stream's topics (inherit: the broker's default).",
    )(f)
    f = opt("defaultpartitions", type=int, help="Partitions of new topics (default 1).")(f)
    f = opt("autocreate", type=BOOL, help="Create topics when a producer first writes to them (default true).")(f)
    f = opt("ttl", type=int, help="Seconds before messages expire; 0 keeps them forever (default 604800).")(f)
    return f


FORCE_HELP = (
    "Set an -adminperm that does not pass you (you could no longer change or delete the stream; default false:"
    " refused)."
)


def _warn(text: str) -> None:
    import sys

    print(text, file=sys.stderr)


def compaction_options(f: click.decorators.FC) -> click.decorators.FC:
    f = opt("deleteretention", type=int, help="Milliseconds delete markers are kept.")(f)
    f = opt("mincompactionlag", type=int, help="Milliseconds a message stays uncompacted.")(f)
    return opt("compact", type=BOOL, help="Keep only the latest message per key.")(f)


@stream.command("create", context_settings=CONTEXT_SETTINGS)
@opt("path", metavar="PATH", help="Stream path: /<cluster>/<path>.")
@settings_options
@compaction_options
@opt("copymetafrom", metavar="PATH", help="Copy settings and ACEs from this stream.")
@opt("force", type=BOOL, default=False, help=FORCE_HELP)
@handles_errors
def create_cmd(path: str, copymetafrom: str | None, force: bool, **settings: object) -> None:
    """Create a stream."""
    from .. import stream_ops

    stream_ops.create(app().registry, require(path, "path"), settings, copymetafrom, force, _warn)
    output([])


@stream.command("edit", context_settings=CONTEXT_SETTINGS)
@opt("path", metavar="PATH", help="Stream path.")
@settings_options
@compaction_options
@opt("force", type=BOOL, default=False, help=FORCE_HELP)
@handles_errors
def edit_cmd(path: str, force: bool, **settings: object) -> None:
    """Change the settings or ACEs of a stream (needs adminperm)."""
    from .. import stream_ops

    stream_ops.edit(app().registry, require(path, "path"), settings, force, _warn)
    output([])


@stream.command("delete", context_settings=CONTEXT_SETTINGS)
@opt("path", metavar="PATH", help="Stream path.")
@handles_errors
def delete_cmd(path: str) -> None:
    """Delete a stream, its topics and their messages (needs adminperm)."""
    from .. import stream_ops

    stream_ops.delete(app().registry, require(path, "path"))
    output([])


@stream.command("info", context_settings=CONTEXT_SETTINGS)
@opt("path", metavar="PATH", help="Stream path.")
@handles_errors
def info_cmd(path: str) -> None:
    """Show the settings of a stream."""
    from .. import streams

    output([streams.info(app().registry, require(path, "path"))])


STREAM_LIST = Listing(
    # streams.INFO_COLUMNS, then the permissions (streams.PERMS) shown to whoever has adminperm
    fields=(
        "path",
        "cluster",
        "uuid",
        "numtopics",
        "defaultpartitions",
        "ttl",
        "compression",
        "autocreate",
        "defaulttimestamptype",
        "compact",
        "numreplicas",
        "numupstreams",
        "creator",
        "created",
        "produceperm",
        "consumeperm",
        "topicperm",
        "copyperm",
        "adminperm",
    ),
    default=("path", "numtopics", "defaultpartitions", "numreplicas", "numupstreams"),
    keep=("path",),
    middle=("path",),
    labels={
        "numtopics": "topics",
        "defaultpartitions": "partitions",
        "numreplicas": "replicas",
        "numupstreams": "upstreams",
    },
)


@stream.command("list", context_settings=CONTEXT_SETTINGS)
@opt("cluster", metavar="NAME", help="Only this cluster (default: every cluster in the registry).")
@handles_errors
@listing(STREAM_LIST)
def list_cmd(cluster: str | None) -> None:
    """List the streams of one or every cluster.

    On a terminal: path, topics, default partitions, replicas and upstreams; -columns chooses others
    (compression, ttl, creator, uuid, the permissions, ...).
    """
    from .. import streams

    rows = streams.list_streams(app().registry, cluster)
    output(rows, None if rows else streams.INFO_COLUMNS)  # an empty list still has its header
