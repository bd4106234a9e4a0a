"""local.up's choice of a port: a cluster's old port when it comes free soon, another one otherwise."""

from __future__ import annotations

import socket
import threading

import pytest

from streamrepl import local


def _listener() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


def test_an_old_port_still_held_a_moment_is_waited_for() -> None:
    """A broker stopped a moment ago may hold its port while its process ends: `up` took another port, and a gateway
    that dialed the old one never found its cluster again (test_gateway_lifecycle -k moved_to_another, noida-db)."""
    held = _listener()
    port = held.getsockname()[1]
    threading.Timer(0.3, held.close).start()
    assert local._free_port(set(), prefer=port) == port


def test_an_old_port_someone_else_keeps_is_given_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "PREFERRED_PORT_WAIT", 0.3)
    with _listener() as held:
        port = held.getsockname()[1]
        chosen = local._free_port(set(), prefer=port)
    assert chosen != port and chosen > 0
