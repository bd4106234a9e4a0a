"""`gateway start`: a gateway in the foreground of its process, until SIGTERM or SIGINT.

A signal handler only sets Gateway.stopping, a plain attribute that is safe to set any number of times: the
loop notices it within a pass. (It called Gateway.stop(), whose Event.set() takes a lock; a burst of SIGTERMs
nested the handlers in the main thread, each waiting on the lock the one it interrupted held: 3 gateways of 5
hung.)
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from types import FrameType

from .. import settings
from ..errors import PermissionDenied
from ..registry import Registry
from . import exits
from .gateway import Gateway

log = logging.getLogger("streamrepl.gateway")


def run_foreground(
    reg: Registry,
    cluster: str,
    gateway_id: str | None = None,
    metrics: tuple[str, int] | None = None,
    parent_id: str | None = None,
    restarts: int = 0,
    last_exit: str = "",
    exit_fd: int | None = None,
) -> None:
    """`restarts` and `last_exit`: what the supervisor says of this worker's earlier processes (reported, counted in
    the metrics); `exit_fd`: where a supervised worker gives its last words before a final exit (exits.py). An error
    before or while running is raised (`gateway start` maps it to its exit status)."""
    settings.check()
    gw = Gateway(
        reg,
        cluster,
        gateway_id,
        settings.gateway(),
        parent_id=parent_id,
        restarts=restarts,
        last_exit=last_exit,
        discover=True,  # what the brokers do is probed (or read from the cluster's cache) before the group is joined
    )
    if metrics is not None:
        gw.serve_metrics(*metrics)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        gw.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    gw.run()
    # Drained and stopped (and left, where the broker handles it): exit without destroying the group consumer again.
    if gw.refused and exit_fd is not None:
        exits.tell_supervisor(exit_fd, PermissionDenied.code, gw.refused)
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    # Taken off the gateway list: a final exit, which a supervisor does not mend by a restart (the log says why).
    os._exit(exits.REFUSED if gw.refused else exits.CLEAN)
