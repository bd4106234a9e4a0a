"""`streamrepl produce` and `streamrepl consume`: the operator's kcat for streams."""

from __future__ import annotations

import base64
import errno
import json
import math
import sys
import time
from typing import TYPE_CHECKING, Any

import click

from ..cli import CONTEXT_SETTINGS
from ..errors import InvalidArgument, NotFound, StreamreplError
from ..output import escape_bytes, escape_text
from ..paths import split_topic
from .common import app, handles_errors, opt, output, require

if TYPE_CHECKING:
    from ..client import Delivery
    from ..registry import Registry

#: How long `consume -timeout` waits at most for a consumer group to hand out partitions.
JOIN_WAIT = 30.0


#: Kafka timestamps are 64-bit signed milliseconds.
MAX_TIMESTAMP = 2**63 - 1
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


#: Kafka partition numbers are 32-bit signed.
MAX_PARTITION = 2**31 - 1


def _check_partition(value: int | None) -> None:
    if value is not None and value < 0:
        raise InvalidArgument(f"-partition {value} is negative; partitions are numbered from 0")
    if value is not None and value > MAX_PARTITION:
        raise InvalidArgument(f"-partition {value} is too large: partition numbers go up to {MAX_PARTITION}")


def _header_pairs(items: tuple[str, ...]) -> list[tuple[str, bytes]]:
    out = []
    for h in items:
        k, sep, v = h.partition("=")
        if not sep or not k:
            raise InvalidArgument(f"-header '{h}' must be key=value")
        if not k.isprintable() or _undecodable(k):
            raise InvalidArgument(f"-header name {k!r} must be printable UTF-8 text (the value may be any bytes)")
        out.append((k, _arg_bytes(v)))
    return out


def _undecodable(text: str) -> bool:
    """True when `text` carries bytes the shell passed that are not UTF-8 (Python keeps them as surrogates)."""
    return any("\udc80" <= ch <= "\udcff" for ch in text)


def _arg_bytes(text: str) -> bytes:
    """The bytes a command-line argument was given as: `-key $'\\xff'` is the byte 0xff, not an error."""
    return text.encode("utf-8", "surrogateescape")


def _json_headers(value: Any, line: int) -> list[tuple[str, Any]]:
    if value is None:
        return []
    if isinstance(value, dict):
        pairs = list(value.items())
    elif isinstance(value, list) and all(isinstance(x, list | tuple) and len(x) == 2 for x in value):
        pairs = [(k, v) for k, v in value]
    else:
        raise InvalidArgument(f"line {line}: 'headers' must be an object or a list of [key, value] pairs")
    out = []
    for k, v in pairs:
        name = str(k)
        _json_text(name, line, "a header name")
        out.append((name, _json_bytes(v, line, f"header {_shown(name)}")))
    return out


def _shown(name: str) -> str:
    """A JSON field or header name for an error message: quoted, with lone surrogates as \\uXXXX."""
    return "'" + name.encode("utf-8", "backslashreplace").decode() + "'"


def _json_text(text: str, line: int, field: str) -> bytes:
    """`text` as UTF-8. JSON may carry a lone UTF-16 surrogate (`"\\ud800"`), which is no character and
    which UTF-8 cannot hold: refused here, naming the field (the Kafka client crashes on such a header name)."""
    try:
        return text.encode()
    except UnicodeEncodeError as e:
        raise InvalidArgument(
            f"line {line}: {field} holds a lone surrogate (\\u{ord(text[e.start]):04x}), which is not text and"
            " cannot be written as UTF-8; write the character as a surrogate pair (\\ud83d\\ude00) or as itself"
        ) from None


def _json_bytes(v: Any, line: int, field: str) -> bytes | None:
    if v is None:
        return None
    if isinstance(v, str):
        return _json_text(v, line, field)
    return json.dumps(v, separators=(",", ":")).encode()  # ASCII: a lone surrogate in it stays an escape


def _json_whole(obj: dict[str, Any], name: str, line: int, what: str, maximum: int) -> int | None:
    """A field that must be a whole number from 0 to `maximum` (JSON has no integers apart from floats)."""
    v = obj.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not (0 <= v <= maximum) or v != int(v):
        raise InvalidArgument(f"line {line}: '{name}' {json.dumps(v)} must be {what}")
    return int(v)


def _json_record(line: bytes, n: int, base_headers: list[tuple[str, bytes]], partition: int | None) -> dict[str, Any]:
    """The keyword arguments of StreamProducer.produce for one line of -format json."""
    try:
        return _json_fields(line, n, base_headers, partition)
    except RecursionError:  # Python's JSON reader and writer recurse once per level
        raise InvalidArgument(
            f"line {n} is nested deeper than the JSON reader follows (about {sys.getrecursionlimit()} levels);"
            " a value that deep is better sent as text"
        ) from None


def _json_fields(line: bytes, n: int, base_headers: list[tuple[str, bytes]], partition: int | None) -> dict[str, Any]:
    try:
        obj = json.loads(line)
    except ValueError as e:
        raise InvalidArgument(f"line {n} is not JSON ({e})") from None
    if not isinstance(obj, dict):
        raise InvalidArgument(f"line {n}: expected a JSON object with 'value' (and key, headers, ...)")
    unknown = set(obj) - {"key", "value", "headers", "partition", "timestamp"}
    if unknown:
        raise InvalidArgument(f"line {n}: unknown field {_shown(sorted(unknown)[0])}")
    k = obj.get("key")
    given = _json_whole(obj, "partition", n, "a partition number, 0 or more", MAX_PARTITION)
    return {
        "value": _json_bytes(obj.get("value"), n, "'value'"),
        "key": _json_bytes(k, n, "'key'") if k is not None else None,
        "headers": base_headers + _json_headers(obj.get("headers"), n),
        "partition": given if given is not None else partition,
        "timestamp": _json_whole(
            obj, "timestamp", n, f"milliseconds since the epoch, 0 to {MAX_TIMESTAMP}", MAX_TIMESTAMP
        ),
    }


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
    base_headers = _header_pairs(header)
    key_bytes = _arg_bytes(key) if key is not None else None
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
                    p.produce(topic, **_json_record(line, n, base_headers, partition), on_delivery=done)
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


def _text(b: bytes | None) -> str:
    return "" if b is None else escape_bytes(b)


def _json_field(b: bytes | None) -> tuple[Any, bool]:
    if b is None:
        return None, False
    try:
        return b.decode("utf-8"), False
    except UnicodeDecodeError:
        return base64.b64encode(b).decode(), True


def _record_json(r: Any) -> str:
    key, kb64 = _json_field(r.key)
    value, vb64 = _json_field(r.value)
    headers = {}
    for k, v in r.headers:
        hv, _ = _json_field(v)
        headers[k] = hv
    doc: dict[str, Any] = {
        "topic": r.topic,
        "partition": r.partition,
        "offset": r.offset,
        "timestamp": r.timestamp,
        "key": key,
        "value": value,
        "headers": headers,
    }
    if kb64 or vb64:
        doc["encoding"] = {"key": "base64" if kb64 else "utf-8", "value": "base64" if vb64 else "utf-8"}
    if r.stream:
        doc["stream"] = r.stream
    return json.dumps(doc, separators=(",", ":"))


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
                if as_json:
                    out.write(_record_json(r) + "\n")
                else:
                    hs = ",".join(f"{escape_text(k)}={_text(v)}" for k, v in r.headers)
                    out.write(
                        f"{r.topic}\t{r.partition}\t{r.offset}\t{r.timestamp}\t{_text(r.key)}\t{_text(r.value)}\t{hs}\n"
                    )
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
