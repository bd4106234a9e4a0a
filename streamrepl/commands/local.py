"""`streamrepl local ...`: embedded clusters on loopback for a first run and for tests."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from ..cli import CONTEXT_SETTINGS
from ..errors import InvalidArgument
from .common import BOOL, Words, app, handles_errors, opt, output


@click.group(context_settings=CONTEXT_SETTINGS)
def local() -> None:
    """Start, inspect and stop embedded Kafka-compatible clusters (Tansu or noida-db brokers on loopback)."""


def _dir(d: str | None) -> Path:
    """The state directory: -dir, else $STREAMREPL_LOCAL_DIR, else the default; never a file."""
    from .. import local as embedded

    path = Path(d).expanduser() if d else embedded.default_state_dir()
    if path.exists() and not path.is_dir():
        raise InvalidArgument(f"state directory {path} is a file, not a directory; give another -dir")
    return path


@local.command("up", context_settings=CONTEXT_SETTINGS)
@opt(
    "clusters",
    metavar="A,B",
    help="Comma-separated cluster names, one broker each. Default: the clusters DIR ran before (also after"
    " `local down`), each on its own broker; sanfrancisco,newyork in a new DIR.",
)
@opt(
    "dir",
    metavar="DIR",
    help="State directory (default: $STREAMREPL_LOCAL_DIR or ~/.local/state/streamrepl/local).",
)
@opt(
    "broker",
    type=Words("tansu", "noida"),
    metavar="tansu|noida",
    help="The broker to start: tansu (memory only) or noida (noida-db, keeps its data in DIR/data)."
    " Default: $STREAMREPL_LOCAL_BROKER or tansu; a cluster recorded in DIR, or whose data DIR keeps,"
    " comes back on its own broker.",
)
@opt(
    "tls",
    type=BOOL,
    default=False,
    show_default=True,
    help="Put a TLS terminator (stunnel) in front of each broker started (tansu only): a CA and a server"
    " certificate are made in DIR/tls, and the registry gets security.protocol SSL and ssl.ca.location.",
)
@handles_errors(registry_option=False)
def up_cmd(clusters: str | None, dir: str | None, broker: str | None, tls: bool) -> None:
    """Start one broker per cluster (or reuse the running ones) and write their registry.

    Without -clusters, the clusters DIR ran before come back (a new DIR starts sanfrancisco and newyork); with it,
    the noida-db data of the clusters left out stays in DIR/data, and a warning says so.
    A cluster comes back on the port it last ran on, also after `local down`, so that running gateways and
    configs find it again; when another program holds that port, it gets a new one and a warning says so.
    With -tls true the port is the TLS terminator's, which the broker advertises; a cluster that had TLS comes
    back with it, and a server certificate about to expire is made again.

    Only the shell line `export STREAMREPL_CLUSTERS=...` goes to stdout, so that `eval "$(streamrepl local up)"`
    sets it, and the table to stderr; with -json or -noheader the rows go to stdout and the line to stderr.
    """
    from .. import local as embedded

    names = [n.strip() for n in (clusters or "").split(",") if n.strip()]
    if clusters is not None and not names:
        raise InvalidArgument(f"-clusters '{clusters}' names no cluster; give names such as sanfrancisco,newyork")
    brokers = embedded.up(names, _dir(dir), broker, warn=lambda m: click.echo(f"warning: {m}", err=True), tls=tls)
    reg = embedded.registry_path(_dir(dir))
    rows = [
        {"cluster": b.cluster, "broker": b.broker, "bootstrap": b.bootstrap, "pid": b.pid, "registry": str(reg)}
        for b in brokers
    ]
    export = f"export STREAMREPL_CLUSTERS={shlex.quote(str(reg))}"
    mode = app().mode
    if mode.json or mode.noheader:
        output(rows)  # for programs, on stdout as every command's
        click.echo(export, err=True)
    else:
        # Only shell lines on stdout, so that `eval "$(streamrepl local up)"` works; the table is for the eye.
        output(rows, out=sys.stderr)
        click.echo(export)


#: maprcli prints the header of an empty answer too: scripts that read columns by name depend on it.
STATUS_COLUMNS = ["cluster", "broker", "bootstrap", "pid", "running", "log"]


@local.command("status", context_settings=CONTEXT_SETTINGS)
@opt("dir", metavar="DIR", help="State directory.")
@handles_errors(registry_option=False)
def status_cmd(dir: str | None) -> None:
    """Show the embedded brokers and whether they run."""
    from .. import local as embedded

    output(embedded.status(_dir(dir)), STATUS_COLUMNS)


@local.command("down", context_settings=CONTEXT_SETTINGS)
@opt("dir", metavar="DIR", help="State directory.")
@handles_errors(registry_option=False)
def down_cmd(dir: str | None) -> None:
    """Stop the embedded brokers this state directory started (and nothing else)."""
    from .. import local as embedded

    output([{"stopped": name} for name in embedded.down(_dir(dir))])
