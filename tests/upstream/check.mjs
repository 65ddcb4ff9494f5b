#!/usr/bin/env node
// check.mjs: proves the two upstream test servers (node/server.mjs on @ag-ui/encoder,
// python/server.py on ag-ui-protocol) are real AG-UI 1.0 servers, as judged by the official
// @ag-ui/client HttpAgent, whose verification cannot be switched off. The valid agents must
// pass it; /agents/invalid and /agents/out-of-order must be rejected by it, which is what
// obliges the gateway to reject them too (SPEC §9.3).
//
//   node tests/upstream/check.mjs [node|python]...      (default: both)
//
// Needs `npm ci` in tests/clients (the pinned client) and in tests/upstream/node, and the
// Python venv described in tests/upstream/python/requirements.txt. Prints a summary; exits 1
// on any failure.
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import net from "node:net";
import { fileURLToPath } from "node:url";

// The client is the one tests/clients pins, so every suite is judged by the same version.
const require = createRequire(new URL("../clients/package.json", import.meta.url));
const { HttpAgent, buildResumeArray } = require("@ag-ui/client");
const { EventSchema } = require("@ag-ui/core/schemas");

const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const SERVERS = {
  node: { command: process.execPath, args: [here("node/server.mjs")] },
  python: {
    command: here("python/.venv/bin/python"),
    args: [here("python/server.py")],
    missing: "python venv missing: python3 -m venv tests/upstream/python/.venv && " +
      "tests/upstream/python/.venv/bin/pip install -r tests/upstream/python/requirements.txt",
  },
};
const SECRET = "Bearer upstream-secret";

// The client reports stripped or dropped material through console.warn; for a server that
// claims to be valid, any of it is a failure. Its "Agent execution failed" log duplicates the
// rejection runAgent() throws, so it is dropped.
const clientWarnings = [];
console.warn = (...a) => clientWarnings.push(a.map(String).join(" "));
const consoleError = console.error;
console.error = (...a) => { if (!String(a[0]).startsWith("Agent execution failed")) consoleError(...a); };

