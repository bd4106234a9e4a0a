"""What a benchmark's JSON records about its own run, so that a figure can be traced and run again: the commit (and
whether the tree had changes on top of it), the command as typed, the date, the machine and a note about it (a
shared machine says so: its absolute figures drift, the ratios measured in the same run are what count).
bench/table.py reads these fields to write the standing table of BENCHMARKS.md."""

from __future__ import annotations

import datetime
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _git(*args: str) -> str:
    r = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else ""


def machine() -> dict:
    model = ""
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {"nproc": os.cpu_count(), "cpu": model, "python": platform.python_version(), "kernel": platform.release()}


def provenance(note: str) -> dict:
    """The fields every results file starts with. The command is `.venv/bin/python` (how the pages say to run it),
    the script's path from the repository root and its arguments."""
    script = Path(sys.argv[0]).resolve()
    shown = script.relative_to(ROOT) if script.is_relative_to(ROOT) else script
    # Changed code only: what runs (the product and bench/), not the pages or the results files being brought up to date.
    dirty = bool(_git("status", "--porcelain", "--untracked-files=no", "--", "streamrepl", "bench", ":!bench/results"))
    return {
        "commit": _git("rev-parse", "--short=7", "HEAD"),
        "dirty": dirty,
        "command": shlex.join([".venv/bin/python", str(shown), *sys.argv[1:]]),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "note": note,
    }
