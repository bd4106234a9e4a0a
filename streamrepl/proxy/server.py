"""The proxy: one listening port for bootstrapping and one per broker, each connection passed to its broker.

A client connection is paired with one connection to a broker: the bootstrap port's with a bootstrap broker of the
cluster, a broker port's with that broker. Requests go to the broker as they came; responses come back as they came,
in the order of their requests (as the broker sends them), except the few that name brokers (wire.REWRITTEN, and
ApiVersions, which caps versions): those are decoded, made to name the proxy's ports, and encoded again. A broker
named for the first time gets its port before its name reaches the client. A Produce to a stream with a synchronous
replica has its response held, in line, until the replica holds its records (holds.py, sync.py): the responses after
it on that connection wait with it, so that their order is kept.

SASL passes through: the client authenticates to the broker itself (with SaslHandshake v0 the tokens that follow go
unframed: PLAIN and SCRAM are passed as such, other mechanisms need SaslAuthenticate, which every current client
uses). TLS ends at the proxy: the proxy's own certificate faces the clients, and the connection to the broker is
made as the registry says (security.protocol, ssl.ca.location...), so a client certificate never reaches the broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field

from . import wire
from .holds import Holds
from .stats import ProxyStats

log = logging.getLogger("streamrepl.proxy")

#: How long a drain (SIGTERM) waits for the responses of requests already passed to the brokers.
DRAIN_SECONDS = 30.0
#: How long the proxy waits for a broker to accept a connection before it closes the client's.
CONNECT_SECONDS = 10.0
#: A held Produce is answered this long before its request's timeout_ms runs out (the client's own timer started
#: before the proxy's, and the answer has a way to go).
HOLD_MARGIN = 0.2
#: The longest a held EndTxn waits (it has no timeout of its own; clients' request timeouts are 30 s by default). The
#: latency limit (-synctimeout) ends a hold long before.
END_TXN_HOLD_SECONDS = 25.0

#: SaslHandshake v0: how many unframed token exchanges follow, by mechanism.
_RAW_SASL_ROUNDS = {"PLAIN": 1, "SCRAM-SHA-256": 2, "SCRAM-SHA-512": 2, "OAUTHBEARER": 1}


class ProtocolError(Exception):
    """A peer sent what is not a Kafka frame."""


@dataclass(frozen=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


@dataclass(frozen=True)
class Listen:
    """Where the proxy listens and what it tells clients: `listen` for bootstrapping (broker ports follow it: port+1,
    +2... in the order the brokers are first named, or any free ports when it is 0); `advertise` what clients are
    told (None: the listening host, or this host's name when that is a wildcard, with the listening ports); `sock`
    the bootstrap port's socket, already listening (a supervised worker's, kept open by its supervisor so that the
    port stays the same across restarts: `listen`'s port then only says how broker ports are chosen)."""

    listen: Address
    advertise: Address | None = None
    tls: ssl.SSLContext | None = None
    sock: socket.socket | None = None


class Upstream:
    """How the proxy reaches the brokers of its cluster: the bootstrap brokers, and TLS as the registry says."""

    def __init__(self, bootstrap: list[Address], tls: ssl.SSLContext | None):
        self.bootstrap = bootstrap
        self.tls = tls

    async def open(self, address: Address) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.wait_for(
            asyncio.open_connection(
                address.host, address.port, ssl=self.tls, server_hostname=address.host if self.tls else None
            ),
            CONNECT_SECONDS,
        )

    async def open_bootstrap(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        last: Exception | None = None
        for address in self.bootstrap:
            try:
                return await self.open(address)
            except (TimeoutError, OSError) as e:
                last = e
        raise ConnectionError(f"no bootstrap broker answers: {last}")


async def read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """The next frame's body, or None when the peer closed the connection between frames."""
    try:
        head = await reader.readexactly(4)
    except asyncio.IncompleteReadError as e:
        if e.partial:
            raise ProtocolError("connection closed inside a frame's size") from None
        return None
    (size,) = wire.FRAME_SIZE.unpack(head)
    if not 0 <= size <= wire.MAX_FRAME:
        raise ProtocolError(f"frame of {size} bytes")
    try:
        return await reader.readexactly(size)
    except asyncio.IncompleteReadError:
        raise ProtocolError("connection closed inside a frame") from None


def write_frame(writer: asyncio.StreamWriter, frame: bytes) -> None:
    writer.write(wire.FRAME_SIZE.pack(len(frame)))
    writer.write(frame)


@dataclass
class _Pending:
    """A request passed to the broker whose response has not come back: what the response is read by."""

    head: wire.RequestHead | None  # None: an unframed SASL token (SaslHandshake v0)
    sasl_mechanism: str = ""
    #: a Produce whose response is held (holds.py): records per partition of the topics held, and until when
    held: dict[wire.Partition, int] | None = None
    deadline: float = 0.0
    #: a transactional Produce (with `held`): its transactional id, under which what it wrote is remembered
    txn: str | None = None
    #: an EndTxn committing a transaction that wrote synchronous topics: the last offsets it wrote, held for
    end_txn: dict[wire.Partition, int] | None = None


@dataclass(eq=False)  # kept in a set, by identity
class Connection:
    """A client's connection and its broker's."""

    proxy: Proxy
    client_reader: asyncio.StreamReader
    client_writer: asyncio.StreamWriter
    broker_reader: asyncio.StreamReader
    broker_writer: asyncio.StreamWriter
    pending: deque[_Pending] = field(default_factory=deque)
    raw_sasl_rounds: int = 0
    idle: asyncio.Event = field(default_factory=asyncio.Event)
    requests_task: asyncio.Task[None] | None = None

    async def run(self) -> None:
        self.idle.set()
        self.requests_task = asyncio.create_task(self._requests())
        responses = asyncio.create_task(self._responses())
        try:
            await asyncio.wait({self.requests_task, responses}, return_when=asyncio.FIRST_COMPLETED)
            if self.proxy.draining and not responses.done():
                # Stopped reading requests: the responses of those already sent still reach the client.
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(self.idle.wait(), self.proxy.drain_seconds)
            for task in (self.requests_task, responses):
                task.cancel()
            for task in (self.requests_task, responses):
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            errors = [t.exception() for t in (self.requests_task, responses) if not t.cancelled() and t.exception()]
            if errors:
                # A peer that went away is the common end of a connection; anything else is worth a line.
                level = logging.DEBUG if isinstance(errors[0], ConnectionError) else logging.WARNING
                log.log(level, "connection from %s closed: %s", self._peer(), errors[0])
        finally:
            for writer in (self.client_writer, self.broker_writer):
                writer.close()

    def _peer(self) -> str:
        return str(self.client_writer.get_extra_info("peername"))

    def stop_reading(self) -> None:
        if self.requests_task is not None:
            self.requests_task.cancel()

    async def _requests(self) -> None:
        stats = self.proxy.stats
        while (frame := await read_frame(self.client_reader)) is not None:
            if self.raw_sasl_rounds:
                self.raw_sasl_rounds -= 1
                entry: _Pending | None = _Pending(None)
            else:
                head = wire.request_head(frame)
                stats.request(head.api_key, len(frame))
                entry = _Pending(head)
                if head.api_key == wire.PRODUCE:
                    produce = wire.produce_head(frame, head)
                    if produce.acks == 0:
                        entry = None  # no response comes back: nothing to hold
                    elif self.proxy.holds is not None and self.proxy.holds.active:
                        self._to_hold(entry, frame, produce)
                elif head.api_key == wire.END_TXN and self.proxy.holds is not None and self.proxy.holds.transactions:
                    self._to_hold_end_txn(entry, frame)
                elif head.api_key == wire.SASL_HANDSHAKE and head.api_version == 0:
                    entry.sasl_mechanism = wire.sasl_mechanism(frame)
            if entry is not None:
                self.pending.append(entry)
                self.idle.clear()
            write_frame(self.broker_writer, frame)
            await self.broker_writer.drain()

    def _to_hold(self, entry: _Pending, frame: bytes, produce: wire.ProduceHead) -> None:
        """Mark a Produce whose response waits for synchronous replicas: the records it writes to their topics."""
        holds = self.proxy.holds
        assert holds is not None and entry.head is not None
        if not holds.may_hold(frame):
            return  # no topic of a synchronous stream in it: not even decoded
        try:
            counts = wire.produce_counts(frame, entry.head)
        except Exception as e:  # noqa: BLE001 - a request the library cannot read is passed, not held
            log.warning("Produce v%d not read, its response is not held: %s", entry.head.api_version, e)
            return
        held = {k: n for k, n in counts.items() if n > 0 and holds.links_of(k[0]) is not None}
        if not held:
            return
        entry.held = held
        if produce.transactional_id is not None:
            # Reaches the replica once committed: answered at once, what it wrote remembered for its EndTxn.
            holds.stats.transactional += 1
            entry.txn = produce.transactional_id
            return
        # Within the request's own timeout, from when it came: the client waits no longer than that.
        entry.deadline = holds.clock() + max(produce.timeout_ms / 1000 - HOLD_MARGIN, 0.0)

    def _to_hold_end_txn(self, entry: _Pending, frame: bytes) -> None:
        """Mark an EndTxn that commits a transaction which wrote synchronous topics: its response waits for them."""
        holds = self.proxy.holds
        assert holds is not None and entry.head is not None
        try:
            txn, commit = wire.end_txn_request(frame, entry.head)
        except Exception as e:  # noqa: BLE001 - passed, not held
            log.warning("EndTxn v%d not read, its response is not held: %s", entry.head.api_version, e)
            return
        wrote = holds.txn_end(txn)
        if commit and wrote:
            entry.end_txn = wrote
            entry.deadline = holds.clock() + END_TXN_HOLD_SECONDS

    def _txn_written(self, entry: _Pending, frame: bytes) -> None:
        """A transactional Produce's response: what it wrote, remembered under its transactional id."""
        holds = self.proxy.holds
        assert holds is not None and entry.head is not None and entry.held is not None and entry.txn is not None
        try:
            offsets = wire.produce_offsets(entry.head, frame)
        except Exception as e:  # noqa: BLE001 - its commit will not wait for it
            log.warning(
                "Produce response v%d not read, its transaction's commit is not held: %s", entry.head.api_version, e
            )
            return
        holds.txn_written(entry.txn, {k: offsets[k] + n - 1 for k, n in entry.held.items() if k in offsets})

    async def _hold_end_txn(self, entry: _Pending, frame: bytes) -> None:
        holds = self.proxy.holds
        assert holds is not None and entry.head is not None and entry.end_txn is not None
        try:
            ok = wire.end_txn_ok(entry.head, frame)
        except Exception as e:  # noqa: BLE001 - passed as it came
            log.warning("EndTxn response v%d not read, not held: %s", entry.head.api_version, e)
            return
        if ok:
            holds.stats.end_txn += 1
            await holds.hold(entry.end_txn, entry.deadline)

    async def _hold(self, entry: _Pending, frame: bytes) -> None:
        """Wait until the synchronous replicas hold what the Produce wrote (or fall back, or its timeout)."""
        holds = self.proxy.holds
        assert holds is not None and entry.head is not None and entry.held is not None
        try:
            offsets = wire.produce_offsets(entry.head, frame)
        except Exception as e:  # noqa: BLE001 - an answer the library cannot read is passed as it came
            log.warning("Produce response v%d not read, not held: %s", entry.head.api_version, e)
            return
        produced = {k: offsets[k] + n - 1 for k, n in entry.held.items() if k in offsets}
        if produced:
            await holds.hold(produced, entry.deadline)

    async def _responses(self) -> None:
        while (frame := await read_frame(self.broker_reader)) is not None:
            if not self.pending:
                raise ProtocolError("the broker answered a request it was not sent")
            entry = self.pending.popleft()
            head = entry.head
            if head is not None:
                self.proxy.stats.response(len(frame))
                if entry.txn is not None:
                    self._txn_written(entry, frame)
                elif entry.held is not None:
                    # Held here, in line: the responses after it on this connection wait too (their order is kept).
                    await self._hold(entry, frame)
                elif entry.end_txn is not None:
                    await self._hold_end_txn(entry, frame)
                elif head.api_key in wire.REWRITTEN or head.api_key == wire.API_VERSIONS:
                    frame = await self.proxy.rewrite(head, frame)
                elif head.api_key == wire.SASL_HANDSHAKE and entry.sasl_mechanism and wire.sasl_handshake_ok(frame):
                    rounds = _RAW_SASL_ROUNDS.get(entry.sasl_mechanism.upper())
                    if rounds is None:
                        raise ProtocolError(
                            f"SASL {entry.sasl_mechanism} over SaslHandshake v0 is not passed by the proxy;"
                            " use a client that sends SaslAuthenticate"
                        )
                    self.raw_sasl_rounds = rounds
            write_frame(self.client_writer, frame)
            if not self.pending:
                self.idle.set()
            await self.client_writer.drain()


class Proxy:
    """The listeners of one cluster's proxy and the connections they accepted."""

    def __init__(
        self,
        cluster: str,
        upstream: Upstream,
        listen: Listen,
        stats: ProxyStats | None = None,
        holds: Holds | None = None,
    ):
        self.cluster = cluster
        #: the held Produce (None: every response is passed at once)
        self.holds = holds
        self.upstream = upstream
        self.listen = listen
        self.stats = stats or ProxyStats(cluster)
        self.drain_seconds = DRAIN_SECONDS
        self.draining = False
        self._bootstrap: asyncio.Server | None = None
        self._bootstrap_port = 0
        #: node id -> the broker's own address (the latest a response named), and the proxy's server for it
        self._brokers: dict[int, Address] = {}
        self._servers: dict[int, asyncio.Server] = {}
        self._connections: set[Connection] = set()
        self._stopped = asyncio.Event()

    # -- addresses -------------------------------------------------------------------------
    @property
    def bootstrap_port(self) -> int:
        return self._bootstrap_port

    def advertised(self, port: int) -> Address:
        """What clients are told for the proxy's listening `port`."""
        adv = self.listen.advertise
        host = adv.host if adv is not None else self.listen.listen.host
        if host in ("", "0.0.0.0", "::"):
            host = socket.gethostname()
        if adv is not None and adv.port and self.listen.listen.port:
            port = adv.port + (port - self._bootstrap_port)
        elif adv is not None and adv.port and port == self._bootstrap_port:
            port = adv.port
        return Address(host, port)

    def broker_ports(self) -> dict[int, int]:
        return {node: _port_of(server) for node, server in self._servers.items()}

    async def start(self) -> None:
        if self.listen.sock is not None:
            self._bootstrap = await asyncio.start_server(
                self._accepted_by(None), sock=self.listen.sock, ssl=self.listen.tls
            )
        else:
            self._bootstrap = await self._serve(self.listen.listen.port, None)
        self._bootstrap_port = _port_of(self._bootstrap)
        log.info("proxy of cluster %s listening on %s:%d", self.cluster, self.listen.listen.host, self._bootstrap_port)

    def _accepted_by(self, node: int | None) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await self._accept(reader, writer, node)

        return accepted

    async def _serve(self, port: int, node: int | None) -> asyncio.Server:
        return await asyncio.start_server(self._accepted_by(node), self.listen.listen.host, port, ssl=self.listen.tls)

    async def _ensure_brokers(self, brokers: Iterable[tuple[int, str, int]]) -> None:
        for node, host, port in brokers:
            self._brokers[node] = Address(host, port)
            if node not in self._servers:
                wanted = self._bootstrap_port + 1 + len(self._servers) if self.listen.listen.port else 0
                self._servers[node] = await self._serve(wanted, node)
                log.info("broker %d (%s:%d) through port %d", node, host, port, _port_of(self._servers[node]))
        self.stats.listeners = len(self._servers) + 1

    def _endpoint(self, node: int, host: str, port: int) -> tuple[str, int]:
        address = self.advertised(_port_of(self._servers[node]))
        return address.host, address.port

    async def rewrite(self, head: wire.RequestHead, frame: bytes) -> bytes:
        """A response that names brokers, naming the proxy instead (ApiVersions: capped); as it came when it cannot be
        decoded (an error answer of another shape), which names no broker."""
        try:
            message = wire.decode_response(head, frame)
        except Exception as e:  # noqa: BLE001 - a response the library cannot read is passed as it came
            log.warning("response to API %d v%d passed as it came: %s", head.api_key, head.api_version, e)
            return frame
        if message is None:
            return frame
        if head.api_key == wire.API_VERSIONS:
            return wire.encode_response(head, message) if wire.cap_versions(message) else frame
        await self._ensure_brokers(wire.brokers_named(head, message))
        wire.name_proxy(head, message, self._endpoint)
        self.stats.rewritten += 1
        return wire.encode_response(head, message)

    # -- connections -----------------------------------------------------------------------
    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, node: int | None) -> None:
        if self.draining:
            writer.close()
            return
        try:
            if node is None:
                broker_reader, broker_writer = await self.upstream.open_bootstrap()
            else:
                broker_reader, broker_writer = await self.upstream.open(self._brokers[node])
        except (TimeoutError, OSError, ConnectionError) as e:
            log.warning("cannot reach broker %s for a client: %s", "bootstrap" if node is None else node, e)
            self.stats.connect_failures += 1
            writer.close()
            return
        conn = Connection(self, reader, writer, broker_reader, broker_writer)
        self._connections.add(conn)
        self.stats.connections = len(self._connections)
        self.stats.accepted += 1
        try:
            await conn.run()
        finally:
            self._connections.discard(conn)
            self.stats.connections = len(self._connections)

    def request_stop(self) -> None:
        """Drain: accept no more connections, read no more requests, deliver the responses of those already sent
        (up to drain_seconds), then close. Safe to call more than once."""
        if self.draining:
            return
        self.draining = True
        log.info("draining %d connections", len(self._connections))
        for server in [self._bootstrap, *self._servers.values()]:
            if server is not None:
                server.close()
        for conn in list(self._connections):
            conn.stop_reading()
        asyncio.get_running_loop().create_task(self._wait_drained())

    async def _wait_drained(self) -> None:
        while self._connections:
            await asyncio.sleep(0.05)
        self._stopped.set()

    async def wait_stopped(self) -> None:
        await self._stopped.wait()


def _port_of(server: asyncio.Server) -> int:
    return int(server.sockets[0].getsockname()[1])
