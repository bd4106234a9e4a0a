"""What differs between the embedded brokers streamrepl can start (Tansu and noida-db), measured.

    .venv/bin/python bench/probes/broker_probe.py [tansu] [noida]        (both by default)

For each broker kind it starts one broker in a private state directory (as `streamrepl local up` does) and
prints, one line each:
  start        seconds until the broker answers, and its resident memory idle (VmRSS)
  session      whether a consumer may use a 2 s session timeout (the tests' fast joins) or is refused
  join         seconds until a second member of a group gets its share of partitions from the first
  leave        seconds until a member that closes (LeaveGroup) has its partitions handed to the other
  leave+join   the same, when the LeaveGroup arrives while the group rebalances for a third member's join
  frozen       seconds until two members share the partitions again after the broker was frozen (SIGSTOP)
               for longer than their session, and the group's members as the broker then describes them
  kill         seconds until a member that is SIGKILLed has its partitions handed to the other (capped)
  watermark    the high watermark right after a batch of records and after single records, against the
               number written (Tansu reports the base offset of the last batch + 1: streamrepl reads past it,
               streamrepl.kafka.reading.true_ends)
  transactions offsets of a committed and an aborted transaction and a plain record after them: whether the
               commit/abort markers take offsets, and what read_committed returns
  retention    whether records dated 2023 (older than the 7-day default retention.ms) are deleted, alone in a
               partition and followed by a record of now
Group probes use a 6 s session timeout (the least noida-db accepts) and a 0.5 s heartbeat, and the eager
`range` assignor librdkafka uses by default.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from streamrepl.local import EphemeralClusters  # noqa: E402

GROUP_CONF = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500, "auto.offset.reset": "earliest"}
KILL_CAP = 30.0  # seconds to wait for a killed member's partitions before calling them lost
PARTITIONS = 4
RETENTION_WAIT = 30.0  # seconds to watch for a record older than retention.ms being deleted

# A group member in a process of its own (so that it can be SIGKILLed): prints "assigned N" once it owns
# partitions, and closes (LeaveGroup) when it reads "close" on stdin.
MEMBER = r"""
import json, select, sys
from confluent_kafka import Consumer
bs, topic, group, conf = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
c = Consumer(dict(conf, **{"bootstrap.servers": bs, "group.id": group}))
c.subscribe([topic])
told = False
while True:
    c.poll(0.1)
    if not told and c.assignment():
        print("assigned", len(c.assignment()), flush=True)
        told = True
    if select.select([sys.stdin], [], [], 0)[0] and sys.stdin.readline().strip() == "close":
        c.close()
        print("closed", flush=True)
        break
"""


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def new_topic(bs: str, partitions: int = PARTITIONS) -> str:
    name = f"probe-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bs})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(10)
    return name


def start_member(bs: str, topic: str, group: str) -> subprocess.Popen[str]:
    import json

    proc = subprocess.Popen(
        [sys.executable, "-c", MEMBER, bs, topic, group, json.dumps(GROUP_CONF)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line.startswith("assigned"), f"the first member did not join: {line!r}"
    return proc


def wait_owned(c: Consumer, want: int, limit: float) -> float | None:
    """Seconds until `c` owns `want` partitions (polling it meanwhile), or None after `limit`."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        c.poll(0.1)
        if len(c.assignment()) == want:
            return time.monotonic() - started
    return None


