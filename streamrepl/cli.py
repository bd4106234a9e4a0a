"""The `streamrepl` command line: a thin Click layer over the operations modules.

Sub-commands load lazily so that `streamrepl --help` imports neither pyspark nor the
Kafka client and never connects anywhere.
"""

from __future__ import annotations

import difflib
import importlib
import sys
from typing import Any

import click

from . import __version__

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help", "-help"], "max_content_width": 100}


class LazyGroup(click.Group):
    """A group whose sub-commands are imported only when they are run or listed in help."""

    def __init__(self, *args: Any, lazy: dict[str, str] | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.lazy = lazy or {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy:
            module, _, attr = self.lazy[name].partition(":")
            return getattr(importlib.import_module(module), attr)  # type: ignore[no-any-return]
        return super().get_command(ctx, name)


ROOT_COMMANDS = {
    "stream": "streamrepl.commands.stream:stream",
    "cluster": "streamrepl.commands.cluster:cluster",
    "local": "streamrepl.commands.local:local",
    "gateway": "streamrepl.commands.gateway:gateway",
    "proxy": "streamrepl.commands.proxy:proxy",
    "produce": "streamrepl.commands.produce:produce",
    "consume": "streamrepl.commands.produce:consume",
    "copystream": "streamrepl.commands.copy:copystream",
    "diffstreams": "streamrepl.commands.copy:diffstreams",
}


@click.group(cls=LazyGroup, lazy=ROOT_COMMANDS, context_settings=CONTEXT_SETTINGS)
@click.option(
    "-clusters",
    "--clusters",
    metavar="FILE",
    help="Cluster registry (default: $STREAMREPL_CLUSTERS, "
    "~/.config/streamrepl/clusters.yaml, /etc/streamrepl/clusters.yaml).",
)
@click.option("-json", "--json", "as_json", is_flag=True, help="Output the maprcli JSON envelope.")
@click.option("-noheader", "--noheader", is_flag=True, help="Tab-separated rows without a header.")
@click.version_option(__version__, "-version", "--version", prog_name="streamrepl")
@click.pass_context
def cli(ctx: click.Context, clusters: str | None, as_json: bool, noheader: bool) -> None:
    """Replicate streams of topics between Kafka-compatible clusters, maprcli style.

    Two clusters on this machine (real brokers on loopback), a stream, its replica and a gateway:

    \b
    eval "$(streamrepl local up)"
    streamrepl stream create -path /sanfrancisco/activity -defaultpartitions 3
    streamrepl stream topic create -path /sanfrancisco/activity -topic clicks
    streamrepl stream replica autosetup -path /sanfrancisco/activity -replica /newyork/activity
    streamrepl gateway start -cluster newyork &
    seq 10 | streamrepl produce -path /sanfrancisco/activity:clicks
    streamrepl consume -path /newyork/activity:clicks -count 10
    """
    from .commands.common import App

    ctx.obj = App(clusters_file=clusters)
    ctx.obj.mode.json = as_json
    ctx.obj.mode.noheader = noheader


def _wants_json(argv: list[str]) -> bool:
    return any(a in ("-json", "--json") for a in argv)


def _usage_message(e: click.ClickException, args: list[str]) -> str:
    """Click's message for a usage mistake, naming the option as the user wrote it."""
    message = e.format_message()
    ctx = getattr(e, "ctx", None)
    if isinstance(e, click.NoSuchOption) and ctx is not None:
        known = {o for p in ctx.command.params for o in (*p.opts, *p.secondary_opts)}
        name = e.option_name
        if len(name) == 2:
            # Click reads an unknown `-bogus` as the short option `-b` followed by `ogus`.
            words = (a.split("=", 1)[0] for a in args)
            name = next((w for w in words if w.startswith(name) and len(w) > 2 and w not in known), name)
        single = sorted(o for o in known if o.startswith("-") and not o.startswith("--"))
        close = difflib.get_close_matches(name, single, n=1)
        message = f"No such option '{name}'" + (f" (did you mean '{close[0]}'?)" if close else "")
    return " ".join(message.split()).rstrip(".")


def _command_path(args: list[str]) -> list[str]:
    """The sub-commands named in `args`, for errors Click raises without a context."""
    path: list[str] = []
    current: click.Command = cli
    for a in args:
        if not isinstance(current, click.Group):
            break
        if a.startswith("-"):
            continue
        try:
            sub = current.get_command(click.Context(current), a)
        except Exception:  # noqa: BLE001 - a sub-command that fails to load is reported elsewhere
            sub = None
        if sub is None:
            continue  # an option's value
        path.append(a)
        current = sub
    return path


def _missing_command(e: click.ClickException) -> str | None:
    """One line instead of the whole help when a group is given no sub-command."""
    ctx = getattr(e, "ctx", None)
    no_args = getattr(click.exceptions, "NoArgsIsHelpError", ())  # Click 8.2+
    if not isinstance(e, no_args) or ctx is None:
        return None
    assert isinstance(ctx.command, click.Group)
    verbs = ", ".join(ctx.command.list_commands(ctx))
    return f"missing command; give one of: {verbs}"


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        cli.main(args=args, prog_name="streamrepl", standalone_mode=False)
    except click.exceptions.Exit as e:
        sys.exit(e.exit_code)
    except BrokenPipeError:
        from .commands.common import stdout_closed

        stdout_closed()
    except click.exceptions.Abort:
        sys.stderr.write("ERROR (4) - interrupted\n")
        sys.exit(130)
    except click.ClickException as e:
        # Usage mistakes get the same one-line error as everything else, not a usage dump.
        from .output import OutputMode, emit_error

        ctx = getattr(e, "ctx", None)
        command = " ".join(ctx.command_path.split()[1:]) if ctx is not None else " ".join(_command_path(args))
        hint = f"see 'streamrepl {command} --help'" if command else "see 'streamrepl --help'"
        message = _missing_command(e) or _usage_message(e, args)
        emit_error(command, 22, f"{message}; {hint}", OutputMode(json=_wants_json(args)))
        sys.exit(2)
