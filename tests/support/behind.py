"""A Tansu broker that advertises the port of a line in front of it (a Throttle, a DelayLine): every client,
gateways included, reaches it through the line."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

from streamrepl.local_brokers import Tansu
from support.throttle import free_port

Line = TypeVar("Line", bound=Any)


@contextmanager
def tansu_behind(
    cluster: str, logdir: Path, line_to: Callable[[int], AbstractContextManager[Line]]
) -> Iterator[tuple[str, Line]]:
    """A Tansu broker for `cluster` behind `line_to(broker port)`, which it advertises: (the address clients are given,
    the line). The broker is killed at the end."""
    from confluent_kafka.admin import AdminClient

    port = free_port()
    with line_to(port) as line:
        cmd, env = Tansu().command(cluster, port, logdir / cluster, advertised=line.port)
        with open(logdir / f"{cluster}.log", "ab") as out:
            proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        address = f"127.0.0.1:{line.port}"
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    AdminClient({"bootstrap.servers": address}).list_topics(timeout=2)
                    break
                except Exception:
                    assert time.monotonic() < deadline and proc.poll() is None, f"{cluster}'s broker did not start"
                    time.sleep(0.2)
            yield address, line
        finally:
            proc.kill()
            proc.wait()
