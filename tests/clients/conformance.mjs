#!/usr/bin/env node
// conformance.mjs: the official AG-UI 1.0 client against every stream shape the gateway makes.
//
//   (cd tests/clients && npm ci) && node tests/clients/conformance.mjs [--https]
//
// --https: the gateway serves HTTPS with a certificate from a private CA made for the run
// (examples/tls/make-test-ca.sh), and every request goes through Node's fetch allowed to speak
// HTTP/2 (an undici agent with `allowH2`, trusting that CA). The run fails unless every
// connection negotiated h2 and the gateway logged its requests as HTTP/2.
//
// Starts one gateway (tests/clients/lib/gateway.mjs: AGUI_GATEWAY_BIN, else target/debug) with the
// agents of tests/fixtures/agents.toml and drives `@ag-ui/client` 1.0.0's HttpAgent through text,
// tool calls, state snapshots and deltas, steps, the AI label, a burst, declared frontend tools and a frontend tool
// call answered by the client, approval and question interrupts with resumes, delegated steps
// whose child asks for approval, cards, editable state, failing, refused and cancelled runs,
// pre-1.0 clients and reconnects with Last-Event-ID. Verification is always on in that client;
// on top of it every event, as the client received it and as it came over the wire, is validated
// with `@ag-ui/core/schemas`, and the wire itself is judged (LF framing, one `id:` per event, ids
// increasing, one terminal event last, the input's ids echoed). State is checked with a stock
// RFC 6902 library (fast-json-patch) against `GET /v1/threads/{thread}`. Streams joined from a
// dropped connection and its reconnect must equal the full replay byte for byte and pass the
// official client too.
//
// One line per scenario, then "N passed, N failed, N skipped"; exit 1 on any failure.
import { createRequire } from "node:module";
import { randomUUID } from "node:crypto";
import { isDeepStrictEqual } from "node:util";
import { readFileSync, mkdtempSync, rmSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { tmpdir } from "node:os";
import path from "node:path";
import { startGateway } from "./lib/gateway.mjs";
import { recordProtocols } from "./lib/protocols.mjs";

const require = createRequire(import.meta.url);
const { HttpAgent, buildResumeArray, isInterruptExpired } = require("@ag-ui/client");
const { EventSchema } = require("@ag-ui/core/schemas");
const proto = require("@ag-ui/proto");
const jsonpatch = require("fast-json-patch");

// The agents and tenants are the ones the Rust API tests use (tests/fixtures/agents.toml, which
// says what each is for); keepalive_secs = 1 so that a waiting turn's stream carries
// `: keepalive` comments, which the client must skip.
const CONFIG = `[limits]\nkeepalive_secs = 1\n\n${readFileSync(new URL("../fixtures/agents.toml", import.meta.url), "utf8")}`;

const TEXT = ["TEXT_MESSAGE_START", "TEXT_MESSAGE_CONTENT+", "TEXT_MESSAGE_END"];
const TOOL = ["TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_RESULT"];
const TERMINAL = new Set(["RUN_FINISHED", "RUN_ERROR"]);

let gateway;
const uid = (prefix) => `${prefix}-${randomUUID()}`;
const userMessage = (content) => ({ id: uid("u"), role: "user", content });
const agentUrl = (agent, tenant = "default") => `${gateway.url}/v1/agui/agents/${agent}?tenant=${tenant}`;
const short = (value, n = 300) => String(value).replace(/\s+/g, " ").slice(0, n);

// The client reports what it strips or drops with console.warn; any of that is a finding here.
const clientWarnings = [];
console.warn = (...args) => clientWarnings.push(args.map(String).join(" "));
const originalError = console.error;
console.error = (...args) => {
  if (!String(args[0]).startsWith("Agent execution failed")) originalError(...args);
};

async function getJson(path) {
  const res = await fetch(gateway.url + path);
  return { status: res.status, body: await res.json() };
}
const threadRecord = (threadId, tenant = "default") => getJson(`/v1/threads/${threadId}?tenant=${tenant}`);

// ---------- the wire ----------

/** One SSE block (text between blank lines) as the official client would read it, plus its id. */
function parseBlock(block) {
  const lines = block.split("\n");
  const data = lines.filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, ""));
  if (!data.length) return { comment: true, raw: `${block}\n\n`, lines };
  const ids = lines.filter((l) => l.startsWith("id:")).map((l) => l.slice(3).replace(/^ /, ""));
  let event;
  try {
    event = JSON.parse(data.join("\n"));
  } catch {
    event = undefined;
  }
  return { comment: false, raw: `${block}\n\n`, lines, ids, id: ids.at(-1), dataLines: data.length, event };
}

/** The text of a response body as it arrives, piece by piece (a character split between two
 * chunks is held until it is whole). */
async function* decodedPieces(body) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    yield decoder.decode(value, { stream: true });
  }
  const tail = decoder.decode();
  if (tail) yield tail;
}

/** The SSE blocks of a response body as they arrive, each parsed; `unread.text` holds what
 * came after the last blank line so far. */
async function* sseFrames(body, unread = { text: "" }) {
  for await (const piece of decodedPieces(body)) {
    unread.text += piece;
    let cut;
    while ((cut = unread.text.indexOf("\n\n")) >= 0) {
      const block = unread.text.slice(0, cut);
      unread.text = unread.text.slice(cut + 2);
      yield parseBlock(block);
    }
  }
}

function parseText(text) {
  const blocks = text.split("\n\n");
  const tail = blocks.pop(); // whatever follows the last blank line: empty for a whole stream
  return { frames: blocks.filter((b) => b.length).map(parseBlock), tail };
}

/** Keys an event carries that its schema does not describe (the client strips them, warning). */
function undescribedKeys(event) {
  const option = EventSchema.options.find((o) => (o.shape.type.def?.values ?? [o.shape.type.value])[0] === event.type);
  return option ? Object.keys(event).filter((k) => !Object.prototype.hasOwnProperty.call(option.shape, k)) : [];
}

function validateEvent(event, where, problems) {
  const parsed = EventSchema.safeParse(event);
  if (!parsed.success) {
    problems.push(`${where} ${event?.type}: ${parsed.error.issues.map((i) => `/${i.path.join("/")} ${i.message}`).join("; ")}`);
    return;
  }
  const extra = undescribedKeys(event);
  if (extra.length) problems.push(`${where} ${event.type}: undescribed properties ${extra.join(", ")}`);
}

// `<turn>.<seq>`, or `<turn>.<seq>.<part>` for the leading SSE events rendered from one logged
// event (docs/api.md): ids strictly increase, a part sorting before its event's own id.
const EVENT_ID = /^(t[0-9a-f]{24})\.([0-9]+)(?:\.([1-9][0-9]*))?$/;

/**
 * Judges SSE text as it came over the wire: LF only, every data frame one `id:` and one `data:`
 * line holding a schema-valid event, comments only `:` lines. Returns the event frames.
 */
function judgeWire(text, problems, label = "wire") {
  if (text.includes("\r")) problems.push(`${label}: CR in the stream (the client splits on LF only)`);
  const { frames, tail } = parseText(text);
  if (tail.length) problems.push(`${label}: the stream ends inside a frame: ${JSON.stringify(short(tail, 80))}`);
  const events = [];
  frames.forEach((frame, n) => {
    if (frame.comment) {
      if (!frame.lines.every((l) => l.startsWith(":"))) problems.push(`${label}: frame ${n} has no data and is not a comment: ${JSON.stringify(short(frame.raw, 80))}`);
      return;
    }
    const others = frame.lines.filter((l) => !l.startsWith("data:") && !l.startsWith("id:"));
    if (frame.ids.length !== 1) problems.push(`${label}: frame ${n} has ${frame.ids.length} id lines`);
    if (frame.dataLines !== 1) problems.push(`${label}: frame ${n} has ${frame.dataLines} data lines`);
    if (others.length) problems.push(`${label}: frame ${n} has other lines: ${JSON.stringify(others)}`);
    if (!frame.event || typeof frame.event !== "object" || Array.isArray(frame.event)) {
      problems.push(`${label}: frame ${n} is not a JSON object: ${JSON.stringify(short(frame.raw, 120))}`);
      return;
    }
    validateEvent(frame.event, `${label} #${events.length}`, problems);
    events.push(frame);
  });
  return events;
}

/**
 * The rules of a run a client cannot check by itself: it opens with RUN_STARTED echoing the
 * input (or is one refused RUN_ERROR with id 0), ends exactly once with its last event, and its
 * event ids name one turn and increase. Only a resume's opening events share an id (the
 * decision's, docs/api.md).
 */
function judgeRun(frames, input, problems) {
  const events = frames.map((f) => f.event);
  if (!events.length) {
    problems.push("no events");
    return;
  }
  const terminals = events.filter((e) => TERMINAL.has(e.type)).length;
  if (!TERMINAL.has(events.at(-1).type)) problems.push(`the run ends with ${events.at(-1).type}, not a terminal event`);
  if (terminals !== 1) problems.push(`${terminals} terminal events (a run ends exactly once)`);
  if (events.length === 1 && events[0].type === "RUN_ERROR") {
    if (frames[0].id !== "0") problems.push(`a refused run's RUN_ERROR has id ${frames[0].id}, docs say 0`);
    return;
  }
  if (events[0].type !== "RUN_STARTED") problems.push(`the first event is ${events[0].type}`);
  for (const e of events) {
    if ((e.type === "RUN_STARTED" || e.type === "RUN_FINISHED") && (e.threadId !== input.threadId || e.runId !== input.runId)) {
      problems.push(`${e.type} names ${e.threadId}/${e.runId}, the input ${input.threadId}/${input.runId}`);
    }
    if (e.type === "RUN_STARTED" && e.protocolVersion !== "1.0") problems.push(`RUN_STARTED.protocolVersion is ${JSON.stringify(e.protocolVersion)}`);
  }
  let turn;
  let last = -1;
  frames.forEach((frame, n) => {
    const m = EVENT_ID.exec(frame.id ?? "");
    if (!m) {
      problems.push(`event #${n} ${frame.event.type} has id ${JSON.stringify(frame.id)}, not <turn>.<seq>[.<part>]`);
      return;
    }
    if (turn && m[1] !== turn) problems.push(`event #${n} id ${frame.id} names another turn than ${turn}`);
    turn ??= m[1];
    // (seq, part) with the event's own id (no part) after its parts.
    const position = Number(m[2]) + (m[3] === undefined ? 0.999999 : Number(m[3]) / 1e6);
    if (position <= last) problems.push(`event #${n} ${frame.event.type} id ${frame.id} does not increase`);
    last = position;
  });
}

/** The event types in order, a run of TEXT_MESSAGE_CONTENT folded into "TEXT_MESSAGE_CONTENT+". */
function shape(events) {
  const out = [];
  for (const e of events) {
    if (e.type === "TEXT_MESSAGE_CONTENT" && out.at(-1) === "TEXT_MESSAGE_CONTENT+") continue;
    out.push(e.type === "TEXT_MESSAGE_CONTENT" ? "TEXT_MESSAGE_CONTENT+" : e.type);
  }
  return out;
}

