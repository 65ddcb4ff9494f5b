#!/usr/bin/env node
// TanStack AI's chat client against the gateway's AG-UI route, with no server of its own in
// between: `ChatClient` + `fetchServerSentEvents` (the adapter `useChat` takes) POST a
// RunAgentInput and read the gateway's SSE, `id:` lines and `Last-Event-ID` reconnects included.
//
//   npm ci --ignore-scripts --prefix tests/tanstack && node tests/tanstack/run.mjs
//
// @tanstack/ai-client 0.33 sends no `protocolVersion`, so the gateway treats it as a pre-1.0
// client (SPEC §5.4). The approval tests that expect TanStack's own interrupts declare "1.0" with
// the `fetchClient` docs/tanstack-ai.md shows: TanStack understands the 1.0 interrupt outcome,
// not the pre-1.0 `on_interrupt` event; the last test checks what an undeclared client gets.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { ChatClient, fetchServerSentEvents } from "@tanstack/ai-client";
import { CHAT_AGENTS_TOML, startGatewayWithAppTokens } from "../clients/lib/gateway.mjs";

const CONFIG = `
[[tenants]]
name = "default"
${CHAT_AGENTS_TOML}
[[agents]]
name = "storyteller"
kind = "script"
chunk_chars = 4
chunk_delay_ms = 20
steps = [ { say = "Once upon a time a stream was cut, and it went on where it stopped: {input}" } ]
`;

let gateway;
let token;
before(async () => {
  const started = await startGatewayWithAppTokens({ configToml: CONFIG });
  gateway = started.gateway;
  token = started.mint("alice");
});
after(async () => {
  await gateway?.stop();
});

/**
 * Every request the adapter made, `{ body, lastEventId, events }`, `events` being what the
 * gateway answered (filled once `read` settles): what TanStack was sent, to compare with what
 * it passed on.
 */
function recorder(fetchImpl = fetch) {
  const requests = [];
  const fetchClient = async (url, init) => {
    const request = { body: JSON.parse(init.body), lastEventId: new Headers(init.headers).get("last-event-id"), events: [] };
    requests.push(request);
    const response = await fetchImpl(url, init);
    request.read = response
      .clone()
      .text()
      .then((text) => {
        request.events = text
          .split("\n")
          .filter((line) => line.startsWith("data:"))
          .map((line) => JSON.parse(line.slice(5)));
      });
    return response;
  };
  return { requests, fetchClient };
}

/** A ChatClient on a fresh thread; `chunks` are the events it passed on (`onChunk`). */
function chat(agent, { fetchClient, ...options } = {}) {
  const errors = [];
  const chunks = [];
  const client = new ChatClient({
    threadId: `ts-${randomUUID()}`,
    connection: fetchServerSentEvents(`${gateway.url}/v1/agui/agents/${agent}?tenant=default`, {
      headers: { Authorization: `Bearer ${token}` },
      ...(fetchClient ? { fetchClient } : {}),
    }),
    onError: (error) => errors.push(error.message),
    onChunk: (chunk) => chunks.push(chunk),
    ...options,
  });
  return { client, errors, chunks };
}

const textOf = (message) => message.parts.filter((p) => p.type === "text").map((p) => p.content).join("");
const assistantTexts = (client) => client.getMessages().filter((m) => m.role === "assistant").map(textOf);

async function gatewayGet(path) {
  const response = await fetch(`${gateway.url}${path}`, { headers: { Authorization: `Bearer ${token}` } });
  assert.equal(response.status, 200, `GET ${path}`);
  return response.json();
}

test("a message sent with TanStack AI's ChatClient gets the gateway's streamed answer", async () => {
  const { client, errors } = chat("helper");

  await client.sendMessage("What is on my calendar today?");

  assert.deepEqual(errors, []);
  const answer = client.getMessages().at(-1);
  assert.equal(answer.role, "assistant");
  assert.equal(textOf(answer), "Hello from the gateway: What is on my calendar today?");
  // TanStack adopts the stream's message id, so its next request names the answer the way the
  // gateway checks history (§6).
  assert.match(answer.id, /^t[0-9a-f]{24}:m1$/);

  await client.sendMessage("And tomorrow?");

  assert.deepEqual(errors, []);
  assert.deepEqual(assistantTexts(client), [
    "Hello from the gateway: What is on my calendar today?",
    "Hello from the gateway: And tomorrow?",
  ]);
  const thread = await gatewayGet(`/v1/threads/${client.threadId}?tenant=default`);
  assert.equal(thread.turnCount, 2);
});

