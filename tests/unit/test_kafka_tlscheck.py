"""kafka/tlscheck.py: why a cluster registered with TLS does not answer, told by one handshake (no broker)."""

from __future__ import annotations

import socket
import threading

from streamrepl.kafka.tlscheck import tls_problem
from streamrepl.registry import Cluster


def test_a_plaintext_port_is_named_as_a_failed_handshake() -> None:
    # What a Kafka broker without TLS does with a ClientHello: it reads it as a request and closes or answers junk.
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer() -> None:
        conn, _ = server.accept()
        with conn:
            conn.recv(4096)
            conn.sendall(b"\x00\x00\x00\x08not tls!")

    t = threading.Thread(target=answer)
    t.start()
    try:
        said = tls_problem(Cluster("c", {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SSL"}))
    finally:
        t.join(10)
        server.close()
    assert said.startswith("the TLS handshake with it failed (") and "security.protocol" in said, said


def test_nothing_is_said_without_tls_or_without_an_answer() -> None:
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]
    refused = {"bootstrap.servers": f"127.0.0.1:{port}"}  # nothing listens there now
    assert tls_problem(Cluster("c", refused)) == ""
    assert tls_problem(Cluster("c", dict(refused, **{"security.protocol": "SSL"}))) == ""
