#!/usr/bin/env node
// The chat app's backend: serves the page in public/ and passes its calls through to
// agui-gateway, adding the app's credential on the way, so the browser never holds it.
//
//   AGUI_GATEWAY_URL=http://127.0.0.1:8080 AGUI_APP_TOKEN=… PORT=3000 node server.mjs
//
// Routes (all same-origin for the page, so the gateway needs no CORS entry):
//   POST /api/agents/:agent              -> POST /v1/agui/agents/:agent?tenant=…  (an SSE stream, piped)
//   POST /api/agents/:agent/connect      -> POST /v1/agui/agents/:agent/connect?tenant=…  (the thread's stream)
//   GET  /api/agents                     -> GET  /v1/agents?tenant=…
//   GET  /api/threads/:thread            -> GET  /v1/threads/:thread?tenant=…
//   GET  /api/threads/:thread/messages   -> GET  /v1/threads/:thread/messages?tenant=…  (`?turn=` passed on)
//   GET  /…                              -> a file of public/
//
// Only node: built-ins and the global fetch: nothing to install.
import http from "node:http";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const publicDir = path.join(here, "public");

const gatewayUrl = (process.env.AGUI_GATEWAY_URL || "http://127.0.0.1:8080").replace(/\/+$/, "");
const tenant = process.env.AGUI_TENANT || "default";
// A gateway app token (`agui-gateway token mint …`) or a tenant API key. Unset: the gateway must
// be in local development mode, which serves anonymous callers from loopback.
const appToken = process.env.AGUI_APP_TOKEN || "";
const host = process.env.HOST || "127.0.0.1";
const port = Number(process.env.PORT ?? 3000);

// The gateway refuses bodies over 4 MiB anyway; refusing here keeps a stray upload from being
// buffered whole in this process first.
const MAX_BODY_BYTES = 4 * 1024 * 1024;
// Names and ids as the gateway accepts them (docs/api.md "Ids"), checked before they go into
// a URL path.
const AGENT_NAME = /^[A-Za-z0-9_-]{1,64}$/;
const THREAD_ID = /^[A-Za-z0-9._:@-]{1,200}$/;

const CONTENT_TYPES = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".ico": "image/x-icon",
};

function sendJson(res, status, value) {
  res.writeHead(status, { "content-type": "application/json", "cache-control": "no-store" });
  res.end(JSON.stringify(value));
}

function sendError(res, status, code, message) {
  sendJson(res, status, { error: { code, message } });
}

async function readBody(req) {
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) return null;
    chunks.push(chunk);
  }
  return Buffer.concat(chunks);
}

/**
 * Calls the gateway and writes its answer to `res` as it arrives: the status, the content type,
 * then each chunk of the body the moment it comes. A run's stream is never collected first: the
 * page shows text while the agent is still writing it.
 */
async function passThrough(req, res, { method, gatewayPath, body }) {
  const headers = { accept: req.headers.accept || "application/json" };
  if (appToken) headers.authorization = `Bearer ${appToken}`;
  if (body) headers["content-type"] = req.headers["content-type"] || "application/json";
  // The browser's reconnect names the last event it saw; the gateway continues right after it.
  const lastEventId = req.headers["last-event-id"];
  if (lastEventId) headers["last-event-id"] = lastEventId;

  // When the browser goes away, stop reading the gateway's stream. The turn itself runs on in
  // the gateway: closing a stream never cancels a turn.
  const abort = new AbortController();
  res.on("close", () => abort.abort());

  const separator = gatewayPath.includes("?") ? "&" : "?";
  const url = `${gatewayUrl}${gatewayPath}${separator}tenant=${encodeURIComponent(tenant)}`;
  let upstream;
  try {
    upstream = await fetch(url, { method, headers, body, signal: abort.signal });
  } catch (error) {
    if (abort.signal.aborted) return;
    console.error(`${method} ${gatewayPath}: the gateway is unreachable (${error.cause?.code ?? error.cause?.message ?? error.message})`);
    sendError(res, 502, "gateway_unreachable", "the agent gateway cannot be reached");
    return;
  }
  console.log(`${method} ${gatewayPath} -> ${upstream.status}${lastEventId ? ` (after ${lastEventId})` : ""}`);

  res.writeHead(upstream.status, {
    "content-type": upstream.headers.get("content-type") || "application/octet-stream",
    "cache-control": "no-cache",
    // For a proxy in front of this backend (nginx and the like): do not hold SSE back either.
    "x-accel-buffering": "no",
  });
  // Send the head now: the browser's fetch resolves and starts reading before the first event.
  res.flushHeaders();
  if (!upstream.body) {
    res.end();
    return;
  }
  try {
    for await (const chunk of upstream.body) {
      if (!res.write(chunk)) {
        await new Promise((resolve) => {
          res.once("drain", resolve);
          res.once("close", resolve);
        });
      }
    }
    res.end();
  } catch {
    // The gateway's stream broke before its end (a restart, a dropped connection). Break the
    // browser's too instead of ending it cleanly: a cleanly ended stream without RUN_FINISHED
    // would look complete, while a broken one makes the page reconnect with Last-Event-ID.
    res.destroy();
  }
}

