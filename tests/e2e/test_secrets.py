"""Secrets of the cluster registry never appear in output, errors or logs.

One registry holds planted secrets (SASL passwords, a TLS key password, an OIDC client secret) in
four clusters: `live`, a real broker spoken to in PLAINTEXT (librdkafka ignores the secrets there),
`dead`, a port where nothing listens, `userinfo`, whose bootstrap.servers holds `user:password@`, and
`sasl` and `oidc`, the same live broker reached with SASL settings it refuses. Many commands run against them; every byte they write is searched for the
secrets: stdout and stderr (for the commands run as processes, librdkafka's own writes to fd 2 as
well), the logs of gateways at -loglevel debug, and the files a Spark job leaves in $TMPDIR.

Each planted value holds TOKEN, a random string found nowhere else, so that a partial echo of a
secret (a truncated value, a value inside a longer one) is caught as well as a whole one.
(The warning for a registry others can read is tested in test_registry.py.)

The secrets must still reach the Kafka clients that need them: the tasks of copystream,
diffstreams and the Spark data source build theirs from every property of the registry entry, not
only bootstrap.servers (checked with the Spark jobs run in this process).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import textwrap
import time
import uuid
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import support
import yaml
from support.cli import STREAMREPL_BIN, Run, run_cli

from streamrepl.local import EphemeralClusters

TOKEN = uuid.uuid4().hex[:16]
SECRET = f"PLANTED-s3cret-{TOKEN}"
STREAM = "/live/orders"
REPLICA = "/live/orders-replica"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def userinfo_kinds(dead_port: int) -> dict[str, str]:
    """bootstrap.servers with a password in the address that holds each of '@', ',' and ' ', and several servers."""
    at = f"127.0.0.1:{dead_port}"
    return {
        "at": f"operator:Pa55@{SECRET}-at@{at}",
        "comma": f"operator:{SECRET}-c1,{SECRET}-c2@{at}",
        "space": f"operator:{SECRET}-s1 {SECRET}-s2@{at}",
        "many": f"{at},operator:{SECRET}-m1@x@{at},op2:{SECRET}-m2,y@{at}",
    }


def registry_doc(live_bootstrap: str, dead_port: int) -> dict[str, object]:
    return {
        "default": "live",
        "clusters": {
            "live": {
                "bootstrap.servers": live_bootstrap,
                "sasl.username": "operator",
                "sasl.password": f"{SECRET}-live-sasl",
                "ssl.key.password": f"{SECRET}-live-key",
                "sasl.oauthbearer.client.secret": f"{SECRET}-live-oidc",
            },
            "dead": {
                "bootstrap.servers": f"127.0.0.1:{dead_port}",
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "PLAIN",
                "sasl.username": "operator",
                "sasl.password": f"{SECRET}-dead-sasl",
                "ssl.key.password": f"{SECRET}-dead-key",
            },
            # A password written into the address (librdkafka takes it for a host name, which does not resolve),
            # holding what also separates an address from its user ('@') and servers from each other (',', ' ').
            "userinfo": {"bootstrap.servers": f"operator:Pa55@{SECRET}-ui, {SECRET}-ui2@127.0.0.1:{dead_port}"},
            **{f"userinfo-{kind}": {"bootstrap.servers": value} for kind, value in userinfo_kinds(dead_port).items()},
            "sasl": {
                "bootstrap.servers": live_bootstrap,
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.username": "operator",
                "sasl.password": f"{SECRET}-scram",
            },
            "oidc": {
                "bootstrap.servers": live_bootstrap,
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "OAUTHBEARER",
                "sasl.oauthbearer.method": "oidc",
                "sasl.oauthbearer.client.id": "streamrepl",
                "sasl.oauthbearer.client.secret": f"{SECRET}-oidc",
                "sasl.oauthbearer.token.endpoint.url": f"http://127.0.0.1:{dead_port}/token",
            },
        },
    }


@dataclass
class Env:
    reg: Path
    tmp: Path


def proc_env(env: Env, **extra: str) -> dict[str, str]:
    full = dict(os.environ)
    full.pop("STREAMREPL_DEBUG", None)  # tracebacks on purpose are not what is tested here
    full["STREAMREPL_CLUSTERS"] = str(env.reg)
    full.update(extra)
    return full


def run_proc(env: Env, args: Sequence[object], stdin: str = "", timeout: float = 90, **extra: str) -> Run:
    """`streamrepl <args>` as its own process: stderr holds librdkafka's writes to fd 2 too."""
    return support.run_proc(
        args, env={**proc_env(env, **extra), "STREAMREPL_DEBUG": None}, timeout=timeout, stdin=stdin
    )


