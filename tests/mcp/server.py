"""An MCP tool server for the gateway's tests, on the official `mcp` package (Streamable HTTP).

Prints `listening http://127.0.0.1:<port>` once it serves; its MCP endpoint is `/mcp`. Every
tool call is recorded (tool, arguments, the `_meta` idempotency key, the `authorization` and
`x-client` headers it came with) and `GET /calls` answers
the record, so a test can tell what reached the server and what never did.
"""

import argparse
import asyncio
import os
import socket
import stat
import sys
import threading
from typing import Any

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

CALLS: list[dict[str, Any]] = []

server = MCPServer("gateway-test-tools")


def idempotency_key(ctx: Context) -> Any:
    meta = ctx.request_context.meta
    if meta is None:
        return None
    if isinstance(meta, dict):
        return meta.get("idempotencyKey")
    extra = getattr(meta, "model_extra", None) or {}
    return extra.get("idempotencyKey", getattr(meta, "idempotencyKey", None))


def header(ctx: Context, name: str) -> Any:
    request = ctx.request_context.request
    headers = getattr(request, "headers", None)
    return headers.get(name) if headers is not None else None


def record(ctx: Context, tool: str, arguments: dict[str, Any]) -> None:
    CALLS.append(
        {
            "tool": tool,
            "arguments": arguments,
            "idempotencyKey": idempotency_key(ctx),
            "authorization": header(ctx, "authorization"),
            "xClient": header(ctx, "x-client"),
        }
    )


@server.tool(description="Adds two whole numbers.")
def add(a: int, b: int, ctx: Context) -> int:
    record(ctx, "add", {"a": a, "b": b})
    return a + b


@server.tool(description="Charges a card; the effect a person approves.")
def charge(amount: int, currency: str, ctx: Context) -> str:
    record(ctx, "charge", {"amount": amount, "currency": currency})
    return f"charged {amount} {currency}"


# Idempotency keys `slow_charge` acted on, and its answer for each.
CHARGED: dict[str, str] = {}


@server.tool(description="Charges a card, once per idempotency key; its very first call never answers.")
async def slow_charge(amount: int, ctx: Context) -> str:
    key = idempotency_key(ctx)
    record(ctx, "slow_charge", {"amount": amount})
    CALLS[-1]["acted"] = key not in CHARGED
    first_ever = len([c for c in CALLS if c["tool"] == "slow_charge"]) == 1
    if key not in CHARGED:
        CHARGED[key] = f"charged {amount} EUR"
    if first_ever:
        # A slow tool: the gateway instance making this call is killed while it waits.
        await anyio.sleep(3600)
    return CHARGED[key]


@server.tool(description="Looks an account up with the caller's token, and (carelessly) says which token.")
def lookup(account: str, token: str, ctx: Context) -> str:
    record(ctx, "lookup", {"account": account, "token": token})
    return f"account {account} looked up with token {token}"


@server.tool(description="A tool no allow-list names.")
def wipe(ctx: Context) -> str:
    record(ctx, "wipe", {})
    return "wiped"


async def calls(_: Request) -> JSONResponse:
    return JSONResponse(CALLS)


def watch_stdin(uv: uvicorn.Server) -> None:
    # A parent that dies without signalling closes our stdin. Only a pipe or socket is watched.
    mode = os.fstat(0).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)):
        return

    def wait_for_eof() -> None:
        while os.read(0, 4096):
            pass
        uv.should_exit = True

    threading.Thread(target=wait_for_eof, daemon=True).start()


async def main(port: int) -> None:
    app = server.streamable_http_app(host="127.0.0.1")
    app.router.routes.append(Route("/calls", calls, methods=["GET"]))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    config = uvicorn.Config(app, http="h11", log_level="warning", access_log=False, timeout_graceful_shutdown=1)
    uv = uvicorn.Server(config)
    watch_stdin(uv)
    serving = asyncio.create_task(uv.serve(sockets=[sock]))
    while not uv.started:
        if serving.done():
            await serving
            sys.exit(1)
        await asyncio.sleep(0.01)
    print(f"listening http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
    await serving


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    asyncio.run(main(parser.parse_args().port))
