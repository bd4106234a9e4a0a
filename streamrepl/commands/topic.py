"""`streamrepl stream topic ...`."""

from __future__ import annotations

import click

from ..cli import CONTEXT_SETTINGS
from ..output import Listing
from .common import BOOL, TIMESTAMP_TYPES, app, handles_errors, listing, opt, output, require


@click.group(context_settings=CONTEXT_SETTINGS)
def topic() -> None:
    """Create, change and inspect the topics of a stream."""


def _target(f: click.decorators.FC) -> click.decorators.FC:
    f = opt("topic", metavar="NAME", help="Topic name (letters, digits, '.', '_', '-').")(f)
    return opt("path", metavar="PATH", help="Stream path.")(f)


@topic.command("create", context_settings=CONTEXT_SETTINGS)
@_target
@opt("partitions", type=int, help="Number of partitions (default: the stream's defaultpartitions).")
@opt(
    "timestamptype",
    type=TIMESTAMP_TYPES,
    metavar="createtime|logappendtime",
    help="Timestamp type (default: the stream's).",
)
@opt(
    "force",
    type=BOOL,
    default=False,
    help="Create it even when another upstream of one of the stream's replicas has a topic of that name (the"
    " replica would keep only the first one's records; default false: refused).",
)
@handles_errors
def create_cmd(path: str, topic: str, partitions: int | None, timestamptype: str | None, force: bool) -> None:
    """Create a topic in a stream (needs topicperm)."""
    import sys

    from .. import topics

    topics.create(
        app().registry,
        require(path, "path"),
        require(topic, "topic"),
        partitions,
        timestamptype,
        force=force,
        warn=lambda text: print(text, file=sys.stderr),
    )
    output([])


@topic.command("edit", context_settings=CONTEXT_SETTINGS)
@_target
@opt("partitions", type=int, help="New number of partitions (can only grow).")
@opt("timestamptype", type=TIMESTAMP_TYPES, metavar="createtime|logappendtime", help="Timestamp type.")
@handles_errors
def edit_cmd(path: str, topic: str, partitions: int | None, timestamptype: str | None) -> None:
    """Add partitions to a topic or change its timestamp type (needs topicperm)."""
    from .. import topics

    topics.edit(app().registry, require(path, "path"), require(topic, "topic"), partitions, timestamptype)
    output([])


@topic.command("delete", context_settings=CONTEXT_SETTINGS)
@_target
@handles_errors
def delete_cmd(path: str, topic: str) -> None:
    """Delete a topic and its messages (needs topicperm)."""
    from .. import topics

    topics.delete(app().registry, require(path, "path"), require(topic, "topic"))
    output([])


@topic.command("info", context_settings=CONTEXT_SETTINGS)
@_target
@handles_errors
def info_cmd(path: str, topic: str) -> None:
    """Show a topic, one row per partition."""
    from .. import topics

    output(topics.info(app().registry, require(path, "path"), require(topic, "topic")))


_TOPIC_FIELDS = ("topic", "partitions", "consumers", "maxlag", "timestamptype", "kafkatopic")  # topics.LIST_COLUMNS
TOPIC_LIST = Listing(
    fields=_TOPIC_FIELDS,
    default=("topic", "partitions", "consumers", "maxlag", "kafkatopic"),
    cut=("kafkatopic",),
    keep=("topic",),
    middle=("kafkatopic",),
)


@topic.command("list", context_settings=CONTEXT_SETTINGS)
@opt("path", metavar="PATH", help="Stream path.")
@handles_errors
@listing(TOPIC_LIST)
def list_cmd(path: str) -> None:
    """List the topics of a stream.

    On a terminal: topic, partitions, consumers, maxlag and kafkatopic (cut in the middle to fit); -columns
    chooses others (timestamptype).
    """
    from .. import topics

    rows = topics.list_topics(
        app().registry, require(path, "path"), warn=lambda m: click.echo(f"warning: {m}", err=True)
    )
    output(rows, None if rows else topics.LIST_COLUMNS)  # an empty list still has its header
