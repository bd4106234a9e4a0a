"""The one place that talks to brokers.

Everything that opens a Kafka client goes through here, so timeouts, retries and
secret handling are decided once: a broker that does not answer gives a clear error
within seconds, never a hang, and no error text ever carries a registry secret.
"""

from __future__ import annotations

import errno
import time
import uuid
from collections.abc import Iterable
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    NewTopic,
)
from tenacity import retry, retry_if_exception, stop_after_delay, wait_exponential

from .errors import AlreadyExists, InvalidArgument, NotFound, StreamreplError, Unreachable
from .registry import Cluster

#: How long an operator's command waits for a broker before saying it does not answer.
REQUEST_TIMEOUT = 10.0

_BASE = {
    "socket.connection.setup.timeout.ms": 5000,
    "reconnect.backoff.max.ms": 1000,
    "log_level": 0,  # librdkafka's own stderr chatter is not for operators; errors reach us as exceptions
}


def client_config(cluster: Cluster, **extra: Any) -> dict[str, Any]:
    conf: dict[str, Any] = dict(_BASE)
    conf.update(cluster.properties)
    conf.update(extra)
    return conf


def admin(cluster: Cluster) -> AdminClient:
    return AdminClient(client_config(cluster))


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


def unreachable(cluster: Cluster, what: str = "") -> Unreachable:
    detail = f" while {what}" if what else ""
    return Unreachable(
        f"cluster '{cluster.name}' ({cluster.bootstrap}) does not answer{detail};"
        " check that its brokers are up and the registry's bootstrap.servers"
    )


def _transient(e: BaseException) -> bool:
    if isinstance(e, KafkaException):
        err = e.args[0] if e.args else None
        return isinstance(err, KafkaError) and bool(err.retriable())
    return False


#: Retries for transient broker errors: backoff, never a spin, and a bounded total time.
broker_retry = retry(
    retry=retry_if_exception(_transient),
    wait=wait_exponential(multiplier=0.1, max=2),
    stop=stop_after_delay(REQUEST_TIMEOUT),
    reraise=True,
)


def topics(cluster: Cluster, client: AdminClient | None = None, timeout: float = REQUEST_TIMEOUT) -> dict[str, int]:
    """Kafka topic name -> partition count."""
    client = client or admin(cluster)
    try:
        md = client.list_topics(timeout=timeout)
    except KafkaException:
        raise unreachable(cluster, "listing topics") from None
    return {name: len(t.partitions) for name, t in md.topics.items() if t.error is None}


def ping(cluster: Cluster, timeout: float = 5.0) -> bool:
    try:
        admin(cluster).list_topics(timeout=timeout)
        return True
    except KafkaException:
        return False


def _wait(futures: dict[Any, Any], cluster: Cluster, what: str) -> None:
    for name, fut in futures.items():
        try:
            fut.result(timeout=REQUEST_TIMEOUT + 2)
        except KafkaException as e:
            err = e.args[0]
            code = err.code() if isinstance(err, KafkaError) else None
            if code == KafkaError.TOPIC_ALREADY_EXISTS:
                raise AlreadyExists(f"Kafka topic '{name}' already exists on cluster '{cluster.name}'") from None
            if code == KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise NotFound(f"Kafka topic '{name}' does not exist on cluster '{cluster.name}'") from None
            if code in (KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN):
                raise unreachable(cluster, what) from None
            raise StreamreplError(f"{what} '{name}' failed on cluster '{cluster.name}': {err.str()}") from None
        except TimeoutError:
            raise unreachable(cluster, what) from None


def create_topics(cluster: Cluster, specs: Iterable[tuple[str, int, dict[str, str]]]) -> None:
    new = [NewTopic(name, num_partitions=n, replication_factor=-1, config=conf) for name, n, conf in specs]
    if new:
        client = admin(cluster)  # must outlive the futures, or librdkafka cancels them
        _wait(client.create_topics(new, request_timeout=REQUEST_TIMEOUT), cluster, "creating topic")


def delete_topics(cluster: Cluster, names: list[str]) -> None:
    if names:
        client = admin(cluster)
        _wait(client.delete_topics(names, request_timeout=REQUEST_TIMEOUT), cluster, "deleting topic")


def add_partitions(cluster: Cluster, name: str, total: int) -> None:
    try:
        client = admin(cluster)
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
        client = admin(cluster)
        _wait(client.incremental_alter_configs(resources), cluster, "configuring topic")


def true_end(c: Consumer, tp: TopicPartition, timeout: float = REQUEST_TIMEOUT) -> int:
    """The offset after the last record of a partition (see true_ends)."""
    return true_ends(c, [tp], timeout)[(tp.topic, tp.partition)]


def true_ends(c: Consumer, tps: list[TopicPartition], timeout: float = REQUEST_TIMEOUT) -> dict[tuple[str, int], int]:
    """The offset after the last record of each partition.

    Some brokers (Tansu) report as high watermark the base offset of the last batch + 1,
    so the watermark alone can under-count: read each partition from just before it to
    its real end, all partitions at once.
    """
    ends: dict[tuple[str, int], int] = {}
    start: list[TopicPartition] = []
    for tp in tps:
        low, high = c.get_watermark_offsets(tp, timeout=timeout, cached=False)
        ends[(tp.topic, tp.partition)] = high
        if high > low:
            start.append(TopicPartition(tp.topic, tp.partition, max(low, high - 1)))
    if not start:
        return ends
    waiting = {(tp.topic, tp.partition) for tp in start}
    c.assign(start)
    deadline = time.monotonic() + timeout
    try:
        while waiting:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading the end of {len(waiting)} partitions timed out")
            for m in c.consume(10000, timeout=0.02):
                key = (cast(str, m.topic()), cast(int, m.partition()))
                err = m.error()
                if err is None:
                    ends[key] = max(ends[key], cast(int, m.offset()) + 1)
                elif err.code() == KafkaError._PARTITION_EOF:
                    waiting.discard(key)
        return ends
    finally:
        c.unassign()


def last_record(c: Consumer, tp: TopicPartition, end: int) -> Message | None:
    """The record just before `end`, or None when the partition holds no visible record there."""
    if end <= 0:
        return None
    c.assign([TopicPartition(tp.topic, tp.partition, end - 1)])
    deadline = time.monotonic() + REQUEST_TIMEOUT
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error() is None:
                return m if m.offset() == end - 1 else None
            if cast(KafkaError, m.error()).code() == KafkaError._PARTITION_EOF:
                return None
        return None
    finally:
        c.unassign()


def scrub(text: str, secrets: Iterable[str]) -> str:
    for s in secrets:
        if s and len(s) >= 3:
            text = text.replace(s, "********")
    return text


def describe_exception(e: BaseException, secrets: Iterable[str] = ()) -> tuple[int, str]:
    """A one-line description of an unexpected failure, with secrets removed."""
    if isinstance(e, KafkaException) and e.args and isinstance(e.args[0], KafkaError):
        err = e.args[0]
        return errno.EIO, scrub(f"broker error {err.name()}: {err.str()}", secrets)
    text = " ".join(str(e).split()) or type(e).__name__
    return errno.EIO, scrub(f"unexpected {type(e).__name__}: {text}", secrets)
