"""The Kafka wire format as the proxy sees it: frames, request headers, and the few responses it rewrites.

Every frame is passed on as it came, except the responses that name brokers (Metadata, FindCoordinator,
DescribeCluster), which are decoded, given the proxy's addresses and encoded again, and ApiVersions, whose answer
caps the versions the proxy cannot rewrite (Produce v10+ and Fetch v16+ name brokers in their tagged fields) or
decode. Decoding and encoding are kafka-python's protocol classes (generated from Kafka's own message schemas); the
proxy reads by hand only the fixed start of a request header and, of a Produce request, its acks.
"""

from __future__ import annotations

import io
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

PRODUCE = 0
FETCH = 1
METADATA = 3
FIND_COORDINATOR = 10
SASL_HANDSHAKE = 17
API_VERSIONS = 18
END_TXN = 26
DESCRIBE_CLUSTER = 60

#: The highest version of each API the proxy lets a client use: Produce v10+ and Fetch v16+ carry broker endpoints
#: (in NOT_LEADER errors) that the proxy would have to rewrite; the others are the newest kafka-python decodes (EndTxn:
#: the proxy reads the requests that end a transaction which wrote a synchronous stream, and their answers).
VERSION_CAPS = {
    PRODUCE: 9,
    FETCH: 15,
    METADATA: 13,
    FIND_COORDINATOR: 6,
    DESCRIBE_CLUSTER: 2,
    API_VERSIONS: 4,
    END_TXN: 5,
}

#: Responses that name brokers: rewritten to name the proxy.
REWRITTEN = frozenset({METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER})

#: The size of a frame: a signed 32-bit big-endian count of the bytes that follow.
FRAME_SIZE = struct.Struct(">i")
_HEAD = struct.Struct(">hhi")
#: A frame larger than this is refused (the broker's own default socket.request.max.bytes is 100 MiB).
MAX_FRAME = 200 * 1024 * 1024


@dataclass(frozen=True)
class RequestHead:
    """What the proxy reads of a request: its API, version and correlation id (the first 8 bytes of any request)."""

    api_key: int
    api_version: int
    correlation_id: int


def request_head(frame: bytes) -> RequestHead:
    api_key, api_version, correlation_id = _HEAD.unpack_from(frame, 0)
    return RequestHead(api_key, api_version, correlation_id)


@dataclass(frozen=True)
class ProduceHead:
    acks: int
    transactional_id: str | None
    timeout_ms: int


def produce_head(frame: bytes, head: RequestHead) -> ProduceHead:
    """The acks, transactional id and timeout of a Produce request, read past its header (the records are not)."""
    from kafka.protocol.producer import ProduceRequest
    from kafka.protocol.schemas.fields.codecs.types import Int16, Int32, String

    version = head.api_version
    if 3 <= version and not ProduceRequest.flexible_version_q(version):
        # The common case, on every Produce a client sends: fixed-width fields, read in place without a copy.
        (client_id_len,) = struct.unpack_from(">h", frame, 8)
        pos = 10 + max(client_id_len, 0)
        (txn_len,) = struct.unpack_from(">h", frame, pos)
        pos += 2 + max(txn_len, 0)
        txn = frame[pos - txn_len : pos].decode() if txn_len >= 0 else None
        acks, timeout_ms = struct.unpack_from(">hi", frame, pos)
        return ProduceHead(acks, txn, timeout_ms)
    data = io.BytesIO(frame)
    if version < 3:  # before v3 there was no transactional id; the header has no tagged fields either
        data.seek(8)
        client_id_len = Int16.decode(data)
        data.seek(max(client_id_len, 0), io.SEEK_CUR)
        txn = None
    else:
        ProduceRequest.parse_header(data, version=min(version, ProduceRequest.max_version))
        txn = String().decode(data, compact=ProduceRequest.flexible_version_q(version))
    acks = Int16.decode(data)
    timeout_ms = Int32.decode(data)
    return ProduceHead(acks, txn, timeout_ms)


def sasl_mechanism(frame: bytes) -> str:
    """The mechanism a SaslHandshake request names."""
    from kafka.protocol.sasl import SaslHandshakeRequest

    data = io.BytesIO(frame)
    SaslHandshakeRequest.parse_header(data, version=0)
    from kafka.protocol.schemas.fields.codecs.types import String

    return String().decode(data) or ""


def sasl_handshake_ok(frame: bytes) -> bool:
    """A SaslHandshake response (v0/v1: correlation id, then the error code) that accepted the mechanism."""
    return len(frame) >= 6 and struct.unpack_from(">h", frame, 4)[0] == 0


#: Where a broker of the cluster is reached through the proxy: (node id, the broker's host, its port) -> (host, port).
Endpoint = Callable[[int, str, int], tuple[str, int]]


