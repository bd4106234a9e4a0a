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
