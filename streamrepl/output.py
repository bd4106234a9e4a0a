"""How results and errors reach the user: tables, the maprcli JSON envelope, tab-separated rows.

Commands return a list of records (dicts); this module alone decides how they look.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from .errors import InvalidArgument


@dataclass(frozen=True)
class Listing:
    """How a terminal shows a wide listing: the columns an operator reads first. Scripts (-json, -noheader, output
    that is not a terminal) get every field whatever this says."""

    #: the columns shown on a terminal when -columns is not given
    default: tuple[str, ...]
    #: every field a row may have, in order: -columns is checked against them before the command runs
    fields: tuple[str, ...] = ()
    #: columns that give up their room first when a line is too long, in this order (a last error)
    cut: tuple[str, ...] = ()
    #: columns cut only when nothing else can give (a path, a state)
    keep: tuple[str, ...] = ()
    #: columns cut in the middle, keeping both ends (paths: the cluster and the stream's name)
    middle: tuple[str, ...] = ()
    #: a terminal's header of a column, shorter than its field's name (-columns takes either)
    labels: Mapping[str, str] = field(default_factory=dict)
    #: how a terminal shows a column's value (REPLICA_STATE_ERROR as ERROR)
    show: Mapping[str, Callable[[Any], Any]] = field(default_factory=dict)
    #: columns worked out from a row's fields (for -columns in every output)
    derived: Mapping[str, Callable[[dict], Any]] = field(default_factory=dict)


@dataclass
class OutputMode:
    json: bool = False
    noheader: bool = False
    long: bool = False
    #: the columns -columns asked for (("all",) for every one); None: the listing's default on a terminal
    columns: tuple[str, ...] | None = None
    listing: Listing | None = None


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


def choose_columns(
    asked: str | Sequence[str],
    known: Sequence[str],
    labels: Mapping[str, str] | None = None,
    every: Sequence[str] | None = None,
) -> tuple[str, ...]:
    """The columns `asked` (`a,b,c`, or `all`: `every`, default `known`) names, in its order; a column is named by its
    field or by its terminal header (`labels`); another name is an error that lists them."""
    by_label = {label: name for name, label in (labels or {}).items() if name in known}
    names = [n.strip() for n in asked.split(",")] if isinstance(asked, str) else [str(n).strip() for n in asked]
    names = [by_label.get(n, n) for n in names if n]
    if names == ["all"]:
        return tuple(known if every is None else every)
    bad = [n for n in names if n not in known]
    if bad or not names:
        what = f"no column {', '.join(repr(n) for n in bad)}" if bad else "-columns names no column"
        raise InvalidArgument(f"{what}; the columns are {', '.join(known)} (or all)")
    return tuple(dict.fromkeys(names))


def _width(out: TextIO) -> int:
    """The terminal's width: $COLUMNS when set (as rich and shutil take it), else the terminal's own."""
    try:
        return max(int(os.environ["COLUMNS"]), 1)
    except (KeyError, ValueError):
        pass
    try:
        return os.get_terminal_size(out.fileno()).columns or 80
    except (AttributeError, OSError, ValueError):  # no real file behind `out`
        return 80


def _cells(text: str) -> int:
    from rich.cells import cell_len

    return cell_len(text)


def cut_text(text: str, width: int, middle: bool = False) -> str:
    """`text` within `width` terminal cells, `…` where it was cut: at the end, or in the middle to keep both ends."""
    if _cells(text) <= width:
        return text
    if width <= 1:
        return "…"[:width]

    def head(s: str, room: int) -> str:
        out, used = [], 0
        for c in s:
            used += _cells(c)
            if used > room:
                break
            out.append(c)
        return "".join(out)

    room = width - 1
    if not middle:
        return head(text, room) + "…"
    front = head(text, (room + 1) // 2)
    back = head(text[::-1], room - _cells(front))[::-1]
    return f"{front}…{back}"


GAP = 2  # spaces between two columns


def fit_widths(
    headers: Sequence[str],
    natural: Sequence[int],
    width: int,
    cut: Sequence[str] = (),
    keep: Sequence[str] = (),
    shown: Sequence[str] | None = None,
) -> list[int] | None:
    """Widths of the columns `headers` that fit `width` with GAP between columns: the `cut` columns shrink first (in
    order), then the widest of the others, the `keep` ones last; none narrower than its header as shown (`shown`,
    default `headers`) or its values, when they are narrower. None when the headers alone do not fit."""
    widths = list(natural)
    floors = [min(n, _cells(h)) for h, n in zip(shown or headers, natural, strict=True)]
    room = width - GAP * (len(widths) - 1)
    if sum(floors) > room:
        return None
    excess = sum(widths) - room
    for name in cut:
        if excess <= 0:
            break
        if name in headers:
            i = headers.index(name)
            give = min(excess, widths[i] - floors[i])
            widths[i] -= give
            excess -= give
    for group in ([i for i, h in enumerate(headers) if h not in keep], [i for i, h in enumerate(headers) if h in keep]):
        while excess > 0:
            able = [i for i in group if widths[i] > floors[i]]
            if not able:
                break
            widest = max(able, key=lambda i: widths[i])
            widths[widest] -= 1
            excess -= 1
    return widths


def _value(row: dict, column: str, listing: Listing | None) -> Any:
    if listing is not None and column in listing.derived:
        return listing.derived[column](row)
    return row.get(column)


def _shown(row: dict, column: str, listing: Listing | None) -> str:
    value = _value(row, column, listing)
    if listing is not None and column in listing.show:
        value = listing.show[column](value)
    return _cell(value)


def table_lines(
    rows: Sequence[dict], cols: Sequence[str], listing: Listing | None, width: int, whole: bool = False
) -> list[str] | None:
    """`rows` as a table of `cols` whose every line fits `width` (a header line, then one line a row); None when the
    headers alone do not fit, or (`whole`) when a value would be cut."""
    lst = listing or Listing(default=())
    headers = [lst.labels.get(c, c) for c in cols]
    cells = [[_shown(r, c, listing) for c in cols] for r in rows]
    natural = [max([_cells(h), *(_cells(line[i]) for line in cells)]) for i, h in enumerate(headers)]
    widths = fit_widths(cols, natural, width, cut=lst.cut, keep=lst.keep, shown=headers)
    if widths is None or (whole and widths != natural):
        return None
    lines = []
    for line in [headers, *cells]:
        parts = []
        for i, (text, w) in enumerate(zip(line, widths, strict=True)):
            text = cut_text(text, w, middle=cols[i] in lst.middle)
            parts.append(text if i == len(widths) - 1 else text + " " * (w - _cells(text)))
        lines.append((" " * GAP).join(parts).rstrip())
    return lines


def record_lines(rows: Sequence[dict], cols: Sequence[str], listing: Listing | None, width: int) -> list[str]:
    """`rows` for a terminal too narrow for their columns side by side: a line a field (name, then value), long
    values wrapped under themselves, a blank line between rows; nothing is cut."""
    import textwrap

    labels = (listing or Listing(default=())).labels
    label = max(_cells(labels.get(c, c)) for c in cols) + GAP
    room = max(width - label, 10)
    lines: list[str] = []
    for n, row in enumerate(rows):
        if n:
            lines.append("")
        for c in cols:
            text = _shown(row, c, listing)
            parts = textwrap.wrap(text, room, break_long_words=True, break_on_hyphens=False) or [""]
            name = labels.get(c, c)
            lines.append((name + " " * (label - _cells(name)) + parts[0]).rstrip())
            lines += [" " * label + p for p in parts[1:]]
    return lines


def emit(
    rows: Iterable[dict], mode: OutputMode, columns: Sequence[str] | None = None, out: TextIO | None = None
) -> None:
    """`rows` on `out` (default: stdout) as `mode` says."""
    out = out or sys.stdout
    rows = list(rows)
    listing = mode.listing
    cols = columns_of(rows, columns)
    if mode.columns is not None:
        lst = listing or Listing(default=())
        every = [*(cols or lst.fields), *(d for d in lst.derived if d not in cols)]
        known = [*every, *(f for f in lst.fields if f not in every)]
        cols = list(choose_columns(mode.columns, known, lst.labels, every))
    terminal = not mode.json and not mode.noheader and out.isatty()
    if terminal and mode.columns is None and listing is not None:
        cols = list(listing.default)
    if mode.json:
        if mode.columns is not None:
            rows = [{c: _value(r, c, listing) for c in cols} for r in rows]
        out.write(json.dumps(envelope(rows), indent=1, default=str) + "\n")
        return
    if not terminal:
        # maprcli's tabular output is tab-separated: what scripts `cut` and `awk`.
        if not mode.noheader and cols:
            out.write("\t".join(cols) + "\n")
        for r in rows:
            out.write("\t".join(_cell(_value(r, c, listing)) for c in cols) + "\n")
        return
    if not cols:
        return
    from rich.console import Console
    from rich.text import Text

    width = _width(out)
    lines = table_lines(rows, cols, listing, width, whole=mode.long)
    console = Console(file=out, width=width, highlight=False, soft_wrap=False)
    if lines is None:  # too many columns to stand side by side (or -long: a value cut): a record at a time
        for line in record_lines(rows, cols, listing, width):
            console.print(Text(line), no_wrap=True, crop=True)
        return
    console.print(Text(lines[0], style="bold"), no_wrap=True, crop=True)
    for line in lines[1:]:
        console.print(Text(line), no_wrap=True, crop=True)


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
