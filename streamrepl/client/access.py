"""What the producer and the consumer both do before touching a stream: find it, check the user may, name its topics."""

from __future__ import annotations

from ..model import Stream
from ..paths import StreamPath, kafka_topic_name
from ..registry import Registry
from ..registry import load as load_registry
from ..streams import Resolved, check_perm, load


def registry_or_default(reg: Registry | None) -> Registry:
    return reg if reg is not None else load_registry()


def open_stream(reg: Registry, path: str, perm: str, action: str) -> tuple[Resolved, Stream]:
    """The stream and its metadata, once `perm` (produceperm, consumeperm) allows the current user `action`."""
    r, rec = load(reg, path)
    check_perm(rec, perm, r.path, action)
    return r, rec


def kafka_prefix(stream: StreamPath) -> str:
    """What every Kafka topic of the stream starts with (its topic name follows)."""
    return kafka_topic_name(stream, "x")[:-1]


def stream_topic(stream: StreamPath, kafka_topic: str) -> str:
    """The stream topic name a Kafka topic of `stream` stands for."""
    prefix = kafka_prefix(stream)
    return kafka_topic[len(prefix) :] if kafka_topic.startswith(prefix) else kafka_topic
