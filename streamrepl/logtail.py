"""The last lines of a log file, for an error message that has to say why a child process (a broker, Spark's
JVM) failed."""

from __future__ import annotations

from pathlib import Path


def log_tail(path: str | Path | None, lines: int, missing: str = "", empty: str = "") -> str:
    """The last `lines` non-blank lines of the file on one line, joined by " | "; `missing` when there is no
    file to read, `empty` when it holds nothing."""
    if not path:
        return missing
    try:
        text = Path(path).read_text(errors="replace").strip().splitlines()
    except OSError:
        return missing
    return " | ".join(line for line in text[-lines:] if line.strip()) or empty
