"""copystream and diffstreams on a real Spark standalone cluster (a master and a worker on loopback)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.copying import assert_copied, cli, copied, send
from support.env import Env

pytestmark = pytest.mark.spark

SRC, DST = "/sanfrancisco/standalone", "/newyork/standalone"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(path: Path, text: str, procs: list[subprocess.Popen[bytes]], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and text in path.read_text(errors="replace"):
            return
        for p in procs:
            assert p.poll() is None, f"a Spark daemon exited: {path.read_text(errors='replace')[-2000:]}"
        time.sleep(0.3)
    raise AssertionError(f"'{text}' never appeared in {path}: {path.read_text(errors='replace')[-2000:]}")


@pytest.fixture(scope="module")
def standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """A master and one worker (1 core, 1 GiB) started from the pyspark package; yields (url, work dir)."""
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    d = tmp_path_factory.mktemp("spark-standalone")
    work = d / "work"
    env = dict(
        os.environ,
        SPARK_HOME=str(home),
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_LOG_DIR=str(d),
        PYSPARK_PYTHON=sys.executable,  # the executors' Python: the venv's, with streamrepl in it
    )
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    spark_class = str(home / "bin" / "spark-class")
    procs: list[subprocess.Popen[bytes]] = []
    logs = []
    try:
        for name, args in (
            ("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port)]),
            ("worker", ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "1"]),
        ):
            if name == "worker":
                args += ["--memory", "1g", "--work-dir", str(work), url]
            args += ["--webui-port", str(_free_port())]
            log = d / f"{name}.log"
            logs.append(log)
            with open(log, "wb") as out:
                procs.append(
                    subprocess.Popen(
                        [spark_class, *args],
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        env=env,
                        start_new_session=True,
                    )
                )
            if name == "master":
                _wait_for(log, "I have been elected leader", procs, 90)
        _wait_for(logs[0], "Registering worker", procs, 90)
        yield url, work
    finally:
        for p in reversed(procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def test_copystream_and_diffstreams_on_a_standalone_cluster(
    standalone: tuple[str, Path], env: Env, capsys: pytest.CaptureFixture[str]
) -> None:
    url, work = standalone
    env.make_stream(SRC, ["a", "b"], 2)
    bs = env.bs("sanfrancisco")
    send(bs, env.kt(SRC, "a"), 3000, 2, tag="a")
    send(bs, env.kt(SRC, "b"), 6, 2, single=True, tag="b")
    spark_args = [
        "-master",
        url,
        "-sparkconf",
        "spark.driver.host=127.0.0.1",
        "-sparkconf",
        "spark.driver.bindAddress=127.0.0.1",
        "-sparkconf",
        "spark.executor.memory=512m",
    ]
    code, out, err = cli(capsys, "copystream", "-src", SRC, "-dst", DST, *spark_args)
    assert code == 0, err
    assert copied(out) == 3006
    assert assert_copied(env, SRC, DST, {"a": 2, "b": 2}) == (3006, 0)

    code, out, err = cli(capsys, "diffstreams", "-src", SRC, "-dst", DST, *spark_args)
    assert code == 0, err
    assert out.count("\ttrue") == 4

    # The tasks ran in executors that the worker started, one per application.
    apps = sorted(p.name for p in work.iterdir() if p.name.startswith("app-"))
    assert len(apps) == 2, apps
    assert all(any((work / a).glob("*/stderr")) for a in apps)