function startServer(name, extraArgs = []) {
  const spec = SERVERS[name];
  if (!existsSync(spec.command)) throw new Error(spec.missing ?? `${spec.command} not found`);
  // stdin is a pipe so that closing it is a way to stop the server (and our death stops it).
  const child = spawn(spec.command, [...spec.args, ...extraArgs], { stdio: ["pipe", "pipe", "pipe"] });
  const stderr = [];
  child.stderr.on("data", (d) => stderr.push(d.toString()));
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  const ready = new Promise((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => reject(new Error(`${name} did not print its address:\n${stderr.join("")}`)), 20_000);
    child.stdout.on("data", (d) => {
      out += d.toString();
      if (!out.includes("\n")) return;
      clearTimeout(timer);
      resolve(out);
    });
    exited.then(({ code }) => { clearTimeout(timer); reject(new Error(`${name} exited with ${code}:\n${stderr.join("")}`)); });
  });
  return { child, exited, ready, stderr };
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once("error", reject);
    s.listen(0, "127.0.0.1", () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

const within = (ms, promise) => Promise.race([promise, new Promise((r) => setTimeout(() => r("timeout"), ms))]);

/** One run of the official client, with every event it accepted kept and schema-checked. */
async function run(url, { agent, input = {}, headers = {} } = {}) {
  agent ??= new HttpAgent({
    url, headers, threadId: `thread-${Math.random().toString(36).slice(2)}`,
    initialMessages: [{ id: "u1", role: "user", content: "What is the weather?" }],
  });
  const events = [];
  const stamps = [];
  const runErrors = [];
  const warningsBefore = clientWarnings.length;
  let rejected;
  try {
    await agent.runAgent({ runId: `run-${Math.random().toString(36).slice(2)}`, ...input }, {
      onEvent: ({ event }) => { events.push(event); stamps.push(Date.now()); },
      onRunErrorEvent: ({ event }) => { runErrors.push(event); },
    });
  } catch (e) {
    rejected = String(e?.message ?? e).replace(/\s+/g, " ");
  }
  const schemaProblems = events.flatMap((ev) => {
    const r = EventSchema.safeParse(ev);
    return r.success ? [] : [`${ev.type}: ${r.error.issues.map((i) => `/${i.path.join("/")} ${i.message}`).join("; ")}`];
  });
  return { agent, events, stamps, runErrors, rejected, schemaProblems, warnings: clientWarnings.slice(warningsBefore) };
}

const types = (events) => events.map((e) => e.type).join(" ");
const textOf = (events, messageId) => events
  .filter((e) => e.type === "TEXT_MESSAGE_CONTENT" && e.messageId === messageId).map((e) => e.delta).join("");

async function checkServer(name) {
  const results = [];
  const check = (label, problems, note) => results.push({ label, problems: problems.filter(Boolean), note });
  const accepted = (r) => [
    r.rejected && `client rejected: ${r.rejected.slice(0, 300)}`,
    ...r.schemaProblems, ...r.warnings.map((w) => `client warning: ${w.slice(0, 200)}`),
  ];

  const server = startServer(name);
  const line = await server.ready;
  const match = /^listening (http:\/\/127\.0\.0\.1:(\d+))\n$/.exec(line);
  check("prints exactly `listening http://127.0.0.1:<port>`", [!match && `stdout was ${JSON.stringify(line)}`]);
  if (!match) { server.child.kill("SIGKILL"); return results; }
  const base = match[1];

  // chat: twice on one agent, so the second run carries history and the run counter moves.
  {
    const first = await run(`${base}/agents/chat`, { headers: { Authorization: SECRET } });
    const e = first.events;
    const heard = e.find((x) => x.type === "TEXT_MESSAGE_START")?.messageId;
    const start = e.find((x) => x.type === "TOOL_CALL_START");
    const result = e.find((x) => x.type === "TOOL_CALL_RESULT");
    const done = e.filter((x) => x.type === "TEXT_MESSAGE_START")[1]?.messageId;
    const expected = "RUN_STARTED TEXT_MESSAGE_START TEXT_MESSAGE_CONTENT TEXT_MESSAGE_CONTENT TEXT_MESSAGE_END " +
      "TOOL_CALL_START TOOL_CALL_ARGS TOOL_CALL_ARGS TOOL_CALL_END TOOL_CALL_RESULT " +
      "TEXT_MESSAGE_START TEXT_MESSAGE_CONTENT TEXT_MESSAGE_CONTENT TEXT_MESSAGE_END STATE_SNAPSHOT RUN_FINISHED";
    const runs1 = first.agent.state?.upstream?.runs;
    check("chat: accepted, events in order, text, tool call, result, state", [
      ...accepted(first),
      types(e) !== expected && `events were ${types(e)}`,
      e[0]?.threadId !== first.agent.threadId && "RUN_STARTED does not echo threadId",
      e[0]?.protocolVersion !== "1.0" && `protocolVersion ${e[0]?.protocolVersion}`,
      textOf(e, heard) !== "Upstream heard: What is the weather?" && `first text ${JSON.stringify(textOf(e, heard))}`,
      start?.parentMessageId !== heard && "TOOL_CALL_START.parentMessageId is not the message",
      e.filter((x) => x.type === "TOOL_CALL_ARGS").map((x) => x.delta).join("") !== '{"city":"Paris"}' && "tool args",
      (result?.toolCallId !== start?.toolCallId || result?.content !== "sunny") && "tool result",
      textOf(e, done) !== "Done after 1 messages." && `second text ${JSON.stringify(textOf(e, done))}`,
      !Number.isInteger(runs1) && `state ${JSON.stringify(first.agent.state)}`,
      e.at(-1)?.outcome?.type !== "success" && `outcome ${JSON.stringify(e.at(-1)?.outcome)}`,
    ]);

    await fetch(`${base}/requests`, { method: "DELETE" });
    first.agent.addMessage({ id: "u2", role: "user", content: "And tomorrow?" });
    const sent = first.agent.messages.length;
    const second = await run(`${base}/agents/chat`, { agent: first.agent });
    const [heard2, done2] = second.events.filter((x) => x.type === "TEXT_MESSAGE_START").map((x) => x.messageId);
    const recorded = await (await fetch(`${base}/requests`)).json();
    check("chat with history: counts messages, counts runs, records the request", [
      ...accepted(second),
      textOf(second.events, heard2) !== "Upstream heard: And tomorrow?" && `text ${JSON.stringify(textOf(second.events, heard2))}`,
      textOf(second.events, done2) !== `Done after ${sent} messages.` && `text ${JSON.stringify(textOf(second.events, done2))} (sent ${sent})`,
      second.agent.state?.upstream?.runs !== runs1 + 1 && `runs went ${runs1} -> ${second.agent.state?.upstream?.runs}`,
      recorded.length !== 1 && `DELETE then one run recorded ${recorded.length} requests`,
      recorded[0]?.path !== "/agents/chat" && `recorded path ${recorded[0]?.path}`,
      recorded[0]?.headers?.authorization !== SECRET && `recorded authorization ${recorded[0]?.headers?.authorization}`,
      recorded[0]?.headers?.accept !== "text/event-stream" && `recorded accept ${recorded[0]?.headers?.accept}`,
      recorded[0]?.body?.messages?.length !== sent && "recorded body does not carry the history",
      recorded[0]?.body?.messages?.at(-1)?.content !== "And tomorrow?" && "recorded body lacks the new message",
      recorded[0]?.body?.runId !== second.events[0]?.runId && "recorded runId differs from the run's",
    ]);
  }

  // approval: interrupt, then the client's own resume continues to success.
  {
    const first = await run(`${base}/agents/approval`);
    const pending = first.agent.pendingInterrupts ?? [];
    const call = first.events.find((x) => x.type === "TOOL_CALL_START");
    const expectedSchema = JSON.stringify({ type: "object", properties: { approved: { type: "boolean" }, note: { type: "string" } }, required: ["approved"] });
    check("approval: ends with the interrupt outcome", [
      ...accepted(first),
      first.events.at(-1)?.outcome?.type !== "interrupt" && `outcome ${JSON.stringify(first.events.at(-1)?.outcome)}`,
      (pending.length !== 1 || pending[0].id !== "up-approval-1") && `pendingInterrupts ${JSON.stringify(pending)}`,
      pending[0]?.reason !== "tool_approval" && "reason",
      pending[0]?.message !== "Send the email?" && "message",
      call?.toolCallName !== "send_email" && "no send_email call",
      pending[0]?.toolCallId !== call?.toolCallId && "interrupt does not name the call",
      call?.toolCallId !== `${first.agent.threadId}-send` && `call id ${call?.toolCallId} not derived from the thread`,
      JSON.stringify(pending[0]?.responseSchema) !== expectedSchema && "responseSchema",
      first.events.some((x) => x.type === "TOOL_CALL_RESULT") && "the call ran before approval",
    ]);

    const resume = buildResumeArray(pending, { "up-approval-1": { status: "resolved", payload: { approved: true, note: "ship it" } } });
    const second = await run(`${base}/agents/approval`, { agent: first.agent, input: { resume } });
    const result = second.events.find((x) => x.type === "TOOL_CALL_RESULT");
    const said = second.events.find((x) => x.type === "TEXT_MESSAGE_START")?.messageId;
    check("approval resumed with approved:true: the call runs, success", [
      ...accepted(second),
      (result?.toolCallId !== call?.toolCallId || result?.content !== "sent") && `result ${JSON.stringify(result)}`,
      textOf(second.events, said) !== "Sent. Note: ship it" && `text ${JSON.stringify(textOf(second.events, said))}`,
      second.events.at(-1)?.outcome?.type !== "success" && "did not finish success",
      (second.agent.pendingInterrupts ?? []).length !== 0 && "interrupts still pending",
    ]);

    const denied = await run(`${base}/agents/approval`);
    const cancel = buildResumeArray(denied.agent.pendingInterrupts ?? [], { "up-approval-1": { status: "cancelled" } });
    const after = await run(`${base}/agents/approval`, { agent: denied.agent, input: { resume: cancel } });
    const said2 = after.events.find((x) => x.type === "TEXT_MESSAGE_START")?.messageId;
    check("approval resumed with cancelled: not sent, success", [
      ...accepted(denied), ...accepted(after),
      after.events.some((x) => x.type === "TOOL_CALL_RESULT") && "a cancelled call ran",
      textOf(after.events, said2) !== "Not sent." && `text ${JSON.stringify(textOf(after.events, said2))}`,
      after.events.at(-1)?.outcome?.type !== "success" && "did not finish success",
    ]);

    // A resume that leaves the upstream's interrupt unanswered (the client cannot send one for
    // its own pending interrupts, so a fresh agent sends another id).
    const missing = await run(`${base}/agents/approval`, { input: { resume: [{ interruptId: "someone-else", status: "resolved", payload: { approved: true } }] } });
    check("approval with a resume lacking up-approval-1: RUN_ERROR", [
      missing.rejected && `client rejected: ${missing.rejected}`,
      types(missing.events) !== "RUN_ERROR" && `events were ${types(missing.events)}`,
      missing.runErrors[0]?.message !== "missing resume for up-approval-1" && `message ${missing.runErrors[0]?.message}`,
    ]);
  }

  // empty-delta: valid in AG-UI 1.0, so the client must accept it.
  {
    const r = await run(`${base}/agents/empty-delta`);
    check("empty-delta: an empty TEXT_MESSAGE_CONTENT delta is accepted", [
      ...accepted(r),
      !r.events.some((x) => x.type === "TEXT_MESSAGE_CONTENT" && x.delta === "") && "no empty delta was delivered",
    ]);
  }

  // slow: the same run, paced.
  {
    const r = await run(`${base}/agents/slow`);
    const gaps = r.stamps.slice(1).map((t, i) => t - r.stamps[i]);
    check("slow: the chat run with ~200 ms between events", [
      ...accepted(r),
      r.events.length !== 16 && `${r.events.length} events`,
      Math.min(...gaps) < 150 && `shortest gap ${Math.min(...gaps)} ms`,
    ]);
  }

  // Streams the official client must refuse: these are what the gateway must refuse too.
  for (const [path, expectWhy] of [
    ["/agents/invalid", /delta/],
    ["/agents/invalid?case=null-delta", /delta/],
    ["/agents/invalid?case=float-timestamp", /timestamp|integer|int/],
    ["/agents/out-of-order", /No active text message found/],
  ]) {
    const r = await run(`${base}${path}`);
    check(`${path}: REJECTED by the official client`, [
      !r.rejected && `accepted (${types(r.events)})`,
      r.rejected && !expectWhy.test(r.rejected) && `rejected for another reason: ${r.rejected.slice(0, 300)}`,
    ], r.rejected && `client: ${r.rejected.slice(0, 160)}`);
  }

  // A malformed RunAgentInput is refused before any stream, as a stock server does.
  {
    const res = await fetch(`${base}/agents/chat`, { method: "POST", headers: { "Content-Type": "application/json", Accept: "text/event-stream" }, body: JSON.stringify({ threadId: "t" }) });
    check("a body that is no RunAgentInput: 400", [res.status !== 400 && `status ${res.status}`]);
  }

  // The Node server negotiates like a stock @ag-ui/encoder server: a wildcard Accept gets
  // protobuf. Python's encoder only speaks SSE.
  {
    const res = await fetch(`${base}/agents/chat`, { method: "POST", headers: { "Content-Type": "application/json", Accept: "*/*" }, body: JSON.stringify({ threadId: "t", runId: "r", messages: [] }) });
    await res.arrayBuffer();
    const want = name === "node" ? "application/vnd.ag-ui.event+proto" : "text/event-stream";
    check(`Accept */* answers ${want}`, [!(res.headers.get("content-type") ?? "").startsWith(want) && `content-type ${res.headers.get("content-type")}`]);
  }

  // Stopping: closing stdin ends it; so does SIGTERM (on a fixed --port, which is honoured).
  server.child.stdin.end();
  const byStdin = await within(5_000, server.exited);
  check("exits when stdin closes", [byStdin === "timeout" && "still running 5 s after stdin closed"]);
  if (byStdin === "timeout") server.child.kill("SIGKILL");

  const port = await freePort();
  const fixed = startServer(name, ["--port", String(port)]);
  const fixedLine = await fixed.ready.catch((e) => e.message);
  fixed.child.kill("SIGTERM");
  const bySignal = await within(5_000, fixed.exited);
  check("--port N is honoured; exits on SIGTERM", [
    fixedLine !== `listening http://127.0.0.1:${port}\n` && `stdout was ${JSON.stringify(fixedLine)}`,
    bySignal === "timeout" && "still running 5 s after SIGTERM",
  ]);
  if (bySignal === "timeout") fixed.child.kill("SIGKILL");
  return results;
}

const chosen = process.argv.slice(2).length ? process.argv.slice(2) : Object.keys(SERVERS);
let failed = 0;
for (const name of chosen) {
  if (!SERVERS[name]) { console.log(`unknown server ${name}; one of ${Object.keys(SERVERS).join(", ")}`); process.exit(2); }
  let results;
  try {
    results = await checkServer(name);
  } catch (e) {
    results = [{ label: "server starts", problems: [String(e?.message ?? e)] }];
  }
  console.log(`${name} upstream`);
  for (const { label, problems, note } of results) {
    console.log(`  ${problems.length ? "FAIL" : "ok  "}  ${label}`);
    if (note && !problems.length) console.log(`          ${note}`);
    for (const p of problems) console.log(`          ${p}`);
    if (problems.length) failed += 1;
  }
}
console.log(failed ? `FAIL: ${failed} check(s) failed` : "PASS: both servers are AG-UI 1.0 servers the official client accepts and rejects as expected");
process.exit(failed ? 1 : 0);
