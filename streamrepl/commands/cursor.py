"""`streamrepl stream cursor ...` and `streamrepl stream assign ...`."""

from __future__ import annotations

import click

from ..cli import CONTEXT_SETTINGS
from ..output import Listing
from .common import app, handles_errors, listing, opt, output, require


@click.group(context_settings=CONTEXT_SETTINGS)
def cursor() -> None:
    """List and delete the committed cursors of the consumer groups reading a stream."""


@click.group(context_settings=CONTEXT_SETTINGS)
def assign() -> None:
    """Show which consumers read which partitions of a stream."""


def _selectors(f: click.decorators.FC) -> click.decorators.FC:
    f = opt("partition", type=int, metavar="ID", help="Only this partition (needs -topic).")(f)
    f = opt("topic", metavar="NAME", help="Only this topic of the stream.")(f)
    f = opt("consumergroup", metavar="GROUP", help="Only this consumer group.")(f)
    return opt("path", metavar="PATH", help="Stream path.")(f)


_CURSOR_FIELDS = (  # cursors.operations.CURSOR_COLUMNS
    "consumergroup",
    "topic",
    "partitionid",
    "produceroffset",
    "committedoffset",
    "consumerlagmillis",
    "lag",
)
CURSOR_LIST = Listing(
    fields=_CURSOR_FIELDS,
    default=_CURSOR_FIELDS,
    cut=("consumergroup",),
    keep=("topic",),
    middle=("consumergroup",),
    labels={
        "consumergroup": "group",
        "partitionid": "partition",
        "produceroffset": "produced",
        "committedoffset": "committed",
        "consumerlagmillis": "lagms",
    },
)


@cursor.command("list", context_settings=CONTEXT_SETTINGS)
@_selectors
@handles_errors
@listing(CURSOR_LIST)
def cursor_list_cmd(path: str, consumergroup: str | None, topic: str | None, partition: int | None) -> None:
    """List committed cursors with the partition's last offset and the lag (records and milliseconds).

    \b
    produceroffset     offset of the last record in the partition (-1 when none)
    committedoffset    the group's committed offset (the next record it reads)
    consumerlagmillis  timestamp of the newest record minus that of the last record consumed
    lag                records between the committed offset and the end of the partition

    Every group is listed (names with control characters escaped, as `\\n`) except streamrepl's own,
    whose names start with `streamrepl-` (gateways, readers). On a terminal the headers are shorter (group,
    partition, produced, committed, lagms) and a long group name is cut in the middle to fit.
    """
    from ..cursors import operations

    rows = operations.list_cursors(app().registry, require(path, "path"), consumergroup, topic, partition)
    output(rows, operations.CURSOR_COLUMNS)


@cursor.command("delete", context_settings=CONTEXT_SETTINGS)
@_selectors
@handles_errors
def cursor_delete_cmd(path: str, consumergroup: str | None, topic: str | None, partition: int | None) -> None:
    """Delete committed cursors (needs adminperm or consumeperm).

    The groups concerned must have no active consumer. A group whose cursors are deleted
    starts reading those partitions from its auto.offset.reset position next time.
    """
    from ..cursors import operations

    operations.delete_cursors(app().registry, require(path, "path"), consumergroup, topic, partition)
    output([])


@assign.command("list", context_settings=CONTEXT_SETTINGS)
@_selectors
@opt("detail", is_flag=True, hidden=True, help="Accepted for maprcli compatibility.")
@handles_errors
def assign_list_cmd(
    path: str, consumergroup: str | None, topic: str | None, partition: int | None, detail: bool
) -> None:
    """List the members of consumer groups and the partitions of the stream each one reads.

    Brokers that do not report assignments (Tansu) show members with an empty topic and
    partition; they are listed when their group has committed cursors in the stream.
    """
    from ..cursors import operations

    rows = operations.list_assignments(app().registry, require(path, "path"), consumergroup, topic, partition)
    output(rows, operations.ASSIGN_COLUMNS)
