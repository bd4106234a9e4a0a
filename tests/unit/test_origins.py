"""The origin runs of a partition and their store (origins.py), on an in-memory log."""

from __future__ import annotations

import json

import pytest

from streamrepl import policy
from streamrepl.origins import NO_RUNS, OriginStore, Runs, _fold, _Folded, run_key

A, B, OWN = "uuid-a", "uuid-b", "uuid-own"
PK = ("sr.s.t", 1700, 0)


class ListLog:
    """A log kept in a list; `compact()` keeps the newest record per key, in log order, as Kafka's compaction does."""

    def __init__(self) -> None:
        self.records: list[tuple[int, bytes | None, bytes | None]] = []
        self.made = True
        self.reads = 0

    def exists(self) -> bool:
        return self.made

    def read(self, offset: int):
        self.reads += 1
        return [r for r in self.records if r[0] >= offset]

    def append(self, key: bytes, value: bytes) -> None:
        self.records.append((len(self.records) and self.records[-1][0] + 1, key, value))

    def compact(self) -> None:
        newest = {k: o for o, k, _ in self.records}
        self.records = [r for r in self.records if newest[r[1]] == r[0]]


def test_a_partition_without_runs_is_the_streams_own() -> None:
    assert NO_RUNS.at(0, OWN) == OWN and NO_RUNS.last(OWN) == OWN
    assert not NO_RUNS


def test_runs_cover_from_their_start_to_the_next() -> None:
    runs = Runs().appended(10, A).appended(50, B)
    assert [runs.at(o, OWN) for o in (0, 9, 10, 49, 50, 10**9)] == [OWN, OWN, A, A, B, B]
    assert runs.span(12, OWN) == (A, 50)
    assert runs.span(3, OWN) == (OWN, 10)
    assert runs.span(60, OWN)[0] == B and runs.span(60, OWN)[1] > 10**12
    assert runs.last(OWN) == B


def test_a_run_appended_replaces_every_run_from_its_start_on() -> None:
    runs = Runs().appended(0, A).appended(50, B).appended(80, A)
    assert runs.appended(50, OWN) == Runs((0, 50), (A, OWN))
    assert runs.appended(0, B) == Runs((0,), (B,))  # the partition re-created empty


def test_below_the_header_form_mark_the_header_says_the_origin() -> None:
    runs = Runs((100,), (B,), headerform_below=100)
    assert runs.origin_of(5, [(policy.ORIGIN, A.encode())], OWN) == A
    assert runs.origin_of(5, None, OWN) == OWN
    # past the mark, a header of that name is the user's data
    assert runs.origin_of(100, [(policy.ORIGIN, A.encode())], OWN) == B


def test_the_store_folds_the_log_in_order_and_survives_compaction() -> None:
    log = ListLog()
    writer = OriginStore(log)
    writer.append(PK, 0, A)
    writer.append(PK, 50, B)
    writer.append(PK, 0, B)  # re-created: starts again
    writer.append(("sr.s.t", 1700, 1), 0, A)
    writer.mark_headerform(("sr.s.u", 1700, 0), 30)
    log.compact()
    reader = OriginStore(log)
    assert reader.runs(PK) == Runs((0,), (B,))
    assert reader.runs(("sr.s.t", 1700, 1)) == Runs((0,), (A,))
    assert reader.runs(("sr.s.u", 1700, 0)) == Runs((), (), 30)
    assert reader.runs(("sr.s.t", 1800, 0)) == NO_RUNS  # a stream created again under the path


def test_a_reader_sees_new_runs_only_after_refresh_and_reads_only_what_is_new() -> None:
    log = ListLog()
    writer, reader = OriginStore(log), OriginStore(log)
    writer.append(PK, 0, A)
    assert reader.runs(PK) == Runs((0,), (A,))
    writer.append(PK, 40, B)
    assert reader.runs(PK).last(OWN) == A  # cached until refreshed
    reader.refresh()
    assert reader.runs(PK).last(OWN) == B
    assert [o for o, _, _ in log.read(reader._state.next_offset)] == []


def test_a_lost_log_forgets_every_run() -> None:
    log = ListLog()
    store = OriginStore(log)
    store.append(PK, 0, A)
    log.made, log.records = False, []
    store.refresh()
    assert store.runs(PK) == NO_RUNS


@pytest.mark.parametrize(
    "key,value",
    [
        (None, b"{}"),
        (b"x", None),
        (b"no-bars", b"{}"),
        (b"sr.s.t|notanumber|0|0", json.dumps({"origin": A}).encode()),
        (run_key(PK, 0), b"not json"),
        (run_key(PK, 0), json.dumps(["a list"]).encode()),
        (run_key(PK, 0), json.dumps({"origin": 7}).encode()),
    ],
)
def test_records_it_did_not_write_are_ignored(key: bytes | None, value: bytes | None) -> None:
    state = _Folded()
    _fold(state, 4, key, value)
    assert state.runs == {} and state.next_offset == 5
