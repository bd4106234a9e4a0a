"""Running the CLI from tests, and the shape its answers are checked against.

Two runners, one result type (`Run`):
- `run_cli` runs `streamrepl` in this process, through CliRunner's isolation: fast (no interpreter
  start), for everything that does not need a process of its own;
- `run_proc` runs the installed console script as its own OS process: for what only a real process
  shows (librdkafka's writes to fd 2, exit on a signal, a process that must outlive the call, a
  command run while the test's own process is busy);
- `run_in_terminal` runs it with its stdout on a pseudo-terminal of a given width: what an operator sees.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from click.testing import CliRunner

#: The console script of the venv that runs the tests.
STREAMREPL_BIN = str(Path(sys.executable).with_name("streamrepl"))


class Run(NamedTuple):
    """What one CLI invocation did: a tuple (exit_code, stdout, stderr)."""

    code: int
    stdout: str
    stderr: str

    @property
    def returncode(self) -> int:
        """The name subprocess.CompletedProcess gives the exit code, for callers written against it."""
        return self.code

    def json(self) -> Any:
        return json.loads(self.stdout)

    def data(self) -> list[dict[str, Any]]:
        doc = self.json()
        assert doc["status"] == "OK", doc
        return doc["data"]  # type: ignore[no-any-return]


def _words(args: Sequence[object]) -> list[str]:
    if len(args) == 1 and isinstance(args[0], list | tuple):
        args = tuple(args[0])
    return [str(a) for a in args]


def run_cli(*args: object, env: Mapping[str, str | None] | None = None) -> Run:
    """Run `streamrepl <args>` (given one by one, or as one list) in this process, through
    CliRunner's isolation, exactly as the console script does (`streamrepl.cli:main`, so usage
    errors get the one-line format too). `env` is laid over os.environ; None removes a variable.

    Click 8.2+ keeps stderr apart from stdout. An exception escaping main() is a bug: its
    traceback is put on stderr (and the exit code is -1) so that assertions show it.
    """
    from streamrepl.cli import main

    words = _words(args)
    runner = CliRunner()
    with runner.isolation(env=env) as (out, err, _):
        code = 0
        try:
            main(words)
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:  # noqa: BLE001 - reported, never swallowed
            code = -1
            traceback.print_exc(file=sys.stderr)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
        return Run(code, out.getvalue().decode(), err.getvalue().decode("utf-8", "backslashreplace"))


def run_proc(
    args: Sequence[object],
    env: Mapping[str, str | None] | None = None,
    timeout: float = 60,
    stdin: str | None = None,
) -> Run:
    """Run the installed `streamrepl` console script as a separate OS process. `env` is laid over
    os.environ (None removes a variable); `timeout` only guards against a hang."""
    full_env = dict(os.environ)
    for name, value in (env or {}).items():
        if value is None:
            full_env.pop(name, None)
        else:
            full_env[name] = value
    p = subprocess.run(
        [STREAMREPL_BIN, *_words(args)],
        input=stdin,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return Run(p.returncode, p.stdout, p.stderr)


def run_in_terminal(args: Sequence[object], columns: int, timeout: float = 60) -> Run:
    """Run the console script with stdout on a pseudo-terminal `columns` wide (stderr a pipe): stdout as the
    terminal got it, line ends as `\\n`. $COLUMNS is removed so that the width is the terminal's own."""
    import fcntl
    import pty
    import select
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    p = subprocess.Popen(
        [STREAMREPL_BIN, *_words(args)], stdin=subprocess.DEVNULL, stdout=slave, stderr=subprocess.PIPE, env=env
    )
    os.close(slave)
    chunks = []
    try:
        while True:
            ready, _, _ = select.select([master], [], [], timeout)
            if not ready:  # only a guard against a hang
                p.kill()
                raise TimeoutError(f"streamrepl {_words(args)} wrote nothing for {timeout} s")
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every writer of the terminal is gone
                break
            if not data:
                break
            chunks.append(data)
        assert p.stderr is not None
        err = p.stderr.read().decode("utf-8", "backslashreplace")
        p.wait(timeout)
    finally:
        os.close(master)
        p.stderr.close()  # type: ignore[union-attr]
    return Run(p.returncode, b"".join(chunks).decode().replace("\r\n", "\n"), err)


def unique_path(cluster: str = "sanfrancisco", stem: str = "s") -> str:
    return f"/{cluster}/{stem}-{uuid.uuid4().hex[:10]}"


def one_error_line(run: Run) -> str:
    """Assert the maprcli error shape on stderr (exactly one line, nothing on stdout); return it."""
    assert run.code != 0, run
    assert "Traceback" not in run.stdout + run.stderr, run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1, f"expected one line on stderr, got {lines!r}"
    assert run.stdout == "", run.stdout
    return lines[0]
