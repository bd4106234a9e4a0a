"""Consumer groups: list them, read and commit their offsets, describe their members.

Group descriptions
    librdkafka first asks with ConsumerGroupDescribe (KIP-848) when a broker advertises it;
    Tansu answers that for classic groups with no members. When a group is reported as not
    empty but with no member, `describe_groups` asks again with the classic DescribeGroups.
    Tansu's DescribeGroups lists members but not their client id, host or assignment: the
    client id is then read from the member id (`<client.id>-<uuid>`, as librdkafka and the
    Java client build it) and the assignment is reported as unknown.

An admin client a group request of which ended unanswered is let go (GroupAdmin)
    librdkafka 2.16 aborts the process when a group request timed out while the group's
    coordinator was down and that broker comes back while the client still exists (SIGABRT,
    rd_kafka_enq_once_del_source_return: Assertion eonce->refcnt > 0; gateway workers died of it,
    issue 38). The request's coordinator lookup (rdkafka_coord.c) has no timeout of its own: it
    outlives the request and, once the coordinator is up, hands it on (rd_kafka_admin_coord_request),
    which finds the request over, drops the last reference to its enqueue-once and returns an error;
    the lookup then fails the request, whose handler (rd_kafka_admin_coord_response_parse) drops that
    reference again, from freed memory. No timeout prevents it (the lookup waits for as long as the
    broker is down); destroying the client does: it fails the waiting lookup once. So a client kept
    for group requests (GroupAdmin) is let go once a request ended without the broker's answer, after
    every future of the call has settled (a client destroyed with requests in flight aborts too), and
    the next call makes a fresh one. RELIABILITY.md, "librdkafka's group requests".
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from confluent_kafka import ConsumerGroupState, ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from ..registry import Cluster
from .clients import REQUEST_TIMEOUT, admin_client, client_config
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


class GroupAdmin:
    """The admin client a long-lived holder (a gateway's seat look, a cursor replicator) makes group requests with:
    made when first needed, and let go once a request ended without the broker's answer (the module docstring), so
    that the next request goes out on a fresh one. The group functions below take it wherever they take an
    AdminClient; a plain AdminClient is the caller's to let go (a command's, gone with its call)."""

    def __init__(self, cluster: Cluster, make: Callable[[Cluster], AdminClient] = admin_client) -> None:
        self.cluster = cluster
        self._make = make
        self._client: AdminClient | None = None
        #: clients let go so far
        self.replaced = 0

    def client(self) -> AdminClient:
        if self._client is None:
            self._client = self._make(self.cluster)
        return self._client

    def let_go(self) -> None:
        """Drop the client (librdkafka destroys it now, unless someone else holds it): only with no request of it
        pending, which the functions below ensure by settling every future of a call before they return."""
        if self._client is not None:
            self._client = None
            self.replaced += 1


#: What the group functions make their requests with.
Admin: TypeAlias = AdminClient | GroupAdmin


def _client(admin: Admin) -> AdminClient:
    return admin.client() if isinstance(admin, GroupAdmin) else admin


def unanswered(e: BaseException | KafkaError | None) -> bool:
    """A request that ended without the broker's answer: librdkafka's own (local, negative) error codes, a timeout
    first. The broker's answers (a group that does not exist, an active group) have codes of 0 and up."""
    code = error_code(e)
    return code is None or code < 0


def _spoiled(admin: Admin, failures: Iterable[BaseException]) -> None:
    """Let a GroupAdmin's client go when one of a call's requests ended unanswered (every future settled by then)."""
    if isinstance(admin, GroupAdmin) and any(unanswered(e) for e in failures):
        admin.let_go()


def settled(futures: dict[str, Any]) -> dict[str, Any]:
    """Wait for every future (each request carries its own timeout) and return result or exception per key.

    No error goes up while a request is pending: librdkafka aborts the whole process
    (rd_kafka_enq_once_del_source_return) when an admin client is destroyed with requests in flight,
    and callers (GroupAdmin) drop their clients on errors."""
    out: dict[str, Any] = {}
    for key, fut in futures.items():
        try:
            out[key] = fut.result()
        except KafkaException as e:
            out[key] = e
    return out


def list_groups(cluster: Cluster, admin: Admin) -> list[str]:
    """The groups of the cluster, streamrepl's own left out, sorted."""
    try:
        res = _client(admin).list_consumer_groups(request_timeout=REQUEST_TIMEOUT).result()
    except KafkaException as e:
        _spoiled(admin, [e])
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
    cluster: Cluster, admin: Admin, groups: Iterable[str], wanted: Callable[[str], bool] | None = None
) -> dict[str, tuple[Offsets, dict[tuple[str, int], str]]]:
    """group -> ({(Kafka topic, partition): offset}, {(topic, partition): commit metadata}).

    `wanted(kafka_topic) -> bool` keeps only some topics. Requests go out together; a group
    whose offsets cannot be read is left out.
    """
    futures = {}
    for g in groups:
        try:
            futures[g] = _client(admin).list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(g)], request_timeout=REQUEST_TIMEOUT
            )[g]
        except KafkaException as e:
            settled(futures)  # those already sent
            _spoiled(admin, [e])
            raise unreachable(cluster, "reading committed offsets") from None
    answers = settled(futures)
    _spoiled(admin, [e for e in answers.values() if isinstance(e, KafkaException)])
    out: dict[str, tuple[Offsets, dict[tuple[str, int], str]]] = {}
    for g, res in answers.items():
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


def commit_offsets(admin: Admin, group: str, offsets: list[TopicPartition]) -> list[TopicPartition]:
    """Commit `offsets` for `group` in one request; returns the partitions the broker refused.

    Raises KafkaException when the request itself fails (an active group, a broker that does not answer).
    """
    try:
        res = (
            _client(admin)
            .alter_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(group, offsets)], request_timeout=REQUEST_TIMEOUT
            )[group]
            .result()
        )
    except KafkaException as e:
        _spoiled(admin, [e])
        raise
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


def describe_groups(cluster: Cluster, admin: Admin, groups: list[str]) -> dict[str, GroupInfo]:
    """State and members of each group (see the module docstring for the Tansu workarounds)."""
    if not groups:
        return {}
    try:
        futures = _client(admin).describe_consumer_groups(groups, request_timeout=REQUEST_TIMEOUT)
    except KafkaException as e:
        _spoiled(admin, [e])
        raise unreachable(cluster, "describing consumer groups") from None
    answers = settled(futures)
    _spoiled(admin, [d for d in answers.values() if isinstance(d, KafkaException)])
    out: dict[str, GroupInfo] = {}
    retry: list[str] = []
    for g, d in answers.items():
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
            # A client of this call alone: it is let go once its futures have settled, whatever they say.
            legacy = _legacy_admin(cluster)
            again = settled(legacy.describe_consumer_groups(retry, request_timeout=REQUEST_TIMEOUT))
            del legacy
            for g, desc in again.items():
                if isinstance(desc, KafkaException):
                    continue  # keep what the first answer said
                members = _members(desc)
                if members:
                    out[g].members = members
                    out[g].active = True
        except KafkaException:
            pass  # keep what the first answer said
    return out
