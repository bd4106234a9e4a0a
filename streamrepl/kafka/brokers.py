"""What streamrepl does differently by broker, decided from what the cluster was found to do (probes.py).

Nothing here trusts a name: each decision reads the probes' answer for the cluster, lets a registry property that
names that decision override it (OVERRIDES; `cluster list` shows where one contradicts a probe), and where the
answer is unknown (not probed in this process, or the probe could not decide) takes what is safe on every broker.
The answers are known to a process once something gave them (`learn`): the gateway probes, or reads the answers
cached in the cluster, before it joins its group; a CLI command that never learnt them takes the safe branch.
"""

from __future__ import annotations

import threading

from ..registry import Cluster
from .probes import UNKNOWN, BrokerTraits

#: registry property -> the probe answer it overrides
OVERRIDES = {
    "streamrepl.watermark.exact": "exact_watermark",
    "streamrepl.fetch.wakes": "fetch_wakes",
    "streamrepl.group.static": "static_rejoin",
    "streamrepl.group.leave": "clean_leave",
}

_known: dict[tuple[str, str], BrokerTraits] = {}
_lock = threading.Lock()


def _key(cluster: Cluster) -> tuple[str, str]:
    return cluster.name, cluster.properties.get("bootstrap.servers", "")


def learn(cluster: Cluster, traits: BrokerTraits) -> None:
    """What `cluster` was found to do, for this process's decisions."""
    with _lock:
        _known[_key(cluster)] = traits


def traits_of(cluster: Cluster) -> BrokerTraits:
    with _lock:
        return _known.get(_key(cluster), UNKNOWN)


def overridden(cluster: Cluster) -> dict[str, bool]:
    """The probe answers the registry overrides for `cluster` (answer name -> value)."""
    return {
        answer: cluster.properties[prop].lower() == "true"
        for prop, answer in OVERRIDES.items()
        if prop in cluster.properties
    }


def answer(cluster: Cluster, name: str) -> bool | None:
    """The registry's override of probe answer `name`, else the probe's answer (None: unknown)."""
    over = overridden(cluster)
    if name in over:
        return over[name]
    value: bool | None = traits_of(cluster).answers()[name]
    return value


def watermark_is_exact(cluster: Cluster) -> bool:
    """Whether the broker's high watermark is the offset after the last record, so that a partition's end need not be
    read (`reading.true_ends`). Unknown: the end is read (Tansu reports the last batch's base offset + 1)."""
    return answer(cluster, "exact_watermark") is True


def honours_static_membership(cluster: Cluster) -> bool:
    """Whether gateways join their slot group as static members (group.instance.id = the gateway id, KIP-345).

    Static membership is what lets a gateway replace a dead one on a broker that never expires dead members (noida-db):
    a member that joins under a dead member's instance id takes its place at once (membership.SlotGroup adopts the
    seats of dead gateways), and the broker fences the old holder of the id. It is left out only where the probe saw
    the broker rebalance on a static member's return (Tansu), because there a new static member never got into a group
    holding a dead static member, while dynamic members are expired after their session. Unknown: static (with
    adoption, which needs no expiry)."""
    return answer(cluster, "static_rejoin") is not False


def leaves_group_safely(cluster: Cluster) -> bool:
    """Whether a gateway stopping on purpose may send LeaveGroup, so that its slots move at once.

    Only where the probe saw a LeaveGroup during a rebalance hand the partitions over, and the members are static
    (a stopped static member's seat is otherwise adopted: membership.py). Tansu once wedged a group for good when a
    LeaveGroup arrived during a rebalance, in an interleaving the probe does not always hit; its members are dynamic
    (honours_static_membership), so there a planned stop lets the session expire. Unknown: no LeaveGroup."""
    return answer(cluster, "clean_leave") is True and honours_static_membership(cluster)


def busy_fetch_wait_ms(cluster: Cluster) -> int:
    """How long a fetch of the source partitions that carry records may wait at `cluster` (fetch.wait.max.ms).

    Where a waiting fetch is answered as soon as records arrive (Apache Kafka) the wait costs no latency: 500 ms.
    Tansu sees them only at its next look, which comes later the longer the wait, and noida-db answers an empty fetch
    at once whatever the wait: 10 ms there (a 100 ms wait put the gateway's median latency at 5,000 records/s on Tansu
    from about 52 to about 70 ms; BENCHMARKS.md, scale). Unknown: 10 ms, right everywhere, dearer on Kafka.
    """
    holds = traits_of(cluster).fetch_holds
    wakes = answer(cluster, "fetch_wakes")
    if "fetch_wakes" in overridden(cluster):
        return 500 if wakes else 10
    return 500 if holds and wakes else 10


def quiet_end_check_ms(cluster: Cluster) -> int:
    """How often the ends of quiet source partitions, which are not fetched, are asked for (replication/quiet.py).

    One ListOffsets round for 800 idle partitions (4 requests of 200), measured with bench/probes/idle_fetch_probe.py: on
    Tansu about 3 % of a core at one round every 100 ms, 6 % every 50 ms, 14 % every 20 ms (fetching them cost 91 %
    at a 10 ms wait, 33 % at 100 ms); on noida-db 0.5 %, 1.1 % and 2.2 % (fetching them: 25-35 % at any wait); the
    client about as much as Tansu. A record into a quiet partition is seen after about half the period plus the
    request (p50 40-77 ms at 100 ms). Apache Kafka answers ListOffsets from memory as well.
    """
    return 100