def leaks(outputs: dict[str, str]) -> list[str]:
    """Each output holding the token, with the text around it."""
    found = []
    for label, text in outputs.items():
        at = text.find(TOKEN)
        if at >= 0:
            found.append(f"{label}: ...{text[max(0, at - 120) : at + 40]!r}")
    return found


def assert_clean(outputs: dict[str, str]) -> None:
    assert outputs, "nothing was checked"
    found = leaks(outputs)
    assert not found, "a registry secret was printed:\n" + "\n".join(found)


def cli(env: Env, *args: object) -> Run:
    return run_cli(*args, "-clusters", env.reg)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    """A broker of its own (cluster `live`), the secret-laden registry (mode 600), a stream with
    records and a replica of it in the same cluster (for the gateway to work on)."""
    tmp = tmp_path_factory.mktemp("secrets")
    # A broker of its own: the registry under test names it with secrets, and its gateway is killed.
    with EphemeralClusters(["live"]) as ec:
        reg = tmp / "clusters.yaml"
        reg.write_text(yaml.safe_dump(registry_doc(ec.brokers["live"].bootstrap, free_port()), sort_keys=False))
        reg.chmod(0o600)
        e = Env(reg, tmp)
        for args in (
            ["stream", "create", "-path", STREAM, "-defaultpartitions", "2"],
            ["stream", "topic", "create", "-path", STREAM, "-topic", "clicks"],
            ["stream", "create", "-path", REPLICA, "-copymetafrom", STREAM],
            ["stream", "replica", "add", "-path", STREAM, "-replica", REPLICA],
            ["stream", "upstream", "add", "-path", REPLICA, "-upstream", STREAM],
        ):
            r = cli(e, *args)
            assert r.code == 0, r
        # Ten records in each partition, named: keyless records may all stick to one partition, and the
        # Spark source test counts one slice per partition with records.
        records = "".join(json.dumps({"value": f"click-{i}", "partition": i % 2}) + "\n" for i in range(20))
        r = run_proc(e, ["produce", "-path", f"{STREAM}:clicks", "-format", "json"], stdin=records)
        assert r.code == 0, r
        yield e


# -- the live cluster: masked listings, ordinary output and ordinary errors ---------------------------
def test_commands_on_a_live_cluster(env: Env) -> None:
    runs: dict[str, Run] = {}
    for args in (
        ["stream", "info", "-path", STREAM],
        ["stream", "info", "-path", STREAM, "-json"],
        ["stream", "list", "-cluster", "live", "-json"],
        ["stream", "topic", "list", "-path", STREAM],
        ["stream", "topic", "info", "-path", STREAM, "-topic", "clicks", "-json"],
        ["stream", "replica", "list", "-path", STREAM, "-json"],
        ["stream", "upstream", "list", "-path", REPLICA],
        ["stream", "cursor", "list", "-path", STREAM],
        ["consume", "-path", f"{STREAM}:clicks", "-offset", "earliest", "-count", "3", "-timeout", "5"],
        ["cluster", "gateway", "list", "-dstcluster", "live"],
    ):
        r = cli(env, *args)
        assert r.code == 0, (args, r)
        runs[" ".join(args)] = r
    errors = (
        ["stream", "info", "-path", "/live/missing"],
        ["stream", "info", "-path", "/live/missing", "-json"],
        ["stream", "create", "-path", STREAM],
        ["stream", "edit", "-path", STREAM, "-ttl", "-5"],
        ["stream", "topic", "create", "-path", STREAM, "-topic", "bad name"],
        ["stream", "replica", "add", "-path", STREAM, "-replica", STREAM],
    )
    for args in errors:
        r = cli(env, *args)
        assert r.code != 0, (args, r)
        runs[" ".join(args)] = r
    assert_clean({f"{k} ({where})": getattr(r, where) for k, r in runs.items() for where in ("stdout", "stderr")})


def test_bad_option_values(env: Env) -> None:
    runs = {}
    for args in (
        ["cluster", "list", "-timeout", "soon"],
        ["cluster", "list", "-timeout", "-1", "-json"],
        ["stream", "create", "-path", "/live/x", "-ttl", "forever"],
        ["stream", "create", "-path", "/live/x", "-compression", "lzf"],
        ["stream", "edit", "-path", STREAM, "-produceperm", "u:alice &"],
        ["stream", "info", "-path", "/live/a:b"],
        ["stream", "info", "-path", "/nosuch/x", "-bogus", "1"],
        ["gateway", "start", "-cluster", "live", "-loglevel", "LOUD"],
        ["gateway", "start", "-cluster", "nosuch"],
        ["copystream", "-src", STREAM, "-dst", "/live/copy", "-sparkconf", "bogus"],
        ["copystream", "-src", STREAM, "-dst", STREAM],
        ["diffstreams", "-src", STREAM, "-dst", "/live/missing"],
        ["consume", "-path", f"{STREAM}:clicks", "-offset", "somewhere"],
        ["stream", "cursor", "list", "-path", "/live/missing", "-json"],
    ):
        r = cli(env, *args)
        assert r.code != 0, (args, r)
        assert "Traceback" not in r.stderr, r.stderr
        runs[" ".join(args)] = r.stdout + r.stderr
    assert_clean(runs)