function expectShape(events, expected, problems, label = "events") {
  const got = shape(events);
  if (!isDeepStrictEqual(got, expected)) problems.push(`${label}: expected ${expected.join(" ")}\n      got      ${got.join(" ")}`);
}

function expect(condition, message, problems) {
  if (!condition) problems.push(message);
}

function expectEqual(actual, expected, what, problems) {
  if (!isDeepStrictEqual(actual, expected)) problems.push(`${what}: expected ${short(JSON.stringify(expected), 400)}, got ${short(JSON.stringify(actual), 400)}`);
}

/** The text of each assistant message, in order of its start. */
function messageTexts(events) {
  const texts = new Map();
  for (const e of events) {
    if (e.type === "TEXT_MESSAGE_START") texts.set(e.messageId, "");
    if (e.type === "TEXT_MESSAGE_CONTENT") texts.set(e.messageId, (texts.get(e.messageId) ?? "") + e.delta);
  }
  return [...texts.values()];
}

// ---------- driving the official client ----------

/**
 * One runAgent() of the official client, with the response body teed off before the client
 * reads it so the wire can be judged too. `onWire(textSoFar)` is told each time more of that
 * copy arrives, so a test can wait for something on the wire (a keepalive comment) that the
 * client never reports as an event.
 */
async function clientRun(agent, params, { timeoutMs = 30_000, onEvent, onWire } = {}) {
  const wire = {};
  agent.fetch = async (url, init) => {
    wire.request = JSON.parse(init.body);
    const res = await fetch(url, init);
    if (res.status === 200) runsServed.push({ url, input: wire.request, headers: agent.headers });
    wire.status = res.status;
    wire.headers = res.headers;
    wire.body = readWireCopy(res.clone(), onWire);
    return res;
  };
  const run = { events: [], finished: undefined, runError: undefined, rejected: undefined };
  const subscriber = {
    onEvent: ({ event }) => {
      run.events.push(event);
      onEvent?.(event);
    },
    onRunFinishedEvent: (p) => {
      run.finished = p;
    },
    onRunErrorEvent: ({ event }) => {
      run.runError = event;
    },
  };
  const timer = setTimeout(() => agent.abortRun(), timeoutMs);
  try {
    await agent.runAgent(params, subscriber);
  } catch (e) {
    run.rejected = e;
  }
  clearTimeout(timer);
  run.wire = { ...wire, text: wire.body ? await wire.body : "" };
  run.input = wire.request;
  return run;
}

/** The whole text of a teed-off response body, told to `onWire` as it grows; "" if it fails. */
async function readWireCopy(copy, onWire) {
  if (!onWire) return copy.text().catch(() => "");
  let text = "";
  try {
    for await (const piece of decodedPieces(copy.body)) {
      text += piece;
      onWire(text);
    }
    return text;
  } catch {
    return "";
  }
}

/** Resolves with `promise`, or rejects saying `what` did not happen within `ms`. */
async function within(ms, promise, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([promise, timeout]);
  } finally {
    clearTimeout(timer);
  }
}

/** A first run that ended waiting on a person's decision about its tool call: the client's one
 * pending interrupt, which must name that call (`interrupt` is undefined when there is none). */
function waitsOnItsToolCall(run, events, agent, problems) {
  expect(run.finished?.outcome === "interrupt", `run 1 outcome ${run.finished?.outcome}`, problems);
  const pending = agent.pendingInterrupts ?? [];
  expect(pending.length === 1, `${pending.length} pending interrupts`, problems);
  const [interrupt] = pending;
  const call = events.find((e) => e.type === "TOOL_CALL_START");
  if (interrupt) expect(interrupt.reason === "tool_call" && interrupt.toolCallId === call?.toolCallId, `interrupt ${short(JSON.stringify(interrupt))} vs call ${call?.toolCallId}`, problems);
  return { pending, interrupt };
}

/** A client's first run on `threadId`, sending `text` to the agent `agentName`, judged as a run
 * the client should accept (`judgeClientRun`). */
async function judgedFirstRun(agentName, threadId, text, problems, label) {
  const agent = new HttpAgent({ url: agentUrl(agentName), threadId, initialMessages: [userMessage(text)] });
  const run = await clientRun(agent, { runId: uid("run") });
  return { agent, run, events: judgeClientRun(run, problems, label) };
}

/** The common verdict on a run the client should accept: returns the wire's event frames. */
function judgeClientRun(run, problems, label = "run") {
  if (run.rejected) problems.push(`${label}: @ag-ui/client rejected the stream: ${short(run.rejected?.message ?? run.rejected)}`);
  if (run.wire.status !== 200) problems.push(`${label}: HTTP ${run.wire.status} ${short(run.wire.text, 200)}`);
  const contentType = run.wire.headers?.get("content-type") ?? "";
  if (!/^text\/event-stream\b/.test(contentType)) problems.push(`${label}: Content-Type ${contentType}`);
  const frames = judgeWire(run.wire.text, problems, `${label} wire`);
  judgeRun(frames, run.input, problems);
  run.events.forEach((e, n) => validateEvent(e, `${label} client #${n}`, problems));
  if (run.events.length !== frames.length) {
    problems.push(`${label}: the client saw ${run.events.length} events, the wire carried ${frames.length}`);
  }
  return frames.map((f) => f.event);
}

/**
 * Puts recorded SSE text before the official client through its fetch hook, as
 * verify-recorded.mjs does: enforcement, chunk expansion and verifyEvents judge those bytes.
 */
async function verifyRecorded(text, input, problems, label) {
  const agent = new HttpAgent({
    url: "http://recorded.invalid/",
    threadId: input.threadId,
    initialMessages: input.messages,
    fetch: async () => new Response(text, { status: 200, headers: { "content-type": "text/event-stream" } }),
  });
  const seen = [];
  try {
    await agent.runAgent({ runId: input.runId }, { onEvent: ({ event }) => seen.push(event) });
  } catch (e) {
    problems.push(`${label}: @ag-ui/client rejected the recorded stream: ${short(e?.message ?? e)}`);
  }
  return { agent, seen };
}

// ---------- driving the wire by hand ----------

/**
 * POSTs a RunAgentInput and reads the SSE response frame by frame. `stopAfter` (a count of
 * events) or `stopWhen(frame, events)` drops the connection right after that event, as a client
 * whose network failed would.
 */
async function rawRun(agent, input, { lastEventId, stopAfter, stopWhen, tenant = "default", headers: extra = {} } = {}) {
  const controller = new AbortController();
  const headers = { ...extra, "content-type": "application/json", accept: "text/event-stream" };
  if (lastEventId !== undefined) headers["last-event-id"] = lastEventId;
  const res = await fetch(agentUrl(agent, tenant), { method: "POST", headers, body: JSON.stringify(input), signal: controller.signal });
  const out = { status: res.status, headers: res.headers, frames: [], comments: [], text: "", dropped: false };
  if (!/^text\/event-stream\b/.test(res.headers.get("content-type") ?? "")) {
    out.text = await res.text();
    try {
      out.json = JSON.parse(out.text);
    } catch {
      /* not JSON: left as text */
    }
    return out;
  }
  const unread = { text: "" };
  try {
    for await (const frame of sseFrames(res.body, unread)) {
      out.text += frame.raw;
      if (frame.comment) {
        out.comments.push(frame);
        continue;
      }
      out.frames.push(frame);
      if (out.frames.length === stopAfter || stopWhen?.(frame, out.frames)) {
        out.dropped = true;
        controller.abort();
        return out;
      }
    }
  } catch (e) {
    if (!controller.signal.aborted) throw e;
  }
  out.text += unread.text;
  return out;
}

/** The event frames of a stream as bytes, keepalive comments left out (their timing varies). */
const eventBytes = (frames) => frames.map((f) => f.raw).join("");

/** Follows a client's run again by hand: the replay must be the stream the client read, byte for
 * byte (keepalives aside). Returns the replay. */
async function replayOf(agent, run, problems, label) {
  const replay = await rawRun(agent, run.input);
  expect(eventBytes(replay.frames) === eventBytes(parseText(run.wire.text).frames.filter((f) => !f.comment)), `${label}: the replay differs from the stream`, problems);
  return replay;
}

/** Each `[label, run]` replays as it streamed, and continues from every event with Last-Event-ID. */
async function replaysFromEveryEvent(agent, labelledRuns, problems) {
  for (const [label, run] of labelledRuns) {
    const replay = await replayOf(agent, run, problems, label);
    await everyCutPoint(agent, run.input, replay, problems, `${label} reconnect`);
  }
}

/**
 * Reconnects after every event of a finished run's replay: each answer must be exactly the rest
 * of the replay (SPEC §4.2: nothing missed, nothing twice). Stops at the first cut that is not.
 */
async function everyCutPoint(agent, input, replay, problems, label) {
  for (let k = 1; k < replay.frames.length; k += 1) {
    const after = await rawRun(agent, input, { lastEventId: replay.frames[k - 1].id });
    if (eventBytes(after.frames) !== eventBytes(replay.frames.slice(k))) {
      const got = after.status === 200 ? shape(after.frames.map((f) => f.event)).join(" ") || "an empty stream" : `HTTP ${after.status} ${short(after.text, 120)}`;
      problems.push(`${label}: Last-Event-ID ${replay.frames[k - 1].id} (after #${k - 1} ${replay.frames[k - 1].event.type}) gives ${got}; the replay goes on with ${shape(replay.frames.slice(k).map((f) => f.event)).join(" ")}`);
      return k - 1;
    }
  }
  return replay.frames.length - 1;
}

function judgeStreamHeaders(res, problems, label) {
  const h = res.headers;
  expect(res.status === 200, `${label}: HTTP ${res.status} ${short(res.text, 200)}`, problems);
  expect(/^text\/event-stream\b/.test(h.get("content-type") ?? ""), `${label}: content-type ${h.get("content-type")}`, problems);
  expect(h.get("cache-control") === "no-cache", `${label}: cache-control ${h.get("cache-control")}`, problems);
  expect(h.get("x-accel-buffering") === "no", `${label}: x-accel-buffering ${h.get("x-accel-buffering")}`, problems);
}

/** Applies a stream's STATE_SNAPSHOT and STATE_DELTAs in order with fast-json-patch. */
function foldState(events) {
  let state;
  let snapshots = 0;
  let deltas = 0;
  for (const e of events) {
    if (e.type === "STATE_SNAPSHOT") {
      state = structuredClone(e.snapshot);
      snapshots += 1;
    } else if (e.type === "STATE_DELTA") {
      if (state === undefined) throw new Error(`STATE_DELTA #${deltas} before any STATE_SNAPSHOT: ${JSON.stringify(e.delta)}`);
      // validate = true: an operation that does not apply throws instead of being skipped.
      state = jsonpatch.applyPatch(state, structuredClone(e.delta), true, false).newDocument;
      deltas += 1;
    }
  }
  return { state, snapshots, deltas };
}

