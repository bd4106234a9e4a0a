"""`streamrepl produce` and `streamrepl consume`: the operator's kcat for streams."""

from __future__ import annotations

import errno
import math
import sys
import time
from typing import TYPE_CHECKING, Any

import click

from ..cli import CONTEXT_SETTINGS
from ..errors import InvalidArgument, NotFound, StreamreplError
from ..paths import split_topic
from ..records import MAX_PARTITION, MAX_TIMESTAMP, arg_bytes, header_pairs, json_record, record_json, record_line
from .common import Words, app, handles_errors, opt, output, require

if TYPE_CHECKING:
    from ..client import Delivery
    from ..registry import Registry

#: How long `consume -timeout` waits at most for a consumer group to hand out partitions.
JOIN_WAIT = 30.0


#: Kafka offsets are 64-bit signed too.
MAX_OFFSET = 2**63 - 1


def _split_path(path: str) -> tuple[str, str | None]:
    return split_topic(require(path, "path"))


def _check_seconds(value: float | None, option: str, above_zero: bool = False) -> None:
    if value is None:
        return
    if not math.isfinite(value) or value < 0 or (above_zero and value == 0):
        raise InvalidArgument(
            f"-{option} {value:g} must be a number of seconds, {'above 0' if above_zero else '0 or more'}"
        )


def _check_partition(value: int | None) -> None:
    if value is not None and value < 0:
        raise InvalidArgument(f"-partition {value} is negative; partitions are numbered from 0")
    if value is not None and value > MAX_PARTITION:
        raise InvalidArgument(f"-partition {value} is too large: partition numbers go up to {MAX_PARTITION}")


def _written(results: list[Delivery]) -> str:
    """`2 records before it were written (partition 0: offsets 0-1)`, for an error that stopped produce."""
    done = [d for d in results if d.error is None]
    if not done:
        return "nothing was written"
    spans = []
    for part in sorted({d.partition for d in done}):
        offs = [d.offset for d in done if d.partition == part]
        lo, hi = min(offs), max(offs)
        spans.append(f"partition {part}: offset {lo}" if lo == hi else f"partition {part}: offsets {lo}-{hi}")
    n = len(done)
    return f"{n} record{'s' if n > 1 else ''} before it {'were' if n > 1 else 'was'} written ({', '.join(spans)})"


