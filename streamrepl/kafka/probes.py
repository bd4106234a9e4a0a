"""What a cluster's brokers do where streamrepl's safety depends on it, found out by asking the running cluster.

A registry names only `bootstrap.servers`; which broker runs behind it is not declared but probed (docs/brokers.md,
"What a broker does is probed, not declared"). Each probe answers one question with True, False or None (could not
decide), and the decisions in brokers.py take the behaviour safe on every broker where the answer is None:

  identity       who answers: the cluster id, the broker ids, and a fingerprint of the API version ranges the
                 broker offers (ApiVersions); a change of identity makes the cached answers stale
  exact_watermark  the high watermark right after one batch of records is the offset after its last record
                 (Tansu 0.6 reports the batch's base offset + 1)
  fetch_holds    an empty fetch is held for its fetch.wait.max.ms (noida-db answers at once)
  fetch_wakes    a held fetch is answered as soon as a record arrives (Apache Kafka; Tansu sees it at its next look)
  static_rejoin  a static member (group.instance.id) that comes back under its id takes its old place without a
                 rebalance: the other member keeps its partitions (Apache Kafka, noida-db; Tansu rebalances)
  clean_leave    a LeaveGroup that arrives while the group rebalances hands the partitions over (Tansu is left with
                 a departed leader for good)

The probes write a few records into the topic PROBE_TOPIC and use throwaway groups named PROBE_GROUP_PREFIX...; they
never touch a user's topics or groups. bench/probes/broker_probe.py measures the same differences on brokers it starts.
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
import struct
import subprocess
import sys
import time
import uuid
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

from ..registry import Cluster
from .admin import create_shared_topic, topics
from .clients import admin_client, client_config

PROBE_TOPIC = "__streamrepl_probe"
PROBE_GROUP_PREFIX = "__streamrepl-probe-"
#: The group probes share the topic's partitions between two members (round robin: two each).
PROBE_PARTITIONS = 4
#: Session timeouts the group probes try, shortest first: a broker may refuse one under its minimum
#: (noida-db and Apache Kafka by default refuse under 6 s).
PROBE_SESSIONS_MS = (1000, 6000)


@dataclass(frozen=True)
class BrokerTraits:
    """The probes' answers for one cluster (None: not probed, or the probe could not decide)."""

    identity: str = ""
    exact_watermark: bool | None = None
    fetch_holds: bool | None = None
    fetch_wakes: bool | None = None
    static_rejoin: bool | None = None
    clean_leave: bool | None = None
    #: when the probes ran (ms since the epoch); 0: never
    probed_at: int = 0
    #: why a probe could not decide, per probe
    notes: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> BrokerTraits:
        raw = json.loads(text)
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in known})

    def answers(self) -> dict[str, bool | None]:
        return {
            "exact_watermark": self.exact_watermark,
            "fetch_holds": self.fetch_holds,
            "fetch_wakes": self.fetch_wakes,
            "static_rejoin": self.static_rejoin,
            "clean_leave": self.clean_leave,
        }


UNKNOWN = BrokerTraits()


# -- identity ---------------------------------------------------------------------------------------------------
def _api_versions(host: str, port: int, timeout: float) -> list[tuple[int, int, int]]:
    """The (api key, min version, max version) triples a broker offers: one ApiVersions v0 request on a plain socket."""
    client_id = b"streamrepl-probe"
    body = struct.pack(">hhih", 18, 0, 7, len(client_id)) + client_id
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", _read(s, 4))[0]
        data = _read(s, size)
    _corr, error, n = struct.unpack(">ihi", data[:10])
    if error:
        raise OSError(f"ApiVersions error {error}")
    return [struct.unpack(">hhh", data[10 + 6 * i : 16 + 6 * i]) for i in range(n)]


