"""The Spark session of one bulk job: start-up (its log kept off the terminal), running a job so that it
can be cancelled, and stopping. pyspark is imported inside the functions that need it."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn, cast

from .. import kafka, settings
from ..errors import InvalidArgument, StreamreplError
from ..logtail import log_tail

#: The master URLs Spark 4 starts on (SparkContext's own forms); anything else fails inside the JVM with a
#: stack trace whose last lines do not say why.
_MASTER = re.compile(r"yarn|(spark|k8s)://\S+|local(\[[^\]]+\])?|local-cluster\[[^\]]+\]")


def check_spark_options(master: str | None, numthreads: int | None) -> None:
    """Refuse a bad -master or -numthreads in one line, before a job creates or locks anything."""
    if numthreads is not None and numthreads < 1:
        raise InvalidArgument(f"-numthreads {numthreads} must be at least 1")
    if master is not None and not _MASTER.fullmatch(master):
        raise InvalidArgument(
            f"-master {master!r} is not a Spark master: give yarn, spark://HOST:PORT, k8s://URL, local or"
            " local[N] (leave it out for local[*])"
        )


def describe(e: BaseException, secrets: Iterable[str]) -> str:
    """A failure of the driver or of a task as one line, without the clusters' secrets."""
    if isinstance(e, StreamreplError):
        return kafka.scrub(e.message, secrets)
    return kafka.describe_exception(e, secrets)[1]


@dataclass
class SparkHandle:
    spark: Any
    seconds: float
    owned: bool
    log: str | None = None

    @property
    def sc(self) -> Any:
        return self.spark.sparkContext

    def stop(self) -> None:
        if self.owned:
            self.spark.stop()
            if self.log and not settings.keep_spark_log():
                # Named only when Spark fails to start; a run that got this far leaves nothing behind (cron).
                with contextlib.suppress(OSError):
                    os.unlink(self.log)


