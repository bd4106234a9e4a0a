"""Unit tests of the offset-preserving writer's decisions (no broker: a recording producer)."""

from __future__ import annotations

import pytest
from support.fakes import Message, RecordingProducer

from streamrepl import policy
from streamrepl.applier import OffsetPreservingWriter, ReplicaConflict
from streamrepl.origins import Runs


def msg(offset: int, origin: str | None = None, value: bytes = b"v") -> Message:
    """A source record at `offset`, replicated from `origin` when given (its origin header)."""
    headers = [(policy.ORIGIN, origin.encode())] if origin else None
    return Message(offset, value, key=b"k", headers=headers, timestamp=1000 + offset)


def test_own_records_coming_back_advance_past_them_and_are_never_written():
    # Multi-master: the destination's own records return from the other side; a later end-of-partition
    # fill must not write fillers over offsets the destination itself holds.
    p = RecordingProducer()
    w = OffsetPreservingWriter(p, "t", 0, 5, dst_uuid="A", src_uuid="B", origin="A")
    w.write([msg(5, "A"), msg(6, "A"), msg(7, "A")])
    assert p.sent == [] and w.next == 8
    assert w.fill_to(8) == 0


def test_gap_is_filled_and_offsets_line_up():
    p = RecordingProducer()
    w = OffsetPreservingWriter(p, "t", 0, 0, dst_uuid="B", src_uuid="A")
    w.write([msg(0), msg(3)])
    assert len(p.sent) == 4 and w.next == 4
    assert [policy.is_filler(s["headers"]) for s in p.sent] == [False, True, True, False]
    assert all(policy.origin_of(s["headers"], "B") == "A" for s in p.sent)


def test_second_origin_in_one_partition_is_a_conflict():
    p = RecordingProducer()
    w = OffsetPreservingWriter(p, "t", 0, 3, dst_uuid="C", src_uuid="A", origin="A")
    with pytest.raises(ReplicaConflict):
        w.write([msg(3, "E")])
    assert p.sent == []


def test_records_already_in_place_are_skipped():
    p = RecordingProducer()
    w = OffsetPreservingWriter(p, "t", 0, 10, dst_uuid="C", src_uuid="B", origin="A")
    w.write([msg(8, "A"), msg(9, "A"), msg(10, "A")])
    assert len(p.sent) == 1 and w.next == 11 and w.skipped == 2


# -- the run form (write_runs): origins from the source's runs, records written with exactly their headers --------


def plain(offset: int, headers: object = None, value: bytes = b"v") -> Message:
    return Message(offset, value, key=b"k", headers=headers, timestamp=1000 + offset)


def run_writer(p: RecordingProducer, next_offset: int = 0, origin: str | None = None, run_origin: str | None = None):
    appended: list[tuple[int, str]] = []

    def append(start: int, origin: str) -> None:
        appended.append((start, origin))
        # acknowledged before the records it describes: nothing of that origin is queued yet
        assert not any(s.get("value") is not None for s in p.sent[start - next_offset :])

    w = OffsetPreservingWriter(
        p, "t", 0, next_offset, dst_uuid="B", src_uuid="A", origin=origin, run_origin=run_origin, append_run=append
    )
    return w, appended


def test_run_form_writes_each_record_with_exactly_its_headers_and_one_run_first():
    p = RecordingProducer()
    w, appended = run_writer(p)
    same = [("k", b"1"), ("k", b"2"), (policy.ORIGIN, b"a user's own")]
    binary = [("bin", bytes(range(256)))]
    w.write_runs([plain(0), plain(1, same), plain(2, binary)], Runs())
    assert appended == [(0, "A")]
    assert [s.get("headers") for s in p.sent] == [None, same, binary]
    assert p.sent[1]["headers"] is not None and w.next == 3
    w.write_runs([plain(3), plain(4)], Runs())
    assert appended == [(0, "A")]  # the partition's run covers them already


def test_run_form_skips_records_first_published_at_the_destination():
    p = RecordingProducer()
    w, appended = run_writer(p, next_offset=5, origin="B")
    w.write_runs([plain(5), plain(6), plain(7)], Runs((0,), ("B",)))
    assert p.sent == [] and appended == [] and w.next == 8 and w.fill_to(8) == 0


def test_run_form_splits_a_batch_at_the_source_runs_and_refuses_a_second_origin():
    p = RecordingProducer()
    w, appended = run_writer(p, next_offset=0)
    with pytest.raises(ReplicaConflict, match="written in two streams"):
        w.write_runs([plain(0), plain(1), plain(2)], Runs((0, 2), ("C", "E")))
    assert appended == [(0, "C")] and w.next == 2 and len(p.sent) == 2


def test_run_form_records_already_in_place_of_another_origin_are_a_conflict():
    p = RecordingProducer()
    w, _ = run_writer(p, next_offset=3, origin="B", run_origin="B")
    with pytest.raises(ReplicaConflict, match="the replica holds B"):
        w.write_runs([plain(1)], Runs())
    assert p.sent == []


def test_run_form_fillers_carry_only_the_filler_mark():
    p = RecordingProducer()
    w, appended = run_writer(p)
    w.write_runs([plain(0), plain(3)], Runs())
    assert [s.get("headers") for s in p.sent] == [None, policy.FILLER_ONLY, policy.FILLER_ONLY, None]
    assert w.fill_to(6) == 2 and p.sent[-1]["headers"] == policy.FILLER_ONLY and appended == [(0, "A")]


def test_run_form_fillers_alone_append_their_run_first():
    p = RecordingProducer()
    w, appended = run_writer(p)
    assert w.fill_to(2) == 2 and appended == [(0, "A")]
