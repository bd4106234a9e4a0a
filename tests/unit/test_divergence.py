"""Divergence (streamrepl/divergence.py) with fake clients: the comparison, the gateway's checks on acquire and
while running (replication/units.py, guard.py, mover.py), and copystream's check of a rerun; no broker."""

from __future__ import annotations

from confluent_kafka import TopicPartition
from support.divergence import DKT, DST, ORIGIN_SRC, SKT, SRC, LogConsumer, Producer, history, link, msg, replicated
from support.fakes import Message

from streamrepl import policy
from streamrepl.bulk.copystream import _foreign_end
from streamrepl.divergence import check, compare, filler_tail, resync_hint, tail_of
from streamrepl.replication.links import Plan, Unit
from streamrepl.replication.mover import Mover
from streamrepl.replication.stats import GatewayStats


# -- the comparison -----------------------------------------------------------------------------
def test_the_same_record_is_no_divergence_whichever_stream_it_was_read_from() -> None:
    plain = msg(9, b"x")  # as published in the source: no origin header
    copied = msg(9, b"x", headers=ORIGIN_SRC)  # as replicated: the origin header added
    assert tail_of(plain, "SRC") == tail_of(copied, "DST")
    assert compare(tail_of(copied, "DST"), 10, tail_of(plain, "SRC"), 12, "SRC", "DST") is None


def test_a_source_record_without_a_timestamp_matches_its_copy_stamped_when_it_was_copied() -> None:
    replica = tail_of(msg(9, b"x", ts=1_800_000_000_000, headers=ORIGIN_SRC), "DST")
    assert compare(replica, 10, tail_of(msg(9, b"x", ts=-1), "SRC"), 10, "SRC", "DST") is None
    assert compare(replica, 10, tail_of(msg(9, b"y", ts=-1), "SRC"), 10, "SRC", "DST") is not None


def test_another_timestamp_key_or_value_at_the_replicas_last_offset_is_a_divergence() -> None:
    replica = tail_of(msg(9, b"x", headers=ORIGIN_SRC), "DST")
    for other in (msg(9, b"x", ts=5), msg(9, b"y")):
        div = compare(replica, 10, tail_of(other, "SRC"), 12, "SRC", "DST")
        assert div is not None and (div.offset, div.source_end, div.replica_end) == (9, 12, 10)
        text = div.describe(
            "source /sf/s:t partition 0",
            "streamrepl diffstreams -src /sf/s -dst /ny/r",
            resync_hint("/sf/s", "/ny/r", "t"),
        )
        assert text.startswith("source /sf/s:t partition 0 diverged at offset 9: the source's record there is not")
        assert "(source end 12, replica end 10)" in text and "'streamrepl diffstreams -src /sf/s -dst /ny/r'" in text
        assert text.endswith(
            "then 'streamrepl stream replica resync -path /sf/s -replica /ny/r -topic t' to set the replica's"
            " records aside and copy the source again"
        )


def test_a_source_that_ends_below_a_record_it_gave_has_lost_it() -> None:
    replica = tail_of(msg(9, b"x", headers=ORIGIN_SRC), "DST")
    div = compare(replica, 10, None, 4, "SRC", "DST")
    assert div is not None and div.offset == 4 and "now ends at offset 4" in div.why
    # With several feeds, a record of a third origin may have come from the other one: the source may lag.
    third = tail_of(msg(9, b"x", headers=[(policy.ORIGIN, b"TOKYO")]), "DST")
    assert compare(third, 10, None, 4, "SRC", "DST", sole_feed=False) is None
    assert compare(third, 10, None, 4, "SRC", "DST", sole_feed=True) is not None


def test_what_is_not_a_divergence() -> None:
    own = tail_of(msg(9, b"x"), "DST")  # the replica's own record (multi-master): the source may lag behind it
    assert compare(own, 10, None, 3, "SRC", "DST") is None
    replica = tail_of(msg(9, b"x", headers=ORIGIN_SRC), "DST")
    assert compare(replica, 10, None, 10, "SRC", "DST") is None, "compacted away at the source: nothing to compare"
    assert compare(None, 0, None, 0, "SRC", "DST") is None, "an empty replica"
    assert compare(filler_tail("SRC"), 10, None, 10, "SRC", "DST") is None, "a filler over a marker"
    filler = msg(9, None, ts=0, headers=policy.filler_headers("SRC"))
    assert tail_of(filler, "DST") == filler_tail("SRC")
    div = compare(filler_tail("SRC"), 10, tail_of(msg(9, b"new"), "SRC"), 10, "SRC", "DST")
    assert div is not None, "a visible record where the source had none"


