"""What every command shares: maprcli-style options, output modes, and error reporting."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import click

from .. import settings
from ..errors import InvalidArgument, StreamreplError
from ..output import Listing, OutputMode, choose_columns, emit, emit_error

#: maprcli's words, in any case; nothing else, so that a typo is an error rather than a guess.
TRUE_WORDS = {"true", "yes"}
FALSE_WORDS = {"false", "no"}


class BoolWord(click.ParamType):
    """maprcli booleans: `true|false` and `yes|no`."""

    name = "true|false"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> bool:
        if isinstance(value, bool):
            return value
        word = str(value).strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
        self.fail(f"'{value}' is not a boolean; use true or false (yes or no)", param, ctx)


BOOL = BoolWord()


class Words(click.ParamType):
    """A value that is one of a few words, which shell completion offers (scripts/gen_docs.py reads `choices`). The
    value is passed on as given: the command checks it, with a message of its own (and any case where it takes any).
    `closed=False`: something else (a number) is taken too."""

    def __init__(self, *choices: str, closed: bool = True) -> None:
        self.choices = choices
        self.closed = closed
        self.name = "|".join(choices) + ("" if closed else "|...")

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        return value


COMPRESSIONS = Words("off", "lz4", "zlib", "snappy", "zstd")
TIMESTAMP_TYPES = Words("createtime", "logappendtime")
LOG_LEVELS = Words("DEBUG", "INFO", "WARNING", "ERROR")


class Terminated(KeyboardInterrupt):
    """SIGTERM, made an exception by `sigterm_interrupts` so that clean-up runs as it does for Ctrl-C."""


@contextlib.contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """SIGTERM stops the block as Ctrl-C does (exit 143 instead of 130), for commands that start processes
    or leave files that only their own clean-up removes (a Spark JVM and its log)."""

    def terminated(signum: int, frame: object) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def opt(name: str, *decls: str, **kwargs: Any) -> Callable:
    """An option spelled maprcli's way (`-name value`), with `--name` accepted too.

    A bare identifier among `decls` names the Python parameter (default: the option name).
    """
    dest = next((d for d in decls if not d.startswith("-")), name.replace(".", "_").replace("-", "_"))
    flags = [d for d in decls if d.startswith("-")]
    return click.option(f"-{name}", f"--{name}", *flags, dest, **kwargs)


def loglevel_opt() -> Callable:
    """-loglevel of the long-running commands (gateway start, proxy start)."""
    return opt(
        "loglevel",
        type=LOG_LEVELS,
        metavar="DEBUG|INFO|WARNING|ERROR",
        default="INFO",
        show_default=True,
        help="What the log shows, from everything (DEBUG) to errors only.",
    )


@dataclass
class App:
    """Per-invocation state: where the registry is and how to print."""

    clusters_file: str | None = None
    mode: OutputMode = field(default_factory=OutputMode)
    _registry: Any = None

    @property
    def registry(self) -> Any:
        if self._registry is None:
            from ..registry import load

            self._registry = load(self.clusters_file)
        return self._registry

    def registry_secrets_safe(self) -> list[str]:
        """Secrets to scrub from error text; never fails, never loads the registry just for this."""
        return self._registry.secrets() if self._registry is not None else []


def app() -> App:
    ctx = click.get_current_context()
    root = ctx.find_root()
    if root.obj is None:
        root.obj = App()
    return root.obj  # type: ignore[no-any-return]


def _apply_common(as_json: bool, noheader: bool, long: bool, clusters: str | None) -> App:
    a = app()
    a.mode.json = a.mode.json or as_json
    a.mode.noheader = a.mode.noheader or noheader
    a.mode.long = a.mode.long or long
    if clusters:
        a.clusters_file = clusters
    return a


def common_options(f: Callable, registry_option: bool = True) -> Callable:
    f = click.option("-json", "--json", "as_json", is_flag=True, help="Output the maprcli JSON envelope.")(f)
    f = click.option("-noheader", "--noheader", is_flag=True, help="Tab-separated rows without a header.")(f)
    f = click.option("-long", "--long", is_flag=True, hidden=True)(f)
    if registry_option:
        f = click.option("-clusters", "--clusters", metavar="FILE", help="Cluster registry file.")(f)
    return f


def command_name(ctx: click.Context) -> str:
    parts = ctx.command_path.split()
    return " ".join(parts[1:]) if len(parts) > 1 else parts[0]


def handles_errors(f: Callable | None = None, *, registry_option: bool = True) -> Callable:
    """Turn every failure into maprcli's one-line error (or JSON envelope) and a non-zero exit.

    With registry_option=False the command keeps `-clusters` for a meaning of its own
    (`local up -clusters a,b` names clusters to start).
    """
    if f is None:
        return functools.partial(handles_errors, registry_option=registry_option)

    @functools.wraps(f)
    def wrapper(*args: Any, as_json: bool, noheader: bool, long: bool, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        registry_file = kwargs.pop("clusters", None) if registry_option else None
        a = _apply_common(as_json, noheader, long, registry_file)
        try:
            return f(*args, **kwargs)
        except StreamreplError as e:
            message, secrets = e.message, a.registry_secrets_safe()
            if secrets:  # a broker's own error text quoted in ours may name its address, password and all
                from ..kafka import scrub  # here: `--help` must not load the Kafka client

                message = scrub(message, secrets)
            report_error(command_name(ctx), e.code, message, a.mode, exit_code=e.exit_status)
        except KeyboardInterrupt as e:
            code = 128 + (signal.SIGTERM if isinstance(e, Terminated) else signal.SIGINT)
            # A job that stopped part way says what it left behind (raised again with that text).
            report_error(command_name(ctx), 4, f"interrupted: {e}" if str(e) else "interrupted", a.mode, exit_code=code)
        except BrokenPipeError:
            stdout_closed()
        except Exception as e:  # noqa: BLE001 - the promise is one line, never a traceback
            if settings.debug():
                raise
            from ..kafka import describe_exception  # here: `--help` must not load the Kafka client

            code, message = describe_exception(e, a.registry_secrets_safe())
            report_error(command_name(ctx), code, message, a.mode)

    return common_options(wrapper, registry_option)


def listing(view: Listing) -> Callable:
    """A wide listing: `view` says which columns a terminal shows unless `-columns` chooses (under `handles_errors`,
    so that a bad name is a one-line error)."""

    def decorate(f: Callable) -> Callable:
        @functools.wraps(f)
        def wrapper(*args: Any, columns: str | None, **kwargs: Any) -> Any:
            mode = app().mode
            mode.listing = view
            mode.columns = None if columns is None else tuple(columns.split(","))
            if mode.columns is not None and view.fields:  # a wrong name is said before any work is done
                choose_columns(mode.columns, [*view.fields, *view.derived], view.labels)
            return f(*args, **kwargs)

        return opt(
            "columns",
            type=Words(*view.fields, *view.derived, "all", closed=False),  # completion offers the names
            metavar="A,B,...|all",
            help="The columns to show: field names or terminal headers, comma-separated; all: every one. Default on a"
            f" terminal: {', '.join(view.default)}; a pipe, -json and -noheader get every one.",
        )(wrapper)

    return decorate


def stdout_closed() -> None:
    """The reader of our output left (`streamrepl stream list | head -1`): stop quietly, as other
    Unix tools do, with the status of a process killed by SIGPIPE."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that flushing at exit does not fail again
    except (OSError, ValueError):  # no real file behind stdout
        pass
    sys.exit(128 + 13)


def report_error(command: str, code: int, message: str, mode: OutputMode, exit_code: int = 1) -> None:
    emit_error(command, code, message, mode)
    sys.exit(exit_code)


def output(rows: Sequence[dict], columns: Sequence[str] | None = None, out: TextIO | None = None) -> None:
    emit(rows, app().mode, columns, out)


def require(value: Any, option: str) -> Any:
    if value is None or value == "":
        raise InvalidArgument(f"missing -{option}; it is required")
    return value
