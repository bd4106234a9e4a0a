"""streamrepl.proxy.server against a fake broker (an asyncio server that answers frames): requests and responses pass
byte for byte, Metadata names the proxy's ports and a broker port reaches its broker, acks=0 waits for no answer,
SaslHandshake v0's unframed tokens pass, and a drain delivers the answers already due before it closes."""

from __future__ import annotations

import asyncio
import struct

from kafka.protocol.metadata import MetadataResponse
from kafka.protocol.producer import ProduceRequest
from kafka.protocol.sasl import SaslHandshakeRequest
from support.proxy_fakes import (
    OTHER_API,
    FakeBroker,
    exchange,
    metadata_answer,
    produce_answer,
    produce_request,
    request,
    run,
    start_proxy,
)

from streamrepl.proxy import wire
from streamrepl.proxy.server import Address, Listen, Proxy, Upstream, read_frame, write_frame


def test_requests_and_responses_pass_byte_for_byte() -> None:
    async def scenario() -> None:
        broker = FakeBroker(1, metadata_answer([]))
        proxy = await start_proxy([broker])
        sent = [request(OTHER_API, 0, n, bytes(range(256)) * n) for n in range(1, 4)]
        got = await exchange(proxy.bootstrap_port, sent, 3)
        assert broker.received == sent
        assert got == [struct.pack(">ii", n, 1) + sent[n - 1][8:] for n in range(1, 4)]

    run(scenario())


def test_metadata_names_the_proxy_and_each_broker_port_reaches_its_broker() -> None:
    async def scenario() -> None:
        brokers = [FakeBroker(1, metadata_answer([])), FakeBroker(2, metadata_answer([]))]
        proxy = await start_proxy(brokers)
        from kafka.protocol.metadata import MetadataRequest

        ask = MetadataRequest[1](topics=None)
        ask.with_header(correlation_id=11, client_id="app")
        (answer,) = await exchange(proxy.bootstrap_port, [bytes(ask.encode(header=True))], 1)
        named = MetadataResponse.decode(answer, version=1, header=True)
        ports = {b.node_id: b.port for b in named.brokers}
        assert {b.host for b in named.brokers} == {"127.0.0.1"}
        assert set(ports.values()).isdisjoint({b.port for b in brokers}) and proxy.bootstrap_port not in ports.values()
        assert ports == proxy.broker_ports()
        for b in brokers:
            (reply,) = await exchange(ports[b.node_id], [request(OTHER_API, 0, 5)], 1)
            assert struct.unpack_from(">ii", reply) == (5, b.node_id)

    run(scenario())


def test_acks_0_produce_waits_for_no_answer() -> None:
    async def scenario() -> None:
        broker = FakeBroker(1, metadata_answer([]))
        proxy = await start_proxy([broker])
        fire = ProduceRequest[7](transactional_id=None, acks=0, timeout_ms=1000, topic_data=[])
        fire.with_header(correlation_id=1, client_id="app")
        # The answer to the request after it is read as that request's (not as the acks=0 Produce's).
        got = await exchange(proxy.bootstrap_port, [bytes(fire.encode(header=True)), request(OTHER_API, 0, 2)], 1)
        assert struct.unpack_from(">i", got[0]) == (2,)

    run(scenario())


def test_sasl_handshake_v0_tokens_pass_unframed() -> None:
    async def scenario() -> None:
        broker = FakeBroker(1, metadata_answer([]))
        proxy = await start_proxy([broker])
        hello = SaslHandshakeRequest[0](mechanism="SCRAM-SHA-256")
        hello.with_header(correlation_id=1, client_id="app")
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.bootstrap_port)
        write_frame(writer, bytes(hello.encode(header=True)))
        assert await read_frame(reader) == struct.pack(">ihi", 1, 0, 0)
        # Tokens are not requests: these two, read as headers, would be acks=0 Produce requests that get no answer.
        looks_like_acks_0 = request(wire.PRODUCE, 2, 2, struct.pack(">hi", 0, 1000))
        for token in (looks_like_acks_0, looks_like_acks_0 + b"-final"):
            write_frame(writer, token)
            assert await read_frame(reader) == b"raw-answer-to:" + token
        write_frame(writer, request(OTHER_API, 0, 3))  # framed again after SCRAM's two rounds
        assert struct.unpack_from(">i", await read_frame(reader) or b"") == (3,)
        writer.close()

    run(scenario())


