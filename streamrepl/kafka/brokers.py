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
