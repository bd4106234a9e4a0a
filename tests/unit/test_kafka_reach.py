"""Which of many clusters answer (kafka/reach.py, `cluster list`): closed ports are told without a Kafka client,
the clients that ask are bounded in number, and a registry of thousands of closed ports is listed whole."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import support

from streamrepl.kafka import reach
from streamrepl.registry import Cluster


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def listening() -> Iterator[int]:
    """A port that accepts TCP connections (and says nothing: no broker)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("bootstrap", "found"),
    [
        ("h1:9092", [("h1", 9092)]),
        ("h1:9092, h2:9093", [("h1", 9092), ("h2", 9093)]),
        ("SASL_SSL://h1:1,PLAINTEXT://h2:2", [("h1", 1), ("h2", 2)]),
        ("[::1]:9092", [("::1", 9092)]),
        ("h1", [("h1", 9092)]),
        ("op:pw@h1:9092", None),
        ("h1:port", None),
        ("h1:70000", None),
    ],
)
def test_addresses_read_as_the_client_reads_them(bootstrap: str, found: list[tuple[str, int]] | None) -> None:
    assert reach.addresses(bootstrap) == found


def test_closed_ports_are_told_without_a_kafka_client() -> None:
    asked: list[str] = []
    clusters = [Cluster(f"c{i}", {"bootstrap.servers": f"127.0.0.1:{closed_port()}"}) for i in range(50)]
    answers = reach.which_answer(clusters, 5.0, lambda c, t: asked.append(c.name) or True)
    assert answers == [False] * 50
    assert asked == []


def test_a_cluster_that_accepts_or_cannot_be_read_is_asked(listening: int) -> None:
    clusters = [
        Cluster("open", {"bootstrap.servers": f"127.0.0.1:{closed_port()},127.0.0.1:{listening}"}),
        Cluster("closed", {"bootstrap.servers": f"127.0.0.1:{closed_port()}"}),
        Cluster("odd", {"bootstrap.servers": f"op:pw@127.0.0.1:{closed_port()}"}),
    ]
    asked: list[str] = []
    answers = reach.which_answer(clusters, 5.0, lambda c, t: asked.append(c.name) or c.name == "open")
    assert answers == [True, False, False]
    assert sorted(asked) == ["odd", "open"]


def test_the_clients_that_ask_are_bounded_in_number(listening: int) -> None:
    clusters = [Cluster(f"c{i}", {"bootstrap.servers": f"127.0.0.1:{listening}"}) for i in range(40)]
    now = 0
    most = 0
    lock = threading.Lock()

    def ask(c: Cluster, timeout: float) -> bool:
        nonlocal now, most
        with lock:
            now += 1
            most = max(most, now)
        time.sleep(0.02)
        with lock:
            now -= 1
        return True

    assert reach.which_answer(clusters, 5.0, ask, workers=4) == [True] * 40
    assert 1 < most <= 4


def test_cluster_list_of_ten_thousand_closed_ports_lists_every_one(tmp_path: Path) -> None:
    """Each cluster unreachable, in the registry's order; finished well within the test's timeout (a client per
    cluster, all at once, took minutes and every core of the machine)."""
    ports = [closed_port() for _ in range(20)]
    path = tmp_path / "clusters.yaml"
    path.write_text(
        "clusters:\n" + "".join(f"  c{i}:\n    bootstrap.servers: 127.0.0.1:{ports[i % 20]}\n" for i in range(10_000))
    )
    listing = support.run_proc(["cluster", "list", "-clusters", path, "-json"], timeout=400)
    assert listing.code == 0, listing
    rows = listing.data()
    assert [r["cluster"] for r in rows] == [f"c{i}" for i in range(10_000)]
    assert not any(r["answers"] for r in rows)
