"""The test run's progress (tests/support/progress.py): one line per test file finished, with the files done out of all,
the time so far and the time the whole run is expected to take, from the durations earlier runs recorded in
.pytest_cache; a first run says its estimate is a guess. Run as pytest runs it, in a process of its own."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

FILES = {
    "test_one.py": "def test_a():\n    pass\n\ndef test_b():\n    pass\n",
    "test_two.py": "import pytest\n\n@pytest.mark.parametrize('n', range(3))\ndef test_c(n):\n    assert n < 2\n",
}


def _pytest(folder: Path, *args: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(TESTS))
    argv = [sys.executable, "-m", "pytest", "-p", "support.progress", "-o", "console_output_style=classic", *args]
    run = subprocess.run([*argv, str(folder)], cwd=folder, env=env, capture_output=True, text=True, timeout=120)
    assert run.returncode in (0, 1), run.stdout + run.stderr
    return run.stdout


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    return tmp_path


TIME = r"\d+:\d\d"


def test_a_line_per_file_with_elapsed_and_expected_time(folder: Path) -> None:
    first = _pytest(folder)
    # On the line pytest gives the file: its dots, then where the run is.
    assert re.search(rf"^test_one\.py \.\. \[1/2 files\] elapsed {TIME}, expected ~{TIME} \(guess\)$", first, re.M), (
        first
    )
    assert re.search(rf"^test_two\.py \.\.F \[2/2 files\] elapsed {TIME}$", first, re.M), first
    assert "1 failed, 4 passed" in first

    # The durations of the first run were recorded: the second run's estimate comes from them.
    again = _pytest(folder)
    assert re.search(rf"^test_one\.py \.\. \[1/2 files\] elapsed {TIME}, expected ~{TIME}$", again, re.M), again


@pytest.mark.parametrize("flag", ["-q", "-v"])
def test_quiet_and_verbose_runs_get_a_line_of_their_own(folder: Path, flag: str) -> None:
    out = _pytest(folder, flag)
    assert re.search(rf"^\[1/2 files\] test_one\.py elapsed {TIME}, expected ~{TIME}", out, re.M), out
    assert re.search(rf"^\[2/2 files\] test_two\.py elapsed {TIME}$", out, re.M), out


def test_a_run_without_the_cache_still_shows_progress(folder: Path) -> None:
    out = _pytest(folder, "-p", "no:cacheprovider")
    assert re.search(rf"^test_two\.py \.\.F \[2/2 files\] elapsed {TIME}$", out, re.M), out
