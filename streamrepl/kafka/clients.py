"""Kafka clients built from a registry cluster entry.

Every client gets the registry's properties as they are (secrets included: librdkafka needs
them) and nothing here logs or formats a configuration, so a secret never leaves the client.
The base settings make a broker that does not answer a clear error within seconds, never a hang.
"""

from __future__ import annotations

import uuid
from typing import Any

from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from ..registry import Cluster

#: How long an operator's command waits for a broker before saying it does not answer.
REQUEST_TIMEOUT = 10.0

_BASE = {
    "socket.connection.setup.timeout.ms": 5000,
    "reconnect.backoff.max.ms": 1000,
    "log_level": 0,  # librdkafka's own stderr chatter is not for operators; errors reach us as exceptions
}


def client_config(cluster: Cluster, **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = dict(_BASE)
    conf.update(cluster.client_properties)
    conf.update(extra)
    return conf


def admin_client(cluster: Cluster, **extra: Any) -> AdminClient:
    return AdminClient(client_config(cluster, **extra))


def producer(cluster: Cluster, **extra: Any) -> Producer:
    conf = {"acks": "all", "enable.idempotence": True, "linger.ms": 5}
    conf.update(extra)
    return Producer(client_config(cluster, **conf))


def consumer(cluster: Cluster, group: str | None = None, **extra: Any) -> Consumer:
    conf: dict[str, Any] = {
        "group.id": group or f"streamrepl-reader-{uuid.uuid4()}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
        "isolation.level": "read_committed",
        # Readers want what is there now, not to wait for more: commands must feel instant.
        "fetch.wait.max.ms": 10,
    }
    conf.update(extra)
    return Consumer(client_config(cluster, **conf))
