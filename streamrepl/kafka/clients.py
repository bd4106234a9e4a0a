"""Kafka clients built from a registry cluster entry.

Every client gets the registry's properties as they are (secrets included: librdkafka needs
them) and nothing here logs or formats a configuration, so a secret never leaves the client (a
property librdkafka refuses is named, with librdkafka's words scrubbed of the cluster's secrets).
The base settings make a broker that does not answer a clear error within seconds, never a hang.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from typing import Any, TypeVar, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient

from ..errors import RegistryError
from ..masking import is_secret
from ..registry import Cluster
from .errors import scrub

C = TypeVar("C")

#: The clients' maker when not librdkafka's (None: the real clients). Set only by the simulated cluster
#: (tests/sim, docs/simulation.md) through set_backend: every client of streamrepl is made by _build, so the
#: package's functions (topics, true_ends, describe_groups...) reach the simulated brokers with it.
_backend: Callable[[type, Cluster, dict[str, Any]], Any] | None = None


def set_backend(backend: Callable[[type, Cluster, dict[str, Any]], Any] | None) -> None:
    """Make every client with `backend(kind, cluster, conf)` instead of librdkafka (`kind`: AdminClient, Producer or
    Consumer; `conf` as librdkafka would get it); None: the real clients again."""
    global _backend
    _backend = backend


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


def _close(client: Any) -> None:
    if isinstance(client, Consumer):
        client.close()


def _build(make: Callable[[dict[str, Any]], C], cluster: Cluster, extra: dict[str, Any]) -> C:
    """`make(conf)` for the cluster; when librdkafka refuses the configuration, an error naming the registry
    property it refuses instead of librdkafka's own words alone ("broker error _INVALID_ARG: Invalid value for
    configuration property "request.required.acks"", where the registry says `acks`)."""
    conf = client_config(cluster, **extra)
    if _backend is not None:
        return cast(C, _backend(cast(type, make), cluster, conf))
    try:
        return make(conf)
    except KafkaException as e:
        err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
        if err is None or err.code() != KafkaError._INVALID_ARG:
            raise
        added = _refused_property(make, cluster, extra)
        if added is None:
            raise  # not the registry's: streamrepl's own settings
        culprit = _named_culprit(cluster, err.str()) or added
        choices = CHOICES.get(culprit)
        fix = (
            f"use one of {', '.join(choices)}"
            if choices
            else "fix or remove it in the registry (see librdkafka's CONFIGURATION.md)"
        )
        said = _CREATE_PREFIX_RE.sub("", err.str())
        raise RegistryError(
            scrub(
                f"property '{culprit}' of cluster '{cluster.name}' in the cluster registry is refused by the Kafka"
                f" client: {said}; {fix}",
                cluster.secrets(),
            )
        ) from None


_MECHANISMS = ("GSSAPI", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
_CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
#: The values librdkafka takes for the properties that have a fixed set (its CONFIGURATION.md), told with its refusal.
CHOICES: dict[str, tuple[str, ...]] = {
    "security.protocol": ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"),
    "sasl.mechanism": _MECHANISMS,
    "sasl.mechanisms": _MECHANISMS,
    "sasl.oauthbearer.method": ("default", "oidc"),
    "compression.type": _CODECS,
    "compression.codec": _CODECS,
    "ssl.endpoint.identification.algorithm": ("none", "https"),
    "auto.offset.reset": ("earliest", "latest", "error"),
    "isolation.level": ("read_committed", "read_uncommitted"),
    "partition.assignment.strategy": ("range", "roundrobin", "cooperative-sticky"),
    "broker.address.family": ("any", "v4", "v6"),
    "client.dns.lookup": ("use_all_dns_ips", "resolve_canonical_bootstrap_servers_only"),
}
#: librdkafka's names for a property the registry may give under its other name.
_ALIASES = {"compression.codec": "compression.type", "sasl.mechanisms": "sasl.mechanism"}
_NAMED_RE = re.compile(r'property "([^"]+)"')
_CREATE_PREFIX_RE = re.compile(r"^Failed to create [a-z ]+: ")


def _named_culprit(cluster: Cluster, said: str) -> str | None:
    """The registry property librdkafka's refusal is about, when its words tell: it names the property (under either
    of its names), or quotes the value of one (the SASL mechanism is checked only once SASL is on, so the property
    whose addition was refused is then security.protocol, not the mechanism at fault)."""
    props = cluster.client_properties
    named = _NAMED_RE.search(said)
    if named:
        for name in (named[1], _ALIASES.get(named[1], ""), *(k for k, v in _ALIASES.items() if v == named[1])):
            if name in props:
                return name
    for name, value in props.items():
        if name != "bootstrap.servers" and not is_secret(name) and len(value) > 1:
            if re.search(rf"(?<![\w.-]){re.escape(value)}(?![\w.-])", said):
                return name
    return None


def _refused_property(make: Callable[[dict[str, Any]], Any], cluster: Cluster, extra: dict[str, Any]) -> str | None:
    """The first registry property, in the registry's order, whose addition makes librdkafka refuse the client;
    None when streamrepl's own settings alone are refused. The clients tried have no bootstrap.servers, so they
    connect nowhere: when all of them are accepted, the address is what is left."""
    mine = {k: v for k, v in cluster.client_properties.items() if k not in extra}
    trial = {k: v for k, v in client_config(cluster, **extra).items() if k not in mine}
    for name, value in [("", None), *((k, v) for k, v in mine.items() if k != "bootstrap.servers")]:
        if name:
            trial[name] = value
        try:
            _close(make(trial))
        except KafkaException as e:
            err = e.args[0] if e.args and isinstance(e.args[0], KafkaError) else None
            refused = err is not None and err.code() == KafkaError._INVALID_ARG
            return name if refused and name else None
    return "bootstrap.servers" if "bootstrap.servers" in mine else None


def admin_client(cluster: Cluster, **extra: Any) -> AdminClient:
    return _build(AdminClient, cluster, extra)


def producer(cluster: Cluster, **extra: Any) -> Producer:
    conf = {"acks": "all", "enable.idempotence": True, "linger.ms": 5}
    conf.update(extra)
    return _build(Producer, cluster, conf)


#: The largest fetch answer a consumer takes (librdkafka's receive.message.max.bytes, at its maximum; its default is
#: 100 MB). noida-db answers a fetch with everything a partition holds past the offset asked for, whatever
#: fetch.max.bytes says: librdkafka dropped every larger answer and the connection with it, so a source with more than
#: 100 MB behind a gateway's position was never replicated (tests/e2e/test_noida_large_backlog.py). Brokers that
#: honour fetch.max.bytes (Kafka, Tansu) never send that much. A cluster's registry entry may set its own.
ANSWER_LIMIT = 2_147_483_647


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
    if "receive.message.max.bytes" not in cluster.client_properties:
        conf["receive.message.max.bytes"] = ANSWER_LIMIT
    conf.update(extra)
    return _build(Consumer, cluster, conf)
