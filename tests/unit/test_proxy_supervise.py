"""`proxy start`'s supervision: a worker serves the bootstrap socket its supervisor keeps open, so that a worker
started again answers on the same port (and a client connecting between the two waits in the backlog); the worker's
command line is the supervisor's options, without the supervisor's own. The supervisor itself is the gateway's
(tests/unit/test_replication_workers.py); a worker SIGKILLed under load is tests/e2e/test_proxy_restart.py."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import struct

import click
import pytest
from click.testing import CliRunner
from support.proxy_fakes import OTHER_API, FakeBroker, metadata_answer, request, run

from streamrepl.commands.proxy import _worker_args
from streamrepl.proxy.run import listening_socket
from streamrepl.proxy.server import Address, Listen, Proxy, Upstream, read_frame, write_frame
from streamrepl.replication.workers import Supervisor, Worker


def test_workers_on_the_supervisors_socket_answer_on_the_same_port_one_after_the_other() -> None:
    kept = listening_socket(Address("127.0.0.1", 0))
    port = kept.getsockname()[1]

    async def scenario() -> None:
        broker = FakeBroker(1, metadata_answer([]))
        await broker.start()
        upstream = Upstream([Address("127.0.0.1", broker.port)], None)
        for n in range(1, 3):
            # Each worker gets its own copy of the descriptor, as a child process does; closing it leaves the port open.
            sock = socket.socket(fileno=os.dup(kept.fileno()))
            proxy = Proxy("c", upstream, Listen(Address("127.0.0.1", 0), sock=sock))
            await proxy.start()
            assert proxy.bootstrap_port == port
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            write_frame(writer, request(OTHER_API, 0, n))
            reply = await read_frame(reader)
            assert reply is not None and struct.unpack_from(">ii", reply) == (n, 1)
            writer.close()
            proxy.request_stop()
            await proxy.wait_stopped()
        # Between workers the port still takes connections (they wait in the backlog for the next worker).
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass

    try:
        run(scenario())
    finally:
        kept.close()


def test_the_worker_gets_the_options_given_but_not_the_supervisors() -> None:
    from streamrepl.commands.proxy import start_cmd

    seen: list[list[str]] = []

    @click.command(context_settings={"ignore_unknown_options": True})
    @click.pass_context
    def probe(ctx: click.Context) -> None:
        inner = start_cmd.make_context(
            "start",
            [
                "-cluster",
                "sf",
                "-listen",
                "127.0.0.1:9092",
                "-synctimeout",
                "1.5",
                "-json",
                "-supervise",
                "true",
                "-metricsport",
                "0",
            ],
            parent=ctx,
        )
        seen.append(_worker_args(inner))

    result = CliRunner().invoke(probe, [])
    assert result.exit_code == 0, result.output
    (args,) = seen
    assert args[args.index("-cluster") + 1] == "sf"
    assert args[args.index("-listen") + 1] == "127.0.0.1:9092"
    assert args[args.index("-synctimeout") + 1] == "1.5"
    assert args[args.index("-metricsport") + 1] == "0"
    assert "-json" in args
    assert not {"-supervise", "-restarts", "-lastexit", "-exitfd", "-listenfd"} & set(args)


def test_the_supervisor_says_proxy_in_its_log(caplog: pytest.LogCaptureFixture) -> None:
    class Dead:
        pid = 1

        def poll(self) -> int:
            return -9

        def send_signal(self, sig: int) -> None:
            pass

        def last_words(self) -> None:
            return None

    now = [0.0]
    started: list[Worker] = []
    sup = Supervisor("px", 1, lambda w: started.append(w) or Dead(), clock=lambda: now[0], kind="proxy")
    with caplog.at_level(logging.WARNING, logger="streamrepl.proxy"):
        sup._start(sup.workers[0])
        sup.step()
        now[0] += 10
        sup.step()
    assert "proxy px: worker px died (killed by SIGKILL)" in caplog.text
    assert len(started) == 2 and sup.workers[0].restarts == 1
