"""An MCP tool server for the gateway's tests, on the official `mcp` package (Streamable HTTP).

Prints `listening http://127.0.0.1:<port>` once it serves; its MCP endpoint is `/mcp`. Every
tool call is recorded (tool, arguments, the `_meta` idempotency key, the `authorization` and
`x-client` headers it came with) and `GET /calls` answers
the record, so a test can tell what reached the server and what never did.
"""

import asyncio
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1] / "support"))
import listen  # noqa: E402  (tests/support/listen.py, shared by the Python test servers)


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


async def main(port: int) -> None:
    app = server.streamable_http_app(host="127.0.0.1")
    app.router.routes.append(Route("/calls", calls, methods=["GET"]))
    # The MCP app's session manager runs in its lifespan.
    await listen.serve(app, port, lifespan="auto")


if __name__ == "__main__":
    asyncio.run(main(listen.port_from_args(__doc__.splitlines()[0])))
