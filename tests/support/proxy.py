"""A `streamrepl proxy start` run by a test, and the kafkajs client the tests drive through it.

The proxy runs as its own process (SIGTERM drains it), listening on any free ports; `running_proxy` reads the
address it prints (-json) and stops it at the end. kafkajs is installed with npm, once, into the venv that runs the
tests (scripts/setup makes a new venv when pyproject changes, and the install with it).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from support.cli import STREAMREPL_BIN

KAFKAJS_VERSION = "2.2.4"
KAFKAJS_PREFIX = Path(sys.prefix) / "kafkajs"
CLIENT_JS = Path(__file__).with_name("proxy_client.js")


@dataclass
class RunningProxy:
    proc: subprocess.Popen[str]
    bootstrap: str
    metrics_port: int | None

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM (a drain), then the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> int:
        """SIGKILL: no drain."""
        if self.proc.poll() is None:
            self.proc.kill()
        return self.proc.wait(30)


def _read_envelope(proc: subprocess.Popen[str]) -> dict[str, Any]:
    """The JSON envelope the proxy prints once it listens (indented: it ends at a line '}')."""
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.rstrip() == "}":
            return json.loads("".join(lines))  # type: ignore[no-any-return]
    raise AssertionError(f"the proxy exited ({proc.wait(10)}) before it listened: {proc.stderr and proc.stderr.read()}")


@contextlib.contextmanager
def running_proxy(
    cluster: str, *args: str, registry: str | None = None, log: Path | None = None, listen: str = "127.0.0.1:0"
) -> Iterator[RunningProxy]:
    env = dict(os.environ)
    if registry is not None:
        env["STREAMREPL_CLUSTERS"] = registry
    stderr = open(log, "a") if log is not None else subprocess.DEVNULL  # noqa: SIM115 - closed below
    proc = subprocess.Popen(
        [STREAMREPL_BIN, "proxy", "start", "-json", "-cluster", cluster, "-listen", listen, *args],
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        env=env,
    )
    try:
        row = _read_envelope(proc)["data"][0]
        yield RunningProxy(proc, row["advertise"], row.get("metricsport"))
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(30)
        if log is not None:
            stderr.close()  # type: ignore[union-attr]


def free_port_pair() -> int:
    """A port P of loopback with P+1 free too (the proxy's bootstrap port and its one broker's), for a proxy started
    again on the same ports."""
    import socket

    for _ in range(100):
        with socket.socket() as a:
            a.bind(("127.0.0.1", 0))
            port = int(a.getsockname()[1])
            if port >= 65535:
                continue
            with socket.socket() as b:
                try:
                    b.bind(("127.0.0.1", port + 1))
                except OSError:
                    continue
                return port
    raise AssertionError("no two free ports in a row on loopback")


def kafkajs() -> Path:
    """The folder kafkajs is installed in (skips the test when node or npm is missing, as the TLS tests do without
    stunnel)."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are needed for the kafkajs client")
    if not (KAFKAJS_PREFIX / "node_modules" / "kafkajs" / "package.json").exists():
        subprocess.run(
            [
                "npm",
                "install",
                "--prefix",
                str(KAFKAJS_PREFIX),
                "--no-audit",
                "--no-fund",
                f"kafkajs@{KAFKAJS_VERSION}",
            ],
            check=True,
            capture_output=True,
            timeout=300,
        )
    return KAFKAJS_PREFIX


def run_kafkajs(bootstrap: str, topic: str, records: int, group_session_ms: int) -> dict[str, Any]:
    """proxy_client.js against `bootstrap`: create `topic`, produce `records` (acks=-1), consume them in a group, list
    the topic's offsets; what it did, as JSON."""
    prefix = kafkajs()
    p = subprocess.run(
        ["node", str(CLIENT_JS), bootstrap, topic, str(records), str(group_session_ms)],
        env={**os.environ, "NODE_PATH": str(prefix / "node_modules"), "KAFKAJS_NO_PARTITIONER_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]