def test_a_drain_delivers_the_answers_due_then_closes() -> None:
    async def scenario() -> None:
        broker = FakeBroker(1, metadata_answer([]))
        proxy = await start_proxy([broker])
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.bootstrap_port)
        write_frame(writer, request(OTHER_API, 1, 7))  # answered after 0.3 s
        await writer.drain()
        while not broker.received:
            await asyncio.sleep(0.01)
        proxy.request_stop()
        answer = await read_frame(reader)
        assert answer is not None and struct.unpack_from(">i", answer) == (7,)
        assert await read_frame(reader) is None  # then closed
        await proxy.wait_stopped()
        try:  # and no new connection is accepted
            r2, w2 = await asyncio.open_connection("127.0.0.1", proxy.bootstrap_port)
            assert await read_frame(r2) is None
        except ConnectionRefusedError:
            pass

    run(scenario())


# -- the held Produce (holds.py) --------------------------------------------------------------------------------------
def test_a_held_produce_is_answered_once_the_replica_holds_it_and_holds_what_follows_on_its_connection() -> None:
    from streamrepl.paths import StreamPath, kafka_topic_name
    from streamrepl.proxy.holds import Holds, Target
    from streamrepl.proxy.sync import Limits

    sync_topic = kafka_topic_name(StreamPath("c", "/s"), "orders")
    plain_topic = kafka_topic_name(StreamPath("c", "/plain"), "orders")

    async def scenario() -> None:
        replica_end = {"now": 0}
        asked: list[tuple[str, int, int, int]] = []  # (topic, partition, offset waited for, responses the client had)
        got: list[bytes] = []

        async def end(topic: str, p: int, needed: int) -> int:
            asked.append((topic, p, needed, len(got)))
            return replica_end["now"]

        holds = Holds("c", lambda: {}, lambda target: (end, lambda: None), Limits(timeout=60, stall=60))
        holds.apply({"/c/s": [Target("/c/s", "/ny/s", StreamPath("ny", "/s"), None)]})
        broker = FakeBroker(1, produce_answer(40))
        await broker.start()
        proxy = Proxy(
            "c", Upstream([Address("127.0.0.1", broker.port)], None), Listen(Address("127.0.0.1", 0)), holds=holds
        )
        await proxy.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", proxy.bootstrap_port)

        async def read(n: int) -> None:
            for _ in range(n):
                frame = await read_frame(reader)
                assert frame is not None
                got.append(frame)

        # A Produce to a stream without a synchronous replica: answered without a question about any replica.
        write_frame(writer, produce_request(1, plain_topic, 2))
        await writer.drain()
        await read(1)
        assert asked == [] and holds.stats.held == 0

        # A transactional Produce: not held (its records reach the replica once committed).
        write_frame(writer, produce_request(2, sync_topic, 2, txn="tx"))
        await writer.drain()
        await read(1)
        assert asked == [] and holds.stats.transactional == 1

        # 3 records written at 40-42, then a request of another API on the same connection.
        write_frame(writer, produce_request(3, sync_topic, 3))
        write_frame(writer, request(OTHER_API, 0, 4))
        await writer.drain()
        reading = asyncio.ensure_future(read(2))
        while len(asked) < 20:
            await asyncio.sleep(0.01)
        assert {(t, p, o) for t, p, o, _ in asked} == {("orders", 0, 42)}
        assert all(n == 2 for *_, n in asked), "answered before the replica held the records"
        replica_end["now"] = 42  # offsets up to 41: not yet
        seen = len(asked)
        while len(asked) < seen + 5:
            await asyncio.sleep(0.01)
        assert len(got) == 2
        replica_end["now"] = 43
        await reading
        assert [struct.unpack_from(">i", f)[0] for f in got] == [1, 2, 3, 4]  # in request order
        assert holds.stats.held == 1 and holds.stats.confirmed == 1
        writer.close()

    run(scenario())