# -- a registry that does not parse, near the secrets ----------------------------------------------
BROKEN = {
    "indentation": """\
        clusters:
          live:
            bootstrap.servers: 127.0.0.1:1
            sasl.password: {secret}
              ssl.key.password: {secret}
        """,
    "unclosed quote": """\
        clusters:
          live:
            bootstrap.servers: 127.0.0.1:1
            sasl.password: "{secret}
            sasl.username: operator
        """,
    "colon in the value": """\
        clusters:
          live:
            bootstrap.servers: 127.0.0.1:1
            sasl.password: {secret}: more
        """,
    "tab": "clusters:\n  live:\n    bootstrap.servers: 127.0.0.1:1\n\tsasl.password: {secret}\n",
    "undefined alias": """\
        clusters:
          live:
            bootstrap.servers: 127.0.0.1:1
            sasl.password: *{secret}
        """,
    "list value": """\
        clusters:
          live:
            bootstrap.servers: 127.0.0.1:1
            sasl.password: [{secret}, other]
        """,
    "mapping value": """\
        clusters:
          live:
            bootstrap.servers: 127.0.0.1:1
            sasl.password: {{first: {secret}}}
        """,
    "password dedented to a cluster": """\
        clusters:
          live:
            bootstrap.servers: 127.0.0.1:1
          sasl.password: {secret}
        """,
    "no bootstrap.servers": """\
        clusters:
          live:
            sasl.password: {secret}
        """,
    "empty bootstrap.servers": """\
        clusters:
          live:
            bootstrap.servers: ""
            sasl.password: {secret}
        """,
}


@pytest.mark.parametrize("mistake", list(BROKEN))
def test_registry_mistakes_never_quote_a_secret(tmp_path: Path, mistake: str) -> None:
    reg = tmp_path / "clusters.yaml"
    reg.write_text(textwrap.dedent(BROKEN[mistake]).format(secret=SECRET))
    reg.chmod(0o600)
    runs = {}
    for fmt in ([], ["-json"]):
        r = run_cli("cluster", "list", "-clusters", reg, *fmt)
        assert r.code != 0, (mistake, r)
        assert str(reg) in r.stdout + r.stderr, r  # the error names the file, not what is in it
        runs[f"{mistake} {fmt}"] = r.stdout + r.stderr
    assert_clean(runs)