test("TanStack's reload() gets another answer on a new branch, and the first one stays in the thread", async () => {
  const { requests, fetchClient } = recorder();
  const { client, errors } = chat("helper", { fetchClient });
  await client.sendMessage("Tell me something new");
  const first = client.getMessages().at(-1).id;

  await client.reload();

  assert.deepEqual(errors, []);
  const answers = client.getMessages().filter((m) => m.role === "assistant");
  assert.equal(answers.length, 1, "the old answer is replaced on screen");
  assert.notEqual(answers[0].id, first, "another answer, not the old one replayed");
  assert.deepEqual(
    requests.at(-1).body.messages.map((m) => m.role),
    ["user"],
    "reload() sends the user message with its answer left out",
  );
  // The gateway kept both answers: two turns beside each other (§6).
  const { turns } = await gatewayGet(`/v1/threads/${client.threadId}/turns?tenant=default`);
  assert.deepEqual(turns.map((t) => t.parent), [null, null]);
  assert.deepEqual(turns.map((t) => t.onCurrentBranch), [false, true]);
  const branch = await gatewayGet(`/v1/threads/${client.threadId}/messages?tenant=default`);
  assert.deepEqual([branch.alternatives[0].index, branch.alternatives[0].count], [2, 2]);
});

test("a stream cut mid-answer is continued by TanStack with Last-Event-ID, nothing missed or repeated", async () => {
  // A proxy that drops the first connection after five events, as a load balancer might.
  let cut = false;
  const dropping = async (url, init) => {
    const response = await fetch(url, init);
    if (cut) return response;
    cut = true;
    return new Response(await firstFrames(response, 5), { status: response.status, headers: response.headers });
  };
  const { requests, fetchClient } = recorder(dropping);
  const { client, errors } = chat("storyteller", { fetchClient });

  await client.sendMessage("the end");

  assert.deepEqual(errors, []);
  assert.equal(requests.length, 2, "one request, then one reconnect");
  assert.equal(requests[0].lastEventId, null);
  assert.match(requests[1].lastEventId, /^t[0-9a-f]{24}\.5$/, "the reconnect names the fifth event");
  assert.deepEqual(requests[1].body, requests[0].body, "the reconnect sends the same run");
  assert.deepEqual(assistantTexts(client), [
    "Once upon a time a stream was cut, and it went on where it stopped: the end",
  ]);
});

/** The first `count` SSE frames of a response, as text; the connection is then dropped. */
async function firstFrames(response, count) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let text = "";
  for (;;) {
    const frames = text.split("\n\n");
    if (frames.length > count) {
      await reader.cancel();
      return frames.slice(0, count).join("\n\n") + "\n\n";
    }
    const { value, done } = await reader.read();
    if (done) throw new Error(`the stream ended before ${count} frames`);
    text += decoder.decode(value, { stream: true });
  }
}

/**
 * The `fetchClient` docs/tanstack-ai.md recommends: it declares AG-UI 1.0, which TanStack AI
 * understands (its interrupts need the 1.0 outcome) but does not send, and it drops TanStack's
 * `X-Run-Id` header, which the gateway does not use (the runId is in the body) and which a
 * browser's CORS preflight would have to be allowed.
 */
const gatewayFetch = (url, init) => {
  const headers = new Headers(init.headers);
  headers.delete("X-Run-Id");
  const body = { ...JSON.parse(init.body), protocolVersion: "1.0" };
  return fetch(url, { ...init, headers, body: JSON.stringify(body) });
};

/** Sends the approval agent a message through `gatewayFetch`; returns at the interrupt. */
async function askForApproval() {
  const { requests, fetchClient } = recorder(gatewayFetch);
  const flow = { requests, ...chat("mailer", { fetchClient }) };
  await flow.client.sendMessage("Ship the Q3 report");
  assert.deepEqual(flow.errors, []);
  return flow;
}

const approve = (interrupt) => [{ interruptId: interrupt.id, status: "resolved", payload: { approved: true } }];

test("an approval reaches TanStack as an interrupt and its resume continues the turn", async () => {
  const { client, errors, requests } = await askForApproval();

  const [interrupt, ...more] = client.getInterrupts();
  assert.equal(more.length, 0);
  assert.equal(interrupt.reason, "tool_call");
  assert.equal(interrupt.message, "Allow the tool 'send_email' to run?");
  assert.deepEqual(interrupt.metadata["gateway/details"], { to: "team@example.com", body: "Ship the Q3 report" });
  // The gateway's interrupt carries no TanStack binding, so TanStack lists it as `unbound`:
  // its own resolve() does not apply, and the app answers through the resume escape hatch.
  assert.equal(interrupt.canResolve, false);

  const resumed = await client.resumeInterruptsUnsafe(approve(interrupt));

  assert.equal(resumed, true);
  assert.deepEqual(errors, []);
  assert.deepEqual(requests.at(-1).body.resume, approve(interrupt));
  assert.equal(client.getInterrupts().length, 0);
  const parts = client.getMessages().flatMap((m) => m.parts);
  const result = parts.find((p) => p.type === "tool-result");
  assert.equal(result?.content, "sent", "the approved call ran and its result reached TanStack");
  assert.equal(assistantTexts(client).filter(Boolean).at(-1), "The email is on its way.");
  const thread = await gatewayGet(`/v1/threads/${client.threadId}?tenant=default`);
  assert.equal(thread.latestTurn.status, "succeeded");
});

