// The resumable client against a real gateway through a proxy that cuts connections mid-run.
//
// Each run goes through the official @ag-ui/client pipeline (runAgent: enforcement, chunk
// expansion and event verification, which cannot be switched off), so a duplicated, missing or
// reordered event would either fail the run or show up in what the app received. "The log" is
// the run replayed straight from the gateway (the same POST with no Last-Event-ID), which the
// gateway renders from its event log byte for byte.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { HttpAgent } from "@ag-ui/client";
import { ResumableHttpAgent } from "@agui-gateway/resumable-client";
import { startGateway } from "../../../tests/clients/lib/gateway.mjs";
import { startCuttingProxy, eventsPassed, lastEventIdOf, requestBodyOf } from "./proxy.mjs";

// A slow, long run: 4 characters per event, 15 ms apart, so a cut lands in the middle of it
// and the turn is still being written while the client reconnects.
const SAY =
  "Streaming slowly so that a client can lose its connection in the middle of a message and " +
  "come back for the rest without missing a word or hearing one twice. Every few characters " +
  "is its own event with its own id, and the gateway writes each one to its log before any " +
  "client sees it, so a reconnect asks for everything after the last id it holds. {input}";
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
  { tool = "search", args = { q = "{input}" }, result = "found" },
  { note = "slow note", tags = ["slow"] },
  { say = "And a second answer after the tool." },
]

# Twice as long, for following a run across several of the gateway's own stream closes.
[[agents]]
name = "long"
kind = "script"
chunk_chars = 4
chunk_delay_ms = 15
steps = [ { say = ${JSON.stringify(SAY)} }, { say = ${JSON.stringify(SAY)} } ]
`;

let gateway;
let agentUrl;
// Bytes in a whole run's response, measured once on a run nobody cuts.
let fullRunBytes;

before(async () => {
  // startGateway hands the whole environment to the gateway, which refuses any unknown
  // AGUI_GATEWAY_* variable as a setting ("environment override AGUI_GATEWAY_BIN: no such
  // setting"), including the one that names the binary; so that one is left out.
  gateway = await startGateway({ configToml: CONFIG, env: { AGUI_GATEWAY_BIN: undefined } });
  agentUrl = `${gateway.url}/v1/agui/agents/slow?tenant=default`;
  const body = JSON.stringify({
    threadId: `calibrate-${randomUUID()}`,
    runId: "run-1",
    messages: [{ id: "u1", role: "user", content: "calibrate" }],
  });
  const response = await fetch(agentUrl, { method: "POST", headers: { "Content-Type": "application/json" }, body });
  assert.equal(response.status, 200);
  fullRunBytes = Buffer.byteLength(await response.text());
});

after(async () => {
  await gateway?.stop();
});

/** An agent (resumable unless told otherwise) on a new thread, asking one question. */
function newAgent(url, { Agent = ResumableHttpAgent, ...options } = {}) {
  return new Agent({
    url,
    threadId: `thread-${randomUUID()}`,
    initialMessages: [{ id: `msg-${randomUUID()}`, role: "user", content: "keep going" }],
    reconnectDelayMs: 50,
    ...options,
  });
}

/** Runs the agent to its end; returns what the app saw, or the error runAgent rejected with. */
async function runCollecting(agent) {
  const received = [];
  const runId = `run-${randomUUID()}`;
  try {
    await agent.runAgent({ runId }, { onEvent: ({ event }) => void received.push(event) });
    return { runId, received };
  } catch (error) {
    return { runId, received, error };
  }
}

/** The run's log: the same POST, straight to the gateway (the suite's, unless told), with no Last-Event-ID. */
async function replay(body, url = agentUrl) {
  const response = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
    body,
  });
  assert.equal(response.status, 200, "the replay of the run is answered");
  const raw = await response.text();
  return { raw, frames: parseFrames(raw) };
}

/** The SSE frames with data of a response body, as `{ id, event }`. */
function parseFrames(raw) {
  return raw
    .split("\n\n")
    .filter((block) => block.split("\n").some((line) => line.startsWith("data:")))
    .map((block) => {
      const lines = block.split("\n");
      const id = lines.find((l) => l.startsWith("id:"))?.slice(3).trim();
      const data = lines.filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, "")).join("\n");
      return { id, event: JSON.parse(data) };
    });
}

// What an event says, as JSON: the client's schema pass builds new objects, so identity and key
// order are not the point, content is.
const asJson = (event) => JSON.parse(JSON.stringify(event));

/** Asserts the app received exactly the log's events, in order, once each. */
function assertReceivedIsTheLog(received, log, what) {
  const expected = log.frames.map((f) => asJson(f.event));
  const got = received.map(asJson);
  assert.equal(got.length, expected.length, `${what}: the app received ${got.length} events, the log holds ${expected.length}`);
  assert.deepStrictEqual(got, expected, `${what}: the events the app received are the log's, in order`);
  const keys = got.map((e) => JSON.stringify(e));
  assert.equal(new Set(keys).size, keys.length, `${what}: no event arrived twice`);
  assert.equal(got.filter((e) => e.type === "RUN_FINISHED").length, 1, `${what}: exactly one RUN_FINISHED`);
}

