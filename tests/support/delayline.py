"""A delay line: a TCP forwarder that holds every byte, in each direction, `delay` seconds before passing it on (a
slow WAN to a broker, as bench/delayline.c makes for the benchmarks, in Python for the tests). The delay is a plain
attribute that may be changed while it runs: it applies to bytes read from then on (bytes held keep their release
time, and the order is kept). Reading never waits for the release, so only latency is added. Its own thread and
event loop, so that synchronous tests use it as they like."""

from __future__ import annotations

import asyncio
import contextlib
import threading


class DelayLine:
    """Listens on loopback (`port`, a free one by default) and forwards each connection to `target_port`, each way
    `delay` seconds late."""

    CHUNK = 65536

    def __init__(self, target_port: int, delay: float = 0.0, port: int = 0):
        self.target_port = target_port
        #: seconds each byte is held, in each direction (a round trip adds twice this)
        self.delay = delay
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="delayline")
        self._thread.start()
        self._writers: set[asyncio.StreamWriter] = set()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._accepted, "127.0.0.1", port), self._loop
        ).result(10)
        self.port = int(self._server.sockets[0].getsockname()[1])

    async def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            writer.close()
            return
        self._writers |= {writer, up_writer}
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer), return_exceptions=True)
        finally:
            for w in (writer, up_writer):
                self._writers.discard(w)
                w.close()

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        held: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def release() -> None:
            while True:
                at, data = await held.get()
                if (wait := at - loop.time()) > 0:
                    await asyncio.sleep(wait)
                if not data:  # the reading side closed
                    dst.close()
                    return
                dst.write(data)
                await dst.drain()

        releasing = asyncio.create_task(release())
        last = 0.0
        try:
            while True:
                data = await src.read(self.CHUNK)
                last = max(last, loop.time() + self.delay)  # never before what was read earlier
                held.put_nowait((last, data))
                if not data:
                    break
            await releasing
        except OSError:
            pass  # a side went away: the connection ends
        finally:
            releasing.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await releasing

    def close(self) -> None:
        async def shut() -> None:
            self._server.close()
            for w in list(self._writers):
                w.close()
            # Their sockets closed, the connections' tasks end on their own (cancelled, asyncio logs an error).
            me = asyncio.current_task()
            tasks = [t for t in asyncio.all_tasks() if t is not me]
            if tasks:
                await asyncio.wait(tasks, timeout=5)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shut(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()

    def __enter__(self) -> DelayLine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
