"""Unit tests of the offset-preserving writer's decisions (no broker: a recording producer)."""

from __future__ import annotations

import pytest
from support.fakes import Message, RecordingProducer

from streamrepl import policy
from streamrepl.applier import OffsetPreservingWriter, ReplicaConflict


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
