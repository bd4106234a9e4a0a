"""The record codec of produce and consume (streamrepl/records.py): JSON lines in, JSON or tab-separated lines out.

A value that is not a JSON string is written as the user's own text, byte for byte; a line JSON reads two ways (a key
given twice) or that holds a number no 64-bit float holds is refused with its line number."""

from __future__ import annotations

import json

import pytest

from streamrepl import records
from streamrepl.client.consumer import StreamRecord
from streamrepl.errors import InvalidArgument


def parse(line: str, n: int = 1, headers: list[tuple[str, bytes]] | None = None) -> dict:
    return records.json_record(line.encode(), n, headers or [], None)


@pytest.mark.parametrize(
    "value",
    [
        "1.10",
        "1e5",
        "-0",
        "12345678901234567890123",
        '{"b": 1,  "a": [1.50, "x"]}',
        "[ ]",
        "true",
        '{"name": "Zoë \\u00e9"}',
        "0.1000000000000000055511151231257827",
    ],
)
def test_a_value_that_is_not_a_string_is_written_as_the_user_wrote_it(value: str) -> None:
    assert parse(f'{{"value": {value}, "key": {value}}}') == {
        "value": value.encode(),
        "key": value.encode(),
        "headers": [],
        "partition": None,
        "timestamp": None,
    }


def test_strings_are_written_as_their_text_and_headers_as_written_too() -> None:
    got = parse('{"value":"v\\tw","key":"k","headers":{"h":"1","n":2.50,"o":{"x": 1}},"partition":1,"timestamp":5}')
    assert got["value"] == b"v\tw" and got["key"] == b"k"
    assert got["headers"] == [("h", b"1"), ("n", b"2.50"), ("o", b'{"x": 1}')]
    assert (got["partition"], got["timestamp"]) == (1, 5)
    listed = parse('{"value":"v","headers":[["h", 1.0], ["h", "again"], ["z", null]]}', headers=[("base", b"b")])
    assert listed["headers"] == [("base", b"b"), ("h", b"1.0"), ("h", b"again"), ("z", None)]


@pytest.mark.parametrize(
    ("line", "names"),
    [
        ('{"value":"a","value":"b"}', "'value'"),
        ('{"value":"a","key":"k","key":"k"}', "'key'"),
        ('{"value":{"x":1,"x":2}}', "'x'"),
        ('{"value":"v","headers":{"h":"1","h":"2"}}', "'h'"),
    ],
)
def test_a_key_given_twice_is_refused_with_its_line(line: str, names: str) -> None:
    with pytest.raises(InvalidArgument) as e:
        parse(line, n=7)
    assert e.value.message.startswith("line 7: ") and names in e.value.message and "twice" in e.value.message


@pytest.mark.parametrize(
    "line",
    [
        '{"value":1e400}',
        '{"value":-1e400}',
        '{"value":{"x":[1e999]}}',
        '{"value":NaN}',
        '{"value":Infinity}',
        '{"value":-Infinity}',
        '{"value":"v","timestamp":1e400}',
    ],
)
def test_a_number_no_float_holds_is_refused(line: str) -> None:
    with pytest.raises(InvalidArgument) as e:
        parse(line, n=3)
    assert e.value.message.startswith("line 3: ") and "as a string" in e.value.message


def test_what_is_not_json_or_not_an_object_is_refused() -> None:
    with pytest.raises(InvalidArgument, match=r"^line 2 is not JSON \(Expecting"):
        parse('{"value": }', n=2)
    with pytest.raises(InvalidArgument, match=r"^line 2: expected a JSON object"):
        parse("[1, 2]", n=2)
    with pytest.raises(InvalidArgument, match=r"^line 2 is not JSON \(not UTF-8"):
        records.json_record(b'{"value": "\xff"}', 2, [], None)
    with pytest.raises(InvalidArgument, match=r"^line 2: unknown field 'valu'"):
        parse('{"valu": 1}', n=2)


def test_a_byte_order_mark_and_spaces_around_the_object_are_allowed() -> None:
    assert parse('\ufeff  {"value": 1.0 }  ')["value"] == b"1.0"


def record(key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]]) -> StreamRecord:
    return StreamRecord("clicks", 1, 42, key, value, headers, 1700000000000, 0, "/sf/s")


def test_a_record_as_a_json_line() -> None:
    doc = json.loads(records.record_json(record(b"k", b"v\n", [("h", b"1"), ("n", None)])))
    assert doc == {
        "topic": "clicks",
        "partition": 1,
        "offset": 42,
        "timestamp": 1700000000000,
        "key": "k",
        "value": "v\n",
        "headers": {"h": "1", "n": None},
        "stream": "/sf/s",
    }
    doc = json.loads(records.record_json(record(None, b"\xff\x00", [])))
    assert doc["key"] is None and doc["value"] == "/wA=" and doc["encoding"] == {"key": "utf-8", "value": "base64"}


def test_a_record_as_a_tab_separated_line() -> None:
    line = records.record_line(record(b"k\tx", b"\xffv", [("h=", b"1"), ("n", None)]))
    assert line == "clicks\t1\t42\t1700000000000\tk\\tx\t\\xffv\th==1,n="


def test_what_produce_writes_consume_reads_back_as_written() -> None:
    """A JSON value round trips as its text: what consume -json prints is the user's line's value, unchanged."""
    got = parse('{"value": {"price": 1.10, "qty": 3}}')
    shown = json.loads(records.record_json(record(None, got["value"], [])))
    assert shown["value"] == '{"price": 1.10, "qty": 3}'
