"""Consumer groups: list them, read and commit their offsets, describe their members.

Group descriptions
    librdkafka first asks with ConsumerGroupDescribe (KIP-848) when a broker advertises it;
    Tansu answers that for classic groups with no members. When a group is reported as not
    empty but with no member, `describe_groups` asks again with the classic DescribeGroups.
    Tansu's DescribeGroups lists members but not their client id, host or assignment: the
    client id is then read from the member id (`<client.id>-<uuid>`, as librdkafka and the
    Java client build it) and the assignment is reported as unknown.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from ..registry import Cluster
from .clients import REQUEST_TIMEOUT, client_config
from .errors import TRANSPORT, error_code, unreachable

#: Consumer groups of streamrepl itself (gateways, readers): never listed, deleted or replicated.
INTERNAL_GROUP_PREFIX = "streamrepl-"

#: Group states in which the group has (or is getting) members.
_ACTIVE_STATES = {
    ConsumerGroupState.STABLE,
    ConsumerGroupState.PREPARING_REBALANCING,
    ConsumerGroupState.COMPLETING_REBALANCING,
}
_IDLE_STATES = {ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD}

_MEMBER_ID_RE = re.compile(r"^(.*)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")

Offsets = dict[tuple[str, int], int]  # (Kafka topic, partition) -> committed offset


def settled(futures: dict[str, Any]) -> dict[str, Any]:
    """Wait for every future (each request carries its own timeout) and return result or exception per key.

    No error goes up while a request is pending: librdkafka aborts the whole process
    (rd_kafka_enq_once_del_source_return) when an admin client is destroyed with requests in flight,
    and callers drop their clients on errors."""
    out: dict[str, Any] = {}
    for key, fut in futures.items():
        try:
            out[key] = fut.result()
        except KafkaException as e:
            out[key] = e
    return out


def list_groups(cluster: Cluster, admin: AdminClient) -> list[str]:
    """The groups of the cluster, streamrepl's own left out, sorted."""
    try:
        res = admin.list_consumer_groups(request_timeout=REQUEST_TIMEOUT).result()
    except KafkaException:
        raise unreachable(cluster, "listing consumer groups") from None
    names = {n for g in res.valid for n in _names_listed_as(g.group_id)}
    return sorted(n for n in names if not n.startswith(INTERNAL_GROUP_PREFIX))


def _names_listed_as(listed: str) -> set[str]:
    """The group a listed id may stand for. Tansu lists ids percent-encoded (`odd%0Agroup`, `a%2541` for
    `a%41`) and answers only to the real name; Kafka lists them as they are. Both are kept: asking for the
    offsets of a group that does not exist returns none."""
    decoded = urllib.parse.unquote(listed) if "%" in listed else listed
    return {listed, decoded}


def committed_offsets(
    cluster: Cluster, admin: AdminClient, groups: Iterable[str], wanted: Callable[[str], bool] | None = None
) -> dict[str, tuple[Offsets, dict[tuple[str, int], str]]]:
    """group -> ({(Kafka topic, partition): offset}, {(topic, partition): commit metadata}).

    `wanted(kafka_topic) -> bool` keeps only some topics. Requests go out together; a group
    whose offsets cannot be read is left out.
    """
    futures = {}
    for g in groups:
        try:
            futures[g] = admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(g)], request_timeout=REQUEST_TIMEOUT
            )[g]
        except KafkaException:
            raise unreachable(cluster, "reading committed offsets") from None
    out: dict[str, tuple[Offsets, dict[tuple[str, int], str]]] = {}
    for g, res in settled(futures).items():
        if isinstance(res, KafkaException):
            if error_code(res) in TRANSPORT:
                raise unreachable(cluster, "reading committed offsets") from None
            continue
        offsets: Offsets = {}
        meta: dict[tuple[str, int], str] = {}
        for tp in res.topic_partitions or []:
            if tp.offset < 0 or tp.error is not None:
                continue
            if wanted is not None and not wanted(tp.topic):
                continue
            offsets[(tp.topic, tp.partition)] = tp.offset
            if tp.metadata:
                meta[(tp.topic, tp.partition)] = tp.metadata
        out[g] = (offsets, meta)
    return out


