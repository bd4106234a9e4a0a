"""Freezing a process (SIGSTOP) for a while and thawing it (SIGCONT) whatever happens meanwhile: a
broker or a gateway that stalls, as in a long GC pause or a network partition, without dying."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from collections.abc import Iterator

from streamrepl.local import EphemeralClusters


@contextlib.contextmanager
def frozen(proc: subprocess.Popen) -> Iterator[None]:  # type: ignore[type-arg]
    """`proc` is stopped for the block and continued after it, even when the block fails."""
    proc.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        proc.send_signal(signal.SIGCONT)


@contextlib.contextmanager
def broker_frozen(ec: EphemeralClusters, cluster: str) -> Iterator[None]:
    """The broker of `cluster` is stopped for the block and continued after it."""
    ec.freeze(cluster)
    try:
        yield
    finally:
        ec.thaw(cluster)
