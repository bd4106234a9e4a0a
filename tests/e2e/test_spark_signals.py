"""A signal while a Spark job starts (copystream or diffstreams on Spark) stops its JVM and removes its log."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from support import STREAMREPL_BIN, Run, one_error_line, run_proc


# -- 1. a signal while Spark starts stops its JVM and removes its log -------------------------------------------
def _marked_pids(marker: str) -> list[int]:
    """Processes (ours and the JVMs they started, reparented or not) whose environment holds `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in environ.split(b"\0"):
            found.append(int(entry))
    return found


def _is_java(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(b"java")
    except OSError:
        return False


@pytest.mark.spark
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="finds the JVM through /proc")
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_signal_while_spark_starts_stops_the_jvm_and_removes_its_log(
    cli: Callable[..., Run], new_path: Callable[..., str], tmp_path: Path, sig: signal.Signals, code: int
) -> None:
    src, dst = new_path("sanfrancisco"), new_path("newyork")
    assert cli("stream", "create", "-path", src).code == 0
    assert cli("stream", "topic", "create", "-path", src, "-topic", "t").code == 0
    assert run_proc(["produce", "-path", f"{src}:t"], stdin="a\nb\nc\n").code == 0
    marker = f"STREAMREPL_TEST_RUN={uuid.uuid4().hex}"
    name, _, value = marker.partition("=")
    # Files, not pipes: a JVM left behind would hold a pipe open and communicate() would wait for it.
    out_file, err_file = tmp_path.parent / f"{tmp_path.name}.out", tmp_path.parent / f"{tmp_path.name}.err"
    with out_file.open("w") as out_fd, err_file.open("w") as err_fd:
        proc = subprocess.Popen(
            [STREAMREPL_BIN, "copystream", "-src", src, "-dst", dst, "-numthreads", "1", "-mapreduce", "true"],
            stdout=out_fd,
            stderr=err_fd,
            env=dict(os.environ, TMPDIR=str(tmp_path), **{name: value}),
        )
    try:
        deadline = time.monotonic() + 60
        while not any(_is_java(p) for p in _marked_pids(marker)):
            assert proc.poll() is None, err_file.read_text()
            assert time.monotonic() < deadline, "Spark's JVM never started"
            time.sleep(0.05)
        time.sleep(0.5)  # the JVM is starting, not yet up
        proc.send_signal(sig)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    out, err = out_file.read_text(), err_file.read_text()
    assert proc.returncode == code, err
    assert one_error_line(Run(proc.returncode, out, err)) == "ERROR (4) - copystream: interrupted"
    deadline = time.monotonic() + 15
    while (left := _marked_pids(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert left == [], "processes of the interrupted run are still running"
    assert list(tmp_path.glob("streamrepl-spark-*.log")) == []