@click.command("produce", context_settings=CONTEXT_SETTINGS)
@opt("path", metavar="STREAM:TOPIC", help="Topic to write: <stream path>:<topic>.")
@opt("key", metavar="KEY", help="Key of every record (lines format).")
@opt("partition", type=int, metavar="N", help="Partition of every record (default: by key, else spread).")
@opt("header", metavar="K=V", multiple=True, help="Header of every record; repeat for more.")
@opt(
    "format",
    "fmt",
    type=click.Choice(["lines", "json"]),
    default="lines",
    show_default=True,
    help="lines: each line is a value; json: each line is {key, value, headers, partition, timestamp}.",
)
@opt(
    "timeout",
    type=float,
    default=30.0,
    show_default=True,
    metavar="S",
    help="Seconds to wait for the acknowledgement of the last records.",
)
@handles_errors
def produce(
    path: str, key: str | None, partition: int | None, header: tuple[str, ...], fmt: str, timeout: float
) -> None:
    """Write records read from stdin to a stream topic.

    Prints one row per partition written (records, first and last offset); with -json, one
    entry per record with its partition and offset. Records are acknowledged only once they
    are on every synchronous replica of the stream (unless replication falls back to
    asynchronous, which is reported on stderr). A line that cannot be written (not JSON, a lone
    surrogate, too large) stops reading there: the lines before it are written, and the error names
    the line and says how many records were.

    With -format json a string is written as its text; any other value (a number, an object, a list,
    true/false) as its JSON text exactly as the line gives it (1.10 stays 1.10, spaces and key order
    stay). A key given twice in a line, and a number no 64-bit float holds (1e400; NaN and Infinity
    are not JSON), are refused with the line's number.

    \b
    printf 'a\\nb\\n' | streamrepl produce -path /sanfrancisco/activity:clicks -key user-1
    echo '{"key":"k","value":"v","headers":{"h":"1"}}' | streamrepl produce -path /s:t -format json
    """
    from ..client import StreamProducer
    from ..kafka import KafkaException, describe_exception

    stream, topic = _split_path(path)
    if not topic:
        raise InvalidArgument(f"-path {path} names no topic; write it as <stream path>:<topic>")
    _check_partition(partition)
    _check_seconds(timeout, "timeout")
    if fmt == "json" and key is not None:
        raise InvalidArgument("-key is for -format lines; with -format json give each record its key in 'key'")
    base_headers = header_pairs(header)
    key_bytes = arg_bytes(key) if key is not None else None
    results: list[Delivery] = []
    errors: list[str] = []

    def done(err: Any, d: Delivery) -> None:
        if err is not None:
            errors.append(err.str())
        results.append(d)

    p = StreamProducer(f"{stream}:{topic}", app().registry)
    for replica in p.paused_synchronous:
        sys.stderr.write(
            f"warning: replica {replica} is synchronous but paused: records are acknowledged without waiting for it\n"
        )
    count = 0
    # Records are written as they are read (stdin need not end), so a bad line cannot take back the
    # lines before it: reading stops there, and the error says what was written.
    stopped: StreamreplError | None = None
    try:
        for n, raw in enumerate(sys.stdin.buffer, start=1):
            line = raw[:-1] if raw.endswith(b"\n") else raw
            if fmt == "json" and not line.strip():
                continue
            try:
                if fmt == "lines":
                    p.produce(topic, line, key=key_bytes, headers=base_headers, partition=partition, on_delivery=done)
                else:
                    p.produce(topic, **json_record(line, n, base_headers, partition), on_delivery=done)
            except StreamreplError as e:
                stopped = StreamreplError(_at_line(e.message, n), e.code)
                break
            except KafkaException as e:
                stopped = StreamreplError(_at_line(e.args[0].str() if e.args else str(e), n), errno.EIO)
                break
            except Exception as e:  # noqa: BLE001 - whatever stops a line, the error says what was written before it
                code, message = describe_exception(e, app().registry_secrets_safe())
                stopped = StreamreplError(_at_line(message, n), code)
                break
            count += 1
            if count % 10000 == 0:
                p.poll(0)
        left = p.flush(timeout)
    finally:
        p.close(timeout)
    if p.stats["fallbacks"]:
        sys.stderr.write(f"warning: synchronous replication fell back to asynchronous {p.stats['fallbacks']} time(s)\n")
    if errors or left:
        why = errors[0] if errors else f"{left} records were not acknowledged within {timeout:g} s"
        after = f"; reading stopped at {stopped.message}" if stopped else ""
        raise StreamreplError(f"{len(errors) + left} of {count} records were not written: {why}{after}")
    if stopped is not None:
        if results and not app().mode.json:
            _summary(topic, results)
        raise StreamreplError(f"{stopped.message}; {_written(results)}", stopped.code)
    if app().mode.json:
        output(
            [
                {"topic": d.topic, "partition": d.partition, "offset": d.offset, "synchronous": d.synchronous}
                for d in results
            ]
        )
        return
    _summary(topic, results)


def _at_line(message: str, n: int) -> str:
    return message if message.startswith(f"line {n}") else f"line {n}: {message}"


def _summary(topic: str, results: list[Delivery]) -> None:
    """One row per partition written: how many records, first and last offset."""
    rows: dict[int, dict[str, Any]] = {}
    for d in results:
        row = rows.setdefault(
            d.partition, {"topic": topic, "partition": d.partition, "records": 0, "firstoffset": d.offset}
        )
        row["records"] += 1
        row["firstoffset"] = min(row["firstoffset"], d.offset)
        row["lastoffset"] = max(row.get("lastoffset", -1), d.offset)
    output([rows[k] for k in sorted(rows)], ["topic", "partition", "records", "firstoffset", "lastoffset"])


