"""What differs between the brokers streamrepl has met, where it changes what streamrepl does (README, "Brokers").

Found out with bench/broker_probe.py, not assumed; the registry says which broker a cluster runs
(`streamrepl.broker`, written by `local up`; "kafka" when a registry names none).
"""

from __future__ import annotations

from ..registry import Cluster


def leaves_group_safely(cluster: Cluster) -> bool:
    """Whether a gateway stopping on purpose may send LeaveGroup, so that its slots move at once.

    Tansu wedges a group for good when a LeaveGroup arrives during a rebalance: there a planned stop lets the session
    expire instead (a session's wait). noida-db and Apache Kafka hand the partitions over in under a second, and
    noida-db never expires a member that stopped heartbeating: without LeaveGroup its slots would stay held for good.
    """
    return cluster.broker != "tansu"


def honours_static_membership(cluster: Cluster) -> bool:
    """Whether gateways should join their group as static members (group.instance.id = the gateway id, KIP-345).

    A static member that comes back under the same id takes its old place at once, without a rebalance. That is the
    only way out on noida-db, whose coordinator never expires a member that died: there a crashed gateway started
    again got nothing (its join waited for the dead member for good, and the other gateways gave up their slots
    too); as a static member it has its slots back within a second (probed: 0.02 s). Tansu accepts the id but does
    not honour it (the member is revoked and the group rebalances as if it were new), so it is left out there.
    Apache Kafka honours it since 2.3.
    """
    return cluster.broker != "tansu"


def watermark_is_exact(cluster: Cluster) -> bool:
    """Whether the broker's high watermark is the offset after the last record, so that a partition's end need not be
    read (`reading.true_ends`). Tansu reports the base offset of the last batch + 1 (1 after one batch of 20
    records); noida-db and Apache Kafka report the end (20), transaction markers included."""
    return cluster.broker != "tansu"


def busy_fetch_wait_ms(cluster: Cluster) -> int:
    """How long a fetch of the source partitions that carry records may wait at `cluster` (fetch.wait.max.ms).

    Where the broker answers a waiting fetch as soon as records arrive (Apache Kafka), the wait costs no latency.
    Tansu sees them only at its next look, which comes later the longer the wait: 10 ms there (a 100 ms wait put
    the gateway's median latency at 5,000 records/s from about 52 to about 70 ms; BENCHMARKS.md, scale).
    """
    return 500 if cluster.broker not in ("tansu", "noida") else 10


def quiet_end_check_ms(cluster: Cluster) -> int:
    """How often the ends of quiet source partitions, which are not fetched, are asked for (replication/quiet.py).

    One ListOffsets round for 800 idle partitions (4 requests of 200), measured with bench/idle_fetch_probe.py: on
    Tansu about 3 % of a core at one round every 100 ms, 6 % every 50 ms, 14 % every 20 ms (fetching them cost 91 %
    at a 10 ms wait, 33 % at 100 ms); on noida-db 0.5 %, 1.1 % and 2.2 % (fetching them: 25-35 % at any wait); the
    client about as much as Tansu. A record into a quiet partition is seen after about half the period plus the
    request (p50 40-77 ms at 100 ms). Apache Kafka answers ListOffsets from memory as well.
    """
    return 100
