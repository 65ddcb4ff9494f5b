"""An MCP tool server for the gateway's tests, on the official `mcp` package (Streamable HTTP).

Prints `listening http://127.0.0.1:<port>` once it serves; its MCP endpoint is `/mcp`. Every
tool call is recorded (tool, arguments, the `_meta` idempotency key, the `authorization` and
`x-client` headers it came with) and `GET /calls` answers
the record, so a test can tell what reached the server and what never did. Every POST to `/mcp`
is recorded too (its JSON-RPC method; its `MCP-Protocol-Version`, `Mcp-Session-Id`,
`Mcp-Method` and `Mcp-Name` headers),
answered by `GET /requests`, so a test can tell how the gateway spoke.

`--revision` picks what the server speaks: `both` (the package's default: 2026-07-28
single-exchange requests and the earlier `initialize` handshake revisions), `2026-07-28` (that
revision only: a request of an earlier revision is refused as unsupported) or `2025-11-25` (the
handshake revisions only, as a server made before 2026-07-28: the newer revision's header is not
read, so `server/discover` lands on the session path and is refused for want of a session).
`--tools-ttl-ms` makes `tools/list` results say how long they stay fresh (`ttlMs`, 2026-07-28).
`POST /tools` adds the tool `multiply`, so a test can change the listed tools.
"""

import argparse
import asyncio
import json
from typing import Any

import anyio
from mcp.server.caching import CacheHint
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.utilities.types import Image
from mcp_types.jsonrpc import UNSUPPORTED_PROTOCOL_VERSION
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
import sys as _sys
from pathlib import Path as _Path

_sys.path.insert(0, str(_Path(__file__).resolve().parents[1] / "support"))
import listen  # noqa: E402  (tests/support/listen.py, shared by the Python test servers)


CALLS: list[dict[str, Any]] = []
# Every POST to the MCP endpoint: {method, protocolVersion, sessionId}.
REQUESTS: list[dict[str, Any]] = []

ARGS = argparse.ArgumentParser(description=__doc__.splitlines()[0])
ARGS.add_argument("--port", type=int, default=0)
ARGS.add_argument("--revision", choices=["both", "2026-07-28", "2025-11-25"], default="both")
ARGS.add_argument("--tools-ttl-ms", type=int, default=None)
OPTIONS = ARGS.parse_args()

HINTS = {"tools/list": CacheHint(ttl_ms=OPTIONS.tools_ttl_ms)} if OPTIONS.tools_ttl_ms is not None else None
server = MCPServer("gateway-test-tools", cache_hints=HINTS)


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


@server.tool(description="Looks something up and never answers: a call a cancel must stop.")
async def stall(ctx: Context) -> str:
    record(ctx, "stall", {})
    entry = CALLS[-1]
    try:
        await anyio.sleep(3600)
    except anyio.get_cancelled_exc_class():
        # The client cancelled the request (`notifications/cancelled`) or went away.
        entry["cancelled"] = True
        raise
    return "never"


@server.tool(description="Looks an account up with the caller's token, and (carelessly) says which token.")
def lookup(account: str, token: str, ctx: Context) -> str:
    record(ctx, "lookup", {"account": account, "token": token})
    return f"account {account} looked up with token {token}"


@server.tool(description="A tool no allow-list names.")
def wipe(ctx: Context) -> str:
    record(ctx, "wipe", {})
    return "wiped"


# An MCP App (the MCP Apps extension): `weather` names its UI in `_meta.ui.resourceUri`; the UI
# is a `ui://` resource of the App media type. Its page speaks the MCP Apps host protocol
# (JSON-RPC over postMessage to its host): `ui/initialize`, then it shows the tool results its
# host sends (`ui/notifications/tool-result`) and its button calls `umbrella` (`tools/call`) for
# the city its host said the tool ran for (`ui/notifications/tool-input`).
APP_URI = "ui://weather/view.html"
APP_HTML = """<!doctype html><html><body><h1 id="title">Weather</h1>
<button id="order">Send an umbrella</button><p id="shown"></p><p id="answered"></p>
<script>
let next = 1;
let city = "Oslo";
const waiting = {};
function ask(method, params) {
  const id = next++;
  parent.postMessage({ jsonrpc: "2.0", id, method, params }, "*");
  return new Promise((resolve) => (waiting[id] = resolve));
}
const text = (result) => ((result && result.content) || []).map((c) => c.text || "").join(" ");
addEventListener("message", ({ data }) => {
  if (!data || data.jsonrpc !== "2.0") return;
  if (data.id in waiting && !data.method) return waiting[data.id](data.result);
  if (data.method === "ui/notifications/tool-input") city = data.params.arguments.city || city;
  if (data.method === "ui/notifications/tool-result") document.getElementById("shown").textContent = text(data.params);
});
ask("ui/initialize", { protocolVersion: "2026-01-26", appInfo: { name: "weather", version: "1.0.0" }, appCapabilities: {} })
  .then(() => parent.postMessage({ jsonrpc: "2.0", method: "ui/notifications/initialized", params: {} }, "*"));
document.getElementById("order").onclick = async () => {
  const result = await ask("tools/call", { name: "umbrella", arguments: { city } });
  document.getElementById("answered").textContent = "answered: " + (text(result) || "nothing yet");
};
</script></body></html>"""


