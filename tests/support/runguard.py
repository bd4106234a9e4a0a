"""No process outlives the test run that started it (a pytest plugin; tests/conftest.py registers it).

- SIGTERM (and SIGHUP) stop the run as Ctrl-C does: the test in progress is interrupted and every fixture is torn
  down, so the brokers are stopped as usual (`local down`); the exit status is then 128 + the signal's number.
- Whatever a teardown cannot reach (pytest SIGKILLed, a teardown interrupted in turn, brokers a test started with
  `streamrepl local up`, a gateway a test left running) is killed by the reaper: a small process of its own session,
  started with the run, that waits for the run to end (the run holds the write end of a pipe: it reads EOF however the
  run ends, SIGKILL included) and then kills every process carrying the run's token, $STREAMREPL_TEST_RUN, which every
  process the run starts inherits in its environment. A token is the run's own, so another run (of this machine's
  other users of the suite, or a pytest run by a test) is never touched.
- The brokers of EphemeralClusters die with the test process even without the reaper (streamrepl.local's parent death
  signal), as they do for any program that uses it.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from types import FrameType

import pytest

TOKEN_VAR = "STREAMREPL_TEST_RUN"
#: The reaper's pid, for the tests of this plugin (tests/e2e/test_interrupted_run.py).
REAPER_VAR = "STREAMREPL_TEST_REAPER"

#: The reaper: argv token, the fd of the pipe's read end. It reads until EOF, then kills what carries the token
#: (SIGTERM, SIGKILL for what is left 5 s later), a few rounds in case a dying process started another.
REAPER = r"""
import os, signal, sys, time
token, fd = sys.argv[1], int(sys.argv[2])
mark = b"STREAMREPL_TEST_RUN=" + token.encode()
while os.read(fd, 4096):
    pass
me = os.getpid()

def carriers():
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) != me:
            try:
                with open(f"/proc/{name}/environ", "rb") as fh:
                    if mark in fh.read().split(b"\0"):
                        found.append(int(name))
            except OSError:
                pass
    return found

def stop(pids, sig):
    for pid in pids:
        try:
            os.kill(pid, sig)
            os.kill(pid, signal.SIGCONT)  # a frozen process cannot act on SIGTERM
        except OSError:
            pass

for _ in range(5):
    pids = carriers()
    if not pids:
        break
    stop(pids, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and (pids := [p for p in pids if p in carriers()]):
        time.sleep(0.1)
    stop(pids, signal.SIGKILL)
"""


class RunGuard:
    def __init__(self) -> None:
        self.token = f"{os.getpid()}-{secrets.token_hex(6)}"
        self.signalled: int | None = None
        self._write_end = -1
        self.reaper: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        os.environ[TOKEN_VAR] = self.token  # before any child: every one inherits it
        if sys.platform.startswith("linux"):
            read_end, self._write_end = os.pipe()  # neither is inherited by the run's children (close-on-exec)
            try:
                self.reaper = subprocess.Popen(
                    [sys.executable, "-c", REAPER, self.token, str(read_end)],
                    pass_fds=(read_end,),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    start_new_session=True,  # out of the terminal's Ctrl-C, and of a kill of the run's group
                )
            finally:
                os.close(read_end)
            os.environ[REAPER_VAR] = str(self.reaper.pid)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) is not signal.SIG_IGN:  # a run under nohup goes on when its terminal goes
                signal.signal(sig, self._interrupt)

    def _interrupt(self, signum: int, frame: FrameType | None) -> None:
        # As Ctrl-C: pytest stops the run, tears the fixtures down and reports; a second signal interrupts that.
        self.signalled = signum
        raise KeyboardInterrupt(f"{signal.Signals(signum).name}")

    def stop(self) -> None:
        """The run is over: the reaper kills what it left. Not waited for (the run's exit is not delayed)."""
        if self._write_end >= 0:
            os.close(self._write_end)
            self._write_end = -1


_GUARD_KEY = pytest.StashKey[RunGuard]()


def pytest_configure(config: pytest.Config) -> None:
    guard = RunGuard()
    config.stash[_GUARD_KEY] = guard
    guard.start()


def pytest_sessionfinish(session: pytest.Session) -> None:
    guard = session.config.stash.get(_GUARD_KEY, None)
    if guard is not None and guard.signalled is not None:
        session.exitstatus = 128 + guard.signalled


def pytest_unconfigure(config: pytest.Config) -> None:
    guard = config.stash.get(_GUARD_KEY, None)
    if guard is not None:
        guard.stop()
