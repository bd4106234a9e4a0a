"""`gateway start`: a small supervisor that runs the gateway's work in worker processes and starts a dead one again.

A gateway process that dies (a librdkafka segfault included) must not end replication, so `gateway start` runs
its gateway as a worker process under this supervisor by default (`-supervise false` runs it in the command's
own process, for those who leave restarts to systemd's Restart=always). With one worker, the worker joins under
the gateway's own -id, as an unsupervised gateway does: a rolling restart across releases keeps the member ids.

`-workers N` (N > 1) runs N workers, to use more than one core: one gateway process spends about 3 µs of its own
CPU a record in confluent-kafka's per-record consume and produce calls, so it is bound to one core (bench/run.py:
0.5-0.87x of the C relay); two processes reached 0.81-1.06x. Each worker is then a gateway with the id
`<id>.w<k>`, so it joins the slot group as a member of its own (static membership ids must differ), and shows as
its own row in `cluster gateway list`. It is told its parent's id (`-parent`), by which the gateway list judges it.

Workers are separate `python -m streamrepl gateway start` processes rather than multiprocessing children: each
is then exactly the gateway a single unsupervised start runs (its own signal handling, its os._exit after the
drain), nothing has to be pickled, and nothing is forked from a process that may hold librdkafka threads.

- SIGTERM / SIGINT are forwarded to every worker, and the supervisor waits for their drains: it exits 0 when every
  worker stopped cleanly, 1 otherwise. The handler only sets an attribute (see process.py for why).
- A worker that dies (killed by a signal, or any failure: exit status 1) is started again under the same id after
  a back-off that doubles while it keeps dying young; it is told how many restarts preceded it and how the last
  one ended (`cluster gateway list`, metrics). One that exits 0 (stopped on its own: someone sent it SIGTERM) is
  not started again, and the others run on.
- A worker that exits with a final status (exits.py: bad input or settings, fenced by another gateway with its
  id, refused by the gateway list) cannot be mended by a restart: the supervisor stops the others and exits with
  that status and the worker's message (which the worker passes on a pipe of its own, so that the command prints
  it once).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from . import exits

log = logging.getLogger("streamrepl.gateway")

MAX_WORKERS = 64  # the slot count (membership.SLOTS): a worker more would own no slot
BACKOFF_SECONDS = 1.0
BACKOFF_MAX_SECONDS = 30.0
#: a worker that ran this long before it died starts again after the first back-off, not a longer one
RAN_LONG_SECONDS = 60.0
POLL_SECONDS = 0.2


class Process(Protocol):
    """What the supervisor needs of a worker process (WorkerProcess, around subprocess.Popen)."""

    pid: int

    def poll(self) -> int | None: ...

    def send_signal(self, sig: int) -> None: ...

    def last_words(self) -> tuple[int, str] | None:
        """Once it exited: the (errno code, message) it gave before a final exit (exits.tell_supervisor)."""
        ...


def worker_id(parent_id: str, k: int, count: int) -> str:
    """A lone worker is the gateway itself (its -id); one of several is `<id>.w<k>`."""
    return parent_id if count == 1 else f"{parent_id}.w{k}"


def worker_metrics_port(port: int | None, k: int) -> int | None:
    """Worker k (1..N) serves metrics on port+k-1; 0 stays "any free port" for each."""
    if port is None or port == 0:
        return port
    return port + k - 1


def describe_exit(code: int) -> str:
    """How a worker ended, for the log: "killed by SIGKILL", "exit status 1"."""
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit status {code}"


def exit_text(code: int) -> str:
    """How a worker ended, for `cluster gateway list`: "signal 11 (SIGSEGV)", "exit 1"."""
    if code < 0:
        try:
            return f"signal {-code} ({signal.Signals(-code).name})"
        except ValueError:
            return f"signal {-code}"
    return f"exit {code}"


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
    #: how many times it was started again, and how its last process ended (exit_text; "" before any restart)
    restarts: int = 0
    last_exit: str = ""


class Supervisor:
    """`spawn(worker)` starts a worker's process (`worker.k` 1..N, its id, restarts and last exit); `clock` and
    `sleep` are injectable so that the unit tests run without processes or waiting. `kind` is what the workers are,
    in the log ("gateway", or "proxy" for `proxy start`'s supervisor, which is this one with one worker)."""

    def __init__(
        self,
        gateway_id: str,
        count: int,
        spawn: Callable[[Worker], Process],
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        backoff: float = BACKOFF_SECONDS,
        kind: str = "gateway",
    ):
        self.kind = kind
        self._log = log if kind == "gateway" else logging.getLogger(f"streamrepl.{kind}")
        self.workers = [Worker(k, worker_id(gateway_id, k, count), backoff=backoff) for k in range(1, count + 1)]
        self.gateway_id = gateway_id
        #: the signal to forward (0: none yet); a plain attribute, so that a signal handler may set it
        self.stop_signal = 0
        #: the first final exit of a worker (exits.FINAL), which ends the supervisor with its status and message
        self.final: exits.FinalExit | None = None
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
        """Start the workers and look after them until none is left; the exit status (`final` says why, when it
        is one of exits.FINAL)."""
        for w in self.workers:
            self._start(w)
        if len(self.workers) > 1:
            self._log.info("%s %s: started %d workers", self.kind, self.gateway_id, len(self.workers))
        while not self.step():
            self._sleep(POLL_SECONDS)
        if self.final is not None:
            return self.final.exit_status
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
        w.proc = self._spawn(w)
        w.started = self._clock()

    def _exited(self, w: Worker, code: int, now: float) -> None:
        proc, w.proc = w.proc, None
        if code in exits.FINAL:
            w.final = code
            if self.final is None:
                words = proc.last_words() if proc is not None else None
                self.final = exits.final_error(code, words, w.id)
                others = [o.id for o in self.workers if o.proc is not None]
                if others:
                    self._log.error(
                        "%s %s: worker %s stopped for good (%s: %s); stopping %s",
                        self.kind,
                        self.gateway_id,
                        w.id,
                        exits.FINAL[code],
                        self.final.message,
                        " ".join(others),
                    )
                if not self.stop_signal:
                    self.stop_signal = signal.SIGTERM  # forwarded to the others at the next step
            return
        if self.stop_signal:
            w.final = code
            if code != 0:
                self._log.warning(
                    "%s %s: worker %s stopped with %s", self.kind, self.gateway_id, w.id, describe_exit(code)
                )
            return
        if code == 0:
            w.final = code
            self._log.warning(
                "%s %s: worker %s stopped on its own (exit status 0); not started again",
                self.kind,
                self.gateway_id,
                w.id,
            )
            return
        if now - w.started >= RAN_LONG_SECONDS:
            w.backoff = self._first_backoff
        w.restart_at = now + w.backoff
        w.restarts += 1
        w.last_exit = exit_text(code)
        self._log.warning(
            "%s %s: worker %s died (%s); starting it again in %.1f s (restart %d)",
            self.kind,
            self.gateway_id,
            w.id,
            describe_exit(code),
            w.backoff,
            w.restarts,
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


class WorkerProcess:
    """A worker's process and the read end of the pipe on which it may give its last words."""

    def __init__(self, argv: list[str], words_fd: int, words_read: int, keep_fds: tuple[int, ...] = ()):
        import subprocess

        try:
            self.popen = subprocess.Popen(  # noqa: S603 - our own interpreter and module
                argv,
                pass_fds=(words_fd, *keep_fds),
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - no threads here
            )
        finally:
            os.close(words_fd)  # the worker holds its end; the supervisor reads only
        self.pid = self.popen.pid
        self._words_fd = words_read
        self._words: tuple[int, str] | None = None

    def poll(self) -> int | None:
        code = self.popen.poll()
        if code is not None and self._words_fd >= 0:
            # What it wrote is in the pipe once it exited (read now, so that the pipe is closed either way).
            self._words = exits.last_words(self._words_fd)
            os.close(self._words_fd)
            self._words_fd = -1
        return code

    def send_signal(self, sig: int) -> None:
        self.popen.send_signal(sig)

    def last_words(self) -> tuple[int, str] | None:
        return self._words


def spawn_gateway(
    argv: Callable[[Worker, int], list[str]], keep_fds: tuple[int, ...] = ()
) -> Callable[[Worker], Process]:
    """The real spawn: `argv(worker, fd)` is the worker's command line, `fd` the pipe it gives its last words on
    (exits.tell_supervisor); its output goes where the supervisor's goes. `keep_fds`: more of the supervisor's
    descriptors the worker inherits (`proxy start`'s listening socket, so that a restarted worker listens on the
    same port and the connections made meanwhile wait in its backlog)."""

    def spawn(w: Worker) -> Process:
        read, write = os.pipe()
        try:
            args = argv(w, write)
        except BaseException:
            os.close(write)
            os.close(read)
            raise
        try:
            return WorkerProcess(args, write, read, keep_fds)
        except BaseException:
            os.close(read)
            raise

    return spawn