# -- clusters that do not answer, or refuse us: errors, and gateway logs at debug level ---------------
def test_unreachable_and_refusing_clusters(env: Env) -> None:
    logs = {name: env.tmp / f"gateway-{name}.log" for name in ("live", "dead", "userinfo")}
    gateways = {}
    for name, path in logs.items():
        with path.open("w") as log:
            gateways[name] = subprocess.Popen(
                [STREAMREPL_BIN, "gateway", "start", "-cluster", name, "-id", f"gw-{name}", "-loglevel", "debug"],
                env=proc_env(env),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
    slow: list[tuple[list[str], str]] = [
        (["cluster", "list", "-timeout", "3"], ""),
        (["cluster", "list", "-timeout", "3", "-json"], ""),
        (["stream", "info", "-path", "/dead/orders", "-json"], ""),
        (["stream", "create", "-path", "/dead/orders"], ""),
        (["stream", "info", "-path", "/userinfo/orders"], ""),
        (["stream", "info", "-path", "/userinfo/orders", "-json"], ""),
        (["stream", "list", "-cluster", "userinfo", "-json"], ""),
        (["produce", "-path", "/userinfo/orders:t", "-timeout", "5"], "one\n"),
        (["stream", "replica", "add", "-path", STREAM, "-replica", "/userinfo/orders"], ""),
        (["produce", "-path", "/dead/orders:t", "-timeout", "5"], "one\ntwo\n"),
        (["stream", "list", "-cluster", "sasl"], ""),
        (["consume", "-path", "/sasl/orders:clicks", "-count", "1", "-timeout", "3"], ""),
        (["stream", "info", "-path", "/oidc/orders"], ""),
        (["stream", "replica", "add", "-path", STREAM, "-replica", "/dead/orders"], ""),
        (["copystream", "-src", STREAM, "-dst", "/dead/orders"], ""),
        (["diffstreams", "-src", STREAM, "-dst", "/oidc/orders", "-json"], ""),
    ]
    for kind in userinfo_kinds(0):
        slow += [
            (["stream", "list", "-cluster", f"userinfo-{kind}"], ""),
            (["stream", "list", "-cluster", f"userinfo-{kind}", "-json"], ""),
            (["stream", "info", "-path", f"/userinfo-{kind}/orders"], ""),
        ]
    try:
        with ThreadPoolExecutor(max_workers=len(slow)) as pool:
            runs = list(pool.map(lambda job: run_proc(env, job[0], stdin=job[1]), slow))
        # The gateway of the dead cluster logs its first failure after its 10 s wait for an answer.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(
            "does not answer" in logs[name].read_text() for name in ("dead", "userinfo")
        ):
            time.sleep(0.2)
    finally:
        for gw in gateways.values():
            gw.send_signal(signal.SIGTERM)
        codes = {name: gw.wait(timeout=60) for name, gw in gateways.items()}
    outputs: dict[str, str] = {}
    for (args, _), r in zip(slow, runs, strict=True):
        outputs[" ".join(args)] = r.stdout + r.stderr
        if args[:2] != ["cluster", "list"]:
            assert r.code != 0, (args, r)
            assert "Traceback" not in r.stderr, r.stderr
    gateway_logs = {f"gateway {name} log": path.read_text() for name, path in logs.items()}
    outputs.update(gateway_logs)
    assert_clean(outputs)
    # The commands did meet the clusters they were meant to: the live one answers, the others not.
    [listing] = [r for (args, _), r in zip(slow, runs, strict=True) if args[-1] == "-json" and args[0] == "cluster"]
    answers = {row["cluster"]: row["answers"] for row in listing.data()}
    assert answers == {
        "live": True,
        "dead": False,
        "userinfo": False,
        "sasl": False,
        "oidc": False,
        **{f"userinfo-{kind}": False for kind in userinfo_kinds(0)},
    }
    shown = {row["cluster"]: row["bootstrap.servers"] for row in listing.data()}
    assert shown["userinfo-many"].startswith("127.0.0.1:") and "operator:********@127.0.0.1:" in shown["userinfo-many"]
    for kind in userinfo_kinds(0):
        assert "(operator:********@127.0.0.1:" in outputs[f"stream list -cluster userinfo-{kind}"] or kind == "many"
        assert "does not answer" in outputs[f"stream list -cluster userinfo-{kind} -json"]
    assert "does not answer" in outputs["stream info -path /dead/orders -json"]
    assert "(operator:********@127.0.0.1:" in outputs["stream info -path /userinfo/orders -json"]
    assert "gateway gw-live started for cluster live" in gateway_logs["gateway live log"]
    assert "acquired /live/orders-replica:clicks" in gateway_logs["gateway live log"]
    assert "does not answer" in gateway_logs["gateway dead log"]
    assert "(operator:********@127.0.0.1:" in gateway_logs["gateway userinfo log"]
    assert codes == {"live": 0, "dead": 0, "userinfo": 0}, gateway_logs


# -- every registry property reaches the clients of Spark tasks --------------------------------------
class FakeRDD:
    """What the jobs ask of Spark, run in this process: each element is one partition (one task)."""

    tasks_running = False

    def __init__(self, elements: list[Any]):
        self.elements = elements
        self.task: Any = None

    def mapPartitions(self, task: Any) -> FakeRDD:  # noqa: N802 - Spark's name
        self.task = task
        return self

    def collect(self) -> list[Any]:
        FakeRDD.tasks_running = True
        try:
            return [row for element in self.elements for row in self.task(iter([element]))]
        finally:
            FakeRDD.tasks_running = False


class FakeSparkContext:
    defaultParallelism = 2  # noqa: N815 - Spark's name

    def parallelize(self, elements: list[Any], _slices: int) -> FakeRDD:
        return FakeRDD(list(elements))

    def cancelAllJobs(self) -> None:  # noqa: N802 - Spark's name
        pass