/** Runs `fn`, collecting unhandled rejections instead of letting them fail the test run. */
async function catchingStrayRejections(fn) {
  const installed = process.listeners("unhandledRejection");
  const stray = [];
  const collect = (reason) => void stray.push(reason);
  process.removeAllListeners("unhandledRejection");
  process.on("unhandledRejection", collect);
  try {
    const result = await fn();
    // Node reports a promise left rejected and unhandled once the callback that left it returns
    // and the microtask queue drains; one turn of the event loop later every such rejection of
    // the run has been reported.
    await oneEventLoopTurn();
    return { result, stray };
  } finally {
    process.off("unhandledRejection", collect);
    for (const listener of installed) process.on("unhandledRejection", listener);
  }
}

/** Resolves after everything already due on the event loop (callbacks, microtasks) has run. */
const oneEventLoopTurn = () => new Promise((resolve) => setImmediate(resolve));

/** The assistant messages' text as the log spells it, by message id. */
function textsOfLog(log) {
  const texts = new Map();
  for (const { event } of log.frames) {
    if (event.type === "TEXT_MESSAGE_CONTENT") texts.set(event.messageId, (texts.get(event.messageId) ?? "") + event.delta);
  }
  return texts;
}

test("a run cut twice mid-stream reaches the app as exactly the events of its log", async (t) => {
  // The first connection goes at ~30% of the run's bytes; the second, which starts there, after
  // another ~40%, so at ~70% of the run.
  const firstCut = Math.floor(fullRunBytes * 0.3);
  const secondCut = Math.floor(fullRunBytes * 0.4);
  const proxy = await startCuttingProxy(gateway.url, (i) => [firstCut, secondCut][i]);
  t.after(() => proxy.close());
  const agent = newAgent(`${proxy.url}/v1/agui/agents/slow?tenant=default`);

  const { received, error } = await runCollecting(agent);

  assert.equal(error, undefined, `the run succeeds: ${error}`);
  assert.equal(proxy.cuts, 2, "the proxy cut the stream twice");
  assert.equal(proxy.connections.length, 3, "three connections: the first and two reconnects");
  const log = await replay(requestBodyOf(proxy.connections[0]));
  const again = await replay(requestBodyOf(proxy.connections[0]));
  assert.equal(again.raw, log.raw, "the gateway replays a run byte-identically");
  assertReceivedIsTheLog(received, log, "two cuts");

  // Every connection sent the same body; each reconnect resumed after an event the app already
  // had, mid-run, and the second from later than the first.
  const bodies = proxy.connections.map(requestBodyOf);
  assert.ok(bodies.every((b) => b === bodies[0]), "every reconnect re-sends the same body");
  const ids = log.frames.map((f) => f.id);
  const resumedAt = proxy.connections.map(lastEventIdOf);
  assert.equal(resumedAt[0], undefined, "the first request has no Last-Event-ID");
  const firstResume = ids.indexOf(resumedAt[1]);
  const secondResume = ids.indexOf(resumedAt[2]);
  assert.ok(firstResume > 0, `the first reconnect names an id of the log (${resumedAt[1]})`);
  assert.ok(secondResume > firstResume, `the second reconnect resumes later (${resumedAt[2]} after ${resumedAt[1]})`);
  assert.ok(secondResume < ids.length - 1, "the second cut came before the run's last event");
  assert.equal(agent.lastEventId, ids.at(-1), "lastEventId is the id of the run's last event");
  // Each reconnect resumed after the last event that reached the client whole. (Where a cut falls
  // inside an event depends on how the gateway grouped frames into HTTP chunks; so far each fell
  // after the cut event's id line, which a client must not take as received: see the measured line.)
  const passed = proxy.connections.slice(0, 2).map(eventsPassed);
  for (const [i, { whole }] of passed.entries()) {
    assert.equal(resumedAt[i + 1], whole.at(-1), `reconnect ${i + 1} resumes after the last whole event`);
  }

  // The reducer built the answer from the spliced stream: not a character lost or doubled.
  const logTexts = textsOfLog(log);
  for (const [messageId, text] of logTexts) {
    assert.equal(agent.messages.find((m) => m.id === messageId)?.content, text, `message ${messageId} is whole`);
  }
  console.log(
    `measured: run of ${log.frames.length} events / ${fullRunBytes} bytes; cuts after ${firstCut} and ${secondCut} ` +
      `response bytes, inside events ${passed[0].partial ?? "(none)"} and ${passed[1].partial ?? "(none)"}; ${proxy.connections.length} ` +
      `connections; resumed after event ${firstResume + 1} (${resumedAt[1]}) and ${secondResume + 1} ` +
      `(${resumedAt[2]}); app received ${received.length} events = log`,
  );
});

