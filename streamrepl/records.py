"""The record codec of `produce` and `consume`: JSON lines in, JSON or tab-separated lines out.

A line of `produce -format json` is an object with `value` and optionally `key`, `headers` (an object, or a list of
[name, value] pairs), `partition` and `timestamp`. A string is written as its text (UTF-8); any other JSON value
(a number, an object, a list, true, false) as the user's own text of it, byte for byte: `1.10` stays `1.10`, spaces
and key order stay. A line that JSON reads two ways is refused, with its line number: a key given twice (JSON keeps
the last) and a number no 64-bit float holds (`1e400`; NaN and Infinity are not JSON).
"""

from __future__ import annotations

import base64
import json
import math
import re
import sys
from typing import TYPE_CHECKING, Any

from .errors import InvalidArgument
from .output import escape_bytes, escape_text

if TYPE_CHECKING:
    from .client.consumer import StreamRecord

#: Kafka timestamps are 64-bit signed milliseconds.
MAX_TIMESTAMP = 2**63 - 1
#: Kafka partition numbers are 32-bit signed.
MAX_PARTITION = 2**31 - 1
FIELDS = ("key", "value", "headers", "partition", "timestamp")


class _Refused(ValueError):
    """A line that is JSON, but that JSON reads in more than one way."""


def _no_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _Refused(f"key {shown(key)} is given twice in one object (JSON would keep the last); keep one")
        seen.add(key)
    return dict(pairs)


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise _Refused(f"the number {text} is beyond what a 64-bit float holds; write it as a string")
    return number


def _not_a_number(text: str) -> float:
    raise _Refused(f"{text} is not a JSON number; write it as a string")


_DECODER = json.JSONDecoder(object_pairs_hook=_no_repeated_keys, parse_float=_finite, parse_constant=_not_a_number)
_SPACE = re.compile(r"[ \t\n\r]*")


def _spans(text: str, at: int, close: str) -> list[tuple[str | None, Any, str]]:
    """The members (close `}`) or elements (close `]`) of the object or array opening at text[at], each as (name or
    None, value, the text of the value). The text has been read by _DECODER whole, so it is valid JSON."""
    out: list[tuple[str | None, Any, str]] = []
    at = _SPACE.match(text, at + 1).end()  # type: ignore[union-attr]
    while text[at] != close:
        name = None
        if close == "}":
            name, at = json.decoder.scanstring(text, at + 1)  # type: ignore[attr-defined]
            at = _SPACE.match(text, at).end() + 1  # type: ignore[union-attr]  # the ':'
            at = _SPACE.match(text, at).end()  # type: ignore[union-attr]
        value, end = _DECODER.scan_once(text, at)  # type: ignore[attr-defined]
        out.append((name, value, text[at:end]))
        at = _SPACE.match(text, end).end()  # type: ignore[union-attr]
        if text[at] == ",":
            at = _SPACE.match(text, at + 1).end()  # type: ignore[union-attr]
    return out


def shown(name: str) -> str:
    """A JSON field or header name for an error message: quoted, with lone surrogates as \\uXXXX."""
    return "'" + name.encode("utf-8", "backslashreplace").decode() + "'"


def undecodable(text: str) -> bool:
    """True when `text` carries bytes the shell passed that are not UTF-8 (Python keeps them as surrogates)."""
    return any("\udc80" <= ch <= "\udcff" for ch in text)


def arg_bytes(text: str) -> bytes:
    """The bytes a command-line argument was given as: `-key $'\\xff'` is the byte 0xff, not an error."""
    return text.encode("utf-8", "surrogateescape")


def header_pairs(items: tuple[str, ...]) -> list[tuple[str, bytes]]:
    """`-header k=v` arguments as (name, value) pairs."""
    out = []
    for h in items:
        k, sep, v = h.partition("=")
        if not sep or not k:
            raise InvalidArgument(f"-header '{h}' must be key=value")
        if not k.isprintable() or undecodable(k):
            raise InvalidArgument(f"-header name {k!r} must be printable UTF-8 text (the value may be any bytes)")
        out.append((k, arg_bytes(v)))
    return out


def _text_bytes(text: str, line: int, field: str) -> bytes:
    """`text` as UTF-8. JSON may carry a lone UTF-16 surrogate (`"\\ud800"`), which is no character and
    which UTF-8 cannot hold: refused here, naming the field (the Kafka client crashes on such a header name)."""
    try:
        return text.encode()
    except UnicodeEncodeError as e:
        raise InvalidArgument(
            f"line {line}: {field} holds a lone surrogate (\\u{ord(text[e.start]):04x}), which is not text and"
            " cannot be written as UTF-8; write the character as a surrogate pair (\\ud83d\\ude00) or as itself"
        ) from None


def _value_bytes(value: Any, written: str, line: int, field: str) -> bytes | None:
    """What is written for a JSON value: nothing for null, a string's text, else the JSON text as the user wrote it
    (ASCII escapes in it stay escapes: a lone surrogate there is the user's text, not a character)."""
    if value is None:
        return None
    if isinstance(value, str):
        return _text_bytes(value, line, field)
    return written.encode()