/** The conversation as the client folded it, in the shape `GET .../messages` answers. */
function conversation(messages) {
  return messages.map((m) => {
    const out = { role: m.role };
    if (m.role !== "user") out.id = m.id; // a user message keeps the client's id on the client
    if (m.content !== undefined) out.content = m.content;
    if (m.toolCalls?.length) out.toolCalls = m.toolCalls.map((c) => ({ id: c.id, type: c.type, function: c.function }));
    if (m.toolCallId !== undefined) out.toolCallId = m.toolCallId;
    return out;
  });
}

// ---------- scenarios ----------

const results = [];

/** Every run the official client was served (its URL and input), replayed over the binary transport at the end. */
const runsServed = [];

// ---------- the binary transport ----------

/** POSTs `input` to `url` asking for the binary transport; returns the status, type and bytes, cut after `stopAfter` frames. */
async function binaryRun(url, input, { lastEventId, stopAfter, headers = {} } = {}) {
  const controller = new AbortController();
  const sent = { ...headers, "content-type": "application/json", accept: proto.AGUI_MEDIA_TYPE };
  if (lastEventId !== undefined) sent["last-event-id"] = lastEventId;
  const res = await fetch(url, { method: "POST", headers: sent, body: JSON.stringify(input), signal: controller.signal });
  const out = { status: res.status, contentType: res.headers.get("content-type"), frames: [], dropped: false };
  let buffer = new Uint8Array(0);
  const reader = res.body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      const joined = new Uint8Array(buffer.length + value.length);
      joined.set(buffer);
      joined.set(value, buffer.length);
      buffer = joined;
      while (buffer.length >= 4) {
        const length = new DataView(buffer.buffer, buffer.byteOffset, 4).getUint32(0, false);
        if (buffer.length < 4 + length) break;
        out.frames.push(buffer.slice(4, 4 + length));
        buffer = buffer.slice(4 + length);
        if (out.frames.length === stopAfter) {
          out.dropped = true;
          controller.abort();
          return out;
        }
      }
    }
  } catch (e) {
    if (!controller.signal.aborted) throw e;
  }
  out.rest = buffer.length;
  return out;
}

/** A decoded binary event as SSE carries it: its gateway id taken out of its metadata. */
function unwrapBinary(bytes) {
  const event = proto.decode(bytes);
  const id = event.metadata?.eventId;
  if (event.metadata) {
    delete event.metadata.eventId;
    if (Object.keys(event.metadata).length === 0) delete event.metadata;
  }
  return { id, event };
}

/** The same event from the two transports, a refusal's own clock left out (each answer makes its own). */
const comparable = ({ id, event }) => (id === "0" ? { id, event: { ...event, timestamp: undefined } } : { id, event });

async function binaryTransport(problems) {
  // The runs of every scenario before, replayed: each binary answer decodes with @ag-ui/proto to
  // exactly the events, ids and order of the SSE answer to the same request.
  let events = 0;
  let unsteady = 0;
  const seen = new Set();
  for (const { url, input, headers } of runsServed) {
    const key = `${url} ${JSON.stringify(input)}`;
    if (seen.has(key)) continue;
    seen.add(key);
    const sse = await rawRun(new URL(url).pathname.split("/").at(-1), input, { tenant: new URL(url).searchParams.get("tenant") ?? "default", headers });
    const binary = await binaryRun(url, input, { headers });
    // A resume posted again is answered afresh, and the first answer after the turn's own can
    // differ from later ones (`already_decided` against `decided`): the binary answer is judged
    // against the SSE answers on either side of it.
    const sseAfter = await rawRun(new URL(url).pathname.split("/").at(-1), input, { tenant: new URL(url).searchParams.get("tenant") ?? "default", headers });
    const label = `${input.threadId}/${input.runId}`;
    if (binary.status !== 200 || binary.contentType !== proto.AGUI_MEDIA_TYPE) {
      problems.push(`${label}: HTTP ${binary.status} ${binary.contentType}`);
      continue;
    }
    if (binary.rest) problems.push(`${label}: ${binary.rest} bytes after the last whole frame`);
    let decoded;
    try {
      decoded = binary.frames.map(unwrapBinary);
    } catch (e) {
      problems.push(`${label}: @ag-ui/proto could not decode a frame: ${short(e?.message ?? e)}`);
      continue;
    }
    decoded.forEach(({ event }, n) => validateEvent(event, `${label} binary #${n}`, problems));
    const asSse = (answer) => JSON.parse(JSON.stringify(answer.frames.map((f) => comparable({ id: f.id, event: f.event }))));
    const before = asSse(sse);
    const after = asSse(sseAfter);
    if (!isDeepStrictEqual(before, after)) unsteady += 1;
    const overBinary = JSON.parse(JSON.stringify(decoded.map(comparable)));
    const overSse = isDeepStrictEqual(overBinary, before) ? before : after;
    expectEqual(overBinary.length, overSse.length, `${label}: the number of binary events`, problems);
    const differs = overSse.findIndex((one, n) => !isDeepStrictEqual(overBinary[n], one));
    if (differs >= 0) expectEqual(overBinary[differs], overSse[differs], `${label}: binary event #${differs}`, problems);
    events += decoded.length;
  }
  expect(runsServed.length > 20, `only ${runsServed.length} runs to replay`, problems);

  // The official client reads a binary stream (its protobuf parser, verification on) as it reads SSE.
  const threadId = uid("th-binary");
  const agent = new HttpAgent({
    url: agentUrl("demo"),
    threadId,
    initialMessages: [userMessage("binary, please")],
    fetch: (url, init) => fetch(url, { ...init, headers: { ...init.headers, Accept: proto.AGUI_MEDIA_TYPE } }),
  });
  const run = { events: [] };
  let contentType;
  const realFetch = agent.fetch;
  agent.fetch = async (url, init) => {
    const res = await realFetch(url, init);
    contentType = res.headers.get("content-type");
    return res;
  };
  try {
    await agent.runAgent({ runId: uid("run") }, { onEvent: ({ event }) => run.events.push(event) });
  } catch (e) {
    problems.push(`@ag-ui/client rejected the binary stream: ${short(e?.message ?? e)}`);
  }
  expectEqual(contentType, proto.AGUI_MEDIA_TYPE, "the answer's Content-Type", problems);
  expect(run.events.at(-1)?.type === "RUN_FINISHED", `the client's binary run ends with ${run.events.at(-1)?.type}`, problems);
  expect(messageTexts(run.events).join("").length > 0, "the client read the agent's text off the binary stream", problems);

  // A binary stream cut after each of its first events continues with Last-Event-ID (the id in
  // the last frame's metadata) to exactly the rest: nothing missed, nothing twice.
  const slowInput = { threadId: uid("th-binary-cut"), runId: uid("run"), messages: [userMessage("cut me")], tools: [], context: [], state: {}, forwardedProps: {}, protocolVersion: "1.0" };
  const head = await binaryRun(agentUrl("slow"), slowInput, { stopAfter: 3 });
  const headEvents = head.frames.map(unwrapBinary);
  const tail = await binaryRun(agentUrl("slow"), slowInput, { lastEventId: headEvents.at(-1)?.id });
  const whole = await binaryRun(agentUrl("slow"), slowInput);
  const joined = [...headEvents, ...tail.frames.map(unwrapBinary)];
  const full = whole.frames.map(unwrapBinary);
  expect(head.dropped && headEvents.length === 3, "the first connection was cut after 3 frames", problems);
  expectEqual(joined.map((e) => e.id), full.map((e) => e.id), "the ids of the cut stream and its continuation", problems);
  expectEqual(JSON.parse(JSON.stringify(joined)), JSON.parse(JSON.stringify(full)), "the joined binary stream", problems);
  expect(full.at(-1)?.event.type === "RUN_FINISHED", `the slow run ends with ${full.at(-1)?.event.type}`, problems);
  return `${seen.size} runs (${unsteady} answered differently when posted again), ${events} events, decoded alike; a cut at 3 of ${full.length} resumed`;
}

async function scenario(name, body) {
  const problems = [];
  const warningsBefore = clientWarnings.length;
  const started = Date.now();
  let note = "";
  let timer;
  try {
    note = await Promise.race([
      body(problems),
      new Promise((_, reject) => {
        timer = setTimeout(() => reject(new Error("timed out after 90 s")), 90_000);
      }),
    ]);
  } catch (e) {
    problems.push(`threw: ${e?.stack ?? e}`);
  }
  clearTimeout(timer);
  for (const w of clientWarnings.slice(warningsBefore)) problems.push(`client warning: ${short(w, 300)}`);
  const ms = Date.now() - started;
  results.push({ name, ok: problems.length === 0 });
  if (problems.length) console.log(`FAIL ${name} (${ms} ms)\n  - ${problems.join("\n  - ")}`);
  else console.log(`PASS ${name}${note ? ` — ${note}` : ""} (${ms} ms)`);
}

function skip(name, why) {
  results.push({ name, skipped: true });
  console.log(`SKIP ${name} — ${why}`);
}

async function textToolStateStep(problems) {
  const threadId = uid("th-text");
  const { agent, run, events } = await judgedFirstRun("demo", threadId, "What is AG-UI?", problems, "turn 1");
  expectShape(events, ["RUN_STARTED", "STATE_SNAPSHOT", ...TEXT, ...TOOL, "STATE_DELTA", "STEP_STARTED", "STEP_FINISHED", ...TEXT, "RUN_FINISHED"], problems);
  expect(run.finished?.outcome === "success", `outcome ${run.finished?.outcome}`, problems);
  expectEqual(run.finished?.pendingToolCallIds, [], "pendingToolCallIds", problems);

  const [firstMessage] = events.filter((e) => e.type === "TEXT_MESSAGE_START");
  const start = events.find((e) => e.type === "TOOL_CALL_START");
  expect(start?.toolCallName === "lookup", `tool name ${start?.toolCallName}`, problems);
  expect(start?.parentMessageId === firstMessage?.messageId, `TOOL_CALL_START.parentMessageId ${start?.parentMessageId}, the message was ${firstMessage?.messageId}`, problems);
  const args = events.filter((e) => e.type === "TOOL_CALL_ARGS").map((e) => e.delta).join("");
  expectEqual(JSON.parse(args), { query: "What is AG-UI?" }, "tool arguments", problems);
  const result = events.find((e) => e.type === "TOOL_CALL_RESULT");
  expect(result?.toolCallId === start?.toolCallId && result?.content === "3 matching documents", `TOOL_CALL_RESULT ${JSON.stringify(result)}`, problems);
  expectEqual(messageTexts(events), ['Hello! You said: "What is AG-UI?".', "Done."], "message texts", problems);
  const step = events.filter((e) => e.type.startsWith("STEP_")).map((e) => e.stepName);
  expectEqual(step, ["summarise", "summarise"], "step names", problems);

  // The client's folded state and conversation are the gateway's record.
  const thread = await threadRecord(threadId);
  expectEqual(thread.body.board.notes.map((n) => n.text), ["Asked about: What is AG-UI?"], "board notes", problems);
  expectEqual(agent.state, { board: thread.body.board }, "the client's state vs GET /v1/threads board", problems);
  const record = await getJson(`/v1/threads/${threadId}/messages?tenant=default`);
  expectEqual(conversation(agent.messages), conversation(record.body.messages), "the client's messages vs GET .../messages", problems);

  // A second turn from the client's own copy of the conversation.
  agent.addMessage(userMessage("And reconnecting?"));
  const second = await clientRun(agent, { runId: uid("run") });
  const events2 = judgeClientRun(second, problems, "turn 2");
  expect(second.finished?.outcome === "success", `turn 2 outcome ${second.finished?.outcome}`, problems);
  expectEqual(events2.find((e) => e.type === "STATE_SNAPSHOT")?.snapshot.board.notes.length, 1, "turn 2 snapshot notes", problems);
  const after = await threadRecord(threadId);
  expect(after.body.turnCount === 2, `turnCount ${after.body.turnCount}`, problems);
  expectEqual(agent.state, { board: after.body.board }, "the client's state after turn 2", problems);
  return `${events.length} + ${events2.length} events`;
}

