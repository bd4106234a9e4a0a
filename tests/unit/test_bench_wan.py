"""The pure pieces of the WAN benchmarks (bench/wan.py, bench/wan_ops.py): what a source broker is started with for
each way of putting it behind the delay line, the registries they write, and how the cursor lags are summed up.
Fast: starts nothing."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str) -> ModuleType:
    sys.path.insert(0, str(ROOT / "bench"))  # the bench scripts import each other by name
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "bench"))


@pytest.fixture(scope="module")
def wan() -> ModuleType:
    return _load("wan")


@pytest.fixture(scope="module")
def wan_ops() -> ModuleType:
    return _load("wan_ops")


def _after(cmd: list[str], flag: str) -> str:
    return cmd[cmd.index(flag) + 1]


def test_tansu_advertises_the_line_only_when_it_is_the_front(wan: ModuleType, tmp_path: Path) -> None:
    advertised = wan.source_command("tansu", "advertise", 9001, "127.0.0.1:9002", tmp_path)
    assert _after(advertised, "--listener-url") == "tcp://127.0.0.1:9001"
    assert _after(advertised, "--advertised-listener-url") == "tcp://127.0.0.1:9002"
    behind_proxy = wan.source_command("tansu", "proxy", 9001, "127.0.0.1:9002", tmp_path)
    assert _after(behind_proxy, "--advertised-listener-url") == "tcp://127.0.0.1:9001"


def test_noida_goes_behind_the_proxy_only(wan: ModuleType, tmp_path: Path) -> None:
    cmd = wan.source_command("noida", "proxy", 9001, "127.0.0.1:9002", tmp_path)
    assert _after(cmd, "--kafka-port") == "9001"
    assert "9002" not in " ".join(cmd)
    with pytest.raises(ValueError, match="--front proxy"):
        wan.source_command("noida", "advertise", 9001, "127.0.0.1:9002", tmp_path)


def test_registry_text_names_the_source_default_with_its_settings(wan: ModuleType) -> None:
    src, dst = wan.bench.SRC, wan.bench.DST
    doc = yaml.safe_load(wan.registry_text({src: "a:1", dst: "b:2"}, {"fetch.max.bytes": "1"}))
    assert doc == {
        "default": src,
        "clusters": {src: {"bootstrap.servers": "a:1", "fetch.max.bytes": "1"}, dst: {"bootstrap.servers": "b:2"}},
    }


def test_lag_summary_ranks_what_arrived_and_counts_what_did_not(wan_ops: ModuleType) -> None:
    lags = [i / 1000 for i in range(1, 101)] + [None]  # 1..100 ms, one never seen
    s = wan_ops.lag_summary(lags)
    assert s == {"commits": 101, "missing": 1, "p50_ms": 51.0, "p99_ms": 100.0, "max_ms": 100.0, "mean_ms": 50.5}
    assert wan_ops.lag_summary([None, None]) == {"commits": 2, "missing": 2}


def test_takeover_victim_is_named_by_reports_unchanged_for_a_report_period(wan_ops: ModuleType) -> None:
    """bench/handoff.py kills the owner of t[0] as the gateways' reports name it. Reports lag what the gateways hold
    by up to a report period: a noida-db run at 0 ms (d350adc) killed b, which the reports still named for t[0]
    while a rebalance had already given t[0] to a, and measured a 'takeover' of 0.23 s (a had written t[0] all
    along). The owner is named only once the same settled split has been reported for longer than a report
    period."""
    handoff = wan_ops.handoff
    units = [f"/d/x:t[{i}]" for i in range(4)]
    before = {"a": [units[1]], "b": [units[0], units[2], units[3]]}  # the stale split of that run
    after = {"a": [units[0], units[2]], "b": [units[1], units[3]]}  # what they held when b was killed
    watch = handoff.OwnerWatch(units[0], {"a", "b"}, set(units), span=6.0)
    assert watch.see(0.0, before) is None
    assert watch.see(3.0, before) is None  # settled-looking, but not for a report period yet
    assert watch.see(3.5, after) is None  # it changed: the period starts again
    assert watch.see(9.0, after) is None
    assert watch.see(9.6, after) == "a"
    # Not settled: a partition named by two gateways, one missing, or a gateway holding none.
    for owners in (
        {"a": [units[0], units[1]], "b": [units[0], units[2], units[3]]},
        {"a": [units[0]], "b": [units[2], units[3]]},
        {"a": units, "b": []},
    ):
        w = handoff.OwnerWatch(units[0], {"a", "b"}, set(units), span=6.0)
        assert w.see(0.0, owners) is None
        assert w.see(100.0, owners) is None
    # A gateway outside the pair (a dead one's stale report) is not counted.
    w = handoff.OwnerWatch(units[0], {"a", "b"}, set(units), span=6.0)
    assert w.see(0.0, {**after, "old": [units[0]]}) is None
    assert w.see(7.0, {**after, "old": [units[0]]}) == "a"
