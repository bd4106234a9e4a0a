"""A fake Kafka broker for the proxy's unit tests (an asyncio server that answers frames with a function given to it),
and the frames those tests send: shared by tests/unit/test_proxy_server.py, test_proxy_end_txn.py and
test_proxy_supervise.py."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable
from typing import Any

from kafka.protocol.metadata import MetadataResponse
from kafka.protocol.producer import ProduceRequest

from streamrepl.proxy import wire
from streamrepl.proxy.server import Address, Listen, Proxy, Upstream, read_frame, write_frame

OTHER_API = 99  # an API the proxy knows nothing of: passed as it came


class FakeBroker:
    """Answers each frame with what `answer(frame)` returns (None: no answer); keeps every frame it was sent."""

    def __init__(self, node_id: int, answer: Callable[[FakeBroker, bytes], Awaitable[bytes | None]]):
        self.node_id = node_id
        self.answer = answer
        self.received: list[bytes] = []
        self.port = 0
        #: unframed SASL tokens still to come (SaslHandshake v0 with SCRAM: two)
        self.raw_tokens = 0

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while (frame := await read_frame(reader)) is not None:
            self.received.append(frame)
            reply = await self.answer(self, frame)
            if reply is not None:
                write_frame(writer, reply)
                await writer.drain()
        writer.close()


def metadata_answer(brokers: list[FakeBroker]) -> Callable[[FakeBroker, bytes], Awaitable[bytes | None]]:
    async def answer(me: FakeBroker, frame: bytes) -> bytes | None:
        if me.raw_tokens:
            me.raw_tokens -= 1
            return b"raw-answer-to:" + frame
        head = wire.request_head(frame)
        if head.api_key == wire.METADATA:
            b = MetadataResponse.MetadataResponseBroker
            response = MetadataResponse[head.api_version](
                throttle_time_ms=0,
                brokers=[b(node_id=x.node_id, host="127.0.0.1", port=x.port, rack=None, version=1) for x in brokers],
                controller_id=brokers[0].node_id,
                topics=[],
            )
            response.with_header(correlation_id=head.correlation_id)
            return bytes(response.encode(header=True))
        if head.api_key == wire.PRODUCE and wire.produce_head(frame, head).acks == 0:
            return None
        if head.api_key == wire.SASL_HANDSHAKE:
            me.raw_tokens = 2
            return struct.pack(">ihi", head.correlation_id, 0, 0)  # accepted; no mechanisms listed
        if head.api_key == OTHER_API and head.api_version == 1:
            await asyncio.sleep(0.3)  # a slow answer (a drain waits for it)
        # An arbitrary body: the broker's node and the request's bytes after the correlation id.
        return struct.pack(">ii", head.correlation_id, me.node_id) + frame[8:]

    return answer


def request(api_key: int, version: int, correlation_id: int, body: bytes = b"payload\x00\xff") -> bytes:
    return struct.pack(">hhi", api_key, version, correlation_id) + b"\x00\x03app" + body


def run(coro: Awaitable[Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 30))  # type: ignore[arg-type]


async def start_proxy(brokers: list[FakeBroker]) -> Proxy:
    for b in brokers:
        await b.start()
        b.answer = metadata_answer(brokers)
    proxy = Proxy("c", Upstream([Address("127.0.0.1", brokers[0].port)], None), Listen(Address("127.0.0.1", 0)))
    await proxy.start()
    return proxy


async def exchange(port: int, frames: list[bytes], answers: int) -> list[bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    for frame in frames:
        write_frame(writer, frame)
    await writer.drain()
    got = [f for _ in range(answers) if (f := await read_frame(reader)) is not None]
    writer.close()
    return got


def produce_answer(base_offset: int) -> Callable[[FakeBroker, bytes], Awaitable[bytes | None]]:
    """A broker that writes every Produce at `base_offset` and answers anything else as metadata_answer does."""
    from kafka.protocol.producer import ProduceResponse

    other = metadata_answer([])

    async def answer(me: FakeBroker, frame: bytes) -> bytes | None:
        head = wire.request_head(frame)
        if head.api_key != wire.PRODUCE:
            return await other(me, frame)
        req = ProduceRequest.decode(frame, version=head.api_version, header=True)
        topic = ProduceResponse.TopicProduceResponse
        part = topic.PartitionProduceResponse
        response = ProduceResponse[head.api_version](
            responses=[
                topic(
                    name=t.name,
                    partition_responses=[
                        part(index=p.index, error_code=0, base_offset=base_offset, log_append_time_ms=-1)
                        for p in t.partition_data
                    ],
                )
                for t in req.topic_data
            ],
            throttle_time_ms=0,
        )
        response.with_header(correlation_id=head.correlation_id)
        return bytes(response.encode(header=True))

    return answer


def produce_request(correlation_id: int, topic: str, records: int, txn: str | None = None) -> bytes:
    from kafka.record.memory_records import MemoryRecordsBuilder

    builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 16)
    for i in range(records):
        builder.append(timestamp=None, key=None, value=b"v%d" % i, headers=[])
    builder.close()
    data = ProduceRequest.TopicProduceData
    message = ProduceRequest[7](
        transactional_id=txn,
        acks=-1,
        timeout_ms=60_000,
        topic_data=[
            data(name=topic, partition_data=[data.PartitionProduceData(index=0, records=bytes(builder.buffer()))])
        ],
    )
    message.with_header(correlation_id=correlation_id, client_id="app")
    return bytes(message.encode(header=True))