@pytest.fixture
def task_clients(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, dict[str, str]]]:
    """(kind, cluster, properties) of every Kafka client a task opens; Spark replaced by FakeRDD."""
    from types import SimpleNamespace

    from streamrepl import kafka
    from streamrepl.bulk import spark as job

    seen: list[tuple[str, str, dict[str, str]]] = []

    def recording(kind: str, real: Any) -> Any:
        def make(cluster: Any, *args: Any, **kwargs: Any) -> Any:
            if FakeRDD.tasks_running:
                seen.append((kind, cluster.name, dict(cluster.properties)))
            return real(cluster, *args, **kwargs)

        return make

    monkeypatch.setattr(kafka, "consumer", recording("consumer", kafka.consumer))
    monkeypatch.setattr(kafka, "producer", recording("producer", kafka.producer))
    spark = SimpleNamespace(sparkContext=FakeSparkContext())
    monkeypatch.setattr(job, "start_spark", lambda *a, **k: job.SparkHandle(spark, 0.0, owned=False))
    monkeypatch.setattr(job, "run_job", lambda sc, make, on_tick=None, tick=0.5: make().collect())
    return seen


def test_copystream_and_diffstreams_tasks_get_every_cluster_property(
    env: Env, task_clients: list[tuple[str, str, dict[str, str]]]
) -> None:
    """The tasks rebuild each cluster from the job's spec: TLS and SASL settings, not only the servers."""
    from streamrepl import registry
    from streamrepl.bulk import copystream, diffstreams

    reg = registry.load(str(env.reg))
    live = reg.get("live").properties
    assert sum(TOKEN in v for v in live.values()) == 3

    copied = copystream.copystream(reg, STREAM, "/live/orders-inprocess", mapreduce=True, progress=False)
    assert copied.complete and copied.records == 20, copied
    assert {kind for kind, _, _ in task_clients} == {"consumer", "producer"}
    assert all(props == live for _, _, props in task_clients), task_clients

    task_clients.clear()
    diff = diffstreams.diffstreams(reg, STREAM, "/live/orders-inprocess", mapreduce=True, progress=False)
    assert diff.match, diff.rows
    assert len(task_clients) == 2 * diff.partitions
    assert all(props == live for _, _, props in task_clients), task_clients


def test_spark_source_slices_carry_every_cluster_property(
    env: Env, task_clients: list[tuple[str, str, dict[str, str]]]
) -> None:
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    from streamrepl import registry
    from streamrepl.bulk.spark_source import StreamreplReader

    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    schema = StructType(
        [
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("timestamp", TimestampType()),
            StructField("timestampType", IntegerType()),
            StructField("headers", ArrayType(header)),
        ]
    )
    live = registry.load(str(env.reg)).get("live").properties
    reader = StreamreplReader({"path": STREAM, "clusters": str(env.reg)}, schema)
    slices = reader.partitions()
    assert len(slices) == 2
    rows = 0
    for s in slices:
        assert s.props == live  # type: ignore[attr-defined]
        assert TOKEN not in repr(s)
        FakeRDD.tasks_running = True
        try:
            rows += sum(batch.num_rows for batch in reader.read(s))
        finally:
            FakeRDD.tasks_running = False
    assert rows == 20
    assert [kind for kind, _, _ in task_clients] == ["consumer", "consumer"]
    assert all(props == live for _, _, props in task_clients)


# -- a Spark job with secrets in both clusters' properties --------------------------------------------
@pytest.mark.spark
def test_copystream_on_spark(env: Env) -> None:
    tmpdir = env.tmp / "spark-tmp"
    tmpdir.mkdir()
    # The JVM's log is removed when a run ends; kept here, so that what Spark wrote is searched too.
    copy = run_proc(
        env,
        ["copystream", "-src", STREAM, "-dst", "/live/orders-copy", "-mapreduce", "true"],
        timeout=300,
        TMPDIR=str(tmpdir),
        STREAMREPL_KEEP_SPARK_LOG="1",
    )
    assert copy.code == 0, copy
    assert "copied 20 records" in copy.stdout, copy
    files = {str(p): p.read_text(errors="replace") for p in tmpdir.rglob("*") if p.is_file()}
    assert any("streamrepl-spark-" in name for name in files), sorted(files)  # the JVM's log
    assert_clean({"copystream": copy.stdout + copy.stderr, **files})


def test_copystream_and_diffstreams_in_process(env: Env) -> None:
    """The same jobs run in this process (small): their output has no secret either."""
    copy = run_proc(env, ["copystream", "-src", STREAM, "-dst", "/live/orders-threads"], timeout=120)
    assert copy.code == 0 and "copied 20 records" in copy.stdout and "in-process" in copy.stdout, copy
    diff = run_proc(env, ["diffstreams", "-src", STREAM, "-dst", "/live/orders-threads", "-json"], timeout=120)
    assert diff.code == 0, diff
    assert_clean({"copystream": copy.stdout + copy.stderr, "diffstreams": diff.stdout + diff.stderr})