def _response_class(api_key: int) -> Any:
    from kafka.protocol.admin import DescribeClusterResponse
    from kafka.protocol.metadata import ApiVersionsResponse, FindCoordinatorResponse, MetadataResponse

    return {
        METADATA: MetadataResponse,
        FIND_COORDINATOR: FindCoordinatorResponse,
        DESCRIBE_CLUSTER: DescribeClusterResponse,
        API_VERSIONS: ApiVersionsResponse,
    }[api_key]


def decode_response(head: RequestHead, frame: bytes) -> Any:
    """The response to `head` decoded (header included), or None when kafka-python has no class for its version."""
    cls = _response_class(head.api_key)
    if head.api_version > cls.max_version:
        return None
    return cls.decode(frame, version=head.api_version, header=True)


def encode_response(head: RequestHead, message: Any) -> bytes:
    message.with_header(correlation_id=head.correlation_id)
    return bytes(message.encode(header=True))


def brokers_named(head: RequestHead, message: Any) -> list[tuple[int, str, int]]:
    """The brokers a decoded Metadata, FindCoordinator or DescribeCluster response names: (node id, host, port)."""
    if head.api_key == METADATA:
        return [(b.node_id, b.host, b.port) for b in message.brokers]
    if head.api_key == DESCRIBE_CLUSTER:
        return [(b.broker_id, b.host, b.port) for b in message.brokers]
    if head.api_key == FIND_COORDINATOR:
        if head.api_version >= 4:
            return [(c.node_id, c.host, c.port) for c in message.coordinators if c.node_id >= 0]
        return [(message.node_id, message.host, message.port)] if message.node_id >= 0 else []
    return []


def name_proxy(head: RequestHead, message: Any, endpoint: Endpoint) -> None:
    """Give every broker `message` names the proxy's address for it (in place)."""
    if head.api_key == METADATA:
        for b in message.brokers:
            b.host, b.port = endpoint(b.node_id, b.host, b.port)
    elif head.api_key == DESCRIBE_CLUSTER:
        for b in message.brokers:
            b.host, b.port = endpoint(b.broker_id, b.host, b.port)
    elif head.api_key == FIND_COORDINATOR:
        if head.api_version >= 4:
            for c in message.coordinators:
                if c.node_id >= 0:
                    c.host, c.port = endpoint(c.node_id, c.host, c.port)
        elif message.node_id >= 0:
            message.host, message.port = endpoint(message.node_id, message.host, message.port)


def cap_versions(message: Any) -> bool:
    """Lower, in a decoded ApiVersions response, the highest versions to VERSION_CAPS; whether anything changed."""
    changed = False
    for api in message.api_keys or []:
        cap = VERSION_CAPS.get(api.api_key)
        if cap is not None and api.max_version > cap:
            api.max_version = max(cap, api.min_version)
            changed = True
    return changed


#: A partition of the cluster: (Kafka topic, partition).
Partition = tuple[str, int]


def produce_counts(frame: bytes, head: RequestHead) -> dict[Partition, int]:
    """How many records a Produce request writes to each partition (the records themselves are not decoded: of a
    v2 batch its header's last offset delta; older, rare message sets are iterated)."""
    from kafka.protocol.producer import ProduceRequest
    from kafka.record.memory_records import MemoryRecords

    request = ProduceRequest.decode(frame, version=head.api_version, header=True)
    counts: dict[Partition, int] = {}
    for topic in request.topic_data:
        for part in topic.partition_data:
            n = 0
            records = MemoryRecords(part.records or b"")
            while (batch := records.next_batch()) is not None:
                n += batch.last_offset_delta + 1 if batch.magic >= 2 else sum(1 for _ in batch)
            key = (topic.name, part.index)
            counts[key] = counts.get(key, 0) + n
    return counts


def produce_offsets(head: RequestHead, frame: bytes) -> dict[Partition, int]:
    """The base offset of each partition a Produce response says was written (error code 0)."""
    from kafka.protocol.producer import ProduceResponse

    response = ProduceResponse.decode(frame, version=head.api_version, header=True)
    return {
        (topic.name, part.index): part.base_offset
        for topic in response.responses
        for part in topic.partition_responses
        if part.error_code == 0 and part.base_offset >= 0
    }


def end_txn_request(frame: bytes, head: RequestHead) -> tuple[str, bool]:
    """The transactional id of an EndTxn request, and whether it commits (False: aborts)."""
    from kafka.protocol.producer.transaction import EndTxnRequest

    request = EndTxnRequest.decode(frame, version=head.api_version, header=True)
    return str(request.transactional_id), bool(request.committed)


def end_txn_ok(head: RequestHead, frame: bytes) -> bool:
    """Whether an EndTxn response says the transaction ended (error code 0)."""
    from kafka.protocol.producer.transaction import EndTxnResponse

    return int(EndTxnResponse.decode(frame, version=head.api_version, header=True).error_code) == 0