test("every event of the resume run reaches TanStack, gateway.resume included", async () => {
  const { client, chunks, requests } = await askForApproval();
  const before = chunks.length;

  await client.resumeInterruptsUnsafe(approve(client.getInterrupts()[0]));

  // TanStack drops an event whose SSE id it has already seen (a replayed duplicate): every
  // event the gateway sends needs an id of its own (SPEC §4.2).
  await requests.at(-1).read;
  const sent = requests.at(-1).events.map((e) => e.type + (e.name ? ` ${e.name}` : ""));
  const passedOn = chunks.slice(before).map((e) => e.type + (e.name ? ` ${e.name}` : ""));
  assert.ok(sent.includes("CUSTOM gateway.resume"));
  assert.deepEqual(passedOn, sent);
});

test("a client that does not declare 1.0 gets the approval as on_interrupt, a clean end, and can resume", async () => {
  const { requests, fetchClient } = recorder();
  const custom = [];
  const { client, errors } = chat("mailer", {
    fetchClient,
    onCustomEvent: (name, value) => custom.push({ name, value }),
  });

  await client.sendMessage("Ship the Q3 report");

  // The pre-1.0 shape (§5.4): MESSAGES_SNAPSHOT, CUSTOM on_interrupt, RUN_FINISHED. TanStack
  // hands the custom event to the app and ends the run; it must not need a reconnect for it.
  assert.deepEqual(errors, []);
  assert.equal(requests.length, 1, "the run ended on its first stream");
  const interrupt = custom.find((e) => e.name === "on_interrupt")?.value;
  assert.match(interrupt?.id ?? "", /^int_[0-9a-f]{32}$/);
  assert.equal(interrupt.message, "Allow the tool 'send_email' to run?");
  assert.equal(client.getStatus(), "ready");

  // TanStack holds no interrupt to resume, so the app names the thread and run itself.
  const state = { threadId: client.threadId, runId: requests[0].body.runId };
  await client.resumeInterruptsUnsafe(approve(interrupt), state);

  assert.deepEqual(errors, []);
  assert.equal(assistantTexts(client).filter(Boolean).at(-1), "The email is on its way.");
  const thread = await gatewayGet(`/v1/threads/${client.threadId}?tenant=default`);
  assert.equal(thread.latestTurn.status, "succeeded");
});

test("a chat reopened with a stale copy shows the gateway's conversation once it sends (MESSAGES_SNAPSHOT)", async () => {
  // The first page: two turns on the thread.
  const first = chat("helper");
  await first.client.sendMessage("What is on my calendar today?");
  await first.client.sendMessage("And tomorrow?");
  assert.deepEqual(first.errors, []);
  const threadId = first.client.threadId;
  const before = await gatewayGet(`/v1/threads/${threadId}/messages?tenant=default`);

  // A page reopened from its own stale copy (what it persisted while the answers were still
  // streaming): the person's questions under ids of its own, each answer cut short. The gateway
  // takes the questions by their words and the last answer by its id (SPEC §6); the run then
  // opens with the conversation as the gateway recorded it.
  const stale = first.client.getMessages().map((message) => ({
    ...message,
    id: message.role === "user" ? `stale-${randomUUID()}` : message.id,
    parts: message.parts.map((part) => (part.type === "text" && message.role === "assistant" ? { ...part, content: part.content.slice(0, 5) } : part)),
  }));
  for (const [variant, fetchClient] of [
    ["as TanStack sends it", undefined],
    ["declaring 1.0 (gatewayFetch)", gatewayFetch],
  ]) {
    const reopened = chat("helper", { threadId, initialMessages: structuredClone(stale), fetchClient });
    assert.notDeepEqual(assistantTexts(reopened.client), assistantTexts(first.client), "the copy is stale");
    await reopened.client.sendMessage(`Reopened, ${variant}`);
    assert.deepEqual(reopened.errors, [], `${variant}: the run succeeds`);
    const record = await gatewayGet(`/v1/threads/${threadId}/messages?tenant=default`);
    assert.deepEqual(
      reopened.client.getMessages().map((m) => m.id),
      record.messages.map((m) => m.id),
      `${variant}: TanStack holds the gateway's messages, their ids and order`,
    );
    assert.deepEqual(
      assistantTexts(reopened.client),
      record.messages.filter((m) => m.role === "assistant" && m.content).map((m) => m.content),
      `${variant}: every answer whole`,
    );
    assert.equal(assistantTexts(reopened.client).at(-1), `Hello from the gateway: Reopened, ${variant}`);
    // Continue from the corrected copy next time.
    stale.splice(0, stale.length, ...reopened.client.getMessages().map((message) => ({
      ...message,
      id: message.role === "user" ? `stale-${randomUUID()}` : message.id,
    })));
  }
  assert.equal(before.messages.filter((m) => m.role === "user").length, 2);
  const thread = await gatewayGet(`/v1/threads/${threadId}?tenant=default`);
  assert.equal(thread.turnCount, 4);
});
