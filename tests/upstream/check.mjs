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
import net from "node:net";
import { fileURLToPath } from "node:url";
// The client (tests/clients' pinned one), the server's start, one run, the checks' summary.
import { HttpAgent, buildResumeArray, checkChosen, checkList, randomId, runClient, startServer } from "../support/client_checks.mjs";

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
    url, headers, threadId: `thread-${randomId()}`,
    initialMessages: [{ id: "u1", role: "user", content: "What is the weather?" }],
  });
  return runClient(agent, input);
}

const types = (events) => events.map((e) => e.type).join(" ");
const textOf = (events, messageId) => events
  .filter((e) => e.type === "TEXT_MESSAGE_CONTENT" && e.messageId === messageId).map((e) => e.delta).join("");

async function checkServer(name) {
  const { results, check, accepted } = checkList();

  const server = startServer(name, SERVERS[name]);
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
    // Paced, not sent at the end: judged by the median gap, which a busy machine cannot move
    // (a late event shortens the gap after it, but only that one).
    const gaps = r.stamps.slice(1).map((t, i) => t - r.stamps[i]).sort((a, b) => a - b);
    const median = gaps[Math.floor(gaps.length / 2)];
    check("slow: the chat run with ~200 ms between events", [
      ...accepted(r),
      r.events.length !== 16 && `${r.events.length} events`,
      !(median >= 150) && `median gap ${median} ms (gaps ${gaps.join(", ")})`,
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
  const fixed = startServer(name, SERVERS[name], ["--port", String(port)]);
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

await checkChosen(SERVERS, checkServer, {
  heading: (name) => `${name} upstream`,
  passLine: "PASS: both servers are AG-UI 1.0 servers the official client accepts and rejects as expected",
});