def test_check_reads_the_sources_end_and_its_record_at_the_replicas_last_offset() -> None:
    replica = tail_of(msg(9, b"v9", ts=1_700_000_000_009, headers=ORIGIN_SRC), "DST")
    source = LogConsumer({SKT: history(12)})
    assert check(source, _tp(SKT), 10, replica, "SRC", "DST") is None
    recreated = LogConsumer({SKT: history(12, ts=1_800_000_000_000)})
    div = check(recreated, _tp(SKT), 10, replica, "SRC", "DST")
    assert div is not None and div.offset == 9 and div.source_end == 12
    shorter = LogConsumer({SKT: history(3)})
    div = check(shorter, _tp(SKT), 10, replica, "SRC", "DST")
    assert div is not None and div.offset == 3 and div.source_end == 3


def _tp(topic: str) -> TopicPartition:
    return TopicPartition(topic, 0)


# -- the gateway --------------------------------------------------------------------------------
class Rig:
    """The replica ny:/r:t[0] holding `replica`, fed from sf:/s:t[0] holding `source`."""

    def __init__(self, replica: list[Message], source: list[Message], source_down: bool = False):
        self.feed = LogConsumer({SKT: []})  # its records are queued by the tests; it knows the topic
        self.probe = LogConsumer({SKT: source})
        self.probe.down = source_down

        self.reader = LogConsumer({DKT: replica})
        self.producer = Producer()
        self.stats = GatewayStats("test")
        self.failed: list[str] = []
        self.mover = Mover.assemble(
            self.reader,  # type: ignore[arg-type]
            self.stats,
            lambda cluster: self.feed,  # type: ignore[arg-type,return-value]
            lambda: self.producer,  # type: ignore[arg-type,return-value]
            1000,
            lambda u, e: self.failed.append(e),
            new_probe=lambda cluster: self.probe,  # type: ignore[arg-type,return-value]
        )
        self.table = self.mover.table
        self.unit = Unit(DST, "t", 0)
        plan = Plan([link()], {self.unit: [(link(), SKT)]}, {}, [])
        self.table.follow(plan, {DKT}, plan.units, True, self.producer)  # type: ignore[arg-type]


def test_a_partition_whose_source_was_recreated_fails_on_acquire_and_nothing_is_read_or_written() -> None:
    rig = Rig(replicated(10), history(12, ts=1_800_000_000_000))
    assert rig.unit in rig.table.errored and rig.unit not in rig.table.units
    assert rig.feed.assigned == [], "the source is not fed from"
    assert rig.stats.divergences == 1 and rig.stats.failures == 1
    (error,) = rig.failed
    assert error.startswith("source /sf/s:t partition 0 diverged at offset 9: "), error
    assert "(source end 12, replica end 10)" in error and "diffstreams -src /sf/s -dst /ny/r" in error


def test_a_partition_whose_source_lost_its_end_fails_on_acquire() -> None:
    rig = Rig(replicated(10), history(4))
    (error,) = rig.failed
    assert "diverged at offset 4: the source now ends at offset 4" in error


def test_a_partition_whose_source_holds_its_history_is_acquired_at_its_end() -> None:
    rig = Rig(replicated(10), history(12))
    assert rig.unit in rig.table.units and not rig.failed
    assert rig.feed.assigned == [(SKT, 0, 10)]


def test_a_source_that_does_not_answer_on_acquire_is_not_fed_from_until_it_was_compared() -> None:
    rig = Rig(replicated(10), history(12), source_down=True)
    state = rig.table.units[rig.unit]
    assert rig.feed.assigned == [] and not rig.failed and list(state.unverified) == [link().name]
    rig.probe.down = False
    rig.table._retry_at.clear()  # the retry's wait, passed
    rig.mover.move_once()
    assert rig.feed.assigned == [(SKT, 0, 10)] and not state.unverified
    assert rig.mover.feeds.link(link().name) == link()