@click.command("consume", context_settings=CONTEXT_SETTINGS)
@opt("path", metavar="STREAM[:TOPIC]", help="What to read: <stream path>:<topic>, or a whole stream.")
@opt("group", metavar="GROUP", help="Consumer group; its committed offsets are where reading starts and are updated.")
@opt(
    "failover",
    metavar="STREAM",
    multiple=True,
    help="A copy of the stream to continue on when the first fails; repeat for more.",
)
@opt(
    "offset",
    type=Words("earliest", "latest", closed=False),
    metavar="earliest|latest|N",
    help="Start here instead of at the group's committed offsets (N<0: from the end).",
)
@opt("timestamp", type=int, metavar="MS", help="Start at the first record at or after this time (ms since the epoch).")
@opt("partition", type=int, multiple=True, metavar="N", help="Only this partition; repeat for more.")
@opt("count", type=int, metavar="N", help="Stop after N records.")
@opt(
    "timeout", type=float, metavar="S", help="Stop when no record came for S seconds (default: run until interrupted)."
)
@opt(
    "failoverafter",
    type=float,
    default=10.0,
    show_default=True,
    metavar="S",
    help="Seconds a copy may be silent before switching to the next.",
)
@handles_errors
def consume(
    path: str,
    group: str | None,
    failover: tuple[str, ...],
    offset: str | None,
    timestamp: int | None,
    partition: tuple[int, ...],
    count: int | None,
    timeout: float | None,
    failoverafter: float,
) -> None:
    """Print the records of a stream topic, one per line, committing as it goes when -group is given.

    Lines are tab-separated: topic, partition, offset, timestamp, key, value, headers (k=v,...),
    with backslashes, tabs, newlines and other control characters escaped (\\\\, \\t, \\n, \\xNN) and bytes
    that are not UTF-8 as \\xNN; with -json each line is a JSON object with
    topic, partition, offset, timestamp, key, value, headers (and stream, the copy read).

    \b
    streamrepl consume -path /sanfrancisco/activity:clicks -group billing -failover /newyork/activity
    streamrepl consume -path /sanfrancisco/activity:clicks -offset -10 -count 10 -json
    """
    from ..client import StreamConsumer
    from ..kafka import INTERNAL_GROUP_PREFIX  # imports confluent_kafka: not for --help

    stream, topic = _split_path(path)
    if count is not None and count < 0:
        raise InvalidArgument(f"-count {count} is negative")
    if group is not None and not group:
        raise InvalidArgument("-group is empty; name a consumer group, or leave -group out to read without one")
    if group is not None and group.startswith(INTERNAL_GROUP_PREFIX):
        # Joining a gateway's group would take partitions from the gateways and leave them unreplicated.
        raise InvalidArgument(
            f"-group '{group}': names starting with '{INTERNAL_GROUP_PREFIX}' are streamrepl's own groups"
            " (gateways, readers); pick another name"
        )
    if timestamp is not None and timestamp < 0:
        raise InvalidArgument(f"-timestamp {timestamp} is negative; give milliseconds since the epoch")
    if timestamp is not None and timestamp > MAX_TIMESTAMP:
        raise InvalidArgument(
            f"-timestamp {timestamp} is too large: timestamps are milliseconds since the epoch, up to {MAX_TIMESTAMP}"
        )
    for n in partition:
        _check_partition(n)
    _check_seconds(timeout, "timeout")
    _check_seconds(failoverafter, "failoverafter", above_zero=True)
    if offset is not None and offset not in ("earliest", "latest"):
        try:
            n = int(offset)
        except ValueError:
            raise InvalidArgument(f"-offset '{offset}' must be earliest, latest or an offset number") from None
        if abs(n) > MAX_OFFSET:
            raise InvalidArgument(f"-offset {offset} is too large: offsets go up to {MAX_OFFSET}")
    if offset is not None and timestamp is not None:
        raise InvalidArgument("give -offset or -timestamp, not both")
    _check_failover(app().registry, stream, failover)
    copies = [f"{stream}:{topic}" if topic else stream] + [f"{f}:{topic}" if topic else f for f in failover]
    as_json = app().mode.json
    c = StreamConsumer(
        copies,
        group,
        [topic] if topic else None,
        app().registry,
        partitions=list(partition) or None,
        start=offset,
        start_timestamp=timestamp,
        failover_after=failoverafter,
    )
    out = sys.stdout
    seen = 0
    started = last = time.monotonic()
    try:
        while count is None or seen < count:
            try:
                recs = c.consume(min(500, count - seen) if count is not None else 500, timeout=0.5)
            except KeyboardInterrupt:
                break
            if not recs:
                now = time.monotonic()
                if not c.ready and now - started < JOIN_WAIT:
                    last = now  # -timeout counts from when the consumer has its partitions
                if timeout is not None and now - last >= timeout:
                    break
                continue
            last = time.monotonic()
            for r in recs:
                out.write((record_json(r) if as_json else record_line(r)) + "\n")
            out.flush()
            seen += len(recs)
            if group:
                c.commit()
    finally:
        c.close()


def _check_failover(reg: Registry, stream: str, failover: tuple[str, ...]) -> None:
    """Each -failover names another stream, and one that exists where its cluster answers (a copy on a
    cluster that is down now is checked when the consumer gets to it)."""
    from .. import kafka
    from ..streams import load, resolve

    seen = {str(resolve(reg, stream).path): "the stream being read"}
    for text in failover:
        r = resolve(reg, text)
        if str(r.path) in seen:
            raise InvalidArgument(f"-failover {text} is {seen[str(r.path)]}; name another copy of it")
        seen[str(r.path)] = "given twice"
        if kafka.ping(r.cluster, timeout=2.0):
            try:
                load(reg, text)
            except NotFound as e:
                raise NotFound(f"-failover {text}: {e.message}") from None
