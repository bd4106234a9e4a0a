"""`gateway start` is one command run two ways: by a user (its supervisor) and by that supervisor for each worker, with
the command line worker_argv builds. The options are declared once (the decorators) and carried whole
(StartOptions): a worker's command line is made from the command's own options, so that an option added to
`gateway start` reaches the workers without a second list to keep in step."""

from __future__ import annotations

import dataclasses

import click

from streamrepl.commands.gateway import SUPERVISOR_ONLY, StartOptions, start_cmd, worker_argv
from streamrepl.replication.workers import Worker

#: added to every command by handles_errors, not gateway start's own
COMMON = {"as_json", "noheader", "long", "clusters"}


def _own_options() -> set[str]:
    return {str(p.name) for p in start_cmd.params if isinstance(p, click.Option)} - COMMON


def test_start_options_are_the_commands_options() -> None:
    assert {f.name for f in dataclasses.fields(StartOptions)} == _own_options()


def _parse(argv: list[str]) -> dict[str, object]:
    assert argv[1:5] == ["-m", "streamrepl", "gateway", "start"], argv
    ctx = start_cmd.make_context("start", argv[5:])
    return dict(ctx.params)


def test_a_worker_gets_every_option_of_its_supervisor_but_the_supervisors_own() -> None:
    given = StartOptions(
        cluster="newyork",
        gateway_id="gw",
        loglevel="DEBUG",
        metricsport=9100,
        metricsaddr="127.0.0.2",
        workers=3,
        supervise=True,
        parent=None,
        restarts=0,
        lastexit="",
        exitfd=None,
    )
    w = Worker(k=2, id="gw.w2", restarts=4, last_exit="signal 9 (SIGKILL)")
    got = _parse(worker_argv(given, w, 17, "/tmp/clusters.yaml"))
    assert got["clusters"] == "/tmp/clusters.yaml"
    expected = {
        **dataclasses.asdict(given),
        "gateway_id": "gw.w2",
        "parent": "gw",
        "metricsport": 9101,
        "restarts": 4,
        "lastexit": "signal 9 (SIGKILL)",
        "exitfd": 17,
        # the supervisor's own: a worker is one process, run in the foreground
        "workers": 1,
        "supervise": False,
    }
    assert {k: got[k] for k in _own_options()} == expected
    assert set(SUPERVISOR_ONLY) < _own_options()


def test_a_single_worker_runs_under_the_gateways_own_id_with_no_parent_and_no_registry_named() -> None:
    given = StartOptions("newyork", "gw", "INFO", None, "0.0.0.0", 1, True, None, 0, "", None)
    argv = worker_argv(given, Worker(k=1, id="gw"), 5, None)
    got = _parse(argv)
    assert (got["gateway_id"], got["parent"], got["metricsport"], got["clusters"]) == ("gw", None, None, None)
    assert "-clusters" not in argv and "-parent" not in argv