def _headers(value: Any, written: str, line: int) -> list[tuple[str, bytes | None]]:
    if value is None:
        return []
    if isinstance(value, dict):
        pairs = [(str(k), v, text) for k, v, text in _spans(written, 0, "}")]
    elif isinstance(value, list) and all(isinstance(x, list) and len(x) == 2 for x in value):
        pairs = []
        for _, _, pair in _spans(written, 0, "]"):
            (_, k, _), (_, v, text) = _spans(pair, 0, "]")
            pairs.append((str(k), v, text))
    else:
        raise InvalidArgument(f"line {line}: 'headers' must be an object or a list of [key, value] pairs")
    out = []
    for name, v, text in pairs:
        _text_bytes(name, line, "a header name")
        out.append((name, _value_bytes(v, text, line, f"header {shown(name)}")))
    return out


def _whole(obj: dict[str, Any], name: str, line: int, what: str, maximum: int) -> int | None:
    """A field that must be a whole number from 0 to `maximum` (JSON has no integers apart from floats)."""
    v = obj.get(name)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not (0 <= v <= maximum) or v != int(v):
        raise InvalidArgument(f"line {line}: '{name}' {json.dumps(v)} must be {what}")
    return int(v)


def json_record(line: bytes, n: int, base_headers: list[tuple[str, bytes]], partition: int | None) -> dict[str, Any]:
    """The keyword arguments of StreamProducer.produce for line `n` of `produce -format json`."""
    try:
        return _fields(line, n, base_headers, partition)
    except RecursionError:  # Python's JSON reader recurses once per level
        raise InvalidArgument(
            f"line {n} is nested deeper than the JSON reader follows (about {sys.getrecursionlimit()} levels);"
            " a value that deep is better sent as text"
        ) from None


def _fields(line: bytes, n: int, base_headers: list[tuple[str, bytes]], partition: int | None) -> dict[str, Any]:
    try:
        text = line.decode("utf-8").removeprefix("\ufeff").strip(" \t\r\n")
    except UnicodeDecodeError as e:
        raise InvalidArgument(f"line {n} is not JSON (not UTF-8 text at byte {e.start + 1})") from None
    try:
        obj = _DECODER.decode(text)
    except _Refused as e:
        raise InvalidArgument(f"line {n}: {e}") from None
    except ValueError as e:
        raise InvalidArgument(f"line {n} is not JSON ({e})") from None
    if not isinstance(obj, dict):
        raise InvalidArgument(f"line {n}: expected a JSON object with 'value' (and key, headers, ...)")
    unknown = set(obj) - set(FIELDS)
    if unknown:
        raise InvalidArgument(f"line {n}: unknown field {shown(sorted(unknown)[0])}")
    written = {name: value_text for name, _, value_text in _spans(text, 0, "}")}
    given = _whole(obj, "partition", n, "a partition number, 0 or more", MAX_PARTITION)
    return {
        "value": _value_bytes(obj.get("value"), written.get("value", ""), n, "'value'"),
        "key": _value_bytes(obj.get("key"), written.get("key", ""), n, "'key'"),
        "headers": base_headers + _headers(obj.get("headers"), written.get("headers", ""), n),
        "partition": given if given is not None else partition,
        "timestamp": _whole(obj, "timestamp", n, f"milliseconds since the epoch, 0 to {MAX_TIMESTAMP}", MAX_TIMESTAMP),
    }


def _as_json(b: bytes | None) -> tuple[Any, bool]:
    """A key, value or header for a JSON line: its text, or base64 (True) when it is not UTF-8."""
    if b is None:
        return None, False
    try:
        return b.decode("utf-8"), False
    except UnicodeDecodeError:
        return base64.b64encode(b).decode(), True


def record_json(r: StreamRecord) -> str:
    """A consumed record as one JSON line: topic, partition, offset, timestamp, key, value, headers (and encoding
    when the key or the value is base64, stream when known)."""
    key, kb64 = _as_json(r.key)
    value, vb64 = _as_json(r.value)
    doc: dict[str, Any] = {
        "topic": r.topic,
        "partition": r.partition,
        "offset": r.offset,
        "timestamp": r.timestamp,
        "key": key,
        "value": value,
        "headers": {k: _as_json(v)[0] for k, v in r.headers},
    }
    if kb64 or vb64:
        doc["encoding"] = {"key": "base64" if kb64 else "utf-8", "value": "base64" if vb64 else "utf-8"}
    if r.stream:
        doc["stream"] = r.stream
    return json.dumps(doc, separators=(",", ":"))


def _cell(b: bytes | None) -> str:
    return "" if b is None else escape_bytes(b)


def record_line(r: StreamRecord) -> str:
    """A consumed record as one tab-separated line: topic, partition, offset, timestamp, key, value, headers
    (k=v,...), each cell escaped (output.escape_text)."""
    headers = ",".join(f"{escape_text(k)}={_cell(v)}" for k, v in r.headers)
    return f"{r.topic}\t{r.partition}\t{r.offset}\t{r.timestamp}\t{_cell(r.key)}\t{_cell(r.value)}\t{headers}"
