// connectAgent() against a real gateway: a thread restored after a reload and followed live.
//
// Each connection goes through the official @ag-ui/client pipeline (connectAgent: enforcement,
// chunk expansion, event verification and the reducer), so an event out of order, twice or
// missing either fails the connection or shows up in the agent's messages. "The gateway's
// conversation" is GET /v1/threads/{thread}/messages, "its board" GET /v1/threads/{thread}.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { ResumableHttpAgent, connectUrlFor } from "@agui-gateway/resumable-client";
import { startGateway } from "../../../tests/clients/lib/gateway.mjs";
import { startCuttingProxy, eventsPassed, lastEventIdOf } from "./proxy.mjs";

// A slow turn (4 characters per event, 15 ms apart) with a board note, so a connection can join
// it in the middle and the thread has a board to restore.
const SAY =
  "Streaming slowly so that a page reloaded in the middle of this answer connects to the thread " +
  "and sees the rest of it arrive, with the conversation and the board as the gateway holds them. {input}";
const CONFIG = `
[[tenants]]
name = "default"

[[agents]]
name = "slow"
kind = "script"
chunk_chars = 4
chunk_delay_ms = 15
steps = [
  { say = ${JSON.stringify(SAY)} },
  { note = "noted: {input}", tags = ["slow"] },
  { say = "Done." },
]
`;

let gateway;
let runUrl;

before(async () => {
  gateway = await startGateway({ configToml: CONFIG, env: { AGUI_GATEWAY_BIN: undefined } });
  runUrl = `${gateway.url}/v1/agui/agents/slow?tenant=default`;
});

after(async () => {
  await gateway?.stop();
});

