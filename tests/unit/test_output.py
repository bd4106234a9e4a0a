"""What streamrepl prints, read one way only: table cells with control characters, a header when there are no rows, man page headers within 80 columns."""

from __future__ import annotations

import json
from pathlib import Path

from support import run_cli


def test_local_status_with_nothing_running_prints_the_header(tmp_path: Path) -> None:
    run = run_cli("local", "status", "-dir", str(tmp_path))
    assert run.code == 0, run
    assert run.stdout.splitlines()[0].split("\t")[0] == "cluster", run
    run = run_cli("local", "status", "-dir", str(tmp_path), "-json")
    assert json.loads(run.stdout)["data"] == []


def test_every_man_page_header_fits_80_columns() -> None:
    """man prints the title(section) on both sides of the header line and the manual's name between them; when the
    three do not fit in 80 columns they overlap (`STREAMREPL-STREAM-REPLICA-AUTOSstreamrep...`)."""
    import shlex

    for page in sorted(Path(__file__).resolve().parents[2].joinpath("man").glob("*.1")):
        th = next(line for line in page.read_text().splitlines() if line.startswith(".TH"))
        _, title, section, _, _, center = shlex.split(th.replace("\\-", "-"))
        side = len(f"{title}({section})")
        assert 2 * side + len(center) + 4 <= 80, f"{page.name}: {th}"


def test_table_cells_escape_backslashes_and_control_characters() -> None:
    from streamrepl.output import escape_bytes, escape_text

    assert escape_text("plain text, é") == "plain text, é"
    assert escape_text("a\\b") == "a\\\\b"
    assert escape_text("a\nb\tc\x1b[31m") == "a\\nb\\tc\\x1b[31m"
    assert escape_bytes(b"\xff") != escape_bytes(b"\\xff")
