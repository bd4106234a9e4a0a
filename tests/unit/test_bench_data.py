"""bench/data.py, the records every benchmark writes: JSON values of exactly the size asked for, unique keys, one or
two headers, the same records from the same seed. Fast: makes records in memory, starts nothing."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def data() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_data", ROOT / "bench" / "data.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_data"] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("size", [100, 1024])
def test_values_are_json_of_the_size_asked_for_each_its_own(data: ModuleType, size: int) -> None:
    recs = data.Records(size, now_ms=1_790_000_000_000, pool=256)
    values = [recs.value(i) for i in range(10_000)]
    assert {len(v) for v in values} == {size}
    assert len(set(values)) == len(values)
    orders = [json.loads(v) for v in values[:500]]
    assert {o["seq"] for o in orders} == {f"{i:010d}" for i in range(500)}
    assert len({o["status"] for o in orders}) > 3


def test_keys_are_unique_headers_one_or_two_timestamps_near_the_start(data: ModuleType) -> None:
    recs = data.Records(100, now_ms=1_790_000_000_000, pool=256)
    assert len({recs.key(i) for i in range(20_000)}) == 20_000
    assert {len(recs.headers(i)) for i in range(10)} == {1, 2}
    assert recs.timestamp(0) == 1_790_000_000_000
    assert 0 <= recs.timestamp(99_999) - recs.timestamp(0) <= 1_000


def test_the_same_seed_makes_the_same_records_another_seed_others(data: ModuleType) -> None:
    a, b, c = (data.Records(1024, seed=s, now_ms=0, pool=64) for s in (7, 7, 8))
    assert [a.value(i) for i in range(50)] == [b.value(i) for i in range(50)]
    assert [a.key(i) for i in range(50)] == [b.key(i) for i in range(50)]
    assert [a.value(i) for i in range(50)] != [c.value(i) for i in range(50)]


def test_too_small_a_size_is_refused(data: ModuleType) -> None:
    with pytest.raises(ValueError, match="80 B at least"):
        data.Records(40)