test("a cut before the first event re-sends the request without Last-Event-ID and still gets each event once", async (t) => {
  // Connection 0 is cut inside the response head (fetch itself fails), connection 1 after its
  // 200, inside the first event but after that event's id line: the id of an event that never
  // arrived whole must not be sent back.
  const proxy = await startCuttingProxy(gateway.url, (i) => [40, { afterHead: 60 }][i]);
  t.after(() => proxy.close());
  const agent = newAgent(`${proxy.url}/v1/agui/agents/slow?tenant=default`);

  const { received, error } = await runCollecting(agent);

  assert.equal(error, undefined, `the run succeeds: ${error}`);
  assert.equal(proxy.cuts, 2, "both early connections were cut");
  assert.equal(proxy.connections.length, 3);
  assert.ok(proxy.connections[1].responseHeadBytes < proxy.connections[1].responseBytes, "the second cut came after the head");
  const { whole, partial } = eventsPassed(proxy.connections[1]);
  assert.deepEqual(whole, [], "no event passed the second connection whole");
  assert.ok(partial, "the second connection was cut after the first event's id line");
  assert.deepEqual(proxy.connections.map(lastEventIdOf), [undefined, undefined, undefined], "no id to resume from, none sent");
  const log = await replay(requestBodyOf(proxy.connections[0]));
  assertReceivedIsTheLog(received, log, "cuts before the first event");
  console.log(
    `measured: cuts at 40 bytes and head+60 bytes (inside event ${partial}); ${proxy.connections.length} connections, ` +
      `none with Last-Event-ID; app received ${received.length} events = log`,
  );
});

