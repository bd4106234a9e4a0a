"""Which of many clusters answer, found together and within bounds (`cluster list` on a registry of thousands).

A Kafka client per cluster costs threads and sockets of its own, and a cluster that does not answer holds it for the
whole timeout: so first every server of every cluster is tried with a plain TCP connection, many at once on one
thread; a cluster none of whose servers accepts one cannot answer, and is told so without a client. The others
(some server accepts, or an address this cannot read) are asked with a client, a bounded number at a time.
"""

from __future__ import annotations

import asyncio
import re
import resource
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from ..registry import Cluster

#: How many Kafka clients ask at once: each holds librdkafka threads and sockets.
CLIENT_WORKERS = 16
#: The most TCP connections tried at once (fewer when the process may open fewer files).
MAX_CONNECTS = 1024
#: librdkafka's port when an address names none.
DEFAULT_PORT = 9092
_HOST_RE = re.compile(r"[A-Za-z0-9._-]+")


def addresses(bootstrap: str) -> list[tuple[str, int]] | None:
    """The (host, port) of each server of bootstrap.servers; None when one of them cannot be read as an address
    (a `user:password@` in front, a port that is no number): the Kafka client is then the judge."""
    found = []
    for server in re.split(r"[\s,]+", bootstrap.strip()):
        if not server:
            continue
        server = server.split("://", 1)[-1]
        if server.startswith("["):
            host, _, rest = server[1:].partition("]")
            port = rest[1:] if rest.startswith(":") else (None if rest else str(DEFAULT_PORT))
        else:
            host, sep, port = server.rpartition(":")
            if not sep:
                host, port = server, str(DEFAULT_PORT)
            elif not _HOST_RE.fullmatch(host):
                return None
        if not host or port is None or not port.isdigit() or not 0 < int(port) < 65536:
            return None
        found.append((host, int(port)))
    return found or None


def _connect_limit() -> int:
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    room = soft - 256 if soft != resource.RLIM_INFINITY else MAX_CONNECTS
    return max(16, min(MAX_CONNECTS, room))


async def _any_accepts(servers: list[tuple[str, int]], timeout: float, gate: asyncio.Semaphore) -> bool:
    for host, port in servers:
        async with gate:
            try:
                _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
            except (OSError, TimeoutError):
                continue
            writer.close()
            return True
    return False


async def _sweep(targets: list[list[tuple[str, int]]], timeout: float) -> list[bool]:
    gate = asyncio.Semaphore(_connect_limit())
    return list(await asyncio.gather(*(_any_accepts(t, timeout, gate) for t in targets)))


def which_answer(
    clusters: Sequence[Cluster], timeout: float, ask: Callable[[Cluster, float], bool], workers: int = CLIENT_WORKERS
) -> list[bool]:
    """Whether each cluster answers (`ask(cluster, timeout)`, a Kafka client's question), in the clusters' order; a
    cluster none of whose servers accepts a TCP connection within `timeout` is not asked."""
    parsed = [addresses(c.bootstrap) for c in clusters]
    readable = [i for i, a in enumerate(parsed) if a is not None]
    reachable = asyncio.run(_sweep([parsed[i] or [] for i in readable], timeout)) if readable else []
    maybe = set(range(len(clusters))) - {i for i, ok in zip(readable, reachable, strict=True) if not ok}
    answers = [False] * len(clusters)
    if maybe:
        order = sorted(maybe)
        with ThreadPoolExecutor(max_workers=min(workers, len(order)), thread_name_prefix="reach") as pool:
            for i, ok in zip(order, pool.map(lambda c: ask(c, timeout), [clusters[i] for i in order]), strict=True):
                answers[i] = ok
    return answers