def test_a_source_that_does_not_answer_on_acquire_and_diverged_meanwhile_fails_when_it_answers() -> None:
    rig = Rig(replicated(10), history(4), source_down=True)
    rig.probe.down = False
    rig.table._retry_at.clear()
    rig.mover.move_once()
    assert rig.feed.assigned == [] and rig.unit in rig.table.errored and rig.stats.divergences == 1


def test_a_running_partition_fed_a_new_history_below_its_end_stops_before_writing_it() -> None:
    """The source reset the feed's position (its topic re-created under the gateway): the records arrive from 0
    again; the one at the replica's last offset is not the replicated one, so the records after it are not
    appended."""
    rig = Rig(replicated(10), history(10))
    rig.feed.queued = history(12, ts=1_800_000_000_000)
    rig.mover.move_once()
    assert rig.producer.written == [], "nothing of the new history written"
    (error,) = rig.failed
    assert "diverged at offset 9: the source's record there is not the one replicated" in error
    assert rig.stats.divergences == 1


def test_records_written_while_running_are_what_later_rereads_compare_with() -> None:
    rig = Rig(replicated(10), history(10))
    rig.feed.queued = history(14)[10:]
    rig.mover.move_once()
    assert len(rig.producer.written) == 4 and not rig.failed
    rig.feed.queued = history(16)  # a second path, or a seek back: the same records are no divergence
    rig.mover.move_once()
    assert len(rig.producer.written) == 6 and not rig.failed
    rig.feed.queued = history(17, tag="w")[5:]
    rig.mover.move_once()
    assert len(rig.producer.written) == 6 and rig.failed


def test_a_running_partition_whose_source_now_ends_below_it_stops() -> None:
    rig = Rig(replicated(10), history(10))
    rig.probe.logs[SKT] = history(3)  # the source came back without records it had acknowledged
    rig.table.units[rig.unit].checked_at = 0.0
    rig.feed.queued = history(3)
    rig.mover.move_once()
    (error,) = rig.failed
    assert "diverged at offset 3: the source now ends at offset 3" in error


def test_a_source_broker_that_came_back_with_another_history_is_compared_before_its_records_are_written() -> None:
    """The source's broker crashed and came back without records the replica holds, and new records took their
    offsets and went past the replica's end before the feed fetched again: read on from the replica's end, the
    feed would append the new history after the old one (the chaos suite's source crash found replicas mixed so,
    with nothing reported). The lost connection stops the feed; the comparison sees the other record."""
    rig = Rig(replicated(10), history(10))
    new_history = history(14, tag="w")
    rig.probe.logs[SKT] = new_history
    rig.mover.feeds.source_lost("sf")  # what the source consumer's error_cb reports
    rig.feed.queued = new_history[10:]
    rig.mover.move_once()
    assert rig.producer.written == [], "nothing of the new history written"
    (error,) = rig.failed
    assert "diverged at offset 9: the source's record there is not the one replicated" in error


def test_a_source_broker_that_came_back_with_its_history_is_fed_again_from_the_replicas_end() -> None:
    rig = Rig(replicated(10), history(10))
    rig.probe.logs[SKT] = history(12)
    rig.mover.feeds.source_lost("sf")
    rig.mover.move_once()
    assert not rig.failed and rig.feed.assigned == [(SKT, 0, 10), (SKT, 0, 10)], "fed again from the replica's end"
    rig.feed.queued = history(12)[10:]
    rig.mover.move_once()
    assert len(rig.producer.written) == 2 and not rig.failed


# -- copystream ---------------------------------------------------------------------------------
def _rerun_check(copy: list[Message], source: list[Message]) -> str | None:
    src, dst = LogConsumer({SKT: source}), LogConsumer({DKT: copy})
    end = source[-1].offset() + 1 if source else 0
    est = copy[-1].offset() + 1 if copy else 0
    return _foreign_end(src, dst, SKT, DKT, 0, end, est, "SRC", "DST", (SRC, DST, "t"))  # type: ignore[arg-type]


def test_copystream_refuses_a_rerun_when_the_source_was_recreated() -> None:
    assert _rerun_check(replicated(10), history(15)) is None
    why = _rerun_check(replicated(10), history(15, ts=1_800_000_000_000))
    assert why is not None and why.startswith("source /sf/s:t partition 0 diverged at offset 9: "), why
    why = _rerun_check(replicated(10), history(2))
    assert why is not None and "diverged at offset 2: the source now ends at offset 2" in why