def _read(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise OSError("connection closed")
        out += chunk
    return out


def identity(cluster: Cluster, timeout: float = 5.0) -> str:
    """`<cluster id>/<broker ids>/<api fingerprint>`: what the cluster says of itself (DescribeCluster), and a hash of
    the API version ranges of the first bootstrap broker where the connection is plain TCP ("-" otherwise)."""
    admin = admin_client(cluster)  # kept in a name: a client destroyed before its answer fails the future
    desc = admin.describe_cluster(request_timeout=timeout).result(timeout=timeout + 2)
    brokers = ",".join(str(n.id) for n in sorted(desc.nodes, key=lambda n: n.id))
    fingerprint = "-"
    if cluster.properties.get("security.protocol", "PLAINTEXT").upper() == "PLAINTEXT":
        first = cluster.bootstrap.split(",")[0].strip()
        host, _, port = first.rpartition(":")
        try:
            ranges = sorted(_api_versions(host.strip("[]"), int(port), timeout))
            fingerprint = hashlib.sha256(repr(ranges).encode()).hexdigest()[:12]
        except (OSError, ValueError, struct.error):
            pass
    return f"{desc.cluster_id}/{brokers}/{fingerprint}"


# -- the probes -------------------------------------------------------------------------------------------------
def probe_partition(cluster: Cluster) -> TopicPartition:
    if PROBE_TOPIC not in topics(cluster):
        create_shared_topic(cluster, PROBE_TOPIC, PROBE_PARTITIONS)
    return TopicPartition(PROBE_TOPIC, 0)


def _producer(cluster: Cluster, **extra: Any) -> Producer:
    return Producer(client_config(cluster, **{"acks": "all", "enable.idempotence": True, **extra}))


def _consumer(cluster: Cluster, **extra: Any) -> Consumer:
    conf = {"group.id": f"{PROBE_GROUP_PREFIX}{uuid.uuid4().hex[:12]}", "enable.auto.commit": False}
    conf.update(extra)
    return Consumer(client_config(cluster, **conf))


def probe_watermark(cluster: Cluster, tp: TopicPartition, records: int = 5) -> bool:
    """Whether the high watermark right after one batch of `records` is the offset after the batch's last record."""
    offsets: list[int] = []

    def delivered(err: KafkaError | None, msg: Any) -> None:
        if err is None:
            offsets.append(msg.offset())

    p = _producer(cluster, **{"linger.ms": 200})
    for i in range(records):
        p.produce(tp.topic, value=b"watermark probe %d" % i, partition=tp.partition, on_delivery=delivered)
    if p.flush(10) or len(offsets) != records:
        raise TimeoutError("the probe's records were not acknowledged")
    c = _consumer(cluster)
    try:
        _low, high = c.get_watermark_offsets(tp, timeout=5, cached=False)
    finally:
        c.close()
    return bool(high == max(offsets) + 1)


def probe_fetch(cluster: Cluster, tp: TopicPartition, wait_ms: int = 1000, tries: int = 3) -> tuple[bool, bool]:
    """(holds, wakes): whether an empty fetch is held for its wait (counted from the client's statistics: a broker
    that answers at once is fetched from hundreds of times a second), and whether a record that arrives while a fetch
    waits is delivered well before the wait is over."""
    fetches: list[int] = []

    def stats(text: str) -> None:
        for b in json.loads(text).get("brokers", {}).values():
            if b.get("nodeid", -1) >= 0:
                fetches.append(int(b.get("req", {}).get("Fetch", 0)))

    c = _consumer(cluster, **{"fetch.wait.max.ms": wait_ms, "statistics.interval.ms": 500, "stats_cb": stats})
    p = _producer(cluster, **{"linger.ms": 0})
    try:
        _low, high = c.get_watermark_offsets(tp, timeout=5, cached=False)
        c.assign([TopicPartition(tp.topic, tp.partition, high)])
        # The watermark may be short (see probe_watermark): read on to the real end first.
        _drain(c, 1.0)
        fetches.clear()
        _drain(c, 1.6)
        holds = len(fetches) >= 2 and fetches[-1] - fetches[0] <= 6  # about 1 s apart: a held fetch is ~1 a second
        late: list[float] = []
        for _ in range(tries):
            _drain(c, 0.3 * wait_ms / 1000)  # a fetch is waiting now
            sent = time.monotonic()
            p.produce(tp.topic, value=b"fetch probe", partition=tp.partition)
            p.flush(5)
            seen = _first_record(c, 2 * wait_ms / 1000 + 1)
            late.append(seen - sent if seen is not None else float("inf"))
        # Every try: Tansu's answer came 26 ms after one record and 199 ms after the next (its next look).
        wakes = max(late) < 0.1 * wait_ms / 1000
        return holds, wakes
    finally:
        c.close()


def _drain(c: Consumer, seconds: float) -> None:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        c.poll(0.05)


def _first_record(c: Consumer, seconds: float) -> float | None:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        m = c.poll(0.01)
        if m is not None and m.error() is None:
            return time.monotonic()
    return None


class _Member:
    """A member of a probe group, polled by the probe; counts its rebalances."""

    def __init__(self, cluster: Cluster, group: str, session_ms: int, instance: str | None = None):
        conf: dict[str, Any] = {
            "session.timeout.ms": session_ms,
            "heartbeat.interval.ms": max(100, session_ms // 5),
            "partition.assignment.strategy": "roundrobin",
        }
        if instance is not None:
            conf["group.instance.id"] = instance
        self.consumer = _consumer(cluster, **{**conf, "group.id": group})
        self.revoked = 0
        self.owned: set[int] = set()
        self.refused = ""
        self.consumer.subscribe([PROBE_TOPIC], on_assign=self._assigned, on_revoke=self._revoked)

    def _assigned(self, _c: Any, parts: list[TopicPartition]) -> None:
        self.owned = {tp.partition for tp in parts}

    def _revoked(self, _c: Any, parts: list[TopicPartition]) -> None:
        self.revoked += 1
        self.owned = set()

    def poll(self) -> None:
        try:
            m = self.consumer.poll(0.02)
        except KafkaException as e:
            self.refused = e.args[0].str()
            return
        err = m.error() if m is not None else None
        if err is not None and err.code() == KafkaError.INVALID_SESSION_TIMEOUT:
            self.refused = err.str()


def _until(members: list[_Member], done: Any, seconds: float) -> bool:
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        for m in members:
            m.poll()
            if m.refused:
                raise ValueError(m.refused)
        if done():
            return True
    return False


def _group_probe(cluster: Cluster, run: Any) -> bool | None:
    """Run a group probe with the shortest session the broker accepts; None if none worked."""
    for session_ms in PROBE_SESSIONS_MS:
        try:
            answer: bool | None = run(session_ms)
            return answer
        except ValueError:
            continue  # the broker refused the session timeout: try the next
    return None


def probe_static_rejoin(cluster: Cluster) -> bool | None:
    """A dynamic member and a static one (joined second, so that it is not the group's leader, whose return may
    rebalance by design) share the probe topic; the static member goes away without leaving and comes back under its
    instance id: honoured when it owns its partitions again and the dynamic member saw no rebalance meanwhile."""

    def run(session_ms: int) -> bool | None:
        group = f"{PROBE_GROUP_PREFIX}{uuid.uuid4().hex[:12]}"
        instance = f"{group}-static"
        b = _Member(cluster, group, session_ms)
        members = [b]
        try:
            if not _until(members, lambda: len(b.owned) == PROBE_PARTITIONS, 6 * session_ms / 1000 + 2):
                return None
            a = _Member(cluster, group, session_ms, instance)
            members = [a, b]
            if not _until(members, lambda: bool(a.owned and b.owned), 2 * session_ms / 1000 + 2):
                # Tansu: a static member joining a group never got a share (a dynamic one does within a session).
                return False
            _until(members, lambda: False, min(1.0, session_ms / 1000))  # settled
            had, revoked = a.owned, b.revoked
            a.consumer.close()  # a static member's close sends no LeaveGroup (KIP-345): it just went away
            again = _Member(cluster, group, session_ms, instance)
            members = [again, b]
            if not _until(members, lambda: again.owned == had or b.revoked > revoked, 4 * session_ms / 1000 + 2):
                return False
            _until(members, lambda: False, min(1.0, session_ms / 1000))  # a rebalance that follows shows now
            return b.revoked == revoked
        finally:
            for m in members:
                m.consumer.close()

    return _group_probe(cluster, run)


def probe_clean_leave(cluster: Cluster) -> bool | None:
    """Two members share the probe group; a third joins and, once the group rebalances for it (the others' partitions
    are revoked), the first leaves (LeaveGroup): clean when the two left share the partitions within a few sessions."""

    def run(session_ms: int) -> bool | None:
        group = f"{PROBE_GROUP_PREFIX}{uuid.uuid4().hex[:12]}"
        a = _Member(cluster, group, session_ms)
        b = _Member(cluster, group, session_ms)
        members = [a, b]
        try:
            if not _until(members, lambda: bool(a.owned and b.owned), 6 * session_ms / 1000 + 2):
                return None
            _until(members, lambda: False, min(1.0, session_ms / 1000))
            revoked = b.revoked
            c = _Member(cluster, group, session_ms)
            members.append(c)
            if not _until(members, lambda: b.revoked > revoked, 4 * session_ms / 1000 + 2):
                return None
            a.consumer.close()  # LeaveGroup, during the rebalance
            members = [b, c]
            return _until(
                members,
                lambda: bool(b.owned and c.owned and len(b.owned | c.owned) == PROBE_PARTITIONS),
                5 * session_ms / 1000 + 3,
            )
        finally:
            for m in members:
                m.consumer.close()

    return _group_probe(cluster, run)


def now_ms() -> int:
    return int(time.time() * 1000)


def attempt(fn: Any, *args: Any) -> tuple[Any, str]:
    """(fn's answer, ""), or (None, why) when it failed."""
    try:
        return fn(*args), ""
    except (KafkaException, TimeoutError, OSError, ValueError) as e:
        return None, f"{type(e).__name__}: {e}"[:200]


#: The group probes, by the name a child process is given (run_isolated).
GROUP_PROBES = {"static_rejoin": probe_static_rejoin, "clean_leave": probe_clean_leave}
#: How long a group probe may take before its process is killed and its answer is unknown.
ISOLATED_TIMEOUT = 90.0


def run_isolated(name: str, cluster: Cluster, timeout: float = ISOLATED_TIMEOUT) -> bool | None:
    """Run group probe `name` in a child process. Closing a consumer during a rebalance can hang inside librdkafka
    with the GIL held (librdkafka issue 4884: rd_kafka_assign from the close's rebalance callback): in the gateway's
    own process that froze every thread (seen on noida-db, the LeaveGroup probe). A child that hangs is killed, and the
    answer is unknown. The cluster's properties go to the child on stdin (they hold secrets: never on a command line)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "streamrepl.kafka.probes", name, cluster.name],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        out, _ = proc.communicate(json.dumps(cluster.properties), timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise TimeoutError(f"the {name} probe did not finish within {timeout:.0f} s") from None
    if proc.returncode != 0:
        raise OSError(f"the {name} probe failed (exit {proc.returncode})")
    answer: bool | None = json.loads(out.strip().splitlines()[-1])
    return answer


def _child(argv: list[str]) -> None:
    name, cluster_name = argv
    cluster = Cluster(cluster_name, json.loads(sys.stdin.read()))
    print(json.dumps(GROUP_PROBES[name](cluster)), flush=True)
    os._exit(0)  # no destructor of a client left over: a hang there is what this process is for


if __name__ == "__main__":
    _child(sys.argv[1:])