def group_offset(topic: str, partition: int, offset: int, metadata: str | None = None) -> TopicPartition:
    """A committed offset to send (librdkafka refuses metadata=None)."""
    if metadata:
        return TopicPartition(topic, partition, offset, metadata=metadata)
    return TopicPartition(topic, partition, offset)


def commit_offsets(admin: AdminClient, group: str, offsets: list[TopicPartition]) -> list[TopicPartition]:
    """Commit `offsets` for `group` in one request; returns the partitions the broker refused.

    Raises KafkaException when the request itself fails (an active group, a broker that does not answer).
    """
    res = admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, offsets)], request_timeout=REQUEST_TIMEOUT
    )[group].result()
    return [tp for tp in res.topic_partitions or [] if tp.error is not None]


@dataclass
class Member:
    member_id: str
    client_id: str
    host: str
    #: (Kafka topic, partition) pairs, or None when the broker does not report assignments
    assignment: list[tuple[str, int]] | None
    #: a static member's group.instance.id ("" for a dynamic member, or when the broker does not say)
    instance_id: str = ""


@dataclass
class GroupInfo:
    group_id: str
    state: str
    members: list[Member] = field(default_factory=list)
    active: bool = False


def _legacy_admin(cluster: Cluster) -> AdminClient:
    """An admin client that uses the classic DescribeGroups API (see the module docstring)."""
    return AdminClient(client_config(cluster, **{"api.version.request": False, "broker.version.fallback": "0.9.0"}))


def _state_name(state: Any) -> str:
    return str(getattr(state, "name", state) or "UNKNOWN").lower()


def _client_id(member_id: str, reported: str) -> str:
    if reported:
        return reported
    m = _MEMBER_ID_RE.match(member_id or "")
    return m.group(1) if m else ""


def _members(desc: Any) -> list[Member]:
    out = []
    for m in desc.members or []:
        tps = m.assignment.topic_partitions if m.assignment is not None else []
        out.append(
            Member(
                member_id=m.member_id,
                client_id=_client_id(m.member_id, m.client_id or ""),
                host=(m.host or "").lstrip("/"),
                assignment=[(tp.topic, tp.partition) for tp in tps] or None,
                instance_id=getattr(m, "group_instance_id", None) or "",
            )
        )
    return out


def describe_groups(cluster: Cluster, admin: AdminClient, groups: list[str]) -> dict[str, GroupInfo]:
    """State and members of each group (see the module docstring for the Tansu workarounds)."""
    if not groups:
        return {}
    try:
        futures = admin.describe_consumer_groups(groups, request_timeout=REQUEST_TIMEOUT)
    except KafkaException:
        raise unreachable(cluster, "describing consumer groups") from None
    out: dict[str, GroupInfo] = {}
    retry: list[str] = []
    for g, d in settled(futures).items():
        if isinstance(d, KafkaException):
            if error_code(d) == KafkaError.GROUP_ID_NOT_FOUND:
                out[g] = GroupInfo(g, "dead")
                continue
            raise unreachable(cluster, "describing consumer groups") from None
        members = _members(d)
        active = d.state in _ACTIVE_STATES or bool(members)
        out[g] = GroupInfo(g, _state_name(d.state), members, active)
        if not members and d.state not in _IDLE_STATES:
            retry.append(g)
    if retry:
        try:
            legacy = _legacy_admin(cluster)  # must outlive its futures
            answers = settled(legacy.describe_consumer_groups(retry, request_timeout=REQUEST_TIMEOUT))
            for g, desc in answers.items():
                if isinstance(desc, KafkaException):
                    continue  # keep what the first answer said
                members = _members(desc)
                if members:
                    out[g].members = members
                    out[g].active = True
        except KafkaException:
            pass  # keep what the first answer said
    return out
