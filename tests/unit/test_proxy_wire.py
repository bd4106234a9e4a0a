"""streamrepl.proxy.wire: request headers and Produce heads read, broker-naming responses rewritten, versions capped;
messages built with kafka-python's classes, as a client or broker sends them."""

from __future__ import annotations

from typing import Any

import pytest
from kafka.protocol.admin import DescribeClusterResponse
from kafka.protocol.metadata import ApiVersionsResponse, FindCoordinatorResponse, MetadataResponse
from kafka.protocol.producer import ProduceRequest

from streamrepl.proxy import wire


def _framed_body(message: Any, correlation_id: int, **header: Any) -> bytes:
    message.with_header(correlation_id=correlation_id, **header)
    return bytes(message.encode(header=True))


@pytest.mark.parametrize(("version", "txn", "acks"), [(3, None, 1), (7, "tx-1", -1), (9, "tx-2", 0), (9, None, -1)])
def test_produce_head_reads_acks_transactional_id_and_timeout(version: int, txn: str | None, acks: int) -> None:
    frame = _framed_body(
        ProduceRequest[version](transactional_id=txn, acks=acks, timeout_ms=4321, topic_data=[]), 77, client_id="app"
    )
    head = wire.request_head(frame)
    assert head == wire.RequestHead(wire.PRODUCE, version, 77)
    assert wire.produce_head(frame, head) == wire.ProduceHead(acks, txn, 4321)


def _metadata(version: int) -> Any:
    broker = MetadataResponse.MetadataResponseBroker
    return MetadataResponse[version](
        throttle_time_ms=0,
        brokers=[
            broker(node_id=1, host="broker-a", port=9092, rack=None, version=version),
            broker(node_id=2, host="broker-b", port=9093, rack="r1", version=version),
        ],
        cluster_id="c1",
        controller_id=1,
        topics=[],
    )


@pytest.mark.parametrize("version", [1, 8, 9, 12])
def test_a_metadata_response_decodes_and_encodes_to_the_same_bytes(version: int) -> None:
    frame = _framed_body(_metadata(version), 5)
    head = wire.RequestHead(wire.METADATA, version, 5)
    assert wire.encode_response(head, wire.decode_response(head, frame)) == frame


@pytest.mark.parametrize("version", [1, 12])
def test_metadata_names_the_proxy(version: int) -> None:
    head = wire.RequestHead(wire.METADATA, version, 5)
    message = wire.decode_response(head, _framed_body(_metadata(version), 5))
    assert wire.brokers_named(head, message) == [(1, "broker-a", 9092), (2, "broker-b", 9093)]
    wire.name_proxy(head, message, lambda node, host, port: ("proxy", 10000 + node))
    again = wire.decode_response(head, wire.encode_response(head, message))
    assert [(b.node_id, b.host, b.port, b.rack) for b in again.brokers] == [
        (1, "proxy", 10001, None),
        (2, "proxy", 10002, "r1" if version >= 1 else None),
    ]
    assert again.header.correlation_id == 5


def test_find_coordinator_names_the_proxy_before_and_after_v4() -> None:
    old = FindCoordinatorResponse[2](
        throttle_time_ms=0, error_code=0, error_message=None, node_id=3, host="broker-c", port=9094
    )
    head = wire.RequestHead(wire.FIND_COORDINATOR, 2, 9)
    message = wire.decode_response(head, _framed_body(old, 9))
    assert wire.brokers_named(head, message) == [(3, "broker-c", 9094)]
    wire.name_proxy(head, message, lambda node, host, port: ("proxy", 20000 + node))
    assert (message.host, message.port) == ("proxy", 20003)

    coordinator = FindCoordinatorResponse.Coordinator
    new = FindCoordinatorResponse[4](
        throttle_time_ms=0,
        coordinators=[
            coordinator(key="g", node_id=4, host="broker-d", port=9095, error_code=0, error_message=None, version=4),
            coordinator(key="h", node_id=-1, host="", port=-1, error_code=15, error_message=None, version=4),
        ],
    )
    head = wire.RequestHead(wire.FIND_COORDINATOR, 4, 10)
    message = wire.decode_response(head, _framed_body(new, 10))
    assert wire.brokers_named(head, message) == [(4, "broker-d", 9095)]  # not the coordinator that is not there
    wire.name_proxy(head, message, lambda node, host, port: ("proxy", 20000 + node))
    assert [(c.host, c.port) for c in message.coordinators] == [("proxy", 20004), ("", -1)]


