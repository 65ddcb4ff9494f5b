"""Serves a test's ASGI app the way every Python test server here is served (the Python twin of
listen.mjs): on 127.0.0.1 at `--port` (0: any free port), printing `listening http://127.0.0.1:<port>`
once it accepts connections, and ending when the parent that started it closes its stdin.
"""

import argparse
import asyncio
import os
import socket
import stat
import sys
import threading
from typing import Any

import uvicorn


def watch_stdin(server: uvicorn.Server) -> None:
    # A parent that dies without signalling closes our stdin. Only a pipe or socket is watched:
    # a terminal or /dev/null as stdin (a shell, CI) must not end the server at once.
    mode = os.fstat(0).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        return

    def wait_for_eof() -> None:
        while os.read(0, 4096):
            pass
        server.should_exit = True

    threading.Thread(target=wait_for_eof, daemon=True).start()


async def serve(app: Any, port: int, lifespan: str = "off") -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    config = uvicorn.Config(
        app,
        http="h11",
        lifespan=lifespan,
        log_level="warning",
        access_log=False,
        # Open streams (a slow run) must not hold shutdown up.
        timeout_graceful_shutdown=1,
    )
    server = uvicorn.Server(config)
    watch_stdin(server)
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        if serving.done():
            await serving  # surfaces a start-up error
            sys.exit(1)
        await asyncio.sleep(0.01)
    print(f"listening http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    # The parent reads that one line and may close its end: anything a framework prints later
    # (CrewAI prints a panel per flow run) would break the pipe and end the server.
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    await serving


def port_from_args(description: str) -> int:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--port", type=int, default=0)
    return parser.parse_args().port
