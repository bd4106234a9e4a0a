"""The plan watcher's change poll when a cluster's metadata topic could not be read (issue 28).

A gateway started before its destination's first stream found no metadata topic there, and its kept end-check
client went on answering "unknown partition" after the topic was made (seen through a 50 ms delay line: every end
check failed for as long as the gateway ran). The watcher then never saw a change in that cluster, waited
REFRESH_SECONDS and read everything on each pass: `replica resume` took 1.8-2.4 s to its first record instead of
0.6-0.7 s. A client whose end check failed is replaced.
"""

from __future__ import annotations

from typing import Any

from streamrepl.kafka import KafkaError, KafkaException, TopicPartition
from streamrepl.registry import Cluster
from streamrepl.replication.watcher import PlanWatcher

NY = Cluster("ny", {"bootstrap.servers": "127.0.0.1:1"})


class Clients:
    """The first client made never finds the topic (as the kept one did); those made after it do."""

    def __init__(self) -> None:
        self.made = 0
        self.closed = 0

    def consumer(self, cluster: Cluster) -> Any:
        clients = self
        clients.made += 1
        stale = clients.made == 1

        class Watch:
            def offsets_for_times(self, tps: list[TopicPartition], timeout: float) -> list[TopicPartition]:
                if stale:
                    raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION))
                return [TopicPartition(tp.topic, tp.partition, 3) for tp in tps]

            def close(self) -> None:
                clients.closed += 1

        return Watch()


def test_a_client_whose_end_check_failed_is_replaced() -> None:
    clients = Clients()
    w = PlanWatcher(planner=None, new_consumer=clients.consumer)  # type: ignore[arg-type]  # only its end checks
    assert w._metadata_ends([NY]) == {"ny": -1}
    assert w._metadata_ends([NY]) == {"ny": 3}
    assert w._metadata_ends([NY]) == {"ny": 3}
    assert (clients.made, clients.closed) == (2, 1)  # the failed one closed; the good one kept
