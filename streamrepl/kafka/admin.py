"""Topics and their configuration: list, create, delete, grow, configure.

Each request waits at most REQUEST_TIMEOUT (plus a margin for the answer) and each failure
becomes one of our errors naming the cluster: AlreadyExists, NotFound, Unreachable, or a
StreamreplError with the broker's own words.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, NewTopic

from ..errors import AlreadyExists, InvalidArgument, NotFound, StreamreplError
from ..registry import Cluster
from .clients import REQUEST_TIMEOUT, admin_client
from .errors import TRANSPORT, unreachable

#: The settings of streamrepl's internal topics that keep the latest record per key.
COMPACTED = {"cleanup.policy": "compact"}


def topics(cluster: Cluster, client: AdminClient | None = None, timeout: float = REQUEST_TIMEOUT) -> dict[str, int]:
    """Kafka topic name -> partition count."""
    client = client or admin_client(cluster)
    try:
        md = client.list_topics(timeout=timeout)
    except KafkaException:
        raise unreachable(cluster, "listing topics") from None
    return {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}


def ping(cluster: Cluster, timeout: float = 5.0) -> bool:
    try:
        admin_client(cluster).list_topics(timeout=timeout)
        return True
    except KafkaException:
        return False


def _wait(futures: dict[Any, Any], cluster: Cluster, what: str) -> None:
    """Wait for every future, then raise the first failure: a caller that finds out what exists afterwards (a topic
    another process made first) must not look while some of its own are still being made."""
    first: StreamreplError | None = None
    for name, fut in futures.items():
        try:
            _result(fut, name, cluster, what)
        except StreamreplError as e:
            first = first or e
    if first is not None:
        raise first


def _result(fut: Any, name: Any, cluster: Cluster, what: str) -> None:
    try:
        fut.result(timeout=REQUEST_TIMEOUT + 2)
    except KafkaException as e:
        err = e.args[0]
        code = err.code() if isinstance(err, KafkaError) else None
        if code == KafkaError.TOPIC_ALREADY_EXISTS:
            raise AlreadyExists(f"Kafka topic '{name}' already exists on cluster '{cluster.name}'") from None
        if code == KafkaError.UNKNOWN_TOPIC_OR_PART:
            raise NotFound(f"Kafka topic '{name}' does not exist on cluster '{cluster.name}'") from None
        if code in TRANSPORT:
            raise unreachable(cluster, what) from None
        raise StreamreplError(f"{what} '{name}' failed on cluster '{cluster.name}': {err.str()}") from None
    except TimeoutError:
        raise unreachable(cluster, what) from None


def create_topics(
    cluster: Cluster, specs: Iterable[tuple[str, int, dict[str, str]]], client: AdminClient | None = None
) -> None:
    """Create each (name, partitions, configs) with the broker's default replication factor; with `client`, a kept
    one (a new client's first request costs: Tansu answers it with every topic of the cluster)."""
    new = [NewTopic(name, num_partitions=n, replication_factor=-1, config=conf) for name, n, conf in specs]
    if new:
        if client is None:
            client = admin_client(cluster)  # must outlive the futures, or librdkafka cancels them
        _wait(client.create_topics(new, request_timeout=REQUEST_TIMEOUT), cluster, "creating topic")


def create_shared_topic(
    cluster: Cluster, name: str, partitions: int = 1, configs: dict[str, str] | None = None
) -> None:
    """Create a topic that other processes (gateways, operators) may be creating at the same time."""
    try:
        create_topics(cluster, [(name, partitions, dict(configs or {}))])
    except Exception:  # noqa: BLE001 - another writer may have created it first
        if name not in topics(cluster):
            raise


def create_compacted_topic(cluster: Cluster, name: str) -> None:
    """Create an internal one-partition topic that keeps the latest record per key (see create_shared_topic)."""
    create_shared_topic(cluster, name, 1, COMPACTED)


def delete_topics(cluster: Cluster, names: list[str]) -> None:
    if names:
        client = admin_client(cluster)
        _wait(client.delete_topics(names, request_timeout=REQUEST_TIMEOUT), cluster, "deleting topic")


def add_partitions(cluster: Cluster, name: str, total: int) -> None:
    try:
        client = admin_client(cluster)
        _wait(client.create_partitions([NewPartitions(name, total)]), cluster, "adding partitions to")
    except StreamreplError as e:
        raise InvalidArgument(
            f"the broker of cluster '{cluster.name}' refused to add partitions to '{name}' ({e.message});"
            " some brokers (Tansu) cannot grow a topic"
        ) from None


def set_topic_configs(cluster: Cluster, names: Iterable[str], configs: dict[str, str]) -> None:
    if not configs:
        return
    resources = [
        ConfigResource(
            ConfigResource.Type.TOPIC,
            name,
            incremental_configs=[
                ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()
            ],
        )
        for name in names
    ]
    if resources:
        client = admin_client(cluster)
        _wait(client.incremental_alter_configs(resources), cluster, "configuring topic")