/** Polls `condition` every 20 ms until it holds, failing after `timeoutMs` with `what`. */
async function waitFor(condition, what, timeoutMs = 15_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await condition();
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

async function getJson(path) {
  const response = await fetch(`${gateway.url}${path}${path.includes("?") ? "&" : "?"}tenant=default`);
  assert.equal(response.status, 200, `GET ${path} is answered`);
  return response.json();
}

const conversationOf = async (threadId) => (await getJson(`/v1/threads/${encodeURIComponent(threadId)}/messages`)).messages;
const threadOf = (threadId) => getJson(`/v1/threads/${encodeURIComponent(threadId)}`);

// What a message says, as JSON: the reducer builds new objects, content is the point.
const asJson = (value) => JSON.parse(JSON.stringify(value));

/** Runs one turn on `threadId` from a page that holds the gateway's conversation. */
async function runTurn(threadId, text, subscriber = {}) {
  // A thread with no turn yet is not one the gateway shows (403): its history is empty.
  const known = await fetch(`${gateway.url}/v1/threads/${encodeURIComponent(threadId)}?tenant=default`);
  await known.body?.cancel();
  const history = known.status === 200 ? await conversationOf(threadId) : [];
  const agent = new ResumableHttpAgent({ url: runUrl, threadId, initialMessages: history });
  agent.addMessage({ id: `user-${randomUUID()}`, role: "user", content: text });
  await agent.runAgent({ runId: `run-${randomUUID()}` }, subscriber);
  return agent;
}

/** A page opened afresh on `threadId` (no messages, no state) and connected to it. */
function connectFresh(threadId, options = {}) {
  const agent = new ResumableHttpAgent({ url: runUrl, threadId, reconnectDelayMs: 50, ...options });
  const received = [];
  const connection = { agent, received, outcome: undefined };
  connection.done = agent
    .connectAgent({ runId: `connect-${randomUUID()}` }, { onEvent: ({ event }) => void received.push(event) })
    .then(
      () => ({ error: undefined }),
      (error) => ({ error }),
    )
    .then((outcome) => (connection.outcome = outcome));
  return connection;
}

/** waitFor on a connection's events, failing at once if the connection ends with an error. */
function until(connection, condition, what) {
  return waitFor(() => {
    if (connection.outcome?.error) throw new Error(`the connection failed while waiting for ${what}: ${connection.outcome.error.message}`);
    return condition();
  }, what);
}

/** Ends a connection and asserts it ended without an error. */
async function leave(connection) {
  await connection.agent.detachActiveRun();
  const { error } = await connection.done;
  assert.equal(error, undefined, `the connection ends cleanly: ${error}`);
}

test("the connect URL is the run URL's path with /connect, the query kept", () => {
  assert.equal(connectUrlFor("https://gw.example/v1/agui/agents/demo?tenant=t"), "https://gw.example/v1/agui/agents/demo/connect?tenant=t");
  assert.equal(connectUrlFor("/api/agents/demo"), "/api/agents/demo/connect");
  assert.equal(connectUrlFor("/api/agents/demo/"), "/api/agents/demo/connect");
  const agent = new ResumableHttpAgent({ url: "/x?tenant=a", connectUrl: "/y" });
  assert.equal(agent.connectUrl, "/y", "connectUrl can be given");
  assert.equal(agent.clone().connectUrl, "/y", "a clone keeps it");
});

test("connectAgent restores a finished thread's conversation and board into a fresh agent", async () => {
  const threadId = `reload-${randomUUID()}`;
  await runTurn(threadId, "first question");
  const expectedMessages = await conversationOf(threadId);
  const thread = await threadOf(threadId);
  assert.ok(thread.board?.notes?.length >= 1, "the turn pinned a note");

  const connection = connectFresh(threadId);
  await until(connection, () => connection.received.some((e) => e.type === "STATE_SNAPSHOT"), "the connection's STATE_SNAPSHOT");

  assert.deepStrictEqual(asJson(connection.agent.messages), asJson(expectedMessages), "the agent holds the gateway's conversation, its ids included");
  assert.deepStrictEqual(asJson(connection.agent.state.board), asJson(thread.board), "the agent holds the thread's board");
  const types = connection.received.map((e) => e.type);
  assert.deepEqual(types.slice(0, 3), ["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT"], "the stream opens with the thread");
  assert.ok(connection.agent.isRunning, "the connection stays open on an idle thread");
  await leave(connection);
  console.log(`measured: restored ${expectedMessages.length} messages and ${thread.board.notes.length} note(s); events: ${types.join(",")}`);
});

test("a connected agent follows later turns started elsewhere, each as its own run", async () => {
  const threadId = `watch-${randomUUID()}`;
  await runTurn(threadId, "first");
  const connection = connectFresh(threadId);
  await until(connection, () => connection.received.some((e) => e.type === "STATE_SNAPSHOT"), "the connection's STATE_SNAPSHOT");
  const runsBefore = connection.received.filter((e) => e.type === "RUN_STARTED").length;

  // Two more turns, each from another "device"; the connected agent is told nothing but its stream.
  for (const text of ["second", "third"]) {
    let firstDeltaAt;
    const runner = runTurn(threadId, text, {
      onTextMessageContentEvent: () => void (firstDeltaAt ??= connection.received.length),
    });
    // The connected agent sees the turn while it streams, not after it.
    await waitFor(
      () => firstDeltaAt !== undefined && connection.received.filter((e) => e.type === "TEXT_MESSAGE_CONTENT").length > 0,
      `the turn "${text}" to stream`,
    );
    await runner;
    const expected = await conversationOf(threadId);
    await waitFor(
      () => JSON.stringify(asJson(connection.agent.messages)) === JSON.stringify(asJson(expected)),
      `the connected agent to hold the conversation after "${text}"`,
    ).catch((error) => {
      assert.deepStrictEqual(asJson(connection.agent.messages), asJson(expected), error.message);
    });
  }
  const thread = await threadOf(threadId);
  assert.deepStrictEqual(asJson(connection.agent.state.board), asJson(thread.board), "the board followed the turns");
  const runs = connection.received.filter((e) => e.type === "RUN_STARTED").length - runsBefore;
  const finished = connection.received.filter((e) => e.type === "RUN_FINISHED").length;
  assert.equal(runs, 2, "each later turn is its own run on the connect stream");
  assert.ok(finished >= 2, "each later turn finished on the stream");
  await leave(connection);
  console.log(`measured: ${connection.received.length} events over the connection, ${runs} later turns followed, ${thread.board.notes.length} notes`);
});

test("a connection joining a running turn gets the rest of it live, across a cut, once", async (t) => {
  const threadId = `join-${randomUUID()}`;
  await runTurn(threadId, "warm up");
  // The second connection through the proxy is cut in the middle of the live turn.
  const proxy = await startCuttingProxy(gateway.url, (i) => (i === 0 ? { afterHead: 4_000 } : undefined));
  t.after(() => proxy.close());

  let streamed = 0;
  const runner = runTurn(threadId, "join me", { onTextMessageContentEvent: () => void (streamed += 1) });
  await waitFor(() => streamed >= 3, "the turn to be under way");
  const joinedAt = streamed;
  const connection = connectFresh(threadId, { url: `${proxy.url}/v1/agui/agents/slow?tenant=default` });
  const runnerAgent = await runner;
  const expected = await conversationOf(threadId);
  await waitFor(
    () => JSON.stringify(asJson(connection.agent.messages)) === JSON.stringify(asJson(expected)),
    "the connected agent to hold the whole answer",
  ).catch((error) => {
    assert.deepStrictEqual(asJson(connection.agent.messages), asJson(expected), error.message);
  });
  assert.deepStrictEqual(asJson(connection.agent.messages), asJson(runnerAgent.messages), "both pages hold the same conversation");

  assert.equal(proxy.cuts, 1, "the proxy cut the connect stream");
  await waitFor(() => proxy.connections.length >= 2, "the reconnect");
  const resumedAfter = lastEventIdOf(proxy.connections[1]);
  const passed = eventsPassed(proxy.connections[0]);
  assert.equal(resumedAfter, passed.whole.at(-1), "the reconnect continues after the last whole event");
  assert.equal(lastEventIdOf(proxy.connections[0]), undefined, "the first connection had no Last-Event-ID");
  // Verification in connectAgent rejects a TEXT_MESSAGE_START twice or a RUN_STARTED inside a
  // run; the connection is still open, so nothing of the sort arrived.
  assert.ok(connection.agent.isRunning, "the connection is still open after the turn");
  const starts = connection.received.filter((e) => e.type === "TEXT_MESSAGE_START").map((e) => e.messageId);
  assert.equal(new Set(starts).size, starts.length, "no message started twice");
  await leave(connection);
  console.log(
    `measured: joined after ${joinedAt} of ${streamed} deltas; cut after ${passed.whole.length} whole events, resumed after ${resumedAfter}; ` +
      `${connection.received.length} events; messages = the gateway's (${expected.length})`,
  );
});

test("abortRun ends a connection at once; connecting again starts from the thread", async () => {
  const threadId = `abort-${randomUUID()}`;
  await runTurn(threadId, "hello");
  const connection = connectFresh(threadId);
  await until(connection, () => connection.received.some((e) => e.type === "STATE_SNAPSHOT"), "the first connection's snapshot");
  connection.agent.abortRun();
  const { error } = await connection.done;
  assert.equal(error, undefined, `an aborted connection resolves: ${error}`);
  assert.equal(connection.agent.isRunning, false);

  // The same agent connects again: abortRun's controller does not abort the new connection.
  const again = [];
  const second = connection.agent.connectAgent({}, { onEvent: ({ event }) => void again.push(event) });
  await waitFor(() => again.some((e) => e.type === "STATE_SNAPSHOT"), "the second connection's snapshot");
  assert.deepStrictEqual(asJson(connection.agent.messages), asJson(await conversationOf(threadId)));
  await connection.agent.detachActiveRun();
  await second;
});

test("connecting to a thread of another tenant fails with the gateway's status", async () => {
  const threadId = `private-${randomUUID()}`;
  await runTurn(threadId, "hello");
  const agent = new ResumableHttpAgent({ url: `${gateway.url}/v1/agui/agents/slow?tenant=nobody`, threadId });
  const error = await agent.connectAgent().then(
    () => undefined,
    (e) => e,
  );
  assert.ok(error, "connectAgent rejects");
  assert.ok(error.status >= 400 && error.status < 500, `a 4xx: ${error.message}`);
  assert.equal(agent.messages.length, 0, "nothing was restored");
});

test("a connection outlives the gateway's stream limit: each close is resumed, between turns too", async (t) => {
  // The gateway ends every stream after limits.stream_max_secs, cleanly (SPEC §4.4); on a
  // watched thread that is mostly between turns, after a RUN_FINISHED, where a run would be over.
  // An idle stream still brings its keepalives (each a sign of a healthy connection, which
  // starts the reconnect count again), as a 30-minute stream with 15-second keepalives does.
  const shortStreams = await startGateway({
    configToml: `[limits]\nstream_max_secs = 2\nkeepalive_secs = 1\n${CONFIG}`,
    env: { AGUI_GATEWAY_BIN: undefined },
  });
  t.after(() => shortStreams.stop());
  const url = `${shortStreams.url}/v1/agui/agents/slow?tenant=default`;
  const requests = [];
  const countingFetch = (target, init) => {
    requests.push({ url: target, lastEventId: init.headers["Last-Event-ID"] });
    return fetch(target, init);
  };
  const threadId = `long-watch-${randomUUID()}`;
  const starter = new ResumableHttpAgent({ url, threadId, initialMessages: [{ id: `u-${randomUUID()}`, role: "user", content: "one" }] });
  await starter.runAgent({ runId: `run-${randomUUID()}` });

  const connection = connectFresh(threadId, { url, fetch: countingFetch, maxReconnects: 2 });
  // Three streams: the opening one and two continuations after the gateway's closes.
  await until(connection, () => requests.length >= 3, "two closes by the gateway to be resumed");
  assert.ok(requests.slice(1).every((r) => r.lastEventId), "every continuation names the last event it had");
  assert.ok(requests.every((r) => r.url.endsWith("/slow/connect?tenant=default")), "all on the connect route");

  // A turn started elsewhere still reaches the connection, across further closes.
  starter.addMessage({ id: `u-${randomUUID()}`, role: "user", content: "two" });
  await starter.runAgent({ runId: `run-${randomUUID()}` });
  const response = await fetch(`${shortStreams.url}/v1/threads/${threadId}/messages?tenant=default`);
  const { messages } = await response.json();
  await until(
    connection,
    () => JSON.stringify(asJson(connection.agent.messages)) === JSON.stringify(asJson(messages)),
    "the later turn on the connection",
  ).catch((error) => {
    assert.deepStrictEqual(asJson(connection.agent.messages), asJson(messages), error.message);
  });
  assert.ok(connection.agent.isRunning, "the connection is still open");
  await leave(connection);
  console.log(`measured: stream_max_secs = 2, keepalive_secs = 1; the connection took ${requests.length} streams; ${connection.received.length} events`);
});

/** Reads SSE frames with data from a response until `stop(frame)` says so; returns them. */
async function readFrames(response, stop) {
  const frames = [];
  const decoder = new TextDecoder();
  let buffer = "";
  for await (const chunk of response.body) {
    buffer += decoder.decode(chunk, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const lines = block.split("\n");
      const data = lines.filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, "")).join("\n");
      if (!data) continue;
      const frame = { id: lines.find((l) => l.startsWith("id:"))?.slice(3).trim(), event: JSON.parse(data) };
      frames.push(frame);
      if (stop(frame)) {
        await response.body.cancel().catch(() => {});
        return frames;
      }
    }
  }
  return frames;
}

test(
  "Last-Event-ID after an idle thread's opening run continues after it, not with the opening again",
  async () => {
    const threadId = `resume-opening-${randomUUID()}`;
    await runTurn(threadId, "hello");
    const connectUrl = `${gateway.url}/v1/agui/agents/slow/connect?tenant=default`;
    const body = JSON.stringify({ threadId, runId: `connect-${randomUUID()}`, messages: [] });
    const post = (headers = {}) =>
      fetch(connectUrl, { method: "POST", headers: { "content-type": "application/json", accept: "text/event-stream", ...headers }, body });
    const opening = await readFrames(await post(), (f) => f.event.type === "RUN_FINISHED");
    const finishedId = opening.at(-1).id;

    const resumed = await post({ "Last-Event-ID": finishedId });
    assert.equal(resumed.status, 200);
    // The next turn is the only thing that may follow the opening run.
    const next = runTurn(threadId, "again");
    const [first] = await readFrames(resumed, () => true);
    await next;
    assert.ok(!opening.some((f) => f.id === first.id), `the resumed stream starts after ${finishedId}, not with ${first.id} (${first.event.type}) again`);
  },
);
