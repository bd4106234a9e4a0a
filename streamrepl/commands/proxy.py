"""`streamrepl proxy ...`: a Kafka-protocol proxy in front of a source cluster."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any

import click

from ..cli import CONTEXT_SETTINGS
from .common import BOOL, app, handles_errors, loglevel_opt, opt, output, require

if TYPE_CHECKING:
    from ..registry import Cluster


@click.group(context_settings=CONTEXT_SETTINGS)
def proxy() -> None:
    """Run a Kafka-protocol proxy that clients of a cluster connect through."""


@proxy.command("start", context_settings=CONTEXT_SETTINGS)
@opt("cluster", metavar="NAME", help="Cluster whose brokers the proxy stands in front of.")
@opt(
    "listen",
    metavar="HOST:PORT",
    default="0.0.0.0:9092",
    show_default=True,
    help="Bootstrap address; broker k listens on PORT+k (port 0: any free ports).",
)
@opt("advertise", metavar="HOST:PORT", help="Address clients are told to use (default: the listening one).")
@opt("tlscert", metavar="FILE", help="PEM certificate (chain) of the proxy's own listeners: clients connect with TLS.")
@opt("tlskey", metavar="FILE", help="PEM private key of -tlscert.")
@opt("metricsport", type=int, metavar="PORT", help="Serve Prometheus metrics on this port (GET /metrics; 0: any).")
@opt("metricsaddr", metavar="ADDR", default="0.0.0.0", show_default=True, help="Address the metrics port listens on.")
@opt(
    "synctimeout",
    type=float,
    metavar="SECONDS",
    default=5.0,
    show_default=True,
    help="A Produce held longer than this for a synchronous replica makes replication to it fall back to asynchronous.",
)
@opt(
    "syncstall",
    type=float,
    metavar="SECONDS",
    default=2.0,
    show_default=True,
    help="A synchronous replica making no progress this long (no gateway alive) falls back to asynchronous.",
)
@loglevel_opt()
@opt(
    "supervise",
    type=BOOL,
    default=True,
    help="Run the proxy in a worker process that is started again, on the same ports, when it dies (default true);"
    " false runs it in this process, for a service manager that restarts it itself (systemd's Restart=always).",
)
# Given by the supervisor to its worker: how many of its processes died before and how the last one ended, the pipe
# for its last words (replication/exits.py) and the listening socket the supervisor keeps open for it.
@opt("restarts", type=int, default=0, hidden=True)
@opt("lastexit", default="", hidden=True)
@opt("exitfd", type=int, hidden=True)
@opt("listenfd", type=int, hidden=True)
@handles_errors
def start_cmd(**given: Any) -> None:
    """Run a proxy of a cluster in the foreground until SIGTERM, which drains it; start as many as you like.

    Clients bootstrap from -listen; the proxy's Metadata, FindCoordinator and DescribeCluster answers name its own
    ports, so every connection goes through it. Requests and responses pass unchanged; SASL is the client's own,
    passed to the broker; TLS to the broker is the registry's. Prints its addresses once it listens.

    A Produce to a stream with a synchronous replica (replica add -synchronous true) is answered once the replica holds
    its records, or at once after a fallback to asynchronous (-synctimeout, -syncstall), until it has caught up.

    The proxy runs in a worker process, started again after a back-off when it dies (killed by a signal, or failing),
    on the same bootstrap port (clients connecting meanwhile wait in its backlog). An exit a restart cannot mend (bad
    input or settings) ends the command with status 78.
    """
    from ..errors import StreamreplError
    from ..replication import exits

    exitfd = given["exitfd"]
    try:
        _start(**given)
    except Exception as e:
        status = exits.status_of(e)
        if exitfd is None or status == exits.FAILED or not isinstance(e, StreamreplError):
            raise  # one line (a worker's supervisor starts it again)
        exits.tell_supervisor(exitfd, e.code, e.message)  # the supervisor ends with it: one line for the command
        sys.exit(status)


def _start(
    cluster: str | None,
    listen: str,
    advertise: str | None,
    tlscert: str | None,
    tlskey: str | None,
    metricsport: int | None,
    metricsaddr: str,
    synctimeout: float,
    syncstall: float,
    loglevel: str,
    supervise: bool,
    restarts: int,
    lastexit: str,
    exitfd: int | None,
    listenfd: int | None,
) -> None:
    import socket

    from ..errors import InvalidArgument
    from ..proxy.run import Started, parse_address, run_foreground, server_tls, upstream_of
    from ..proxy.server import Listen
    from ..proxy.sync import Limits

    level = getattr(logging, loglevel.upper(), None)
    if not isinstance(level, int):
        raise InvalidArgument(f"-loglevel {loglevel} is not a level; use DEBUG, INFO, WARNING or ERROR")
    if not (synctimeout > 0 and syncstall > 0):
        raise InvalidArgument("-synctimeout and -syncstall are seconds above 0, e.g. -synctimeout 5 -syncstall 2")
    if metricsport is not None and not 0 <= metricsport <= 65535:
        raise InvalidArgument(f"-metricsport {metricsport} is not a port; use 1-65535, or 0 for any free port")
    if restarts < 0:
        raise InvalidArgument(f"-restarts {restarts} is not a count; use 0 or more")
    where = Listen(
        parse_address(listen, "listen"),
        parse_address(advertise, "advertise") if advertise else None,
        server_tls(tlscert, tlskey),
        socket.socket(fileno=listenfd) if listenfd is not None else None,
    )
    target = app().registry.get(require(cluster, "cluster"))
    logging.basicConfig(stream=sys.stderr, level=level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    if supervise and exitfd is None:
        upstream_of(target)  # the registry's TLS settings: one error here, not a worker's
        if metricsport:
            from ..replication.metrics import check_ports

            check_ports(metricsaddr, [metricsport])  # a port in use is one error here, not a worker's
        sys.exit(_supervise(target, where, _worker_args(click.get_current_context())))
    if restarts:
        logging.getLogger("streamrepl.proxy").warning(
            "proxy worker started again (restart %d; the last one ended with %s)", restarts, lastexit or "?"
        )

    def started(s: Started) -> None:
        if restarts:
            return  # the supervisor's first worker said where the proxy listens; the ports are the same
        output([{"cluster": s.cluster, "listen": s.listen, "advertise": s.advertise, "metricsport": s.metrics_port}])
        sys.stdout.flush()

    run_foreground(
        target,
        where,
        (metricsaddr, metricsport) if metricsport is not None else None,
        started,
        registry=app().registry,
        limits=Limits(timeout=synctimeout, stall=syncstall),
    )


def _supervise(target: Cluster, where: Any, argv: list[str]) -> int:
    """`proxy start` (unless -supervise false): the listening socket, kept open here, and one worker process running
    the proxy on it, started again when it dies (replication/workers.py, the gateway's supervisor); its exit status.
    A worker's final exit (bad input) is raised, with the worker's message."""
    import time

    from ..proxy.run import listening_socket, proxy_id
    from ..replication.workers import Supervisor, Worker, spawn_gateway

    sock = listening_socket(where.listen)

    def worker_argv(w: Worker, exit_fd: int) -> list[str]:
        return [
            sys.executable,
            "-m",
            "streamrepl",
            "proxy",
            "start",
            *argv,
            "-supervise",
            "false",
            "-restarts",
            str(w.restarts),
            "-lastexit",
            w.last_exit,
            "-exitfd",
            str(exit_fd),
            "-listenfd",
            str(sock.fileno()),
        ]

    def sleep(seconds: float) -> None:
        # Stopping: the port is closed at once, as an unsupervised proxy's is (the worker drains what it accepted).
        if supervisor.stop_signal and sock.fileno() >= 0:
            sock.close()
        time.sleep(seconds)

    supervisor = Supervisor(proxy_id(), 1, spawn_gateway(worker_argv, (sock.fileno(),)), sleep=sleep, kind="proxy")
    supervisor.install_signal_handlers()
    try:
        status = supervisor.run()
    finally:
        sock.close()
    if supervisor.final is not None:
        raise supervisor.final
    return status


#: What only the supervisor acts on, or gives its worker itself.
_SUPERVISOR_ONLY = ("supervise", "restarts", "lastexit", "exitfd", "listenfd")


def _worker_args(ctx: click.Context) -> list[str]:
    """The options of `proxy start` as given, for its worker (made from the command's options, so none is left
    out), without what the supervisor gives the worker itself; -clusters the registry the supervisor read."""
    args: list[str] = []
    for option in ctx.command.params:
        if not isinstance(option, click.Option) or option.name in _SUPERVISOR_ONLY or option.name == "clusters":
            continue
        value = ctx.params.get(str(option.name))
        if value is None or value == option.default or (option.is_flag and not value):
            continue
        if option.is_flag:
            args.append(option.opts[0])
        else:
            args += [option.opts[0], ("true" if value else "false") if isinstance(value, bool) else str(value)]
    if app().clusters_file:
        args += ["-clusters", str(app().clusters_file)]
    return args
