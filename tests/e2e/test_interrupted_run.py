"""An interrupted test run leaves no process behind: a process using EphemeralClusters, and a pytest run, killed with
SIGKILL, SIGTERM or SIGINT once their brokers run; afterwards no broker, TLS terminator, helper process or `local up`
broker they started is alive (checked by pid, and by the run's token in every process's environment). While the
process lives, brokers entered from a thread that has ended run on; `streamrepl local up`'s run on after it exits."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from support.cli import STREAMREPL_BIN
from support.local import alive

from streamrepl import local

TESTS = Path(__file__).resolve().parents[1]

SIGNALS = [signal.SIGKILL, signal.SIGTERM, signal.SIGINT]


def _wait_for(path: Path, proc: subprocess.Popen[str], timeout: float = 120) -> dict:
    """What the child wrote to `path` once its brokers run (a timeout only guards against a hang)."""
    deadline = time.monotonic() + timeout
    while not path.exists() or not path.read_text().endswith("\n"):
        assert proc.poll() is None, f"the child exited with {proc.returncode}: {proc.communicate()}"
        assert time.monotonic() < deadline, "the child's brokers did not start"
        time.sleep(0.1)
    return json.loads(path.read_text())  # type: ignore[no-any-return]


def _gone(pids: list[int], timeout: float = 60) -> list[int]:
    """The pids still alive after `timeout` (a guard: they normally go within a second)."""
    deadline = time.monotonic() + timeout
    while (left := [p for p in pids if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def _carrying(token: str) -> list[int]:
    """The live processes whose environment holds the test run's token."""
    mark = f"STREAMREPL_TEST_RUN={token}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if mark in (entry / "environ").read_bytes().split(b"\0") and alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


PROGRAM = textwrap.dedent(
    """
    import json, sys, threading, time
    from pathlib import Path
    from streamrepl import local

    out, dirs = Path(sys.argv[1]), Path(sys.argv[2])  # state directories in the test's tmp_path: removed by pytest
    with local.EphemeralClusters(["a", "b"], state_dir=dirs / "ab") as ec:
        # Entered by a thread that ends at once, and never left: its broker lives on as long as this process does,
        # and no longer.
        box = []
        worker = threading.Thread(
            target=lambda: box.append(local.EphemeralClusters(["c"], state_dir=dirs / "c").__enter__())
        )
        worker.start()
        worker.join()
        time.sleep(0.5)
        brokers = {**ec.brokers, **box[0].brokers}
        out.write_text(json.dumps({"pids": [b.pid for b in brokers.values()]}) + "\\n")
        time.sleep(600)
    """
)


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_brokers_of_ephemeral_clusters_die_with_their_process(tmp_path: Path, sig: signal.Signals) -> None:
    out = tmp_path / "pids.json"
    proc = subprocess.Popen([sys.executable, "-c", PROGRAM, str(out), str(tmp_path)], text=True)
    try:
        pids = _wait_for(out, proc)["pids"]
        assert len(pids) == 3 and all(alive(p) for p in pids), "a broker entered by an ended thread died with it"
        proc.send_signal(sig)
        proc.wait(60)
        assert _gone(pids) == []
    finally:
        proc.kill()
        proc.wait()


INNER_TEST = textwrap.dedent(
    """
    import json, os, subprocess, sys, time
    from pathlib import Path
    from streamrepl import local

    def test_killed_while_running(tmp_path):
        with local.EphemeralClusters(["a"], state_dir=tmp_path / "ec") as ec:
            # Brokers the run started through the CLI (they outlive `local up` itself) and a helper process.
            sd = tmp_path / "up"
            subprocess.run([os.environ["STREAMREPL_BIN"], "local", "up", "-clusters", "b", "-dir", str(sd)],
                           check=True, capture_output=True)
            helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            pids = [ec.brokers["a"].pid, *(b.pid for b in local._load(sd).values()), helper.pid]
            pids.append(int(os.environ["STREAMREPL_TEST_REAPER"]))
            Path(os.environ["PIDS_FILE"]).write_text(
                json.dumps({"pids": pids, "token": os.environ["STREAMREPL_TEST_RUN"]}) + "\\n"
            )
            time.sleep(600)
    """
)


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: s.name)
def test_an_interrupted_pytest_run_leaves_no_process(tmp_path: Path, sig: signal.Signals) -> None:
    (tmp_path / "test_inner.py").write_text(INNER_TEST)
    out = tmp_path / "pids.json"
    env = dict(os.environ, PYTHONPATH=str(TESTS), PIDS_FILE=str(out), STREAMREPL_BIN=STREAMREPL_BIN)
    argv = [sys.executable, "-m", "pytest", "-p", "support.runguard", "-p", "no:cacheprovider", "-q", "-s"]
    proc = subprocess.Popen(
        [*argv, "--rootdir", str(tmp_path), str(tmp_path / "test_inner.py")],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        started = _wait_for(out, proc)
        pids, token = started["pids"], started["token"]
        assert len(pids) == 4 and all(alive(p) for p in pids)
        proc.send_signal(sig)
        output, _ = proc.communicate(timeout=120)
        if sig != signal.SIGKILL:
            # Told to stop, the run tears its fixtures down and says so; its exit status says how it ended.
            assert proc.returncode == (143 if sig == signal.SIGTERM else 2), output
        assert _gone(pids) == [], output
        assert _carrying(token) == [], output
    finally:
        proc.kill()
        proc.wait()


def test_local_up_brokers_outlive_the_command(tmp_path: Path) -> None:
    """`streamrepl local up` starts brokers for the user: they run on after the command exits (not tied to it)."""
    sd = tmp_path / "local"
    try:
        run = subprocess.run(
            [STREAMREPL_BIN, "local", "up", "-clusters", "solo", "-dir", str(sd)], capture_output=True, text=True
        )
        assert run.returncode == 0, run.stderr
        time.sleep(0.5)
        assert [r["running"] for r in local.status(sd)] == [True]
    finally:
        local.down(sd)