def second_member(bs: str, topic: str, group: str) -> tuple[Consumer, float | None]:
    c = Consumer(dict(GROUP_CONF, **{"bootstrap.servers": bs, "group.id": group}))
    c.subscribe([topic])
    return c, wait_owned(c, PARTITIONS // 2, KILL_CAP)


def seconds(t: float | None) -> str:
    return f"{t:.2f} s" if t is not None else f"never (not within {KILL_CAP:.0f} s)"


def probe_session(bs: str, topic: str) -> str:
    c = Consumer({"bootstrap.servers": bs, "group.id": f"g-{uuid.uuid4().hex[:6]}", "session.timeout.ms": 2000})
    c.subscribe([topic])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is not None:
                return f"2 s refused: {m.error().name()}"
            if c.assignment():
                return "2 s accepted"
        return "2 s: no assignment and no error within 10 s"
    except KafkaException as e:
        return f"2 s refused: {e.args[0].name()}"
    finally:
        c.close()


def probe_leave(bs: str, topic: str, kill: bool) -> tuple[float | None, float | None]:
    """(join, handoff) seconds: B's share after joining A's group, then all of A's after A leaves or dies."""
    group = f"g-{uuid.uuid4().hex[:6]}"
    a = start_member(bs, topic, group)
    b, joined = second_member(bs, topic, group)
    try:
        if joined is None:
            return None, None
        if kill:
            a.send_signal(signal.SIGKILL)
        else:
            assert a.stdin is not None and a.stdout is not None
            a.stdin.write("close\n")
            a.stdin.flush()
        return joined, wait_owned(b, PARTITIONS, KILL_CAP)
    finally:
        a.kill()
        a.wait()
        b.close()


def probe_leave_in_rebalance(bs: str, topic: str) -> float | None:
    """Seconds until the two members left own every partition, when a third member's LeaveGroup arrives while
    the group rebalances (for a new member's join); None if they never do (Tansu is known to be left with a
    departed leader for good: the gateways do not send LeaveGroup on SIGTERM for that reason)."""
    group = f"g-{uuid.uuid4().hex[:6]}"
    a = start_member(bs, topic, group)
    b, joined = second_member(bs, topic, group)
    c = Consumer(dict(GROUP_CONF, **{"bootstrap.servers": bs, "group.id": group}))
    try:
        if joined is None:
            return None
        c.subscribe([topic])
        c.poll(0.05)  # sends the JoinGroup: the group starts rebalancing
        assert a.stdin is not None
        a.stdin.write("close\n")
        a.stdin.flush()
        started = time.monotonic()
        while time.monotonic() - started < KILL_CAP:
            b.poll(0.05)
            c.poll(0.05)
            owned = len(b.assignment()) + len(c.assignment())
            if owned == PARTITIONS and b.assignment() and c.assignment():
                return time.monotonic() - started
        return None
    finally:
        a.kill()
        a.wait()
        b.close()
        c.close()


def probe_broker_frozen(bs: str, topic: str, broker_pid: int) -> tuple[float | None, str]:
    """Two members share a topic; the broker is frozen (SIGSTOP) for longer than their session, then thawed.
    Seconds until they share every partition again (None if not within the cap), and the group's members
    as the broker describes them then."""
    group = f"g-{uuid.uuid4().hex[:6]}"
    members = [Consumer(dict(GROUP_CONF, **{"bootstrap.servers": bs, "group.id": group})) for _ in range(2)]
    for m in members:
        m.subscribe([topic])
    try:

        def shared() -> bool:
            for m in members:
                m.poll(0.05)
            return all(m.assignment() for m in members) and sum(len(m.assignment()) for m in members) == PARTITIONS

        deadline = time.monotonic() + KILL_CAP
        while not shared() and time.monotonic() < deadline:
            pass
        os.kill(broker_pid, signal.SIGSTOP)
        try:
            frozen_until = time.monotonic() + 10  # past the 6 s session
            while time.monotonic() < frozen_until:
                for m in members:
                    m.poll(0.1)
        finally:
            os.kill(broker_pid, signal.SIGCONT)
        started = time.monotonic()
        back: float | None = None
        while time.monotonic() - started < KILL_CAP:
            if shared():
                back = time.monotonic() - started
                break
        admin = AdminClient({"bootstrap.servers": bs})  # kept in a name: a dropped client fails its futures
        try:
            described = admin.describe_consumer_groups([group])[group].result(10)
            return back, f"{len(described.members)} members, state {described.state.name}"
        except Exception as e:  # noqa: BLE001 - what the broker answers (or not) is the finding
            return back, f"not described ({type(e).__name__}: {e})"
    finally:
        for m in members:
            m.close()


def end_offsets(bs: str, topic: str, partition: int = 0) -> tuple[int, int]:
    c = Consumer({"bootstrap.servers": bs, "group.id": "probe-watermarks"})
    try:
        low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10, cached=False)
        return int(low), int(high)
    finally:
        c.close()


def read_all(bs: str, topic: str, isolation: str, partition: int = 0) -> list[tuple[int, bytes]]:
    c = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": "probe-read",
            "enable.partition.eof": True,
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )
    c.assign([TopicPartition(topic, partition, 0)])
    out: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 10
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error() is not None:
                if m.error().code() == KafkaError._PARTITION_EOF:
                    break
                raise KafkaException(m.error())
            out.append((m.offset(), m.value()))
        return out
    finally:
        c.close()


def probe_watermark(bs: str) -> str:
    topic = new_topic(bs, 1)
    p = Producer({"bootstrap.servers": bs, "linger.ms": 200})
    for i in range(20):
        p.produce(topic, value=b"b%d" % i, partition=0)
    p.flush(10)
    _, after_batch = end_offsets(bs, topic)
    single = Producer({"bootstrap.servers": bs, "linger.ms": 0})
    for i in range(3):
        single.produce(topic, value=b"s%d" % i, partition=0)
        single.flush(10)
    _, after_singles = end_offsets(bs, topic)
    return (
        f"after one batch of 20: high {after_batch} (written 20); "
        f"after 3 more single records: high {after_singles} (written 23)"
    )