@contextlib.contextmanager
def _stderr_to(path: str) -> Iterator[None]:
    """Point fd 2 at `path` while the JVM starts: it keeps that stderr (and its chatter) for good."""
    sys.stderr.flush()
    saved = os.dup(2)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        os.dup2(fd, 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(fd)


@contextlib.contextmanager
def starting(show: bool, text: str) -> Iterator[None]:
    """A spinner on the terminal while Spark starts (through a copy of fd 2: the JVM gets fd 2 itself)."""
    if not show:
        yield
        return
    from rich.console import Console

    with os.fdopen(os.dup(2), "w") as tty, Console(file=tty).status(text):
        yield


def start_spark(
    app_name: str,
    master: str | None = None,
    numthreads: int | None = None,
    conf: dict[str, str] | None = None,
    secrets: Iterable[str] = (),
) -> SparkHandle:
    """A Spark session for one job: `local[*]` (or `local[N]`) unless a master is named.

    An already active SparkContext (a notebook, a test) is reused and left running. A JVM this
    function launches writes its log to a file instead of the terminal (named on failure).
    """
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    check_spark_options(master, numthreads)
    t0 = time.monotonic()
    if SparkContext._active_spark_context is not None:
        return SparkHandle(SparkSession.builder.getOrCreate(), 0.0, owned=False)
    spark_settings: dict[str, str] = {
        "spark.app.name": app_name,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
    }
    if not os.environ.get("PYSPARK_PYTHON") and "spark.pyspark.python" not in (conf or {}):
        # Tasks run where streamrepl and confluent-kafka are: this interpreter, unless told otherwise.
        # PySpark reads the workers' interpreter from the environment, not from its settings.
        os.environ["PYSPARK_PYTHON"] = sys.executable
    elif (conf or {}).get("spark.pyspark.python"):
        os.environ["PYSPARK_PYTHON"] = (conf or {})["spark.pyspark.python"]
    if master and numthreads:
        spark_settings["spark.cores.max"] = str(numthreads)
    spark_settings.update(conf or {})
    builder = SparkSession.builder.master(master or (f"local[{numthreads}]" if numthreads else "local[*]"))
    for k, v in spark_settings.items():
        builder = builder.config(k, v)
    log: str | None = None
    children_before = _descendants(os.getpid())
    try:
        if SparkContext._gateway is None and not settings.debug():
            log = os.path.join(tempfile.gettempdir(), f"streamrepl-spark-{os.getpid()}.log")
            with _stderr_to(log):
                spark = builder.getOrCreate()
        else:
            spark = builder.getOrCreate()
    except BaseException as e:
        if isinstance(e, Exception):
            _fail_to_start(e, master, log, secrets)
        # Interrupted (Ctrl-C, or SIGTERM made an exception by the command): the JVM ignores SIGINT and
        # would outlive us for good, so it goes, and with it its log, which would name nothing useful.
        _stop_processes(_descendants(os.getpid()) - children_before)
        if log and not settings.keep_spark_log():
            with contextlib.suppress(OSError):
                os.unlink(log)
        raise
    spark.sparkContext.setLogLevel("WARN")
    handle = SparkHandle(spark, time.monotonic() - t0, owned=True, log=log)
    if not cast(str, spark.sparkContext.master).startswith("local"):
        _ship_package(spark.sparkContext)
    return handle


def _fail_to_start(e: Exception, master: str | None, log: str | None, secrets: Iterable[str]) -> NoReturn:
    """The JVM's reasons are in its log: its last lines, and where it is, make the error."""
    detail = log_tail(log, lines=8) or describe(e, secrets)
    where = f" (log {log})" if log else ""
    raise StreamreplError(
        f"Spark did not start on master {master or 'local'}{where}: {kafka.scrub(detail, secrets)}"
    ) from None


def _parents() -> dict[int, int]:
    """Every process's parent: from /proc where there is one, else from ps."""
    found: dict[int, int] = {}
    if os.path.isdir("/proc"):
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError, ValueError, IndexError):
                    with open(f"/proc/{entry}/stat") as f:
                        # The command name (field 2) may hold spaces and parentheses: count from its end.
                        found[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
        return found
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        listing = subprocess.run(["ps", "-A", "-o", "pid=,ppid="], capture_output=True, text=True, timeout=10)
        for line in listing.stdout.splitlines():
            with contextlib.suppress(ValueError):
                pid, ppid = (int(x) for x in line.split())
                found[pid] = ppid
    return found


def _descendants(root: int) -> set[int]:
    parents = _parents()
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    return found


def _stop_processes(pids: set[int], wait: float = 5.0) -> None:
    """Stop `pids` and whatever they start meanwhile: each tree is frozen first, so that none of it is
    reparented out of sight (spark-submit is a shell script that starts a JVM to build the JVM's command)."""
    frozen: set[int] = set()
    while pending := pids - frozen:
        for pid in pending:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP)
        frozen |= pending
        pids = pids | set().union(*(_descendants(p) for p in pending))
    for pid in frozen:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGTERM)
            os.kill(pid, signal.SIGCONT)
    deadline = time.monotonic() + wait
    while (alive := {p for p in frozen if _alive(p)}) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in alive:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
        _alive(pid)


def _alive(pid: int) -> bool:
    """Whether `pid` still runs; a child of ours that ended is reaped here."""
    with contextlib.suppress(ChildProcessError):
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def _ship_package(sc: Any) -> None:
    """Send streamrepl itself to the executors, for clusters where it is not installed."""
    import zipfile

    pkg = Path(__file__).resolve().parent.parent  # streamrepl/, not streamrepl/bulk/
    out = Path(tempfile.mkdtemp(prefix="streamrepl-pyfiles-")) / "streamrepl.zip"
    with zipfile.ZipFile(out, "w") as z:
        for f in pkg.rglob("*.py"):
            z.write(f, f.relative_to(pkg.parent).as_posix())
    sc.addPyFile(str(out))


def run_job(
    sc: Any, make: Callable[[], Any], on_tick: Callable[[], None] | None = None, tick: float = 0.5
) -> list[Any]:
    """Collect an RDD in a thread (so Ctrl-C and the lock can cancel it) while `on_tick` runs here."""
    from pyspark import InheritableThread

    group = f"streamrepl-{uuid.uuid4().hex[:8]}"
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            sc.setJobGroup(group, "streamrepl", interruptOnCancel=True)
            box["rows"] = make().collect()
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            box["error"] = e

    t = InheritableThread(target=work, daemon=True)
    t.start()
    try:
        while t.is_alive():
            t.join(tick)
            if on_tick is not None:
                on_tick()
    except BaseException:
        sc.cancelJobGroup(group)
        t.join(30)
        raise
    if "error" in box:
        raise box["error"]
    return cast(list[Any], box["rows"])