/**
 * A reopened thread: the second turn's run restates the recorded conversation right after
 * RUN_STARTED, so a client whose copy was edited shows the gateway's messages after the run.
 */
async function reopenedThread(problems) {
  const threadId = uid("th-reopen");
  const agent = new HttpAgent({ url: agentUrl("demo"), threadId, initialMessages: [userMessage("first")] });
  judgeClientRun(await clientRun(agent, { runId: uid("run") }), problems, "turn 1");
  const before = await getJson(`/v1/threads/${threadId}/messages?tenant=default`);
  agent.addMessage(userMessage("second"));
  const second = await clientRun(agent, { runId: uid("run") });
  const events = judgeClientRun(second, problems, "turn 2");
  expectEqual(shape(events).slice(0, 3), ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT"], "turn 2 opens", problems);
  const snapshot = events.find((e) => e.type === "MESSAGES_SNAPSHOT");
  const record = await getJson(`/v1/threads/${threadId}/messages?tenant=default`);
  expectEqual(conversation(snapshot?.messages ?? []), conversation(record.body.messages.slice(0, before.body.messages.length + 1)), "the snapshot vs GET .../messages", problems);
  expectEqual(conversation(agent.messages), conversation(record.body.messages), "the client's messages after turn 2", problems);
  return `${snapshot?.messages.length} messages restated`;
}

/** POSTs to the connect route and reads frames until `stopWhen(frames)` (then drops it). */
async function rawConnect(input, { lastEventId, stopWhen, onFrame }) {
  const controller = new AbortController();
  const headers = { "content-type": "application/json", accept: "text/event-stream" };
  if (lastEventId !== undefined) headers["last-event-id"] = lastEventId;
  const res = await fetch(`${gateway.url}/v1/agui/agents/demo/connect?tenant=default`, { method: "POST", headers, body: JSON.stringify(input), signal: controller.signal });
  const out = { status: res.status, frames: [] };
  if (res.status !== 200) {
    out.text = await res.text();
    return out;
  }
  try {
    if (!stopWhen(out.frames)) {
      for await (const frame of sseFrames(res.body)) {
        if (!frame.comment) {
          out.frames.push(frame);
          onFrame?.(out.frames);
        }
        if (stopWhen(out.frames)) break;
      }
    }
  } finally {
    controller.abort();
  }
  return out;
}

const runsEnded = (frames) => frames.filter((f) => TERMINAL.has(f.event.type)).length;

/**
 * The connect route: the thread's opening, a later turn and a failed one as runs of their own;
 * the official client accepts the whole stream, and a reconnect after every event goes on
 * exactly.
 */
async function connectStream(problems) {
  const threadId = uid("th-connect");
  const agent = new HttpAgent({ url: agentUrl("demo"), threadId, initialMessages: [userMessage("first")] });
  judgeClientRun(await clientRun(agent, { runId: uid("run") }), problems, "turn 1");
  const input = { threadId, runId: uid("watch"), protocolVersion: "1.0", messages: [] };
  let opened;
  const openingSeen = new Promise((resolve) => {
    opened = resolve;
  });
  const watching = rawConnect(input, { stopWhen: (frames) => runsEnded(frames) >= 3, onFrame: (frames) => runsEnded(frames) >= 1 && opened() });
  await within(10_000, openingSeen, "the connect stream's opening");
  // Two more turns while the stream is open: a good one, then a failing one.
  agent.addMessage(userMessage("second"));
  judgeClientRun(await clientRun(agent, { runId: uid("run") }), problems, "turn 2");
  const failing = new HttpAgent({ url: agentUrl("failing"), threadId, initialMessages: agent.messages });
  failing.addMessage(userMessage("third"));
  await clientRun(failing, { runId: uid("run") });
  const watched = await within(20_000, watching, "three runs on the connect stream");
  if (watched.status !== 200) {
    problems.push(`connect: HTTP ${watched.status} ${short(watched.text)}`);
    return;
  }
  const events = watched.frames.map((f) => f.event);
  expectEqual(shape(events).slice(0, 4), ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED"], "the opening", problems);
  expect(events.at(-1)?.type === "RUN_ERROR", `the failed turn ends with ${events.at(-1)?.type}`, problems);
  events.forEach((e, n) => validateEvent(e, `connect #${n}`, problems));
  expect(watched.frames.every((f) => f.id), "every event has an id", problems);
  const text = eventBytes(watched.frames);
  await verifyRecorded(text, input, problems, "connect");
  for (let k = 1; k < watched.frames.length; k += 1) {
    const rest = watched.frames.length - k;
    const after = await rawConnect(input, { lastEventId: watched.frames[k - 1].id, stopWhen: (frames) => frames.length >= rest });
    if (eventBytes(after.frames) !== eventBytes(watched.frames.slice(k))) {
      problems.push(`connect: Last-Event-ID ${watched.frames[k - 1].id} gives ${shape(after.frames.map((f) => f.event)).join(" ")}`);
      break;
    }
  }
  return `${events.length} events over ${runsEnded(watched.frames)} runs, every cut resumed`;
}

async function aiLabel(problems) {
  const threadId = uid("th-label");
  const agent = new HttpAgent({ url: agentUrl("demo", "acme"), threadId, initialMessages: [userMessage("hi")] });
  const run = await clientRun(agent, { runId: uid("run") });
  const events = judgeClientRun(run, problems);
  expect(run.finished?.outcome === "success", `outcome ${run.finished?.outcome}`, problems);
  const firstDeltas = [];
  for (const [n, e] of events.entries()) {
    if (e.type === "TEXT_MESSAGE_START") firstDeltas.push(events.slice(n).find((x) => x.type === "TEXT_MESSAGE_CONTENT" && x.messageId === e.messageId)?.delta);
  }
  expect(firstDeltas.length === 2 && firstDeltas.every((d) => d?.startsWith("[AI] ")), `first delta of each message ${JSON.stringify(firstDeltas)}: expected 2, each led by "[AI] "`, problems);
  expectEqual(messageTexts(events), ['[AI] Hello! You said: "hi".', "[AI] Done."], "labelled texts", problems);
  const thread = await threadRecord(threadId, "acme");
  expect(thread.status === 200 && thread.body.tenant === "acme", `GET thread in acme: ${thread.status}`, problems);
}

async function burst(problems) {
  const { run, events } = await judgedFirstRun("burst", uid("th-burst"), "go", problems);
  expectShape(events, ["RUN_STARTED", "STATE_SNAPSHOT", ...TEXT, ...TEXT, "RUN_FINISHED"], problems);
  const first = events.find((e) => e.type === "TEXT_MESSAGE_START")?.messageId;
  const deltas = events.filter((e) => e.type === "TEXT_MESSAGE_CONTENT" && e.messageId === first);
  expect(deltas.length === 400, `${deltas.length} burst deltas, configured 400`, problems);
  expect(deltas.every((d) => d.delta === "x".repeat(40)), "a burst delta is not 40 x", problems);
  expect(run.finished?.outcome === "success", `outcome ${run.finished?.outcome}`, problems);
  return `${events.length} events`;
}

async function frontendToolsDeclared(problems) {
  const tool = { name: "confirm_dialog", description: "Ask the person to confirm", parameters: { type: "object", properties: { question: { type: "string" } } } };
  const agent = new HttpAgent({ url: agentUrl("slow"), threadId: uid("th-tools"), initialMessages: [userMessage("tools")] });
  const run = await clientRun(agent, { runId: uid("run"), tools: [tool] });
  const events = judgeClientRun(run, problems, "admitted");
  expectEqual(run.input?.tools?.map((t) => t.name), ["confirm_dialog"], "tools the client sent", problems);
  expectShape(events, ["RUN_STARTED", "STATE_SNAPSHOT", ...TEXT, ...TOOL, "STATE_DELTA", ...TEXT, "RUN_FINISHED"], problems, "admitted");
  expect(run.finished?.outcome === "success", `outcome ${run.finished?.outcome}`, problems);
  expectEqual(run.finished?.pendingToolCallIds, [], "pendingToolCallIds (slow has no client_tool step)", problems);

  // A tool the agent does not list is refused before any stream: the client's run fails.
  const refused = new HttpAgent({ url: agentUrl("slow"), threadId: uid("th-tools"), initialMessages: [userMessage("tools")] });
  const bad = await clientRun(refused, { runId: uid("run"), tools: [{ ...tool, name: "delete_everything" }] });
  expect(bad.wire.status === 400, `not admitted: HTTP ${bad.wire.status}`, problems);
  expect(JSON.parse(bad.wire.text || "{}").error?.code === "tool_not_admitted", `not admitted body ${short(bad.wire.text)}`, problems);
  expect(bad.rejected && /400/.test(bad.rejected.message), `the client's run did not fail on the 400: ${bad.rejected?.message}`, problems);
  expect(bad.events.length === 0, `events after a 400: ${bad.events.length}`, problems);
}

/** The turn a run's stream belongs to: the `<turn>` of its first event id. */
function turnOf(run) {
  const first = parseText(run.wire.text).frames.find((f) => !f.comment);
  return EVENT_ID.exec(first?.id ?? "")?.[1];
}

async function frontendToolCall(problems) {
  const tool = {
    name: "confirm_dialog",
    description: "Ask the person to confirm",
    parameters: { type: "object", properties: { question: { type: "string" } }, required: ["question"] },
  };
  const threadId = uid("th-client-tool");
  const agent = new HttpAgent({ url: agentUrl("checker"), threadId, initialMessages: [userMessage("the deploy")] });
  const run = await clientRun(agent, { runId: uid("run"), tools: [tool] });
  const events = judgeClientRun(run, problems, "the call");
  expectShape(events, ["RUN_STARTED", "STATE_SNAPSHOT", ...TEXT, "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "RUN_FINISHED"], problems, "the call");
  const call = events.find((e) => e.type === "TOOL_CALL_START");
  if (!call) return;
  expect(call.toolCallName === "confirm_dialog", `tool name ${call.toolCallName}`, problems);
  const args = events.filter((e) => e.type === "TOOL_CALL_ARGS").map((e) => e.delta).join("");
  expectEqual(JSON.parse(args || "null"), { question: "Proceed with the deploy?" }, "the call's arguments", problems);
  // AG-UI 1.0: stopping on a frontend tool is success naming the pending call, not an interrupt.
  expectEqual(events.at(-1)?.outcome, { type: "success", pendingToolCallIds: [call.toolCallId] }, "RUN_FINISHED.outcome", problems);
  expect(run.finished?.outcome === "success", `outcome ${run.finished?.outcome}`, problems);
  expectEqual(run.finished?.pendingToolCallIds, [call.toolCallId], "the client's pendingToolCallIds", problems);
  expect((agent.pendingInterrupts ?? []).length === 0, "a frontend tool call left interrupts pending on the client", problems);
  const carrier = agent.messages.find((m) => m.toolCalls?.some((c) => c.id === call.toolCallId));
  expect(carrier?.role === "assistant" && carrier.content === "Checking with you.", `the call's message on the client ${short(JSON.stringify(carrier))}`, problems);

  // A new user message while the call waits for its result is refused (docs/api.md).
  const impatient = new HttpAgent({ url: agentUrl("checker"), threadId, initialMessages: [...agent.messages, userMessage("hello?")] });
  const refused = await clientRun(impatient, { runId: uid("run"), tools: [tool] });
  expectShape(judgeClientRun(refused, problems, "new message while the call waits"), ["RUN_ERROR"], problems, "new message while the call waits");
  expect(refused.runError?.code === "interrupts_pending", `new message while the call waits: code ${refused.runError?.code}`, problems);

  // The client ran its tool: the result goes in as a `tool` message, with the same tools declared.
  agent.addMessage({ id: uid("result"), role: "tool", toolCallId: call.toolCallId, content: "yes" });
  const second = await clientRun(agent, { runId: uid("run"), tools: [tool] });
  const events2 = judgeClientRun(second, problems, "the result");
  expectEqual(second.input?.messages?.at(-1), { id: agent.messages.find((m) => m.role === "tool")?.id, role: "tool", toolCallId: call.toolCallId, content: "yes" }, "the result the client sent", problems);
  // The result is the client's: the gateway streams no TOOL_CALL_RESULT for it.
  expectShape(events2, ["RUN_STARTED", "STATE_SNAPSHOT", ...TEXT, "RUN_FINISHED"], problems, "the result");
  expectEqual(messageTexts(events2), ["You said yes."], "the continued turn's text", problems);
  expect(second.finished?.outcome === "success", `the result: outcome ${second.finished?.outcome}`, problems);
  expectEqual(second.finished?.pendingToolCallIds, [], "pendingToolCallIds after the result", problems);
  expect(turnOf(second) === turnOf(run), `the result's run streams turn ${turnOf(second)}, the call was in ${turnOf(run)}`, problems);
  const thread = await threadRecord(threadId);
  expect(thread.body.turnCount === 1 && thread.body.latestTurn?.status === "succeeded", `thread: turnCount ${thread.body.turnCount}, latest turn ${JSON.stringify(thread.body.latestTurn)}`, problems);
  // The record holds the result as a `tool` message after the call (docs/api.md: results are
  // recorded with the turn, and the conversation lists tool results), or a reloaded page would
  // see a call that was never answered. Its id is the gateway's to choose.
  const record = await getJson(`/v1/threads/${threadId}/messages?tenant=default`);
  const byContent = (messages) =>
    conversation(messages).map((m) => {
      if (m.role !== "tool" || m.toolCallId !== call.toolCallId) return m;
      const { id, ...rest } = m;
      return rest;
    });
  expectEqual(byContent(record.body.messages), byContent(agent.messages), "GET .../messages vs the client's messages", problems);

  // Both runs replay as streamed, and continue from every event with Last-Event-ID.
  await replaysFromEveryEvent("checker", [["the call", run], ["the result", second]], problems);
  return `call ${call.toolCallId}`;
}

async function approvalAndResume(problems) {
  const threadId = uid("th-approve");
  const { agent, run, events } = await judgedFirstRun("approver", threadId, "Ship it", problems, "run 1");
  expectShape(events, ["RUN_STARTED", "STATE_SNAPSHOT", ...TEXT, "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "RUN_FINISHED"], problems, "run 1");
  const { pending, interrupt } = waitsOnItsToolCall(run, events, agent, problems);
  if (!interrupt) return;
  expect(interrupt.responseSchema?.required?.includes("approved") && interrupt.responseSchema?.properties?.editedArgs, `responseSchema ${JSON.stringify(interrupt.responseSchema)}`, problems);
  expect(!isInterruptExpired(interrupt) && Date.parse(interrupt.expiresAt) > Date.now(), `expiresAt ${interrupt.expiresAt}`, problems);
  expectEqual(interrupt.metadata?.["gateway/details"], { to: "team@example.com", body: "Ship it" }, "gateway/details", problems);
  const waiting = await threadRecord(threadId);
  expect(waiting.body.status === "waiting", `thread status ${waiting.body.status}`, problems);
  expectEqual(waiting.body.interrupts.map((i) => i.id), [interrupt.id], "GET thread interrupts", problems);

  // A new message while the turn waits on this person is refused with a lone RUN_ERROR. (A
  // second client: the first refuses to send it while it holds pending interrupts.)
  const impatient = new HttpAgent({ url: agentUrl("approver"), threadId, initialMessages: [...agent.messages, userMessage("hello?")] });
  const refused = await clientRun(impatient, { runId: uid("run") });
  const refusedEvents = judgeClientRun(refused, problems, "new message while waiting");
  expectShape(refusedEvents, ["RUN_ERROR"], problems, "new message while waiting");
  expect(refused.runError?.code === "interrupts_pending", `code ${refused.runError?.code}`, problems);

  // The answer, built with the client's own helper from its pending interrupts.
  const resume = buildResumeArray(pending, { [interrupt.id]: { status: "resolved", payload: { approved: true, comment: "go" } } });
  const second = await clientRun(agent, { runId: uid("run"), resume });
  const events2 = judgeClientRun(second, problems, "resume");
  expectEqual(second.input?.resume, [{ interruptId: interrupt.id, status: "resolved", payload: { approved: true, comment: "go" } }], "resume the client sent", problems);
  const afterSnapshot = events2.filter((e) => e.type !== "STATE_SNAPSHOT");
  expectShape(afterSnapshot, ["RUN_STARTED", "CUSTOM", "TOOL_CALL_RESULT", ...TEXT, "RUN_FINISHED"], problems, "resume (STATE_SNAPSHOT aside)");
  const decided = events2.find((e) => e.type === "CUSTOM");
  expectEqual(decided && { name: decided.name, value: decided.value }, { name: "gateway.resume", value: { interruptId: interrupt.id, outcome: "decided", approved: true, decision: "approve" } }, "gateway.resume", problems);
  const result = events2.find((e) => e.type === "TOOL_CALL_RESULT");
  expect(result?.toolCallId === interrupt.toolCallId && result?.content === "sent", `result ${JSON.stringify(result)}`, problems);
  expect(second.finished?.outcome === "success", `resume outcome ${second.finished?.outcome}`, problems);
  expect((agent.pendingInterrupts ?? []).length === 0, "interrupts still pending on the client", problems);
  const done = await threadRecord(threadId);
  expect(done.body.status === "idle" && done.body.latestTurn.status === "succeeded" && done.body.interrupts.length === 0, `thread after resume ${JSON.stringify(done.body.latestTurn)} ${done.body.status}`, problems);
  expectEqual(agent.state, { board: done.body.board }, "the client's state after the resume", problems);

  // Both runs replay as streamed, and continue from every event with Last-Event-ID. (docs/api.md:
  // a resume's RUN_STARTED and first gateway.resume carry the same id, the decision's.)
  await replaysFromEveryEvent("approver", [["interrupted run", run], ["resume run", second]], problems);
  return `interrupt ${interrupt.id}`;
}

async function questionWithChoices(problems) {
  const threadId = uid("th-ask");
  const { agent, run, events } = await judgedFirstRun("asker", threadId, "pick one", problems, "question");
  expectShape(events, ["RUN_STARTED", "STATE_SNAPSHOT", "RUN_FINISHED"], problems, "question");
  expect(run.finished?.outcome === "interrupt", `outcome ${run.finished?.outcome}`, problems);
  const [interrupt] = agent.pendingInterrupts ?? [];
  if (!interrupt) return problems.push("no pending interrupt");
  expect(interrupt.reason === "input_required" && interrupt.message?.includes("Which colour?"), `interrupt ${JSON.stringify(interrupt)}`, problems);
  expectEqual(interrupt.responseSchema?.properties?.answer?.enum, ["red", "blue"], "answer enum", problems);
  expectEqual(interrupt.metadata?.["gateway/choices"], ["red", "blue"], "gateway/choices", problems);

  // An answer outside the choices decides nothing: a lone RUN_ERROR, the question stays open.
  const wrong = await clientRun(agent, { runId: uid("run"), resume: buildResumeArray(agent.pendingInterrupts, { [interrupt.id]: { status: "resolved", payload: { answer: "green" } } }) });
  expectShape(judgeClientRun(wrong, problems, "wrong answer"), ["RUN_ERROR"], problems, "wrong answer");
  expect(wrong.runError?.code === "invalid_resume", `wrong answer code ${wrong.runError?.code}`, problems);
  const still = await threadRecord(threadId);
  expectEqual(still.body.interrupts.map((i) => i.id), [interrupt.id], "open interrupts after the refused answer", problems);

  const answer = await clientRun(agent, { runId: uid("run"), resume: buildResumeArray(agent.pendingInterrupts, { [interrupt.id]: { status: "resolved", payload: { answer: "blue" } } }) });
  const events2 = judgeClientRun(answer, problems, "answer");
  expectShape(events2.filter((e) => e.type !== "STATE_SNAPSHOT"), ["RUN_STARTED", "CUSTOM", ...TEXT, "RUN_FINISHED"], problems, "answer (STATE_SNAPSHOT aside)");
  expectEqual(messageTexts(events2), ["You chose blue."], "answer text", problems);
  expect(answer.finished?.outcome === "success", `answer outcome ${answer.finished?.outcome}`, problems);
}

async function escalation(problems) {
  const threadId = uid("th-escalate");
  const { agent, run, events } = await judgedFirstRun("escalator", threadId, "refund me", problems, "escalation");
  expectShape(events, ["RUN_STARTED", "STATE_SNAPSHOT", ...TEXT, "RUN_FINISHED"], problems, "escalation");
  expect(run.finished?.outcome === "interrupt", `outcome ${run.finished?.outcome}`, problems);
  const [interrupt] = agent.pendingInterrupts ?? [];
  if (!interrupt) return problems.push("no pending interrupt");
  expect(interrupt.reason === "confirmation", `interrupt ${JSON.stringify(interrupt)}`, problems);
  expectEqual(interrupt.responseSchema?.required, ["approved"], "the confirmation's required fields", problems);

  const approved = await clientRun(agent, { runId: uid("run"), resume: buildResumeArray(agent.pendingInterrupts, { [interrupt.id]: { status: "resolved", payload: { approved: true, comment: "Manager ok." } } }) });
  const events2 = judgeClientRun(approved, problems, "approved");
  expectEqual(messageTexts(events2), ["Refunded. Manager ok."], "the text after the confirmation", problems);
  expect(approved.finished?.outcome === "success", `approved outcome ${approved.finished?.outcome}`, problems);
  const record = await getJson(`/v1/threads/${threadId}/messages?tenant=default`);
  expectEqual(conversation(agent.messages), conversation(record.body.messages), "the client's messages vs GET .../messages", problems);
}

async function allOrNothing(problems) {
  const threadId = uid("th-pair");
  const { agent, run, events } = await judgedFirstRun("pair", threadId, "both", problems, "proposal");
  expectShape(events, ["RUN_STARTED", "STATE_SNAPSHOT", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "RUN_FINISHED"], problems, "proposal");
  const pending = agent.pendingInterrupts ?? [];
  expect(pending.length === 2, `${pending.length} pending interrupts`, problems);
  if (pending.length !== 2) return;

  // Answering one of two (a client that holds no pending interrupts sends what it is given).
  const partial = new HttpAgent({ url: agentUrl("pair"), threadId, initialMessages: agent.messages });
  const half = await clientRun(partial, { runId: uid("run"), resume: [{ interruptId: pending[0].id, status: "resolved", payload: { approved: true } }] });
  expectShape(judgeClientRun(half, problems, "one of two"), ["RUN_ERROR"], problems, "one of two");
  expect(half.runError?.code === "interrupts_open", `one of two: code ${half.runError?.code}`, problems);
  const still = await threadRecord(threadId);
  expect(still.body.interrupts.length === 2, `${still.body.interrupts.length} interrupts open after a refused partial resume`, problems);

  const resume = buildResumeArray(pending, { [pending[0].id]: { status: "resolved", payload: { approved: true } }, [pending[1].id]: { status: "cancelled" } });
  const both = await clientRun(agent, { runId: uid("run"), resume });
  const events2 = judgeClientRun(both, problems, "both");
  expectShape(events2.filter((e) => e.type !== "STATE_SNAPSHOT"), ["RUN_STARTED", "CUSTOM", "CUSTOM", "TOOL_CALL_RESULT", "TOOL_CALL_RESULT", ...TEXT, "RUN_FINISHED"], problems, "both (STATE_SNAPSHOT aside)");
  expectEqual(events2.filter((e) => e.type === "TOOL_CALL_RESULT").map((e) => e.content), ["ran first", "not run: the call was denied"], "results", problems);
  expectEqual(events2.filter((e) => e.type === "CUSTOM").map((e) => e.value.outcome), ["decided", "decided"], "gateway.resume outcomes", problems);
  expect(both.finished?.outcome === "success", `outcome ${both.finished?.outcome}`, problems);
}

async function turnFails(problems) {
  const threadId = uid("th-fail");
  const { run, events } = await judgedFirstRun("failing", threadId, "fail", problems);
  expectShape(events, ["RUN_STARTED", "STATE_SNAPSHOT", ...TEXT, "RUN_ERROR"], problems);
  expect(run.runError?.code === "failed" && run.runError?.message === "the script failed on purpose", `RUN_ERROR ${JSON.stringify(run.runError)}`, problems);
  expect(run.finished === undefined, "RUN_FINISHED after RUN_ERROR", problems);
  const thread = await threadRecord(threadId);
  expect(thread.body.latestTurn?.status === "failed" && thread.body.status === "idle", `thread ${JSON.stringify(thread.body.latestTurn)} ${thread.body.status}`, problems);
}

async function refusedRuns(problems) {
  // A made-up assistant answer on a thread the gateway has never seen.
  const madeUp = new HttpAgent({
    url: agentUrl("demo"),
    threadId: uid("th-refused"),
    initialMessages: [userMessage("one"), { id: "a-made-up", role: "assistant", content: "sure" }, userMessage("two")],
  });
  const mismatch = await clientRun(madeUp, { runId: uid("run") });
  expectShape(judgeClientRun(mismatch, problems, "history_mismatch"), ["RUN_ERROR"], problems, "history_mismatch");
  expect(mismatch.runError?.code === "history_mismatch", `code ${mismatch.runError?.code}`, problems);

  // A second message while the first turn still streams.
  const threadId = uid("th-busy");
  const first = userMessage("first");
  const busy = new HttpAgent({ url: agentUrl("slow"), threadId, initialMessages: [first] });
  let started;
  const streaming = new Promise((resolve) => {
    started = resolve;
  });
  const running = clientRun(busy, { runId: uid("run") }, { onEvent: (e) => e.type === "TEXT_MESSAGE_CONTENT" && started() });
  await streaming;
  const eager = new HttpAgent({ url: agentUrl("slow"), threadId, initialMessages: [first, userMessage("second")] });
  const inProgress = await clientRun(eager, { runId: uid("run") });
  expectShape(judgeClientRun(inProgress, problems, "turn_in_progress"), ["RUN_ERROR"], problems, "turn_in_progress");
  expect(inProgress.runError?.code === "turn_in_progress", `code ${inProgress.runError?.code}`, problems);
  const finished = await running;
  judgeClientRun(finished, problems, "the running turn");
  expect(finished.finished?.outcome === "success", `the running turn ended ${finished.finished?.outcome}`, problems);
}

async function cancelledWithKeepalives(problems) {
  const threadId = uid("th-cancel");
  const agent = new HttpAgent({ url: agentUrl("waiter"), threadId, initialMessages: [userMessage("wait")] });
  let said;
  const saidIt = new Promise((resolve) => {
    said = resolve;
  });
  // keepalive_secs = 1: once the turn has said its piece and waits, its idle stream must carry a
  // keepalive comment; the cancel goes out once one has come over the wire after the text.
  let keptAlive;
  const keepaliveArrived = new Promise((resolve) => {
    keptAlive = resolve;
  });
  const keepaliveAfterText = /"TEXT_MESSAGE_END"[\s\S]*\n\n: keepalive\n\n/;
  const running = clientRun(
    agent,
    { runId: uid("run") },
    { onEvent: (e) => e.type === "TEXT_MESSAGE_END" && said(), onWire: (text) => keepaliveAfterText.test(text) && keptAlive() },
  );
  await saidIt;
  try {
    await within(10_000, keepaliveArrived, "no `: keepalive` comment on the waiting turn's stream");
  } catch (e) {
    problems.push(e.message);
  }
  const cancel = await fetch(`${gateway.url}/v1/threads/${threadId}/cancel?tenant=default`, { method: "POST" });
  const body = await cancel.json();
  expect(cancel.status === 202 && body.status === "cancelling", `cancel: ${cancel.status} ${JSON.stringify(body)}`, problems);
  const run = await running;
  const events = judgeClientRun(run, problems);
  expectShape(events, ["RUN_STARTED", "STATE_SNAPSHOT", ...TEXT, "RUN_FINISHED"], problems);
  expect(run.finished?.outcome === "cancelled", `outcome ${run.finished?.outcome}`, problems);
  expect(/(^|\n\n): keepalive\n\n/.test(run.wire.text), "no `: keepalive` comment while the turn waited", problems);
  const thread = await threadRecord(threadId);
  expect(thread.body.latestTurn?.status === "cancelled", `latest turn ${JSON.stringify(thread.body.latestTurn)}`, problems);
}

async function preOneZeroClient(problems) {
  // No protocolVersion: the interrupt comes as MESSAGES_SNAPSHOT + CUSTOM on_interrupt and a
  // RUN_FINISHED without outcome, which the 1.0 client must still accept.
  const input = { threadId: uid("th-legacy"), runId: uid("run"), messages: [userMessage("legacy")] };
  const res = await rawRun("approver", input);
  judgeStreamHeaders(res, problems, "pre-1.0");
  const frames = judgeWire(res.text, problems, "pre-1.0 wire");
  judgeRun(frames, input, problems);
  const events = frames.map((f) => f.event);
  expectShape(events, ["RUN_STARTED", "STATE_SNAPSHOT", ...TEXT, "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "MESSAGES_SNAPSHOT", "CUSTOM", "RUN_FINISHED"], problems);
  const custom = events.find((e) => e.type === "CUSTOM");
  expect(custom?.name === "on_interrupt" && typeof custom.value?.id === "string" && custom.value?.metadata, `CUSTOM ${JSON.stringify(custom)}`, problems);
  expect(events.at(-1)?.outcome === undefined, `RUN_FINISHED carries outcome ${JSON.stringify(events.at(-1)?.outcome)}`, problems);
  const snapshot = events.find((e) => e.type === "MESSAGES_SNAPSHOT");
  expect(snapshot?.messages?.[0]?.role === "user" && snapshot.messages[0].content === "legacy", `MESSAGES_SNAPSHOT ${short(JSON.stringify(snapshot?.messages))}`, problems);
  const { agent } = await verifyRecorded(res.text, input, problems, "pre-1.0");
  expect((agent.pendingInterrupts ?? []).length === 0, "a pre-1.0 stream left interrupts pending on the 1.0 client", problems);
  await everyCutPoint("approver", input, res, problems, "pre-1.0 reconnect");
}

async function reconnectLive(problems) {
  const input = { threadId: uid("th-reconnect"), runId: uid("run"), protocolVersion: "1.0", messages: [userMessage("drop me")] };
  // Dropped mid-message, while the turn still runs.
  const first = await rawRun("slow", input, { stopAfter: 6 });
  judgeStreamHeaders(first, problems, "first part");
  expect(first.dropped, "the stream ended before 6 events", problems);
  const rest = await rawRun("slow", input, { lastEventId: first.frames.at(-1).id });
  judgeStreamHeaders(rest, problems, "reconnect");
  const replay = await rawRun("slow", input);
  const joinedText = eventBytes([...first.frames, ...rest.frames]);
  expect(joinedText === eventBytes(replay.frames), `joined (${first.frames.length}+${rest.frames.length} events) != replay (${replay.frames.length})`, problems);
  const joined = judgeWire(joinedText, problems, "joined");
  judgeRun(joined, input, problems);
  expectShape(joined.map((f) => f.event), ["RUN_STARTED", "STATE_SNAPSHOT", ...TEXT, ...TOOL, "STATE_DELTA", ...TEXT, "RUN_FINISHED"], problems, "joined");
  const { seen } = await verifyRecorded(joinedText, input, problems, "joined");
  expect(seen.length === joined.length, `the client saw ${seen.length} of ${joined.length} joined events`, problems);

  // Every cut point of the finished run, and the edges.
  const cuts = await everyCutPoint("slow", input, replay, problems, "finished run");
  const afterEnd = await rawRun("slow", input, { lastEventId: replay.frames.at(-1).id });
  expect(afterEnd.status === 200 && afterEnd.frames.length === 0, `after the terminal event: ${afterEnd.status}, ${afterEnd.frames.length} events`, problems);
  const refused = await rawRun("slow", input, { lastEventId: "0" });
  expect(refused.status === 400 && refused.json?.error?.code === "bad_last_event_id", `Last-Event-ID 0: ${refused.status} ${refused.text}`, problems);
  return `${first.frames.length}+${rest.frames.length} events joined, ${cuts} cut points`;
}

async function reconnectMidBurst(problems) {
  const input = { threadId: uid("th-burst-drop"), runId: uid("run"), protocolVersion: "1.0", messages: [userMessage("burst")] };
  const first = await rawRun("burst", input, { stopAfter: 150 });
  const rest = await rawRun("burst", input, { lastEventId: first.frames.at(-1).id });
  const replay = await rawRun("burst", input);
  const joinedText = eventBytes([...first.frames, ...rest.frames]);
  expect(joinedText === eventBytes(replay.frames), `joined (${first.frames.length}+${rest.frames.length}) != replay (${replay.frames.length})`, problems);
  const joined = judgeWire(joinedText, problems, "joined");
  judgeRun(joined, input, problems);
  expect(new Set(joined.map((f) => f.id)).size === joined.length, "duplicate event ids in a burst", problems);
  await verifyRecorded(joinedText, input, problems, "joined");
  return `${joined.length} events`;
}

async function stateFreshReplayReconnect(problems) {
  const threadId = uid("th-board");
  // Turn 1, fresh, through the official client (which applies the deltas itself too).
  const { agent, run, events } = await judgedFirstRun("pinner", threadId, "pins", problems, "fresh");
  expectShape(events, ["RUN_STARTED", "STATE_SNAPSHOT", ...TEXT, "STATE_DELTA", "STATE_DELTA", "STATE_DELTA", "STATE_DELTA", ...TEXT, "RUN_FINISHED"], problems, "fresh");
  const fresh = foldState(events);
  const board1 = (await threadRecord(threadId)).body.board;
  expectEqual(fresh.state, { board: board1 }, "fresh: snapshot + deltas (fast-json-patch) vs GET board", problems);
  expectEqual(agent.state, { board: board1 }, "fresh: the client's state vs GET board", problems);
  // The third note supersedes the first (a `replace` at its index).
  expectEqual(board1.notes.map((n) => n.text), ["third", "second", "fourth"], "notes", problems);
  const replaceOps = events.filter((e) => e.type === "STATE_DELTA").flatMap((e) => e.delta).filter((op) => op.op === "replace");
  expectEqual(replaceOps.map((op) => op.path), ["/board/notes/0"], "the superseding note's patch", problems);

  // Its replay: the same bytes, the same state.
  const replay = await replayOf("pinner", run, problems, "fresh");
  expectEqual(foldState(replay.frames.map((f) => f.event)).state, { board: board1 }, "replay: snapshot + deltas vs GET board", problems);

  // Turn 2, dropped after its first delta while the turn still waits between notes.
  const history = (await getJson(`/v1/threads/${threadId}/messages?tenant=default`)).body.messages;
  const input = { threadId, runId: uid("run"), protocolVersion: "1.0", messages: [...history, userMessage("more pins")] };
  const first = await rawRun("pinner", input, { stopWhen: (frame) => frame.event?.type === "STATE_DELTA" });
  const firstDeltas = first.frames.filter((f) => f.event.type === "STATE_DELTA").length;
  expect(first.dropped && firstDeltas === 1, `the first part ended with ${firstDeltas} deltas (dropped: ${first.dropped})`, problems);
  const rest = await rawRun("pinner", input, { lastEventId: first.frames.at(-1).id });
  const joinedFrames = [...first.frames, ...rest.frames];
  const joined = judgeWire(eventBytes(joinedFrames), problems, "joined");
  judgeRun(joined, input, problems);
  const folded = foldState(joined.map((f) => f.event));
  expect(folded.snapshots === 1 && folded.deltas === 4, `joined: ${folded.snapshots} snapshots, ${folded.deltas} deltas`, problems);
  const board2 = (await threadRecord(threadId)).body.board;
  expect(board2.notes.length === 6, `${board2.notes.length} notes after two turns`, problems);
  expectEqual(folded.state, { board: board2 }, "reconnected mid-deltas: snapshot + deltas vs GET board", problems);
  const replay2 = await rawRun("pinner", input);
  expect(eventBytes(joinedFrames) === eventBytes(replay2.frames), "turn 2: joined != replay", problems);
  await verifyRecorded(eventBytes(joinedFrames), input, problems, "joined");
  return `${fresh.deltas} + ${folded.deltas} deltas, reconnect after delta 1`;
}

async function stateAcrossResume(problems) {
  const threadId = uid("th-review");
  const agent = new HttpAgent({ url: agentUrl("reviewer"), threadId, initialMessages: [userMessage("the post")] });
  const run = await clientRun(agent, { runId: uid("run") });
  judgeClientRun(run, problems, "proposal");
  expect(run.finished?.outcome === "interrupt", `outcome ${run.finished?.outcome}`, problems);
  const pending = agent.pendingInterrupts ?? [];
  if (pending.length !== 1) return problems.push(`${pending.length} pending interrupts`);
  const resume = buildResumeArray(pending, { [pending[0].id]: { status: "resolved", payload: { approved: true } } });
  const second = await clientRun(agent, { runId: uid("run"), resume });
  const events = judgeClientRun(second, problems, "resume");
  expect(second.finished?.outcome === "success", `resume outcome ${second.finished?.outcome}`, problems);
  const board = (await threadRecord(threadId)).body.board;
  expectEqual(board.notes.map((n) => n.text), ["draft: the post", "published: the post"], "notes", problems);
  expectEqual(agent.state, { board }, "the resuming client's state vs GET board", problems);
  // SPEC §3/§7: a run opens with a STATE_SNAPSHOT and its deltas apply to it with a stock library.
  try {
    expectEqual(foldState(events).state, { board }, "the resume run's own snapshot + deltas vs GET board", problems);
  } catch (e) {
    problems.push(`the resume run alone: ${e.message}`);
  }

  // A reloaded page: no state of its own, the thread's messages, a new run id. It follows the
  // turn from its decision; what it streams must rebuild the board.
  const history = (await getJson(`/v1/threads/${threadId}/messages?tenant=default`)).body.messages;
  const reloaded = new HttpAgent({ url: agentUrl("reviewer"), threadId, initialMessages: history });
  const follow = await clientRun(reloaded, { runId: uid("run") });
  const followed = judgeClientRun(follow, problems, "reloaded page");
  expectEqual(reloaded.state, { board }, "the reloaded page's state vs GET board", problems);
  try {
    foldState(followed);
  } catch (e) {
    problems.push(`reloaded page: ${e.message}`);
  }
}

/** The STEP_STARTED / STEP_FINISHED events of a stream as [type, stepName] pairs. */
const stepMarks = (events) => events.filter((e) => e.type === "STEP_STARTED" || e.type === "STEP_FINISHED").map((e) => [e.type, e.stepName]);

/** Whether the first event `matches` picks lies between the step's STEP_STARTED and STEP_FINISHED. */
function insideStep(events, stepName, matches) {
  const start = events.findIndex((e) => e.type === "STEP_STARTED" && e.stepName === stepName);
  const end = events.findIndex((e) => e.type === "STEP_FINISHED" && e.stepName === stepName);
  const at = events.findIndex(matches);
  return start >= 0 && start < at && at < end;
}

const TURN_ID = /^t[0-9a-f]{24}$/;

async function delegatedSteps(problems) {
  const threadId = uid("th-deleg");
  const { agent, run, events } = await judgedFirstRun("manager", threadId, "the launch", problems, "run 1");
  // Each delegation is a step and, inside it, a sub-agent whose events carry its run id.
  expectShape(events, ["RUN_STARTED", "STATE_SNAPSHOT", ...TEXT, "STEP_STARTED", "SUBAGENT_STARTED", ...TEXT, "TOOL_CALL_START", "TOOL_CALL_ARGS", "TOOL_CALL_END", "SUBAGENT_FINISHED", "STEP_FINISHED", "RUN_FINISHED"], problems, "run 1");
  const parent = turnOf(run);
  const mailer = stepMarks(events)[0]?.[1];
  expect(TURN_ID.test(mailer ?? "") && mailer !== parent, `the step is named ${JSON.stringify(mailer)}: expected a child turn id, not the parent's ${parent}`, problems);
  // A run ends with nothing open, so the run that stops at the child's approval closes its step.
  expectEqual(stepMarks(events), [["STEP_STARTED", mailer], ["STEP_FINISHED", mailer]], "run 1 steps", problems);
  expectEqual(messageTexts(events), ["Planning: the launch", "Mailer drafting: mail about the launch"], "run 1 texts", problems);
  expect(insideStep(events, mailer, (e) => e.type === "TEXT_MESSAGE_CONTENT" && e.delta.startsWith("Mailer")), "the child's text is not inside its step", problems);
  const subagent = events.find((e) => e.type === "SUBAGENT_STARTED");
  expectEqual(subagent?.subagentRunId, mailer, "the sub-agent's run id (the child turn)", problems);
  const childText = events.find((e) => e.type === "TEXT_MESSAGE_CONTENT" && e.delta.startsWith("Mailer"));
  expectEqual(childText?.subagentRunId, mailer, "the child's text names its sub-agent", problems);
  const { pending, interrupt } = waitsOnItsToolCall(run, events, agent, problems);
  if (!interrupt) return;
  expectEqual(interrupt.metadata?.["gateway/turn"], mailer, "the interrupt's gateway/turn (the child that asks)", problems);
  expectEqual(interrupt.metadata?.["gateway/details"], { body: "mail about the launch" }, "gateway/details", problems);

  const resume = buildResumeArray(pending, { [interrupt.id]: { status: "resolved", payload: { approved: true } } });
  const second = await clientRun(agent, { runId: uid("run"), resume });
  const events2 = judgeClientRun(second, problems, "resume");
  expectShape(
    events2.filter((e) => e.type !== "STATE_SNAPSHOT"),
    ["RUN_STARTED", "CUSTOM", "STEP_STARTED", "SUBAGENT_STARTED", "TOOL_CALL_RESULT", ...TEXT, "SUBAGENT_FINISHED", "STEP_FINISHED", "STEP_STARTED", "SUBAGENT_STARTED", ...TEXT, "SUBAGENT_FINISHED", "STEP_FINISHED", ...TEXT, "RUN_FINISHED"],
    problems,
    "resume (STATE_SNAPSHOT aside)",
  );
  const summariser = stepMarks(events2)[2]?.[1];
  expect(TURN_ID.test(summariser ?? "") && summariser !== mailer && summariser !== parent, `the second step is named ${JSON.stringify(summariser)}: expected its own child turn id`, problems);
  // The resuming run opens the waiting child's step again, finishes it, then runs the next child.
  expectEqual(
    stepMarks(events2),
    [["STEP_STARTED", mailer], ["STEP_FINISHED", mailer], ["STEP_STARTED", summariser], ["STEP_FINISHED", summariser]],
    "resume step order",
    problems,
  );
  const result = events2.find((e) => e.type === "TOOL_CALL_RESULT");
  expect(result?.toolCallId === interrupt.toolCallId && result?.content === "sent", `result ${JSON.stringify(result)}`, problems);
  expect(insideStep(events2, mailer, (e) => e.type === "TOOL_CALL_RESULT"), "the approved call's result is not inside the child's step", problems);
  expect(insideStep(events2, summariser, (e) => e.type === "TEXT_MESSAGE_CONTENT" && e.delta.startsWith("Summary")), "the second child's text is not inside its step", problems);
  expectEqual(messageTexts(events2), ["Mailer sent it.", "Summary of the launch.", "All delegated work is done."], "resume texts", problems);
  expect(second.finished?.outcome === "success", `resume outcome ${second.finished?.outcome}`, problems);
  expect((agent.pendingInterrupts ?? []).length === 0, "interrupts still pending on the client", problems);
  const done = await threadRecord(threadId);
  expect(done.body.latestTurn?.status === "succeeded" && done.body.interrupts?.length === 0, `thread after resume ${JSON.stringify(done.body.latestTurn)}`, problems);

  await replaysFromEveryEvent("manager", [["interrupted run", run], ["resume run", second]], problems);
  return `steps ${mailer}, ${summariser}`;
}

async function card(problems) {
  const { run, events } = await judgedFirstRun("carder", uid("th-card"), '{"title": "Plan", "steps": 2}', problems, "a card");
  expectShape(events, ["RUN_STARTED", "STATE_SNAPSHOT", ...TEXT, "CUSTOM", "RUN_FINISHED"], problems, "a card");
  const custom = events.at(-2);
  expectEqual(custom && { name: custom.name, value: custom.value }, { name: "gateway.card", value: { turn: turnOf(run), card: { title: "Plan", steps: 2 } } }, "the card event", problems);
  expect(run.finished?.outcome === "success", `outcome ${run.finished?.outcome}`, problems);
  expectEqual(messageTexts(events), ['{"title": "Plan", "steps": 2}'], "the answer the card came from", problems);
  await replayOf("carder", run, problems, "a card");

  // JSON the schema refuses (no title, no steps) is an answer, not a card.
  const other = new HttpAgent({ url: agentUrl("carder"), threadId: uid("th-card"), initialMessages: [userMessage('{"name": "Plan"}')] });
  const plain = await clientRun(other, { runId: uid("run") });
  expectShape(judgeClientRun(plain, problems, "no card"), ["RUN_STARTED", "STATE_SNAPSHOT", ...TEXT, "RUN_FINISHED"], problems, "no card");
}

async function editableState(problems) {
  const threadId = uid("th-tone");
  const agent = new HttpAgent({ url: agentUrl("editor"), threadId, initialMessages: [userMessage("write")], initialState: { tone: "casual", other: 1 } });
  const run = await clientRun(agent, { runId: uid("run") });
  const events = judgeClientRun(run, problems, "turn 1");
  expectEqual(run.input?.state, { tone: "casual", other: 1 }, "the state the client sent", problems);
  expectShape(events, ["RUN_STARTED", "STATE_SNAPSHOT", ...TEXT, "STATE_DELTA", "RUN_FINISHED"], problems, "turn 1");
  // Only the listed key is taken; `other` is not the agent's to keep.
  expectEqual(events.find((e) => e.type === "STATE_SNAPSHOT")?.snapshot, { board: { notes: [] }, tone: "casual" }, "turn 1 STATE_SNAPSHOT", problems);
  const folded = foldState(events).state;
  expectEqual(agent.state, folded, "the client's state vs snapshot + deltas (fast-json-patch)", problems);
  const thread = await threadRecord(threadId);
  expectEqual(thread.body.state, { tone: "casual" }, "GET thread state", problems);
  expectEqual(folded, { board: thread.body.board, tone: "casual" }, "snapshot + deltas vs GET board and state", problems);

  // A value the key's schema refuses: 400 before any stream, naming the key; nothing is stored.
  const history = (await getJson(`/v1/threads/${threadId}/messages?tenant=default`)).body.messages;
  const loud = { threadId, runId: uid("run"), protocolVersion: "1.0", state: { tone: "loud" }, messages: [...history, userMessage("louder")] };
  const bad = await rawRun("editor", loud);
  expect(bad.status === 400 && bad.json?.error?.code === "bad_request" && /^state\.tone/.test(bad.json?.error?.message ?? ""), `tone "loud": HTTP ${bad.status} ${short(bad.text)}`, problems);
  const after = await threadRecord(threadId);
  expect(after.body.turnCount === 1 && isDeepStrictEqual(after.body.state, { tone: "casual" }), `after the refused state: turnCount ${after.body.turnCount}, state ${JSON.stringify(after.body.state)}`, problems);

  // Turn 2 sends the client's whole state back, board included: the board is ignored, the tone
  // changes.
  agent.setState({ ...agent.state, tone: "formal" });
  agent.addMessage(userMessage("again"));
  const second = await clientRun(agent, { runId: uid("run") });
  const events2 = judgeClientRun(second, problems, "turn 2");
  expectEqual(events2.find((e) => e.type === "STATE_SNAPSHOT")?.snapshot, { board: thread.body.board, tone: "formal" }, "turn 2 STATE_SNAPSHOT", problems);
  expectEqual(agent.state, foldState(events2).state, "turn 2: the client's state vs snapshot + deltas", problems);
  const last = await threadRecord(threadId);
  expectEqual(last.body.state, { tone: "formal" }, "GET thread state after turn 2", problems);
  expectEqual(agent.state, { board: last.body.board, tone: "formal" }, "the client's state vs GET board and state after turn 2", problems);
}

// ---------- main ----------

// AGUI_GATEWAY_BIN names the binary for lib/gateway.mjs; the gateway refuses any AGUI_GATEWAY_*
// variable that is not one of its settings, so the child must not inherit it.
const https = process.argv.slice(2).includes("--https");
let certDir;
let protocols;
let tlsConfig = "";
if (https) {
  certDir = mkdtempSync(path.join(tmpdir(), "agui-tls-"));
  execFileSync(new URL("../../examples/tls/make-test-ca.sh", import.meta.url).pathname, [certDir, "127.0.0.1"]);
  tlsConfig = `[tls]\ncert_file = ${JSON.stringify(path.join(certDir, "server.crt"))}\nkey_file = ${JSON.stringify(path.join(certDir, "server.key"))}\n\n`;
  protocols = recordProtocols(require("undici"), { allowH2: true, ca: readFileSync(path.join(certDir, "ca.crt"), "utf8") });
}
gateway = await startGateway({ configToml: tlsConfig + CONFIG, env: { AGUI_GATEWAY_BIN: undefined } });
if (https && !gateway.url.startsWith("https://")) throw new Error(`--https: the gateway serves ${gateway.url}`);
try {
  await scenario("text, tool call, state delta, step; a second turn (demo)", textToolStateStep);
  await scenario("a reopened thread restates its conversation: MESSAGES_SNAPSHOT after RUN_STARTED (demo)", reopenedThread);
  await scenario("connect: the thread's opening, a later turn, a failed turn, every cut resumed (demo, failing)", connectStream);
  await scenario("the tenant's AI label leads each message (demo, acme)", aiLabel);
  await scenario("a burst of 400 deltas (burst)", burst);
  await scenario("frontend tools: declared and admitted, or refused with 400 (slow)", frontendToolsDeclared);
  await scenario("a frontend tool call: pendingToolCallIds, then the client's result continues the turn (checker)", frontendToolCall);
  await scenario("approval interrupt, pendingInterrupts and buildResumeArray resume (approver)", approvalAndResume);
  await scenario("question with choices: refused answer, then resume (asker)", questionWithChoices);
  await scenario("an escalation: a confirmation interrupt, approved with a comment (escalator)", escalation);
  await scenario("two interrupts: a partial resume is refused, then all at once (pair)", allOrNothing);
  await scenario("a failing turn ends with RUN_ERROR failed (failing)", turnFails);
  await scenario("refused runs: history_mismatch, turn_in_progress (demo, slow)", refusedRuns);
  await scenario("a cancelled turn, keepalive comments while it waits (waiter)", cancelledWithKeepalives);
  await scenario("a pre-1.0 client's interrupt shape (approver)", preOneZeroClient);
  await scenario("reconnect with Last-Event-ID mid-message and at every cut point (slow)", reconnectLive);
  await scenario("reconnect in the middle of a burst (burst)", reconnectMidBurst);
  await scenario("state: fresh stream, replay, reconnect between deltas (pinner)", stateFreshReplayReconnect);
  await scenario("state across an approval and a reloaded page (reviewer)", stateAcrossResume);
  await scenario("delegated steps: a child's approval through the parent's resume (manager, mailer, summariser)", delegatedSteps);
  await scenario("a card before RUN_FINISHED (carder)", card);
  await scenario("editable state: admitted keys in the snapshot, a bad value refused with 400 (editor)", editableState);
  await scenario("the binary transport: every run above decodes with @ag-ui/proto to its SSE events; HttpAgent reads it; a cut resumes (all)", binaryTransport);
  if (https) {
    await scenario("over HTTPS every connection negotiated h2, and the gateway served HTTP/2", async (problems) => {
      const seen = [...new Set(protocols)];
      expect(protocols.length > 0 && seen.length === 1 && seen[0] === "h2", `negotiated: ${seen.join(", ") || "nothing"} over ${protocols.length} connection(s)`, problems);
      const served = gateway.logs.filter((l) => l.includes("finished processing request"));
      const h2 = served.filter((l) => l.includes("version=HTTP/2.0")).length;
      expect(served.length > 0 && h2 === served.length, `${h2} of ${served.length} requests logged as HTTP/2.0`, problems);
    });
  }
} finally {
  await gateway.stop();
  if (certDir) rmSync(certDir, { recursive: true, force: true });
}

const passed = results.filter((r) => r.ok).length;
const skipped = results.filter((r) => r.skipped).length;
const failed = results.length - passed - skipped;
console.log(`conformance${https ? " (HTTPS, HTTP/2)" : ""}: ${passed} passed, ${failed} failed, ${skipped} skipped`);
process.exit(failed ? 1 : 0);