def test_describe_cluster_names_the_proxy() -> None:
    broker = DescribeClusterResponse.DescribeClusterBroker
    response = DescribeClusterResponse[0](
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        cluster_id="c1",
        controller_id=1,
        brokers=[broker(broker_id=1, host="broker-a", port=9092, rack=None, version=0)],
        authorized_operations=None,
    )
    head = wire.RequestHead(wire.DESCRIBE_CLUSTER, 0, 3)
    message = wire.decode_response(head, _framed_body(response, 3))
    wire.name_proxy(head, message, lambda node, host, port: ("proxy", 30000 + node))
    assert [(b.host, b.port) for b in message.brokers] == [("proxy", 30001)]


def test_api_versions_are_capped_where_the_proxy_cannot_rewrite() -> None:
    api = ApiVersionsResponse.ApiVersion
    response = ApiVersionsResponse[3](
        error_code=0,
        api_keys=[
            api(api_key=wire.PRODUCE, min_version=0, max_version=11, version=3),
            api(api_key=wire.FETCH, min_version=0, max_version=17, version=3),
            api(api_key=wire.METADATA, min_version=0, max_version=12, version=3),
            api(api_key=19, min_version=0, max_version=7, version=3),  # CreateTopics: not the proxy's concern
        ],
        throttle_time_ms=0,
    )
    head = wire.RequestHead(wire.API_VERSIONS, 3, 1)
    message = wire.decode_response(head, _framed_body(response, 1))
    assert wire.cap_versions(message)
    assert [(a.api_key, a.max_version) for a in message.api_keys] == [(0, 9), (1, 15), (3, 12), (19, 7)]
    assert not wire.cap_versions(message)  # nothing left to lower


def test_a_version_the_library_does_not_know_is_not_decoded() -> None:
    assert wire.decode_response(wire.RequestHead(wire.METADATA, 99, 1), b"\x00\x00\x00\x01") is None


def test_sasl_handshake_mechanism_and_answer() -> None:
    from kafka.protocol.sasl import SaslHandshakeRequest

    frame = _framed_body(SaslHandshakeRequest[0](mechanism="SCRAM-SHA-256"), 2, client_id="app")
    assert wire.sasl_mechanism(frame) == "SCRAM-SHA-256"
    assert wire.sasl_handshake_ok(b"\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00")
    assert not wire.sasl_handshake_ok(b"\x00\x00\x00\x02\x00\x21\x00\x00\x00\x00")  # UNSUPPORTED_SASL_MECHANISM


def _batch(n: int, magic: int = 2, compression: int = 0) -> bytes:
    from kafka.record.memory_records import MemoryRecordsBuilder

    builder = MemoryRecordsBuilder(magic=magic, compression_type=compression, batch_size=1 << 20)
    for i in range(n):
        builder.append(timestamp=None, key=b"k", value=b"v%d" % i, headers=[])
    builder.close()
    return bytes(builder.buffer())


@pytest.mark.parametrize("version", [3, 7, 9])
def test_produce_counts_are_the_records_of_each_partition(version: int) -> None:
    data = ProduceRequest.TopicProduceData
    part = data.PartitionProduceData
    request = ProduceRequest[version](
        transactional_id=None,
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            data(name="a", partition_data=[part(index=0, records=_batch(5)), part(index=1, records=_batch(1, 2, 1))]),
            # two batches for one partition, one of them an old (v1, compressed) message set
            data(name="b", partition_data=[part(index=2, records=_batch(3) + _batch(4, 1, 1))]),
        ],
    )
    frame = _framed_body(request, 9, client_id="app")
    assert wire.produce_counts(frame, wire.request_head(frame)) == {("a", 0): 5, ("a", 1): 1, ("b", 2): 7}


@pytest.mark.parametrize("version", [3, 8, 9])
def test_produce_offsets_are_the_base_offsets_of_the_partitions_written(version: int) -> None:
    from kafka.protocol.producer import ProduceResponse

    topic = ProduceResponse.TopicProduceResponse
    part = topic.PartitionProduceResponse

    def answer(index: int, error: int, base: int) -> Any:
        return part(index=index, error_code=error, base_offset=base, log_append_time_ms=-1, log_start_offset=0)

    response = ProduceResponse[version](
        responses=[topic(name="a", partition_responses=[answer(0, 0, 40), answer(1, 6, -1), answer(2, 0, 0)])],
        throttle_time_ms=0,
    )
    head = wire.RequestHead(wire.PRODUCE, version, 9)
    assert wire.produce_offsets(head, _framed_body(response, 9)) == {("a", 0): 40, ("a", 2): 0}
