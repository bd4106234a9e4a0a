"""bulk/lock.py: when the owner of a lock left by a run on this host is gone."""

from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path

from streamrepl.bulk import lock


def _state(pid: int) -> str:
    # /proc/<pid>/stat: "pid (comm) S ...", comm may hold spaces or parentheses
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _held_by(pid: int) -> dict[str, object]:
    return {"local": True, "owner": f"someone@{socket.gethostname()}:{pid}:0123abcd"}


def test_an_owner_that_exited_but_was_not_reaped_yet_is_dead() -> None:
    """A run SIGKILLed under a parent that has not waited for it yet is a zombie: kill(pid, 0) still succeeds."""
    child = subprocess.Popen(["true"])
    try:
        deadline = time.monotonic() + 10
        while _state(child.pid) != "Z":
            assert time.monotonic() < deadline, "the child never exited"
            time.sleep(0.01)
        assert lock._dead_here(_held_by(child.pid)) is True
    finally:
        child.wait()


def test_a_running_owner_is_alive_and_a_gone_one_dead() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert lock._dead_here(_held_by(child.pid)) is False
    finally:
        child.kill()
        child.wait()
    assert lock._dead_here(_held_by(child.pid)) is True
