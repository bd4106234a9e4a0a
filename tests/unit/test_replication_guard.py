"""The replica guard (replication/guard.py) on its own, with fake clients: it answers with verdicts and changes
nothing else (the unit table fails or drops a partition, the write session restarts the writes: the mover acts)."""

from __future__ import annotations

from typing import Any

import pytest
from support.divergence import DKT, ORIGIN_SRC, SKT, LogConsumer, Producer, history, link, replicated

from streamrepl import kafka
from streamrepl.applier import OffsetPreservingWriter
from streamrepl.divergence import tail_of
from streamrepl.replication import guard as guard_module
from streamrepl.replication.guard import Conflict, Fail, LetGo, ReplicaGuard, Restart, Reverify, quiet_for_long
from streamrepl.replication.links import Unit
from streamrepl.replication.state import UnitState
from streamrepl.replication.stats import GatewayStats

UNIT = Unit(link().dst, "t", 0)


def rig(replica: list[Any], source: list[Any] | None = None) -> tuple[ReplicaGuard, UnitState, LogConsumer]:
    """A guard over a replica partition this gateway left at offset 10, everything acknowledged, quiet for long."""
    reader = LogConsumer({DKT: replica})
    probe = LogConsumer({SKT: source if source is not None else history(10)})
    guard = ReplicaGuard(reader, lambda cluster: probe, GatewayStats("test"))  # type: ignore[arg-type]
    writer = OffsetPreservingWriter(Producer(), DKT, 0, 10, "DST", "SRC", "SRC")  # type: ignore[arg-type]
    writer.acked = 10
    return guard, UnitState(UNIT, writer), reader


def test_an_end_where_this_gateway_left_it_is_no_news() -> None:
    guard, state, _ = rig(replicated(10))
    assert quiet_for_long(state, now=1e9, last_offset=10)
    assert guard.end_unchanged(state, "SRC") is True


def test_records_of_the_same_origin_past_the_end_mean_another_gateway_took_over() -> None:
    guard, state, _ = rig(replicated(12))
    assert guard.end_unchanged(state, "SRC") == LetGo()


def test_records_of_another_origin_past_the_end_are_a_conflict(monkeypatch: pytest.MonkeyPatch) -> None:
    guard, state, _ = rig(history(12, topic=DKT, headers=[("streamrepl.origin", b"OTHER")]))
    verdict = guard.end_unchanged(state, "SRC")
    assert isinstance(verdict, Conflict) and "past offset 10 where this gateway left it" in verdict.why


def test_an_end_below_where_this_gateway_left_it_restarts_the_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    guard, state, _ = rig(replicated(8))
    monkeypatch.setattr(kafka, "true_end", lambda c, tp, timeout: 8)  # not an under-counting watermark
    verdict = guard.end_unchanged(state, "SRC")
    assert isinstance(verdict, Restart) and "ends at offset 8, below offset 10" in verdict.why


def test_a_destination_that_does_not_answer_turns_the_end_checks_off_for_a_while() -> None:
    guard, state, reader = rig(replicated(12))
    reader.down = True
    assert guard.end_unchanged(state, "SRC") is True, "writes are checked on delivery meanwhile"
    reader.down = False
    assert guard.end_unchanged(state, "SRC") is True, f"not asked again for {guard_module.END_CHECKS_OFF_SECONDS} s"


def test_a_source_that_diverged_is_a_fail_verdict_and_a_source_down_is_asked_again_later() -> None:
    guard, state, _ = rig(replicated(10), source=history(12, ts=1_800_000_000_000))
    state.tail = tail_of(replicated(10)[-1], "DST")  # as the unit table reads it on acquire
    verdict = guard.check_source(state, link(), kafka.TopicPartition(SKT, 0))
    assert isinstance(verdict, Fail) and "diverged at offset 9" in verdict.error and guard.stats.divergences == 1
    probe = LogConsumer({SKT: history(10)})
    probe.down = True
    guard = ReplicaGuard(LogConsumer({}), lambda cluster: probe, GatewayStats("test"))  # type: ignore[arg-type]
    assert guard.check_source(state, link(), kafka.TopicPartition(SKT, 0)) == "down"


def test_source_records_reread_below_the_replicas_end_are_compared_now_or_before_the_feed_goes_on() -> None:
    """A sole feed reading its source below the replica's end again (the source shrank, or reset the feed's position):
    the source is compared with the replica now when it may be asked (nothing in flight, not asked a moment ago);
    else the feed must stop until it was compared (tests/sim seed 940: let go on unchecked, a source that shrank and
    then went quiet was never compared again, and `replica list` said up to date)."""
    guard, state, _ = rig(replicated(10))
    state.tail = tail_of(replicated(10)[-1], "DST")
    state.feeds[link().name] = (link(), kafka.TopicPartition(SKT, 0))
    batch = history(5)  # offsets 0-4, all below the replica's last offset 9
    state.checked_at = 0.0
    assert guard.check_reread(state, link(), batch) is True, "compared now: the source's records match"
    state.checked_at = 1e12  # compared a moment ago
    assert guard.check_reread(state, link(), batch) == Reverify()


def test_the_sources_of_partitions_taken_up_together_are_read_in_one_go() -> None:
    """A takeover of 4 partitions across a 50 ms line checked their sources one after another, 4-6 round trips each
    (issue 28): check_ahead reads them at once, and check_source then asks the source nothing more."""
    topics = [f"{SKT}.{i}" for i in range(4)]
    source = {t: history(10, topic=t) for t in topics}
    source[topics[3]] = history(10, tag="other", topic=topics[3])  # its record at offset 9 is not the replicated one
    probe = LogConsumer(source)
    guard = ReplicaGuard(LogConsumer({}), lambda cluster: probe, GatewayStats("test"))  # type: ignore[arg-type]
    states = []
    for i, topic in enumerate(topics):
        writer = OffsetPreservingWriter(Producer(), DKT, i, 10, "DST", "SRC", "SRC")  # type: ignore[arg-type]
        states.append(
            UnitState(
                Unit(link().dst, "t", i), writer, tail=tail_of(history(10, topic=topic, headers=ORIGIN_SRC)[9], "DST")
            )
        )
    checks = [(st, link(), kafka.TopicPartition(topic, 0)) for st, topic in zip(states, topics, strict=True)]

    guard.check_ahead(checks)
    asked = probe.requests
    verdicts = [guard.check_source(st, lk, tp) for st, lk, tp in checks]

    assert verdicts[:3] == [True, True, True]
    assert isinstance(verdicts[3], Fail), "a source that diverged is found as before"
    assert probe.requests == asked, "nothing asked of the source again"
    assert asked <= 2, f"{asked} requests for 4 partitions: not read one by one"
