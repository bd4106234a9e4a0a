"""The held EndTxn: a transactional producer's Produces to a stream with a synchronous replica are answered at once
(the gateway reads committed records only), and what they wrote is remembered per transactional id, so that the
EndTxn that commits the transaction (on another connection: the transaction coordinator's) is answered once the
replica holds those records. An abort, or a transaction that wrote no synchronous stream, is not held."""

from __future__ import annotations

import asyncio
import struct

from kafka.protocol.producer.transaction import EndTxnRequest, EndTxnResponse
from support.proxy_fakes import FakeBroker, produce_answer, produce_request, run

from streamrepl.paths import StreamPath, kafka_topic_name
from streamrepl.proxy import wire
from streamrepl.proxy.holds import Holds, Target
from streamrepl.proxy.server import Address, Listen, Proxy, Upstream, read_frame, write_frame
from streamrepl.proxy.sync import Limits

SYNC = kafka_topic_name(StreamPath("c", "/s"), "orders")
PLAIN = kafka_topic_name(StreamPath("c", "/plain"), "orders")


def _end_txn(correlation_id: int, txn: str, commit: bool, version: int = 3) -> bytes:
    message = EndTxnRequest[version](transactional_id=txn, producer_id=7, producer_epoch=0, committed=commit)
    message.with_header(correlation_id=correlation_id, client_id="app")
    return bytes(message.encode(header=True))


def _broker_answer(base_offset: int):  # type: ignore[no-untyped-def]
    produce = produce_answer(base_offset)

    async def answer(me: FakeBroker, frame: bytes) -> bytes | None:
        head = wire.request_head(frame)
        if head.api_key == wire.END_TXN:
            response = EndTxnResponse[head.api_version](throttle_time_ms=0, error_code=0)
            response.with_header(correlation_id=head.correlation_id)
            return bytes(response.encode(header=True))
        return await produce(me, frame)

    return answer


def test_the_end_txn_that_commits_waits_for_the_replica_to_hold_what_the_transaction_wrote() -> None:
    async def scenario() -> None:
        replica_end = {"now": 0}
        asked: list[tuple[str, int, int]] = []

        async def end(topic: str, p: int, needed: int) -> int:
            asked.append((topic, p, needed))
            return replica_end["now"]

        holds = Holds("c", lambda: {}, lambda target: (end, lambda: None), Limits(timeout=60, stall=60))
        holds.apply({"/c/s": [Target("/c/s", "/ny/s", StreamPath("ny", "/s"), None)]})
        broker = FakeBroker(1, _broker_answer(40))
        await broker.start()
        proxy = Proxy(
            "c", Upstream([Address("127.0.0.1", broker.port)], None), Listen(Address("127.0.0.1", 0)), holds=holds
        )
        await proxy.start()
        leader = await asyncio.open_connection("127.0.0.1", proxy.bootstrap_port)
        coordinator = await asyncio.open_connection("127.0.0.1", proxy.bootstrap_port)

        async def exchange(conn: tuple[asyncio.StreamReader, asyncio.StreamWriter], frame: bytes) -> bytes:
            write_frame(conn[1], frame)
            await conn[1].drain()
            got = await read_frame(conn[0])
            assert got is not None
            return got

        # The transaction's Produces: answered at once (records 40-42 of the synchronous stream, and another topic).
        await exchange(leader, produce_request(1, SYNC, 3, txn="tx"))
        await exchange(leader, produce_request(2, PLAIN, 5, txn="tx"))
        assert asked == [] and holds.stats.transactional == 1

        # Its commit, on the coordinator's connection: held until the replica holds offset 42.
        answer = asyncio.ensure_future(exchange(coordinator, _end_txn(3, "tx", commit=True)))
        while len(asked) < 10:
            await asyncio.sleep(0.01)
        assert set(asked) == {("orders", 0, 42)} and not answer.done()
        replica_end["now"] = 43
        reply = await answer
        assert struct.unpack_from(">i", reply)[0] == 3
        assert holds.stats.end_txn == 1 and holds.stats.confirmed == 1

        # An abort, and a commit of a transaction that wrote no synchronous stream: answered at once.
        replica_end["now"] = 0
        asked.clear()
        await exchange(leader, produce_request(4, SYNC, 2, txn="tx2"))
        await exchange(coordinator, _end_txn(5, "tx2", commit=False))
        await exchange(leader, produce_request(6, PLAIN, 2, txn="tx3"))
        await exchange(coordinator, _end_txn(7, "tx3", commit=True, version=0))
        # tx2's abort forgot its writes: its next transaction's commit waits for nothing it wrote before.
        await exchange(coordinator, _end_txn(8, "tx2", commit=True, version=5))
        assert asked == [] and holds.stats.end_txn == 1
        for _, w in (leader, coordinator):
            w.close()

    run(scenario())
