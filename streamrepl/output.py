"""How results and errors reach the user: tables, the maprcli JSON envelope, tab-separated rows.

Commands return a list of records (dicts); this module alone decides how they look.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO


@dataclass
class OutputMode:
    json: bool = False
    noheader: bool = False
    long: bool = False


#: The characters a table shows with a letter; other control characters become `\\xNN`.
_ESCAPES = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape_char(c: str) -> str:
    if c in _ESCAPES:
        return _ESCAPES[c]
    code = ord(c)
    if 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8, kept by surrogateescape
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x20 or 0x7F <= code <= 0x9F:
        return f"\\x{code:02x}"
    return c


def escape_text(text: str) -> str:
    """`text` for a tab-separated cell: backslash as `\\\\`, tab, newline and carriage return as `\\t`, `\\n`,
    `\\r`, other control characters and bytes that are not UTF-8 as `\\xNN`; everything else as it is. A cell
    reads back one way only: the byte 0xFF shows as `\\xff`, the text `\\xff` as `\\\\xff`."""
    if text.isprintable() and "\\" not in text:
        return text
    return "".join(_escape_char(c) for c in text)


def escape_bytes(data: bytes) -> str:
    """`data` (a record's key, value or header) for a tab-separated cell, escaped as `escape_text` does."""
    return escape_text(data.decode("utf-8", errors="surrogateescape"))


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"))
    return escape_text(str(value))


def columns_of(rows: Sequence[dict], columns: Sequence[str] | None) -> list[str]:
    if columns:
        return list(columns)
    seen: dict[str, None] = {}
    for r in rows:
        for k in r:
            seen.setdefault(k, None)
    return list(seen)


def envelope(rows: Sequence[dict]) -> dict:
    now = time.time()
    return {
        "timestamp": int(now * 1000),
        "timeofday": time.strftime("%Y-%m-%d %I:%M:%S.", time.localtime(now))
        + f"{int(now * 1000) % 1000:03d} GMT{time.strftime('%z')} {time.strftime('%p')}",
        "status": "OK",
        "total": len(rows),
        "data": list(rows),
    }


def emit(
    rows: Iterable[dict], mode: OutputMode, columns: Sequence[str] | None = None, out: TextIO | None = None
) -> None:
    """`rows` on `out` (default: stdout) as `mode` says."""
    out = out or sys.stdout
    rows = list(rows)
    if mode.json:
        out.write(json.dumps(envelope(rows), indent=1, default=str) + "\n")
        return
    cols = columns_of(rows, columns)
    if mode.noheader or not out.isatty():
        # maprcli's tabular output is tab-separated: what scripts `cut` and `awk`.
        if not mode.noheader and cols:
            out.write("\t".join(cols) + "\n")
        for r in rows:
            out.write("\t".join(_cell(r.get(c)) for c in cols) + "\n")
        return
    if not cols:
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(show_edge=False, box=None, header_style="bold", pad_edge=False)
    for c in cols:
        table.add_column(c, overflow="fold")
    for r in rows:
        table.add_row(*(_cell(r.get(c)) for c in cols))
    Console(file=out).print(table)


def error_envelope(code: int, desc: str) -> dict:
    return {"timestamp": int(time.time() * 1000), "status": "ERROR", "errors": [{"id": code, "desc": desc}]}


def one_line(text: str) -> str:
    """`text` with line breaks and other control characters escaped: an error is always one line."""
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)


def emit_error(command: str, code: int, message: str, mode: OutputMode) -> None:
    desc = one_line(f"{command}: {message}" if command else message)
    if mode.json:
        sys.stdout.write(json.dumps(error_envelope(code, desc)) + "\n")
    else:
        sys.stderr.write(f"ERROR ({code}) - {desc}\n")
