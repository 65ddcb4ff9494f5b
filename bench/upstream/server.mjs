#!/usr/bin/env node
// server.mjs: the `upstream` scenario's AG-UI server (bench/src/scenarios/upstream.rs). A fast
// upstream on the official @ag-ui/encoder, read by agui-bench directly and through the gateway's
// `agui` agent, so the two can be compared.
//
//   node bench/upstream/server.mjs [--port N]
//
// Prints `listening http://127.0.0.1:<port>` once ready. Routes:
//   GET  /livez                 200
//   POST /agents/stream?events=N&rate=R&bytes=B
//        one run of N events: RUN_STARTED, TEXT_MESSAGE_START, N-4 TEXT_MESSAGE_CONTENT,
//        TEXT_MESSAGE_END, RUN_FINISHED. Delta k is ` t<micros> n<k> ` padded with `x` to B
//        characters: <micros> is the wall-clock microsecond it was encoded (the client's clock
//        on the same machine), k its index (so a client sees a lost, repeated or reordered
//        delta). R = 0: as fast as the socket takes them; R > 0: delta k is due R/s after the
//        first, each written alone when due.
//
// The parameters are in the URL, not the RunAgentInput, because the gateway's `agui` agent does
// not pass the client's forwardedProps upstream: each configured agent URL is one shape of run.
//
// The packages are those of tests/upstream/node (pinned in its package-lock.json; scripts/test
// installs them, or `npm ci --prefix tests/upstream/node`): one pinned encoder for the tests and
// the bench, nothing installed at run time.
import { createRequire } from "node:module";
import { serve } from "../../tests/support/listen.mjs";

const require = createRequire(new URL("../../tests/upstream/node/package.json", import.meta.url));
const { EventEncoder } = require("@ag-ui/encoder");
const { EventType } = require("@ag-ui/core");

// Writes in fast mode gather this many events: one socket write per event would make the
// upstream's syscalls, not the relay, the figure.
const BATCH = 64;

// A microsecond wall clock. performance.now() is monotonic with sub-microsecond resolution but
// its origin is fixed at start, and Date.now() has only milliseconds: at each run the monotonic
// clock is pinned to the instant Date.now() ticks to a new millisecond, so a clock step or slew
// since start (NTP) does not skew the stamps. The tick lies between two Date.now() calls; a
// pinning whose two calls were more than 10 µs apart (the process was preempted between them,
// which on a busy machine happens, and then the pin is off by milliseconds) is tried again, and
// after five such tries the previous offset stays.
let offsetMs = performance.timeOrigin;
function syncClock() {
  for (let attempt = 0; attempt < 5; attempt++) {
    let beforeLast = performance.now();
    const first = Date.now();
    let afterLast = performance.now();
    for (;;) {
      const before = performance.now();
      const now = Date.now();
      const after = performance.now();
      if (now !== first) {
        if (after - beforeLast <= 0.01) {
          offsetMs = now - (afterLast + before) / 2;
          return;
        }
        break;
      }
      beforeLast = before;
      afterLast = after;
    }
  }
}
const wallUs = () => Math.round((offsetMs + performance.now()) * 1000);

function delta(k, bytes) {
  const head = ` t${wallUs()} n${k} `;
  return head.length >= bytes ? head : head + "x".repeat(bytes - head.length);
}

function intParam(url, name, fallback) {
  const raw = url.searchParams.get(name);
  if (raw === null) return fallback;
  const value = Number(raw);
  return Number.isInteger(value) && value >= 0 ? value : NaN;
}

async function readBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return Buffer.concat(chunks).toString("utf8");
}

function sendJson(res, status, value) {
  const body = JSON.stringify(value);
  res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(body) });
  res.end(body);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

async function stream(req, res, url) {
  const events = intParam(url, "events", 1000);
  const rate = intParam(url, "rate", 0);
  const bytes = intParam(url, "bytes", 200);
  if (!(events >= 4) || Number.isNaN(rate) || Number.isNaN(bytes)) {
    return sendJson(res, 400, { error: "events (≥ 4), rate and bytes must be whole numbers" });
  }
  let input;
  try {
    input = JSON.parse(await readBody(req));
  } catch {
    return sendJson(res, 400, { error: "the body is not JSON" });
  }
  const { threadId, runId } = input;
  if (typeof threadId !== "string" || typeof runId !== "string") {
    return sendJson(res, 400, { error: "threadId and runId are required" });
  }
  const encoder = new EventEncoder({ accept: req.headers.accept });
  if (encoder.getContentType() !== "text/event-stream") {
    return sendJson(res, 406, { error: "this server answers text/event-stream only" });
  }
  res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache", Connection: "keep-alive" });
  res.socket?.setNoDelay(true);
  let gone = false;
  res.on("close", () => { gone = true; });
  const drained = () => new Promise((resolve) => {
    const done = () => { res.off("drain", done); res.off("close", done); resolve(); };
    res.on("drain", done);
    res.on("close", done);
  });
  // Returns false once the client is gone; waits for the socket when its buffer is full.
  const write = async (text) => {
    if (gone) return false;
    if (!res.write(text)) await drained();
    return !gone;
  };
  const encode = (event) => encoder.encode({ ...event, timestamp: Date.now() });
  syncClock();
  const messageId = `${runId}-text`;
  const deltas = events - 4;
  let head = encode({ type: EventType.RUN_STARTED, threadId, runId });
  head += encode({ type: EventType.TEXT_MESSAGE_START, messageId, role: "assistant" });
  if (!(await write(head))) return;
  if (rate === 0) {
    for (let k = 0; k < deltas; ) {
      let batch = "";
      const end = Math.min(deltas, k + BATCH);
      for (; k < end; k++) batch += encode({ type: EventType.TEXT_MESSAGE_CONTENT, messageId, delta: delta(k, bytes) });
      if (!(await write(batch))) return;
    }
  } else {
    const start = performance.now();
    const everyMs = 1000 / rate;
    for (let k = 0; k < deltas; k++) {
      const due = start + k * everyMs;
      const wait = due - performance.now();
      if (wait >= 1) await sleep(Math.floor(wait));
      if (!(await write(encode({ type: EventType.TEXT_MESSAGE_CONTENT, messageId, delta: delta(k, bytes) })))) return;
    }
  }
  let tail = encode({ type: EventType.TEXT_MESSAGE_END, messageId });
  tail += encode({ type: EventType.RUN_FINISHED, threadId, runId, outcome: { type: "success" } });
  if (await write(tail)) res.end();
}

async function handle(req, res) {
  const url = new URL(req.url, "http://upstream");
  if (req.method === "GET" && url.pathname === "/livez") return sendJson(res, 200, { ok: true });
  if (req.method === "POST" && url.pathname === "/agents/stream") return stream(req, res, url);
  return sendJson(res, 404, { error: `no route ${req.method} ${url.pathname}` });
}

serve(handle, "bench upstream",
  // The gateway keeps its connection to the upstream between runs; Node's 5 s default would
  // close it under a long paced run's neighbour and cost a reconnect in the measurement.
  { keepAliveTimeout: 120_000 });