async function serveStatic(req, res, pathname, parts) {
  const relative = pathname === "/" ? "index.html" : parts.join("/");
  const file = path.resolve(publicDir, relative);
  const type = CONTENT_TYPES[path.extname(file)];
  if (!file.startsWith(publicDir + path.sep) || !type) {
    sendError(res, 404, "not_found", `no file ${pathname}`);
    return;
  }
  let content;
  try {
    content = await readFile(file);
  } catch {
    sendError(res, 404, "not_found", `no file ${pathname}`);
    return;
  }
  res.writeHead(200, {
    "content-type": type,
    "cache-control": "no-cache",
    // The page runs only its own files: a message text can never become a script.
    "content-security-policy": "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'",
    "x-content-type-options": "nosniff",
  });
  res.end(req.method === "HEAD" ? undefined : content);
}

async function handle(req, res) {
  const { pathname, searchParams } = new URL(req.url, "http://localhost");
  let parts;
  try {
    parts = pathname.split("/").filter(Boolean).map(decodeURIComponent);
  } catch {
    return sendError(res, 400, "bad_request", "the path is not valid percent-encoding");
  }

  if (parts[0] !== "api") {
    if (req.method !== "GET" && req.method !== "HEAD") return sendError(res, 405, "method_not_allowed", `${req.method} is not allowed on ${pathname}`);
    return serveStatic(req, res, pathname, parts);
  }

  // POST /api/agents/:agent: a run (new turn, reconnect or resume), answered with the SSE stream.
  if (parts[1] === "agents" && parts.length === 3) {
    if (req.method !== "POST") return sendError(res, 405, "method_not_allowed", "runs are POSTed");
    if (!AGENT_NAME.test(parts[2])) return sendError(res, 404, "not_found", "no such agent");
    const body = await readBody(req);
    if (body === null) return sendError(res, 413, "payload_too_large", "the request body is too large");
    return passThrough(req, res, { method: "POST", gatewayPath: `/v1/agui/agents/${parts[2]}`, body });
  }
  // POST /api/agents/:agent/connect: the thread's connect stream (a reloaded page, a second tab).
  if (parts[1] === "agents" && parts.length === 4 && parts[3] === "connect") {
    if (req.method !== "POST") return sendError(res, 405, "method_not_allowed", "connections are POSTed");
    if (!AGENT_NAME.test(parts[2])) return sendError(res, 404, "not_found", "no such agent");
    const body = await readBody(req);
    if (body === null) return sendError(res, 413, "payload_too_large", "the request body is too large");
    return passThrough(req, res, { method: "POST", gatewayPath: `/v1/agui/agents/${parts[2]}/connect`, body });
  }
  if (parts[1] === "agents" && parts.length === 2 && req.method === "GET") {
    return passThrough(req, res, { method: "GET", gatewayPath: "/v1/agents" });
  }
  // GET /api/threads/:thread[/messages]: the gateway's record, for a reloaded page.
  if (parts[1] === "threads" && (parts.length === 3 || (parts.length === 4 && parts[3] === "messages"))) {
    if (req.method !== "GET") return sendError(res, 405, "method_not_allowed", "threads are read with GET");
    if (!THREAD_ID.test(parts[2])) return sendError(res, 400, "bad_request", "not a thread id");
    // `?turn=`: the branch of the thread that ends at that turn (a "‹ ›" switch).
    const turn = searchParams.get("turn");
    if (turn !== null && !THREAD_ID.test(turn)) return sendError(res, 400, "bad_request", "not a turn id");
    const suffix = parts.length === 4 ? `/messages${turn ? `?turn=${encodeURIComponent(turn)}` : ""}` : "";
    return passThrough(req, res, { method: "GET", gatewayPath: `/v1/threads/${parts[2]}${suffix}` });
  }
  return sendError(res, 404, "not_found", `no route ${pathname}`);
}

const server = http.createServer((req, res) => {
  handle(req, res).catch((error) => {
    console.error(`${req.method} ${req.url}: ${error.stack ?? error}`);
    if (!res.headersSent) sendError(res, 500, "internal", "internal error");
    else res.destroy();
  });
});

server.listen(port, host, () => {
  const { address, port: bound } = server.address();
  console.log(`chat app listening on http://${address}:${bound} (gateway ${gatewayUrl}, tenant ${tenant}, ${appToken ? "with an app token" : "no token: local development mode"})`);
});

for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, () => {
    // Open streams would hold close() for as long as their turns run; end them now.
    server.closeAllConnections();
    server.close(() => process.exit(0));
  });
}
