"""`streamrepl --help` and every command's help start fast: no pyspark, no Kafka client, no stubs.

Each check runs in a fresh interpreter, because the test process itself has long since imported
everything.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from streamrepl.cli import cli

HEAVY = ("pyspark", "py4j", "confluent_kafka")
STUB_WORDS = ("not implemented", "not yet implemented", "coming soon", "todo")

# Runs in a fresh interpreter: every `argv` in sys.argv[1] (a JSON list of argument lists) through
# streamrepl's real entry point, then reports the exit codes, the output and which heavy modules loaded.
PROBE = r"""
import contextlib, io, json, sys
from streamrepl.cli import main
runs = []
for argv in json.loads(sys.argv[1]):
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    runs.append({"argv": argv, "code": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
heavy = sorted({m.split(".")[0] for m in sys.modules} & set(HEAVY))
print(json.dumps({"runs": runs, "heavy": heavy}))
"""


def _env() -> dict[str, str]:
    env = dict(os.environ)
    # Help must not need a registry, let alone a broker: point at one that does not exist.
    env["STREAMREPL_CLUSTERS"] = "/nonexistent/streamrepl/clusters.yaml"
    env.pop("STREAMREPL_DEBUG", None)
    env["COLUMNS"] = "100"
    return env


def probe(argvs: list[list[str]]) -> dict:
    code = f"HEAVY = {HEAVY!r}\n" + PROBE
    r = subprocess.run(
        [sys.executable, "-c", code, json.dumps(argvs)],
        capture_output=True,
        text=True,
        timeout=120,
        env=_env(),
    )
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


def _tree() -> tuple[list[list[str]], list[list[str]]]:
    """(groups, leaf commands) as argument paths, found the way Click finds them."""
    groups: list[list[str]] = []
    leaves: list[list[str]] = []

    def walk(cmd: click.Command, ctx: click.Context, path: list[str]) -> None:
        if isinstance(cmd, click.Group):
            groups.append(path)
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None, f"'streamrepl {' '.join([*path, name])}' is listed but cannot be loaded"
                walk(sub, click.Context(sub, info_name=name, parent=ctx), [*path, name])
        else:
            leaves.append(path)

    walk(cli, click.Context(cli, info_name="streamrepl"), [])
    return groups, leaves


GROUPS, LEAVES = _tree()


def _listed_commands(help_text: str) -> list[str]:
    lines = help_text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "Commands:")
    names = []
    for line in lines[start + 1 :]:
        if not line.startswith("  "):
            break
        if line[2] != " ":  # a wrapped description is indented further
            names.append(line.split()[0])
    return names


def test_root_help_imports_no_heavy_module() -> None:
    result = probe([["--help"]])
    (run,) = result["runs"]
    assert run["code"] == 0, run["stderr"]
    assert "Usage:" in run["stdout"] and "stream" in run["stdout"]
    assert result["heavy"] == [], f"`streamrepl --help` imported {result['heavy']}"


def test_console_script_help() -> None:
    script = Path(sys.executable).with_name("streamrepl")
    if not script.exists():
        pytest.skip("the streamrepl console script is not installed beside this interpreter")
    r = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60, env=_env())
    assert r.returncode == 0, r.stderr
    assert "Commands:" in r.stdout


@pytest.mark.parametrize("group", GROUPS, ids=[" ".join(g) or "streamrepl" for g in GROUPS])
def test_group_help_lists_only_commands_that_exist(group: list[str]) -> None:
    result = probe([[*group, "--help"]])
    (run,) = result["runs"]
    assert run["code"] == 0, run["stderr"]
    assert result["heavy"] == [], f"`{' '.join(['streamrepl', *group])} --help` imported {result['heavy']}"
    listed = _listed_commands(run["stdout"])
    assert listed, f"`streamrepl {' '.join(group)}` has no commands: an empty group is a stub"
    children = sorted(p[-1] for p in GROUPS + LEAVES if p[:-1] == group and len(p) == len(group) + 1)
    assert sorted(listed) == children


def test_every_command_help_works_without_heavy_imports() -> None:
    """Walk every command's --help in one fresh interpreter: no import error, no stub."""
    result = probe([[*path, "--help"] for path in LEAVES])
    for run in result["runs"]:
        words = " ".join(run["argv"][:-1])
        assert run["code"] == 0, f"`streamrepl {words} --help` failed: {run['stderr']}"
        assert "Usage:" in run["stdout"], words
        low = run["stdout"].lower()
        assert not any(w in low for w in STUB_WORDS), f"`streamrepl {words}` looks like a stub:\n{run['stdout']}"
    assert result["heavy"] == [], f"some command's --help imported {result['heavy']}"


def test_maprcli_help_spellings() -> None:
    result = probe([["-help"], ["stream", "-h"]])
    for run in result["runs"]:
        assert run["code"] == 0, run["stderr"]
        assert "Usage:" in run["stdout"]


def test_unknown_command_is_one_line_error() -> None:
    result = probe([["no-such-command"]])
    (run,) = result["runs"]
    assert run["code"] != 0
    assert run["stderr"].startswith("ERROR (")
    assert len(run["stderr"].strip().splitlines()) == 1
