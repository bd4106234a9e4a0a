"""BENCHMARKS.md's tables are what bench/table.py makes of the checked-in results files (bench/results/*.json), and
the standing table says "missed" when a figure misses its goal. Fast: reads files, starts nothing."""

from __future__ import annotations

import copy
import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def table() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_table", ROOT / "bench" / "table.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_table"] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def test_benchmarks_md_tables_match_the_results_files(table: ModuleType) -> None:
    page = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    assert table.render(page, table.load()) == page, "run: .venv/bin/python bench/table.py (then commit the page)"


def test_every_goal_has_its_results_file_and_a_figure(table: ModuleType) -> None:
    res = table.load()
    for goal in table.GOALS:
        assert goal.results in res, f"no bench/results/{goal.results}.json for: {goal.what}"
        figure, _ = goal.measure(res[goal.results])
        assert figure


def test_each_results_file_says_where_it_comes_from(table: ModuleType) -> None:
    for name, d in table.load().items():
        for field in ("commit", "command", "date", "machine", "note"):
            assert d.get(field) not in (None, ""), f"bench/results/{name}.json has no {field}"
        assert d["command"].split()[1].startswith("bench/"), d["command"]


def test_a_figure_below_its_goal_is_missed_and_the_note_is_left_out_of_the_command(table: ModuleType) -> None:
    run = json.loads((ROOT / "bench" / "results" / "run.json").read_text(encoding="utf-8"))
    slow = copy.deepcopy(run)
    slow["cli"]["help_s"] = 0.31
    slow["note"] = "a note"
    slow["command"] = ".venv/bin/python bench/run.py --note 'a note' --json out.json"
    lines = table.standing({**table.load(), "run": slow})
    row = next(line for line in lines if "`streamrepl --help`" in line)
    assert "| 0.310 s" in row and "| **missed** |" in row
    assert "`.venv/bin/python bench/run.py --json out.json`" in row
    fast = copy.deepcopy(slow)
    fast["cli"]["help_s"] = 0.1
    row = next(line for line in table.standing({**table.load(), "run": fast}) if "`streamrepl --help`" in line)
    assert "| met |" in row


def test_a_page_without_a_block_is_refused(table: ModuleType) -> None:
    page = (ROOT / "BENCHMARKS.md").read_text(encoding="utf-8")
    cut = page.replace("<!-- table: scale -->", "").replace("<!-- end table: scale -->", "")
    with pytest.raises(SystemExit, match=r"missing \['scale'\]"):
        table.render(cut, table.load())


def test_the_throughput_goals_come_from_users_records_of_a_sustained_run(table: ModuleType) -> None:
    """A repeated-byte row is shown but never judged; a run too short to leave its start-up behind is no figure."""
    run = json.loads((ROOT / "bench" / "results" / "run.json").read_text(encoding="utf-8"))
    row = next(r for r in run["throughput"] if r["value_bytes"] == 100 and r.get("values") != "one repeated byte")
    repeated = copy.deepcopy(row)
    repeated["values"] = "one repeated byte"
    repeated["gateway1"]["ratio_to_c_relay_idempotent"] = 5.0
    only_repeated = {**run, "throughput": [repeated]}
    with pytest.raises(table.NoFigure, match="repeated byte"):
        table.gateway_vs_exact_relay(100)(only_repeated)
    figure, _ = table.gateway_vs_exact_relay(100)({**run, "throughput": [repeated, row]})
    assert figure.startswith(f"{row['gateway1']['ratio_to_c_relay_idempotent']:.2f}x")
    with pytest.raises(table.NoFigure, match="start-up"):
        table.gateway_vs_exact_relay(100)({**run, "records": 200_000})
