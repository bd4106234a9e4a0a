"""The brokers end-to-end tests run against.

One pair (sanfrancisco and newyork) is started per test session and shared by every end-to-end test
(`shared_clusters`, the `clusters` fixture of tests/conftest.py); tests keep out of each other's way
by using stream paths of their own (`support.cli.unique_path`). Starting brokers costs about a
second each, and a machine running the suite is busy enough.

A module starts brokers of its own (`EphemeralClusters([...])` directly) only when it does something
to them that would break the others' tests: freezing or killing a broker, or running gateways whose
counts it checks (a gateway works on every replica of its cluster, so streams other modules leave
behind would change them). Such a module says why in a comment at its fixture.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from streamrepl import local, settings
from streamrepl.local import EphemeralClusters

SHARED_CLUSTERS = ["sanfrancisco", "newyork"]

#: The broker program the tests' embedded clusters run: tansu (the default) or noida
#: ($STREAMREPL_LOCAL_BROKER, read through streamrepl.settings).
BROKER = settings.local_broker()
ON_NOIDA = BROKER == "noida"

#: A base for the record timestamps tests set: a day ago, in whole seconds. noida-db deletes records
#: older than the topic's retention.ms (7 days by default, even when the topic sets nothing), so a
#: record dated 2023 or 1970 is gone before a test reads it; Tansu keeps everything.
RECENT_MS = (int(time.time()) - 86_400) * 1000

#: Consumer-group settings for fast joins. A join on Tansu waits about half the session timeout, so
#: tests use 2 s there; noida-db refuses a session timeout under 6 s (INVALID_SESSION_TIMEOUT, as
#: Apache Kafka's group.min.session.timeout.ms does by default).
FAST_GROUP: dict[str, int] = {"session.timeout.ms": 6000 if ON_NOIDA else 2000, "heartbeat.interval.ms": 500}


def not_on_noida(reason: str) -> pytest.MarkDecorator:
    """Skip a test when the brokers are noida-db, for `reason` (a difference of noida-db's, written out)."""
    return pytest.mark.skipif(ON_NOIDA, reason=f"not applicable on noida-db: {reason}")


#: Fixtures that start or use a broker: a test that needs one (even indirectly, as `cli` needs
#: `clusters`) is an end-to-end test: tests/unit/conftest.py refuses it.
BROKER_FIXTURES = frozenset({"clusters"})


@contextlib.contextmanager
def shared_clusters() -> Iterator[EphemeralClusters]:
    """The session's brokers; $STREAMREPL_CLUSTERS names their registry while they run."""
    with EphemeralClusters(SHARED_CLUSTERS) as ec, pytest.MonkeyPatch.context() as mp:
        mp.setenv("STREAMREPL_CLUSTERS", str(ec.registry_path))
        mp.delenv("STREAMREPL_IDENTITY", raising=False)
        yield ec
        # A Tansu broker waits for its connected clients before it stops: let go of any left.
        gc.collect()


@contextlib.contextmanager
def registered_clusters(names: list[str]) -> Iterator[EphemeralClusters]:
    """Brokers of a module's own; $STREAMREPL_CLUSTERS names their registry while they run, as before after."""
    with EphemeralClusters(names) as ec, pytest.MonkeyPatch.context() as mp:
        mp.setenv("STREAMREPL_CLUSTERS", str(ec.registry_path))
        yield ec


def kill_broker(ec: EphemeralClusters, name: str) -> None:
    """SIGKILL one broker of `ec` and reap it. A broker that was frozen with clients connected waits
    for them on SIGTERM (5 s); use this when it holds nothing worth a clean stop."""
    pid = ec.brokers[name].pid
    with contextlib.suppress(ProcessLookupError, ChildProcessError):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def crash_broker(ec: EphemeralClusters, name: str, down_seconds: float = 1.0) -> None:
    """SIGKILL one broker of `ec` and, `down_seconds` later, start the same command line again (same port, same
    data directory). A broker that keeps data on disk (noida-db) comes back without what it took since its last
    save; Tansu comes back empty. (Not `local.up`: it picks another port while the old one's connections are in
    TIME_WAIT, and clients must find the broker where it was.)"""
    broker = ec.brokers[name]
    argv = Path(f"/proc/{broker.pid}/cmdline").read_bytes().rstrip(b"\0").split(b"\0")
    kill_broker(ec, name)
    time.sleep(down_seconds)
    with open(broker.log, "ab") as log:
        proc = local.popen_dying_with_parent(  # as EphemeralClusters' own: dies with the test run
            [a.decode() for a in argv],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    broker.pid = proc.pid
    local._CHILDREN[proc.pid] = proc
    local._wait_ready(proc, broker, local.READY_TIMEOUT, ec.state_dir)
    # Recorded, so that the fixture's `local down` stops the new process.
    local._save(ec.state_dir, {**local._load(ec.state_dir), name: broker})


def wait_saved(ec: EphemeralClusters, name: str, timeout: float = 30) -> None:
    """Until a noida-db broker of `ec` saved its data (kafka.json, written every few seconds) after this call: what
    it took before is kept by a crash; what it takes in the next second most likely is not."""
    data = local.data_dir(ec.state_dir, name) / "kafka.json"
    since = time.time()
    deadline = time.monotonic() + timeout
    while not (data.exists() and data.stat().st_mtime > since):
        assert time.monotonic() < deadline, f"{name}'s broker did not save its data within {timeout:.0f} s"
        time.sleep(0.05)