@server.resource(APP_URI, name="weather-view", mime_type="text/html;profile=mcp-app")
def weather_view() -> str:
    return APP_HTML


@server.tool(description="Tells the weather in a city; shown in its App.", meta={"ui": {"resourceUri": APP_URI}})
def weather(city: str, ctx: Context) -> str:
    record(ctx, "weather", {"city": city})
    return f"sunny in {city}"


@server.tool(description="Sends an umbrella to a city; an effect a person approves, shown in the weather App.",
             meta={"ui": {"resourceUri": APP_URI}})
def umbrella(city: str, ctx: Context) -> str:
    record(ctx, "umbrella", {"city": city})
    return f"an umbrella is on its way to {city}"


# A 1x1 PNG, red.
PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c63f8cfc0f01f0005000201e2219bc5"
    "0000000049454e44ae426082"
)


@server.tool(description="Draws a chart; answers with a picture.")
def chart(title: str, ctx: Context) -> list[str | Image]:
    record(ctx, "chart", {"title": title})
    return [f"chart: {title}", Image(data=PIXEL, format="png")]


def multiply(a: int, b: int, ctx: Context) -> int:
    record(ctx, "multiply", {"a": a, "b": b})
    return a * b


async def calls(_: Request) -> JSONResponse:
    return JSONResponse(CALLS)


async def requests(_: Request) -> JSONResponse:
    return JSONResponse(REQUESTS)


async def add_multiply(_: Request) -> JSONResponse:
    server.add_tool(multiply, description="Multiplies two whole numbers.")
    return JSONResponse({"added": "multiply"})


def unsupported(request_id: Any, requested: str | None) -> bytes:
    error = {
        "code": UNSUPPORTED_PROTOCOL_VERSION,
        "message": "Unsupported protocol version",
        "data": {"supported": list(MODERN_PROTOCOL_VERSIONS), "requested": requested},
    }
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "error": error}).encode()


def recording(app: Any) -> Any:
    """The app behind a door that records each MCP request and keeps the revisions out that
    `--revision` leaves out."""

    async def door(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] != "/mcp":
            return await app(scope, receive, send)
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        version = headers.get("mcp-protocol-version")
        body = b""
        if scope["method"] == "POST":
            while True:
                message = await receive()
                body += message.get("body", b"")
                if not message.get("more_body"):
                    break
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        method = parsed.get("method") if isinstance(parsed, dict) else None
        REQUESTS.append(
            {
                "httpMethod": scope["method"],
                "method": method,
                "protocolVersion": version,
                "sessionId": headers.get("mcp-session-id"),
                "mcpMethod": headers.get("mcp-method"),
                "mcpName": headers.get("mcp-name"),
            }
        )
        if OPTIONS.revision == "2026-07-28" and version not in MODERN_PROTOCOL_VERSIONS:
            # An `initialize` (no header yet) or any request of an earlier revision.
            request_id = parsed.get("id") if isinstance(parsed, dict) else None
            await send({"type": "http.response.start", "status": 400,
                        "headers": [(b"content-type", b"application/json")]})
            return await send({"type": "http.response.body", "body": unsupported(request_id, version)})
        if OPTIONS.revision == "2025-11-25" and version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            # A server made before 2026-07-28 does not route by the newer revision's header.
            scope = dict(scope)
            scope["headers"] = [(k, v) for k, v in scope["headers"] if k != b"mcp-protocol-version"]
        replayed = False

        async def replay() -> Any:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await app(scope, replay, send)

    return door


async def main(port: int) -> None:
    app = server.streamable_http_app(host="127.0.0.1")
    app.router.routes.append(Route("/calls", calls, methods=["GET"]))
    app.router.routes.append(Route("/requests", requests, methods=["GET"]))
    app.router.routes.append(Route("/tools", add_multiply, methods=["POST"]))
    # The MCP app's session manager runs in its lifespan (which the door passes through).
    await listen.serve(recording(app), port, lifespan="auto")


if __name__ == "__main__":
    asyncio.run(main(OPTIONS.port))
