"""`streamrepl gateway ...` (the worker) and `streamrepl cluster gateway ...` (who is running)."""

from __future__ import annotations

import dataclasses
import logging
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from ..cli import CONTEXT_SETTINGS
from ..output import Listing
from .common import BOOL, app, handles_errors, listing, loglevel_opt, opt, output, require

if TYPE_CHECKING:
    from ..replication.workers import Worker

#: A gateway's id goes into its Kafka client ids, its log lines and its metrics' labels.
_GATEWAY_ID = re.compile(r"[A-Za-z0-9._-]+")


@click.group(context_settings=CONTEXT_SETTINGS)
def gateway() -> None:
    """Run the workers that apply replicated records in a destination cluster."""


def _start_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The options of `gateway start`, declared here once; the command gets them whole (StartOptions), and hands
    them on to its workers by worker_argv, which is made from this list too."""
    for option in reversed(_OPTIONS):
        f = option(f)
    return f


_OPTIONS = (
    opt("cluster", metavar="NAME", help="Destination cluster whose replicas this gateway feeds."),
    opt(
        "id",
        "gateway_id",
        metavar="NAME",
        help="Gateway name: letters, digits, '.', '_' and '-' (default: <host>-<pid>).",
    ),
    loglevel_opt(),
    opt(
        "metricsport",
        type=int,
        metavar="PORT",
        help="Serve Prometheus metrics on this port (GET /metrics; 0: any); with -workers N, worker k serves PORT+k-1.",
    ),
    opt(
        "metricsaddr", metavar="ADDR", default="0.0.0.0", show_default=True, help="Address the metrics port listens on."
    ),
    opt(
        "workers",
        type=int,
        metavar="N",
        default=1,
        show_default=True,
        help="Gateway processes to run (1-64), to use more cores: each joins as gateway <id>.w<k>; a dead one"
        " restarts.",
    ),
    opt(
        "supervise",
        type=BOOL,
        default=True,
        help="Run the gateway in a worker process that is started again when it dies (default true); false runs it in"
        " this process, for a service manager that restarts it itself (systemd's Restart=always).",
    ),
    # Given by the supervisor to its workers: the id of a `-workers N` supervisor (the gateway list allows a worker by
    # it), how many processes of this worker died before, how the last one ended, and the pipe for its last words.
    opt("parent", metavar="NAME", hidden=True),
    opt("restarts", type=int, default=0, hidden=True),
    opt("lastexit", default="", hidden=True),
    opt("exitfd", type=int, hidden=True),
)

#: What only the supervisor acts on: each worker it starts is one gateway process, in the foreground.
SUPERVISOR_ONLY = ("workers", "supervise")


@dataclass(frozen=True)
class StartOptions:
    """The options of `gateway start` as given (one field per option of _OPTIONS, by its parameter name)."""

    cluster: str | None
    gateway_id: str | None
    loglevel: str
    metricsport: int | None
    metricsaddr: str
    workers: int
    supervise: bool
    parent: str | None
    restarts: int
    lastexit: str
    exitfd: int | None


@gateway.command("start", context_settings=CONTEXT_SETTINGS)
@_start_options
@handles_errors
def start_cmd(**given: Any) -> None:
    """Run a gateway in the foreground until SIGTERM; start as many as you like per cluster.

    The gateway runs in a worker process, which is started again after a back-off when it dies (killed by a
    signal or failing). Exits that a restart cannot mend end the command with their own status: 78 bad input or
    settings, 76 fenced by another gateway started with the same -id, 77 not on the cluster's gateway list.
    """
    from ..errors import StreamreplError
    from ..replication import exits

    o = StartOptions(**given)
    try:
        _start(o)
    except Exception as e:
        status = exits.status_of(e)
        if status == exits.FAILED:
            raise  # one line, exit status 1 (a worker's supervisor starts it again)
        if isinstance(e, StreamreplError):
            code, message = e.code, e.message
        else:  # a Kafka client that refused its settings
            from ..kafka import describe_exception

            code, message = describe_exception(e, app().registry_secrets_safe())
        if o.exitfd is not None:
            exits.tell_supervisor(o.exitfd, code, message)  # the supervisor ends with it: one line for the command
            sys.exit(status)
        raise exits.FinalExit(message, code, status) from None


def _start(o: StartOptions) -> None:
    from ..errors import InvalidArgument
    from ..replication.process import run_foreground
    from ..replication.workers import MAX_WORKERS

    if o.gateway_id is not None and not _GATEWAY_ID.fullmatch(o.gateway_id):
        raise InvalidArgument(
            f"-id {o.gateway_id!r} is not a gateway name: use letters, digits, '.', '_' and '-' (at least one)"
        )
    level = getattr(logging, o.loglevel.upper(), None)
    if not isinstance(level, int):
        raise InvalidArgument(f"-loglevel {o.loglevel} is not a level; use DEBUG, INFO, WARNING or ERROR")
    if o.metricsport is not None and not 0 <= o.metricsport <= 65535:
        raise InvalidArgument(f"-metricsport {o.metricsport} is not a port; use 1-65535, or 0 for any free port")
    if not 1 <= o.workers <= MAX_WORKERS:
        raise InvalidArgument(f"-workers {o.workers} is out of range; use 1 to {MAX_WORKERS} (the slot count)")
    if o.workers > 1 and not o.supervise:
        raise InvalidArgument(f"-workers {o.workers} needs the supervisor; drop -supervise false, or use -workers 1")
    if o.metricsport and o.metricsport + o.workers - 1 > 65535:
        raise InvalidArgument(
            f"-metricsport {o.metricsport} with -workers {o.workers} needs ports up to"
            f" {o.metricsport + o.workers - 1}; use a lower port, or 0 for any free port"
        )
    if o.parent is not None and not _GATEWAY_ID.fullmatch(o.parent):
        raise InvalidArgument(f"-parent {o.parent!r} is not a gateway name: use letters, digits, '.', '_' and '-'")
    if o.restarts < 0:
        raise InvalidArgument(f"-restarts {o.restarts} is not a count; use 0 or more")
    reg = app().registry
    reg.get(require(o.cluster, "cluster"))
    logging.basicConfig(stream=sys.stderr, level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if o.supervise and o.exitfd is None:
        sys.exit(_supervise(o))
    metrics = (o.metricsaddr, o.metricsport) if o.metricsport is not None else None
    run_foreground(
        reg,
        str(o.cluster),
        o.gateway_id,
        metrics=metrics,
        parent_id=o.parent,
        restarts=o.restarts,
        last_exit=o.lastexit,
        exit_fd=o.exitfd,
    )


def worker_argv(o: StartOptions, w: Worker, exit_fd: int, registry_file: str | None) -> list[str]:
    """The command line of worker `w` of the supervisor started with `o`: `gateway start` with the same options,
    save what is the worker's own (its id, its metrics port, its restarts, the pipe for its last words) and the
    supervisor's (SUPERVISOR_ONLY). Made from the command's options, so none is left out."""
    from ..replication.workers import worker_metrics_port

    mine = dataclasses.replace(
        o,
        gateway_id=w.id,
        parent=o.gateway_id if o.workers > 1 else None,
        metricsport=worker_metrics_port(o.metricsport, w.k),
        restarts=w.restarts,
        lastexit=w.last_exit,
        exitfd=exit_fd,
        workers=1,
        supervise=False,
    )
    args = [sys.executable, "-m", "streamrepl", "gateway", "start"]
    for option in start_cmd.params:
        value = getattr(mine, str(option.name), None) if isinstance(option, click.Option) else None
        if value is None or (value == option.default and option.name not in SUPERVISOR_ONLY):
            continue
        args += [option.opts[0], ("true" if value else "false") if isinstance(value, bool) else str(value)]
    if registry_file:
        args += ["-clusters", str(registry_file)]
    return args


def _supervise(o: StartOptions) -> int:
    """`gateway start` (unless -supervise false): the workers' supervisor (replication/workers.py); its exit status.
    A worker's final exit (exits.FINAL) is raised, with the worker's message."""
    import os
    import socket

    from .. import settings
    from ..replication.metrics import check_ports
    from ..replication.workers import Supervisor, spawn_gateway, worker_metrics_port

    settings.check()  # a bad setting is one error here, not each worker's
    ports = [p for k in range(1, o.workers + 1) if (p := worker_metrics_port(o.metricsport, k))]
    check_ports(o.metricsaddr, ports)  # a port in use is one error here, not a worker that stops for good
    o = dataclasses.replace(o, gateway_id=o.gateway_id or f"{socket.gethostname()}-{os.getpid()}")
    registry_file = app().clusters_file

    def argv(w: Worker, exit_fd: int) -> list[str]:
        return worker_argv(o, w, exit_fd, registry_file)

    supervisor = Supervisor(str(o.gateway_id), o.workers, spawn_gateway(argv))
    supervisor.install_signal_handlers()
    status = supervisor.run()
    if supervisor.final is not None:
        raise supervisor.final
    return status


@click.group("gateway", context_settings=CONTEXT_SETTINGS)
def cluster_gateway() -> None:
    """Which gateways run, and what each of them replicates."""


GATEWAY_LIST = Listing(
    fields=(  # replication.live.COLUMNS
        "cluster",
        "gateway",
        "host",
        "pid",
        "slots",
        "partitions",
        "applied",
        "errors",
        "lastseen",
        "restarts",
        "lastexit",
        "replicates",
    ),
    default=("cluster", "gateway", "host", "partitions", "errors", "lastseen", "restarts", "lastexit"),
    cut=("lastexit", "host"),
    keep=("gateway",),
)


@cluster_gateway.command("list", context_settings=CONTEXT_SETTINGS)
@opt("dstcluster", metavar="NAME", help="Only this destination cluster (default: all).")
@handles_errors
@listing(GATEWAY_LIST)
def list_cmd(dstcluster: str | None) -> None:
    """Show the live gateways of each destination cluster and the partitions each applies.

    Unlike maprcli's `cluster gateway list` (each cluster's configured list, columns cluster gatewayConfig),
    this lists the gateways running now, with more columns; `cluster gateway get` shows a configured list.
    On a terminal: cluster, gateway, host, partitions, errors, lastseen, restarts and lastexit; -columns
    chooses others (pid, slots, applied, replicates: the partitions themselves).
    """
    from ..replication.live import COLUMNS, live_gateways

    reg = app().registry
    names = [dstcluster] if dstcluster else list(reg.clusters)
    rows = []
    for name in names:
        rows.extend(live_gateways(reg.get(name)))
    output(rows, COLUMNS)


# maprcli's other gateway verbs. Here `set` names the gateways ALLOWED to serve a destination cluster (a gateway
# not on the list refuses to join, one taken off it leaves: see gateway_lists.py and replication/allowlist.py).
@cluster_gateway.command("set", context_settings=CONTEXT_SETTINGS)
@opt("dstcluster", metavar="NAME", help="Destination cluster whose gateway list this is.")
@opt("gateways", metavar='"ID ..."', help="Space-separated gateway ids (gateway start -id) or host names.")
@handles_errors
def set_cmd(dstcluster: str | None, gateways: str | None) -> None:
    """Name the gateways allowed to serve a destination cluster (replaces its list).

    A gateway whose id and host name are both off a list refuses to start, and a running one drains and
    leaves within a few seconds. This keeps mistaken gateways out; it is no security boundary: ids are chosen
    by whoever starts a gateway, and the broker's ACLs decide who may write at all.
    """
    from .. import gateway_lists

    cluster = app().registry.get(require(dstcluster, "dstcluster"))
    if gateways is None:
        require(gateways, "gateways")
    gateway_lists.store(cluster, gateway_lists.parse(gateways or ""))
    output([])


@cluster_gateway.command("get", context_settings=CONTEXT_SETTINGS)
@opt("dstcluster", metavar="NAME", help="Destination cluster.")
@handles_errors
def get_cmd(dstcluster: str | None) -> None:
    """Show the gateway list of a destination cluster (no row when none is set: any gateway may serve)."""
    from .. import gateway_lists

    cluster = app().registry.get(require(dstcluster, "dstcluster"))
    record = gateway_lists.read(cluster)
    rows = [{"cluster": cluster.name, "gatewayConfig": " ".join(record.get("gateways", []))}] if record else []
    output(rows, ["cluster", "gatewayConfig"])


@cluster_gateway.command("delete", context_settings=CONTEXT_SETTINGS)
@opt("dstcluster", metavar="NAME", help="Destination cluster.")
@handles_errors
def delete_cmd(dstcluster: str | None) -> None:
    """Delete the gateway list of a destination cluster (any gateway may serve it again); the gateways stay."""
    from .. import gateway_lists

    gateway_lists.delete(app().registry.get(require(dstcluster, "dstcluster")))
    output([])


@cluster_gateway.command("resolve", context_settings=CONTEXT_SETTINGS)
@opt("dstcluster", metavar="NAME", help="Destination cluster.")
@handles_errors
def resolve_cmd(dstcluster: str | None) -> None:
    """Show the gateways serving a destination cluster now: live (reported in the last 15 s) and allowed."""
    from .. import gateway_lists
    from ..replication.live import live_gateways

    cluster = app().registry.get(require(dstcluster, "dstcluster"))
    allowed = gateway_lists.allowed(cluster)
    rows = [
        {k: r[k] for k in ("cluster", "gateway", "host", "lastseen")}
        for r in live_gateways(cluster)
        if gateway_lists.permits(allowed, str(r["gateway"]), str(r["host"]), r.get("parent"))
    ]
    output(rows, ["cluster", "gateway", "host", "lastseen"])


@cluster_gateway.command("local", context_settings=CONTEXT_SETTINGS)
@opt(
    "format",
    "fmt",
    type=click.Choice(["text", "dns"]),
    default="text",
    show_default=True,
    help="text: ids on one line (for -gateways); dns: one zone-file TXT record per gateway.",
)
@handles_errors
def local_cmd(fmt: str) -> None:
    """Show the live gateways running on this host, of every cluster of the registry.

    dns lines read `_streamrepl-gateway.<cluster>. 60 IN TXT "<id> <host>"`.
    """
    import socket

    from ..replication.live import live_gateways

    reg = app().registry
    host = socket.gethostname()
    rows = [
        {"cluster": r["cluster"], "gateway": r["gateway"], "host": r["host"]}
        for name in reg.clusters
        for r in live_gateways(reg.get(name))
        if r["host"] == host
    ]
    if app().mode.json:
        output(rows)
    elif fmt == "dns":
        for r in rows:
            click.echo(f'_streamrepl-gateway.{r["cluster"]}. 60 IN TXT "{r["gateway"]} {r["host"]}"')
    else:
        click.echo(" ".join(str(r["gateway"]) for r in rows))
