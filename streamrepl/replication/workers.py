"""`gateway start -workers N`: one command that runs N gateway processes, to use more than one core.

One gateway process spends about 3 µs of its own CPU a record in confluent-kafka's per-record consume and produce
calls, so it is bound to one core (bench/run.py: 0.5-0.87x of the C relay); two processes reached 0.81-1.06x. With
N > 1 the command's process becomes this small supervisor: each worker is a normal gateway process with the id
`<id>.w<k>`, so it joins the slot group as a member of its own (static membership ids must differ), and shows as
its own row in `cluster gateway list`. It is told its parent's id (`-parent`), by which the gateway list judges it.

Workers are separate `python -m streamrepl gateway start` processes rather than multiprocessing children: each
is then exactly the gateway a single start runs (its own signal handling, its os._exit after the drain), nothing
has to be pickled, and nothing is forked from a process that may hold librdkafka threads.

- SIGTERM / SIGINT are forwarded to every worker, and the supervisor waits for their drains: it exits 0 when every
  worker stopped cleanly, 1 otherwise. The handler only sets an attribute (see process.py for why).
- A worker that dies (killed by a signal, or any failure: exit status 1) is started again under the same id after
  a back-off that doubles while it keeps dying young. One that exits 0 (stopped on its own: someone sent it
  SIGTERM) or REFUSED (the gateway list does not allow it, at start or later: process.py exits so when it has a
  parent) is not. When no worker is left the supervisor exits, 1 unless every one of them stopped cleanly.
  (A worker fenced by another process started with its id exits 1 too and is started again: the two fence each
  other in turn, each back-off longer, and the log says why each time: give each supervisor its own -id.)
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

log = logging.getLogger("streamrepl.gateway")

MAX_WORKERS = 64  # the slot count (membership.SLOTS): a worker more would own no slot
#: a worker's exit status when the gateway list refuses it (sysexits' EX_NOPERM): not started again
REFUSED = 77
NOT_RESTARTED = {0, REFUSED}
BACKOFF_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 30.0
#: a worker that ran this long before it died starts again after the first back-off, not a longer one
RAN_LONG_SECONDS = 60.0
POLL_SECONDS = 0.2


class Process(Protocol):
    """What the supervisor needs of a worker process (subprocess.Popen has it)."""

    pid: int

    def poll(self) -> int | None: ...

    def send_signal(self, sig: int) -> None: ...


def worker_id(parent_id: str, k: int) -> str:
    return f"{parent_id}.w{k}"


def worker_metrics_port(port: int | None, k: int) -> int | None:
    """Worker k (1..N) serves metrics on port+k-1; 0 stays "any free port" for each."""
    if port is None or port == 0:
        return port
    return port + k - 1


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


@dataclass
class Worker:
    k: int
    id: str
    proc: Process | None = None
    started: float = 0.0
    #: when a dead worker is started again (None: not waiting)
    restart_at: float | None = None
    backoff: float = BACKOFF_SECONDS
    #: the last exit status once the worker is finished for good (None while it runs or waits for a restart)
    final: int | None = None


class Supervisor:
    """`spawn(k, worker_id)` starts worker k (1..N) and returns its process; `clock` and `sleep` are injectable so that
    the unit tests run without processes or waiting."""

    def __init__(
        self,
        gateway_id: str,
        count: int,
        spawn: Callable[[int, str], Process],
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        backoff: float = BACKOFF_SECONDS,
    ):
        self.workers = [Worker(k, worker_id(gateway_id, k), backoff=backoff) for k in range(1, count + 1)]
        self.gateway_id = gateway_id
        #: the signal to forward (0: none yet); a plain attribute, so that a signal handler may set it
        self.stop_signal = 0
        self._forwarded = 0
        self._spawn = spawn
        self._clock = clock
        self._sleep = sleep
        self._first_backoff = backoff

    def on_signal(self, signum: int, _frame: object = None) -> None:
        self.stop_signal = signum

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGTERM, self.on_signal)
        signal.signal(signal.SIGINT, self.on_signal)

    def run(self) -> int:
        """Start the workers and look after them until none is left; the exit status."""
        for w in self.workers:
            self._start(w)
        log.info("gateway %s: started %d workers", self.gateway_id, len(self.workers))
        while not self.step():
            self._sleep(POLL_SECONDS)
        clean = all(w.final == 0 for w in self.workers if w.final is not None)
        return 0 if clean else 1

    def step(self) -> bool:
        """One look at the workers; True when none is left."""
        if self.stop_signal and self._forwarded != self.stop_signal:
            self._forwarded = self.stop_signal
            for w in self.workers:
                if w.proc is not None:
                    w.proc.send_signal(self.stop_signal)
                w.restart_at = None  # a planned stop starts nothing again
        now = self._clock()
        for w in self.workers:
            if w.proc is not None:
                code = w.proc.poll()
                if code is not None:
                    self._exited(w, code, now)
            elif w.restart_at is not None and now >= w.restart_at:
                w.restart_at = None
                self._start(w)
        return all(w.proc is None and w.restart_at is None for w in self.workers)

    def _start(self, w: Worker) -> None:
        w.proc = self._spawn(w.k, w.id)
        w.started = self._clock()

    def _exited(self, w: Worker, code: int, now: float) -> None:
        w.proc = None
        if self.stop_signal:
            w.final = code
            if code != 0:
                log.warning("gateway %s: worker %s stopped with %s", self.gateway_id, w.id, describe_exit(code))
            return
        if code in NOT_RESTARTED:
            w.final = code
            why = "is refused by the gateway list" if code == REFUSED else f"stopped ({describe_exit(code)})"
            log.warning("gateway %s: worker %s %s; not started again", self.gateway_id, w.id, why)
            return
        if now - w.started >= RAN_LONG_SECONDS:
            w.backoff = self._first_backoff
        w.restart_at = now + w.backoff
        log.warning(
            "gateway %s: worker %s died (%s); starting it again in %.1f s",
            self.gateway_id,
            w.id,
            describe_exit(code),
            w.backoff,
        )
        w.backoff = min(w.backoff * 2, BACKOFF_MAX_SECONDS)


def _die_with_parent() -> None:
    """In the worker, before exec: SIGTERM it when the supervisor dies (Linux), so that a supervisor killed with -9
    leaves no gateway behind that goes on holding its slots; elsewhere, or without libc, the worker just runs on."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def spawn_gateway(argv: Callable[[int, str], list[str]]) -> Callable[[int, str], Process]:
    """The real spawn: `argv(k, worker_id)` is worker k's command line; its output goes where the supervisor's goes."""
    import subprocess

    def spawn(k: int, wid: str) -> Process:
        return subprocess.Popen(argv(k, wid), preexec_fn=_die_with_parent)  # noqa: S603, PLW1509 - no threads here

    return spawn