test("the plain HttpAgent through the same cutting proxy loses the run", async (t) => {
  const proxy = await startCuttingProxy(gateway.url, (i) => [Math.floor(fullRunBytes * 0.3)][i]);
  t.after(() => proxy.close());
  const agent = newAgent(`${proxy.url}/v1/agui/agents/slow?tenant=default`, { Agent: HttpAgent });

  // HttpAgent 1.0's transport rethrows the read error from its teardown (reader.cancel()),
  // leaving an unhandled rejection that would end a plain Node process and that node:test
  // would pin on this test. It is caught here and reported, so the test judges the run itself.
  const { result, stray } = await catchingStrayRejections(() => runCollecting(agent));
  const { received, error } = result;

  assert.equal(proxy.cuts, 1, "the proxy cut the stream");
  assert.equal(proxy.connections.length, 1, "HttpAgent never reconnects");
  assert.ok(error, "runAgent rejects: the connection was lost mid-run");
  assert.ok(!received.some((e) => e.type === "RUN_FINISHED"), "the app never saw the run finish");
  const log = await replay(requestBodyOf(proxy.connections[0]));
  assert.ok(received.length < log.frames.length, "the app saw only part of the run");
  console.log(
    `measured: plain HttpAgent got ${received.length} of ${log.frames.length} events, then runAgent rejected: ` +
      `${String(error?.message ?? error)}; unhandled rejections from its transport: ${stray.length}` +
      (stray.length ? ` (${stray.map(String).join("; ")})` : ""),
  );
});

test("the run fails when reconnects in a row bring nothing new", async (t) => {
  // Every connection is cut inside the first event, so no reconnect ever makes progress.
  const proxy = await startCuttingProxy(gateway.url, () => ({ afterHead: 30 }));
  t.after(() => proxy.close());
  const agent = newAgent(`${proxy.url}/v1/agui/agents/slow?tenant=default`, { maxReconnects: 2, reconnectDelayMs: 10 });

  const { received, error } = await runCollecting(agent);

  assert.ok(error, "runAgent rejects");
  assert.match(String(error.message), /2 reconnect\(s\) in a row brought nothing new/);
  assert.equal(proxy.connections.length, 3, "the first try and exactly maxReconnects reconnects");
  assert.equal(received.length, 0, "no half event reached the app");
  console.log(`measured: ${proxy.connections.length} connections, then: ${error.message}`);
});

test("an HTTP error answering a reconnect fails the run", async (t) => {
  const proxy = await startCuttingProxy(gateway.url, (i) => [Math.floor(fullRunBytes * 0.3)][i]);
  t.after(() => proxy.close());
  // The app's own fetch, as HttpAgent allows, here naming an id the run never had on reconnect.
  const tamperingFetch = (url, init) => {
    const headers = { ...init.headers };
    if (headers["Last-Event-ID"] !== undefined) headers["Last-Event-ID"] = "not-an-event-of-this-run";
    return fetch(url, { ...init, headers });
  };
  const agent = newAgent(`${proxy.url}/v1/agui/agents/slow?tenant=default`, { fetch: tamperingFetch });

  const { received, error } = await runCollecting(agent);

  assert.equal(proxy.connections.length, 2, "one reconnect, answered with an error status");
  assert.equal(lastEventIdOf(proxy.connections[1]), "not-an-event-of-this-run");
  assert.ok(error, "runAgent rejects");
  assert.equal(error.status, 400, `the reconnect was refused with 400: ${error.message}`);
  assert.equal(error.payload?.error?.code, "bad_last_event_id");
  assert.ok(received.length > 0 && !received.some((e) => e.type === "RUN_FINISHED"));
  console.log(`measured: reconnect with a foreign id -> ${error.message}`);
});

