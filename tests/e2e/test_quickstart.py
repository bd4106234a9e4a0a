"""The README's quickstart, run as written: its commands, taken from README.md, in one bash, against fresh
embedded clusters in a state directory of their own; then what the replica gave back is checked."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BIN = Path(sys.executable).parent  # the venv whose console script `streamrepl` the commands call
MARK = "@@quickstart-step"


def quickstart_commands(readme: str) -> list[str]:
    """The `$ ` lines of the first console block under the README's "## Quickstart", prompt removed."""
    section = re.search(r"^## Quickstart\n(.*?)(?=^## )", readme, re.S | re.M)
    assert section, 'README.md has no "## Quickstart" section'
    block = re.search(r"^```console\n(.*?)^```", section.group(1), re.S | re.M)
    assert block, "the README's quickstart has no ```console block"
    return [line[2:] for line in block.group(1).splitlines() if line.startswith("$ ")]


def test_the_quickstart_replicates_in_at_most_15_commands() -> None:
    commands = quickstart_commands(README.read_text(encoding="utf-8"))
    assert 0 < len(commands) <= 15, commands
    words = "\n".join(commands)
    for step in (
        'eval "$(streamrepl local up)"',
        "streamrepl stream create ",
        "streamrepl gateway start ",
        "streamrepl produce ",
        "streamrepl consume -path /newyork/",
        "streamrepl stream replica list ",
        "streamrepl local down",
    ):
        assert step in words, f"the quickstart lost its step {step!r}"
    assert "replica autosetup" in words or ("replica add" in words and "upstream add" in words)
    assert any(c.startswith("streamrepl gateway start") and c.rstrip().endswith("&") for c in commands), (
        "the gateway must run in the background"
    )


def _sections(stdout: str, count: int) -> list[str]:
    """The output of each command, split at the marks printed before each one."""
    parts = re.split(rf"^{MARK} \d+\n", stdout, flags=re.M)
    assert len(parts) == count + 1, stdout
    return parts[1:]


@pytest.mark.e2e
def test_the_quickstart_runs_as_written(tmp_path: Path) -> None:
    commands = quickstart_commands(README.read_text(encoding="utf-8"))
    state, work, home = tmp_path / "state", tmp_path / "work", tmp_path / "home"
    work.mkdir()
    home.mkdir()  # no registry of the user's own can stand in for the one `local up` writes
    script = ["set -euo pipefail"]
    for i, command in enumerate(commands):
        script += [f"echo '{MARK} {i}'", command]
    env = {k: v for k, v in os.environ.items() if k != "STREAMREPL_CLUSTERS"}
    env.update(PATH=f"{BIN}{os.pathsep}{env.get('PATH', '')}", STREAMREPL_LOCAL_DIR=str(state), HOME=str(home))
    proc = subprocess.Popen(
        ["bash", "-c", "\n".join(script)],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # the gateway it starts in the background is in its process group
    )
    try:
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # a gateway left behind when a step failed
        except ProcessLookupError:
            pass
        subprocess.run([str(BIN / "streamrepl"), "local", "down", "-dir", str(state)], env=env, capture_output=True)
    gateway_log = work / "gateway.log"
    log = gateway_log.read_text() if gateway_log.exists() else ""
    assert proc.returncode == 0, f"stdout:\n{stdout}\nstderr:\n{stderr}\ngateway log:\n{log}"

    out = dict(zip(commands, _sections(stdout, len(commands)), strict=True))
    produced = next(text for c, text in out.items() if c.split("|")[-1].strip().startswith("streamrepl produce"))
    consumed = next(text for c, text in out.items() if c.startswith("streamrepl consume"))
    listed = next(text for c, text in out.items() if c.startswith("streamrepl stream replica list"))

    # produce's rows (piped: tab-separated under a header): topic, partition, records, firstoffset, lastoffset
    written: dict[int, range] = {}
    for row in produced.splitlines()[1:]:
        _topic, partition, records, first, last = row.split("\t")
        written[int(partition)] = range(int(first), int(last) + 1)
        assert len(written[int(partition)]) == int(records), row
    # consume's lines: topic, partition, offset, timestamp, key, value, headers
    read: dict[int, list[tuple[int, str]]] = {}
    for line in consumed.splitlines():
        _topic, partition, offset, _ts, _key, value, _headers = line.split("\t")
        read.setdefault(int(partition), []).append((int(offset), value))
    assert {p: [o for o, _ in sorted(rs)] for p, rs in read.items()} == {p: list(r) for p, r in written.items()}, (
        f"the replica's records are not at the offsets produce reported:\n{produced}\n{consumed}"
    )
    values = [v for rs in read.values() for _, v in rs]
    assert len(values) == len(set(values)) == sum(len(r) for r in written.values()), consumed
    for p, rs in read.items():  # records numbered in the order they were written keep that order per partition
        numbers = [int(m.group()) for _, v in sorted(rs) if (m := re.search(r"\d+$", v))]
        assert numbers == sorted(numbers), f"partition {p} of the replica holds the records out of order: {rs}"

    (link,) = json.loads(listed)["data"]
    assert link["replicaState"] == "REPLICA_STATE_REPLICATING", link
    assert link["isUptodate"] is True and link["putsPending"] == 0, link
    assert "sanfrancisco" in out["streamrepl local down"] and "newyork" in out["streamrepl local down"]


def test_help_examples_start_from_local_up() -> None:
    """`streamrepl --help` shows a session a newcomer can type on a machine with no cluster: it starts the two."""
    r = subprocess.run([str(BIN / "streamrepl"), "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    examples = [line.strip() for line in r.stdout.splitlines() if "streamrepl " in line and "Usage:" not in line]
    assert examples and examples[0] == 'eval "$(streamrepl local up)"', r.stdout
    assert any(e.startswith("streamrepl consume -path /newyork/") for e in examples), r.stdout
