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
from .gateway import Gateway
from .workers import REFUSED

log = logging.getLogger("streamrepl.gateway")


def run_foreground(
    reg: Registry,
    cluster: str,
    gateway_id: str | None = None,
    metrics: tuple[str, int] | None = None,
    parent_id: str | None = None,
) -> None:
    settings.check()
    gw = Gateway(reg, cluster, gateway_id, settings.gateway(), parent_id=parent_id)
    gw.discover = True  # what the brokers do is probed (or read from the cluster's cache) before the group is joined
    if metrics is not None:
        gw.serve_metrics(*metrics)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        gw.stopping = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        gw.run()
    except PermissionDenied as e:
        if parent_id is None:
            raise  # the command's one-line error, exit status 1
        # A worker of `gateway start -workers` refused at start: a status of its own, so that its supervisor does not
        # start it again (exit status 1 is also any other failure, after which it does).
        log.error("%s", e.message)
        gw.refused = e.message
    # Drained and stopped (and left, where the broker handles it): exit without destroying the group consumer again.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    # Taken off the gateway list: not a clean stop, so that a supervisor shows it (the log says why).
    os._exit((REFUSED if parent_id else 1) if gw.refused else 0)