test("abortRun during the pause before a reconnect ends the run at once and reconnects no more", async (t) => {
  const proxy = await startCuttingProxy(gateway.url, (i) => [Math.floor(fullRunBytes * 0.3)][i]);
  t.after(() => proxy.close());
  // Every request the agent makes goes through this fetch, so a reconnect is counted the moment
  // the agent starts it, before any byte reaches the proxy.
  let fetches = 0;
  const countingFetch = (url, init) => {
    fetches += 1;
    return fetch(url, init);
  };
  const pauses = [];
  let paused;
  const inThePause = new Promise((resolve) => {
    paused = resolve;
  });
  const agent = newAgent(`${proxy.url}/v1/agui/agents/slow?tenant=default`, {
    reconnectDelayMs: 5_000,
    fetch: countingFetch,
    onReconnecting: (pause) => {
      pauses.push(pause);
      paused();
    },
  });
  const errors = [];
  const started = Date.now();
  const received = [];
  const run = agent.runAgent(
    { runId: `run-${randomUUID()}` },
    { onEvent: ({ event }) => void received.push(event), onRunErrorEvent: ({ event }) => void errors.push(event) },
  );
  await inThePause;
  assert.equal(proxy.cuts, 1, "the pause follows the proxy's cut");
  assert.equal(pauses[0].delayMs, 5_000, "the pause is the configured 5 s");
  agent.abortRun();

  await run.catch(() => {});
  const elapsed = Date.now() - started;

  assert.ok(elapsed < 5_000, `the run ended without waiting out the pause (${elapsed} ms)`);
  assert.equal(errors.at(-1)?.code, "abort", "the app sees HttpAgent's own abort RUN_ERROR");
  // A pause that ended early instead of failing would reconnect at once; by one turn of the
  // event loop after the run settled, that reconnect would have called fetch.
  await oneEventLoopTurn();
  assert.equal(fetches, 1, "no request after the abort");
  assert.equal(pauses.length, 1, "no further pause after the abort");
  assert.equal(proxy.connections.length, 1, "no reconnect after the abort");
  console.log(`measured: aborted in the pause after ${received.length} events, run over in ${elapsed} ms, ${proxy.connections.length} connection`);
});

test("a run longer than the gateway's stream limit is followed across its closes", async (t) => {
  // The gateway ends every stream after limits.stream_max_secs, cleanly and before the run's
  // end (SPEC §4.4); each close is a plain end of the body, not a network error.
  const shortStreams = await startGateway({
    configToml: `[limits]\nstream_max_secs = 1\n${CONFIG}`,
    env: { AGUI_GATEWAY_BIN: undefined },
  });
  t.after(() => shortStreams.stop());
  // The requests the agent makes, seen through its `fetch` option: a cleanly ended response
  // leaves its keep-alive connection open for the next, so connections do not count them.
  const requests = [];
  const countingFetch = (url, init) => {
    requests.push({ lastEventId: init.headers["Last-Event-ID"], body: init.body });
    return fetch(url, init);
  };
  // One reconnect in a row is enough: every close comes after new events, which starts the
  // count again.
  const agent = newAgent(`${shortStreams.url}/v1/agui/agents/long?tenant=default`, {
    maxReconnects: 1,
    fetch: countingFetch,
  });

  const { received, error } = await runCollecting(agent);

  assert.equal(error, undefined, `the run succeeds: ${error}`);
  assert.ok(requests.length >= 3, `the run took several streams (${requests.length})`);
  assert.equal(requests[0].lastEventId, undefined);
  assert.ok(requests.slice(1).every((r) => r.lastEventId), "every later request continues after an id");
  const body = requests[0].body;
  const response = await fetch(`${shortStreams.url}/v1/agui/agents/long?tenant=default`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body,
  });
  const log = parseFrames(await response.text());
  assertReceivedIsTheLog(received, { frames: log }, "stream limit");
  console.log(
    `measured: stream_max_secs = 1, a ${log.length}-event run took ${requests.length} streams ` +
      `with maxReconnects = 1; app received ${received.length} events = log`,
  );
});