def probe_transactions(bs: str) -> str:
    topic = new_topic(bs, 1)
    tp = Producer({"bootstrap.servers": bs, "transactional.id": f"probe-{uuid.uuid4().hex[:6]}"})
    try:
        tp.init_transactions(10)
        tp.begin_transaction()
        for i in range(3):
            tp.produce(topic, value=b"committed%d" % i, partition=0)
        tp.commit_transaction(10)
        tp.begin_transaction()
        for i in range(2):
            tp.produce(topic, value=b"aborted%d" % i, partition=0)
        tp.flush(10)
        tp.abort_transaction(10)
    except KafkaException as e:
        return f"transactions refused: {e.args[0].name()} ({e.args[0].str()})"
    plain = Producer({"bootstrap.servers": bs})
    plain.produce(topic, value=b"plain", partition=0)
    plain.flush(10)
    _, high = end_offsets(bs, topic)
    committed = read_all(bs, topic, "read_committed")
    uncommitted = read_all(bs, topic, "read_uncommitted")

    def show(records: list[tuple[int, bytes]]) -> str:
        return " ".join(f"{o}:{v.decode()}" for o, v in records)

    return (
        f"3 committed, 2 aborted, 1 plain (6 records): high {high}; "
        f"read_committed [{show(committed)}]; read_uncommitted [{show(uncommitted)}]"
    )


def probe_retention(bs: str) -> str:
    """Partition 0 holds only records dated 2023; partition 1 the same records and then one of now."""
    topic = new_topic(bs, 2)
    p = Producer({"bootstrap.servers": bs, "linger.ms": 0})
    for partition in (0, 1):
        for i in range(3):
            p.produce(topic, value=b"old", partition=partition, timestamp=1_700_000_000_000 + i)
            p.flush(10)
    p.produce(topic, value=b"new", partition=1, timestamp=int(time.time() * 1000))
    p.flush(10)
    started = time.monotonic()
    while time.monotonic() - started < RETENTION_WAIT:
        if end_offsets(bs, topic, 0)[0] > 0:
            break
        time.sleep(0.5)
    waited = time.monotonic() - started
    only_old, mixed = end_offsets(bs, topic, 0), end_offsets(bs, topic, 1)
    return (
        f"after {waited:.1f} s: 3 records dated 2023 alone: low/high {only_old}; "
        f"the same followed by one of now: low/high {mixed}"
    )


def probe(kind: str) -> None:
    print(f"== {kind}", flush=True)
    started = time.monotonic()
    with EphemeralClusters(["probe"], broker=kind) as ec:
        ready = time.monotonic() - started
        broker = ec.brokers["probe"]
        time.sleep(1.0)
        print(f"start        {ready:.2f} s to answer; idle RSS {rss_mb(broker.pid):.1f} MB", flush=True)
        bs = broker.bootstrap
        topic = new_topic(bs)
        print(f"session      {probe_session(bs, topic)}", flush=True)
        joined, left = probe_leave(bs, topic, kill=False)
        print(f"join         {seconds(joined)} for a second member to get {PARTITIONS // 2} of {PARTITIONS}")
        print(f"leave        {seconds(left)} for the remaining member to own all {PARTITIONS}", flush=True)
        rebalancing = probe_leave_in_rebalance(bs, new_topic(bs))
        print(f"leave+join   {seconds(rebalancing)} for the two members left to share all {PARTITIONS}", flush=True)
        back, described = probe_broker_frozen(bs, new_topic(bs), broker.pid)
        print(
            f"frozen       {seconds(back)} for two members to share all {PARTITIONS} again after the broker was"
            f" frozen 10 s; the group then: {described}",
            flush=True,
        )
        joined, killed = probe_leave(bs, new_topic(bs), kill=True)
        print(f"kill         {seconds(killed)} (join before it: {seconds(joined)})", flush=True)
        print(f"watermark    {probe_watermark(bs)}", flush=True)
        print(f"transactions {probe_transactions(bs)}", flush=True)
        print(f"retention    {probe_retention(bs)}", flush=True)
        print(f"memory       RSS after the probes {rss_mb(broker.pid):.1f} MB", flush=True)


if __name__ == "__main__":
    for name in sys.argv[1:] or ["tansu", "noida"]:
        probe(name)