test("a stream ended by a stopping gateway (SIGTERM) is resumed on the next instance with Last-Event-ID", async (t) => {
  // A drain of 1 s and a run of ~5.5 s (two long answers, 4 characters every 30 ms): the run
  // outlasts the drain, so the stopping gateway ends the stream with a broken body and hands the
  // turn over, and the next process on the same SQLite file takes it over at start (SPEC §4.6).
  const stopping = await startGateway({
    configToml: `[turns]\ndrain_secs = 1\n${CONFIG}
[[agents]]
name = "slower"
kind = "script"
chunk_chars = 4
chunk_delay_ms = 30
steps = [ { say = ${JSON.stringify(SAY)} }, { say = ${JSON.stringify(SAY)} } ]
`,
    env: { AGUI_GATEWAY_BIN: undefined },
  });
  t.after(() => stopping.stop());
  const url = `${stopping.url}/v1/agui/agents/slower?tenant=default`;
  // Every request the agent makes, seen through its `fetch` option, with how its body ended:
  // "clean" (the body's end), "broken: …" (a read error), "cancelled" (by the client), or why
  // there was no response at all. The body is handed on chunk by chunk as the client reads
  // (highWaterMark 0: nothing is read ahead, so an error reaches the client exactly where it
  // would have, with no chunk queued before it to be dropped) and kept as text, to tell which
  // events it brought whole.
  const requests = [];
  const watchingFetch = async (input, init) => {
    const request = { lastEventId: init.headers["Last-Event-ID"], body: init.body, ended: "open", at: Date.now(), raw: "" };
    requests.push(request);
    let response;
    try {
      response = await fetch(input, init);
    } catch (error) {
      request.ended = `no response: ${error.cause?.code ?? error.message}`;
      throw error;
    }
    request.status = response.status;
    if (!response.body) return response;
    const source = response.body.getReader();
    const decoder = new TextDecoder();
    const watched = new ReadableStream(
      {
        async pull(controller) {
          let chunk;
          try {
            chunk = await source.read();
          } catch (error) {
            request.ended = `broken: ${error?.message ?? error}${error?.cause ? ` (${error.cause.message ?? error.cause})` : ""}`;
            controller.error(error);
            return;
          }
          if (chunk.done) {
            request.ended = "clean";
            controller.close();
          } else {
            request.raw += decoder.decode(chunk.value, { stream: true });
            controller.enqueue(chunk.value);
          }
        },
        cancel(reason) {
          if (request.ended === "open") request.ended = "cancelled";
          return source.cancel(reason);
        },
      },
      { highWaterMark: 0 },
    );
    return new Response(watched, { status: response.status, statusText: response.statusText, headers: response.headers });
  };
  const pauses = [];
  // The gap between the old process's exit and the new one's listening is refused connections,
  // none bringing anything new; 10 in a row (50 ms doubling) waits far longer than a start takes.
  const agent = newAgent(url, {
    fetch: watchingFetch,
    maxReconnects: 10,
    onReconnecting: (pause) => void pauses.push(pause),
  });

  // Some events in, the gateway is told to stop, as an orchestrator does on a deploy.
  const received = [];
  let someArrived;
  const arrived = new Promise((resolve) => {
    someArrived = resolve;
  });
  const run = agent
    .runAgent(
      { runId: `run-${randomUUID()}` },
      {
        onEvent: ({ event }) => {
          received.push(event);
          if (received.length === 20) someArrived();
        },
      },
    )
    .then(
      () => undefined,
      (error) => error,
    );
  await Promise.race([arrived, run]);
  assert.ok(received.length >= 20, `some events arrived before the stop (${received.length})`);
  const beforeStop = received.length;
  const stoppedAt = Date.now();
  let exitedAt;
  stopping.child.once("exit", () => void (exitedAt = Date.now()));
  const ended = await stopping.restart({ signal: "SIGTERM" });
  const listeningAt = Date.now();
  const error = await run;

  assert.deepEqual(ended, { code: 0, signal: null }, "the first process exited by itself, with 0, after SIGTERM");
  assert.equal(error, undefined, `the run succeeds: ${error}`);
  assert.ok(pauses.length >= 1, "the client reconnected at least once");
  assert.match(requests[0].ended, /^broken/, "the stopping gateway broke the first stream off, it did not end it cleanly");
  assert.equal(requests[0].lastEventId, undefined, "the first request has no Last-Event-ID");
  const answered = requests.filter((r) => r.status === 200);
  // The stopping process accepts no connection after its drain, so a later stream is the next
  // process's.
  assert.ok(answered.length >= 2, `the run went on in a later stream (${answered.length} streams)`);
  assert.ok(answered.slice(1).every((r) => r.lastEventId), "every stream after the first continues after an id");
  assert.ok(requests.every((r) => r.body === requests[0].body), "every reconnect re-sends the same body");

  const log = await replay(requests[0].body, url);
  const again = await replay(requests[0].body, url);
  assert.equal(again.raw, log.raw, "the gateway replays the run byte-identically");
  assertReceivedIsTheLog(received, log, "SIGTERM");
  const ids = log.frames.map((f) => f.id);
  const resumedAt = ids.indexOf(answered[1].lastEventId);
  assert.ok(resumedAt >= beforeStop - 1, `the reconnect resumed after an event the app had (${answered[1].lastEventId})`);
  // The first stream's frames that ended with their blank line; a tail after the last one is
  // half an event the client must not count as received.
  const wholeOfFirst = parseFrames(requests[0].raw.slice(0, requests[0].raw.lastIndexOf("\n\n") + 2));
  assert.deepEqual(
    wholeOfFirst.map((f) => f.id),
    ids.slice(0, wholeOfFirst.length),
    "the first stream brought the log's first events",
  );
  assert.equal(answered[1].lastEventId, wholeOfFirst.at(-1).id, "it resumed after the last event the first stream brought whole");
  assert.ok(resumedAt < ids.length - 1, "the stop came before the run's end: the next process finished it");
  assert.equal(agent.lastEventId, ids.at(-1), "lastEventId is the id of the run's last event");

  // The answers as the app holds them: both whole, once each. (Whatever the stop cut is given
  // again whole by the new owner and withdrawn from the app's view by its MESSAGES_SNAPSHOT.)
  const whole = SAY.replace("{input}", "keep going");
  const answers = agent.messages.filter((m) => m.role === "assistant");
  assert.deepEqual(
    answers.map((m) => m.content),
    [whole, whole],
    "the app holds both answers whole, and no fragment",
  );
  const logTexts = textsOfLog(log);
  for (const m of answers) assert.equal(logTexts.get(m.id), m.content, `message ${m.id} is the log's`);

  const fragments = [...logTexts].filter(([, text]) => text !== whole);
  const snapshots = log.frames.filter((f) => f.event.type === "MESSAGES_SNAPSHOT").length;
  console.log(
    `measured: SIGTERM after ${beforeStop} events; the old process exited ${JSON.stringify(ended)} ` +
      `${exitedAt - stoppedAt} ms later, the next listened at ${listeningAt - stoppedAt} ms; ${wholeOfFirst.length} whole events from the first; ` +
      `${requests.length} requests (${requests.map((r) => `at ${r.at - stoppedAt} ms: ${r.status ?? r.ended}`).join(", ")}), first stream ${requests[0].ended}; ` +
      `${pauses.length} reconnect pause(s); resumed after event ${resumedAt + 1} (${answered[1].lastEventId}); ` +
      `log of ${log.frames.length} events with ${snapshots} MESSAGES_SNAPSHOT and ${fragments.length} cut message(s) ` +
      `(${fragments.map(([id, text]) => `${id}: ${text.length} of ${whole.length} chars`).join("; ")}); app received ${received.length} events = log`,
  );
});
