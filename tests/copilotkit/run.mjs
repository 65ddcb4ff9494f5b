#!/usr/bin/env node
// CopilotKit in front of the gateway, driven the way a CopilotKit React app drives it.
//
//   npm ci --ignore-scripts --prefix tests/copilotkit && node tests/copilotkit/run.mjs
//
// The browser side is `@copilotkit/core`, the client core `@copilotkit/react-core` v2 is built
// on: a `ProxiedCopilotRuntimeAgent` (the agent the provider creates for each runtime agent)
// and `CopilotKitCore.runAgent`, which is what `<CopilotChat>` calls after adding the user's
// message. The interrupt test mirrors `useInterrupt` from @copilotkit/react-core 1.74.0 step by
// step, with the same `ɵInterruptState` machine it uses. A frontend tool is registered as
// `useFrontendTool` registers it, and called by a LangGraph graph (ag-ui-langgraph, from
// tests/frameworks/langgraph) behind the gateway. The server side is a real
// `@copilotkit/runtime` v2 endpoint (stack.mjs). CopilotKit 1.75 bundles @ag-ui/client 0.0.59,
// which sends no `protocolVersion`: the gateway serves it as a pre-1.0 client (SPEC §5.4).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { startStack, outboundRequests, gatewayExchanges } from "./stack.mjs";

const { CopilotKitCore, ProxiedCopilotRuntimeAgent, ɵInterruptState } = await import("@copilotkit/core");

let stack;
before(async () => {
  stack = await startStack();
});
after(async () => {
  await stack?.stop();
});

/** A browser-side CopilotKit: its core and the proxy agent for one runtime agent, on a fresh thread. */
function browser(agentId, headers = {}, runtimeUrl = stack.runtimeUrl) {
  const errors = [];
  const copilotkit = new CopilotKitCore({ runtimeUrl, headers });
  copilotkit.subscribe({ onError: ({ error }) => errors.push(error.message) });
  const agent = new ProxiedCopilotRuntimeAgent({ runtimeUrl, agentId });
  agent.threadId = `ck-${randomUUID()}`;
  return { copilotkit, agent, errors };
}

/** What `<CopilotChat>` does when the person presses send. */
async function send(copilotkit, agent, text) {
  agent.addMessage({ id: randomUUID(), role: "user", content: text });
  await copilotkit.runAgent({ agent });
}

async function gatewayGet(path, token) {
  const response = await fetch(`${stack.gateway.url}${path}`, { headers: { Authorization: `Bearer ${token}` } });
  assert.equal(response.status, 200, `GET ${path}`);
  return response.json();
}

const assistantTexts = (messages) => messages.filter((m) => m.role === "assistant" && m.content).map((m) => m.content);

test("a message sent through the CopilotKit runtime gets the gateway's streamed answer", async () => {
  const { copilotkit, agent, errors } = browser("helper");

  await send(copilotkit, agent, "What is on my calendar today?");

  assert.deepEqual(errors, []);
  const answer = agent.messages.at(-1);
  assert.equal(answer.role, "assistant");
  assert.equal(answer.content, "Hello from the gateway: What is on my calendar today?");
  // The message carries the gateway's own id (`<turn>:m1`): the answer was the gateway's, and
  // the history CopilotKit sends back next time names it the way the gateway checks it (§6).
  assert.match(answer.id, /^t[0-9a-f]{24}:m1$/);
  const record = await gatewayGet(`/v1/threads/${agent.threadId}/messages?tenant=default`, stack.tokens.server);
  assert.deepEqual(assistantTexts(record.messages), ["Hello from the gateway: What is on my calendar today?"]);

  // A second message in the same chat: CopilotKit sends its whole copy of the conversation,
  // which the gateway accepts as the thread's history plus one new turn.
  await send(copilotkit, agent, "And tomorrow?");

  assert.deepEqual(errors, []);
  assert.equal(agent.messages.at(-1).content, "Hello from the gateway: And tomorrow?");
  const thread = await gatewayGet(`/v1/threads/${agent.threadId}?tenant=default`, stack.tokens.server);
  assert.equal(thread.turnCount, 2);
  assert.deepEqual(outboundRequests, [], "nothing may leave the machine (telemetry is disabled)");
});

test("regenerate and edit as CopilotChat sends them get new answers on new branches, the old ones kept", async () => {
  const { copilotkit, agent, errors } = browser("helper");
  await send(copilotkit, agent, "Tell me something new");
  const first = agent.messages.at(-1).id;
  const userIndex = () => agent.messages.findLastIndex((m) => m.role === "user");

  // Regenerate: the messages up to the user message (its answer left out), run again.
  agent.setMessages(agent.messages.slice(0, userIndex() + 1));
  await copilotkit.runAgent({ agent });
  assert.deepEqual(errors, []);
  const regenerated = agent.messages.at(-1);
  assert.equal(regenerated.role, "assistant");
  assert.notEqual(regenerated.id, first, "another answer, not the old one replayed");

  // Edit: the user message under its id with other words, what follows dropped, run again.
  const edited = { ...agent.messages[userIndex()], content: "Tell me something old" };
  agent.setMessages([...agent.messages.slice(0, userIndex()), edited]);
  await copilotkit.runAgent({ agent });
  assert.deepEqual(errors, []);
  assert.equal(agent.messages.at(-1).content, "Hello from the gateway: Tell me something old");

  const { turns } = await gatewayGet(`/v1/threads/${agent.threadId}/turns?tenant=default`, stack.tokens.server);
  assert.deepEqual(turns.map((t) => t.parent), [null, null, null], "three answers side by side, none erased");
  const branch = await gatewayGet(`/v1/threads/${agent.threadId}/messages?tenant=default`, stack.tokens.server);
  assert.deepEqual([branch.alternatives[0].index, branch.alternatives[0].count], [3, 3]);
});

/**
 * `useInterrupt` without React: the same subscriptions, the same state machine, the same
 * `copilotkit.runAgent` calls on resolve (react-core 1.74.0 `use-interrupt.tsx`).
 */
function useInterrupt(copilotkit, agent) {
  const state = new ɵInterruptState();
  const hook = { pending: null };
  let legacy = null;
  let standard = null;
  let legacyRunId;
  const interruptRunIds = new Map();
  agent.subscribe({
    onCustomEvent: ({ event }) => {
      if (event.name === "on_interrupt") legacy = { name: event.name, value: event.value };
    },
    onRunFinishedEvent: (params) => {
      if (params.outcome === "interrupt") {
        for (const interrupt of params.interrupts) interruptRunIds.set(interrupt.id, params.input.runId);
        standard = params.interrupts;
      }
    },
    onRunStartedEvent: () => {
      legacy = null;
      standard = null;
      interruptRunIds.clear();
      legacyRunId = undefined;
      state.clear();
      hook.pending = null;
    },
    onRunFinalized: (params) => {
      if (standard?.length) {
        state.setStandard(standard);
        hook.pending = state.pending;
      } else if (legacy) {
        legacyRunId = params.input.runId;
        hook.interruptedRunId = legacyRunId;
        state.setLegacy(legacy);
        hook.pending = state.pending;
      }
      legacy = null;
      standard = null;
    },
  });
  hook.resolve = async (payload) => {
    const decision = state.resolve(payload);
    if (decision.kind === "legacy-resume") {
      return copilotkit.runAgent({
        agent,
        ...(legacyRunId !== undefined ? { runId: legacyRunId } : {}),
        forwardedProps: { command: { resume: decision.payload, interruptEvent: decision.interruptValue } },
      });
    }
    if (decision.kind !== "resume") throw new Error(`useInterrupt would not resume: ${decision.kind}`);
    for (const result of decision.toolResults) {
      agent.addMessage({ id: randomUUID(), role: "tool", toolCallId: result.toolCallId, content: result.content });
    }
    const runId = decision.resume.map((entry) => interruptRunIds.get(entry.interruptId)).find(Boolean);
    return copilotkit.runAgent({ agent, resume: decision.resume, ...(runId ? { runId } : {}) });
  };
  return hook;
}

/** The approval as CopilotKit shows it: the pre-1.0 shape of §5.4. */
async function askForApproval() {
  const { copilotkit, agent, errors } = browser("mailer", { Authorization: `Bearer ${stack.tokens.person}` });
  const interrupt = useInterrupt(copilotkit, agent);

  await send(copilotkit, agent, "Ship the Q3 report");

  assert.deepEqual(errors, []);
  assert.equal(interrupt.pending?.kind, "legacy", "CopilotKit's client is pre-1.0: it gets on_interrupt");
  const event = interrupt.pending.event;
  assert.equal(event.name, "on_interrupt");
  assert.match(event.value.id, /^int_[0-9a-f]{32}$/);
  assert.equal(event.value.message, "Allow the tool 'send_email' to run?");
  assert.equal(event.value.metadata["gateway/kind"], "tool_call");
  assert.deepEqual(event.value.metadata["gateway/details"], { to: "team@example.com", body: "Ship the Q3 report" });
  // MESSAGES_SNAPSHOT gave CopilotKit the conversation so far: the proposed call, not run.
  const proposal = agent.messages.find((m) => m.role === "assistant" && m.toolCalls?.length);
  assert.equal(proposal?.content, "Let me send that.");
  assert.equal(proposal.toolCalls[0].function.name, "send_email");
  assert.ok(!agent.messages.some((m) => m.role === "tool"), "nothing ran before the approval");
  return { copilotkit, agent, errors, interrupt, event };
}

async function assertTurnFinishedWithTheToolResult({ agent, errors, interrupt }) {
  assert.deepEqual(errors, []);
  assert.equal(interrupt.pending, null, "no interrupt is left pending");
  const call = agent.messages.find((m) => m.role === "assistant" && m.toolCalls?.length).toolCalls[0];
  const result = agent.messages.find((m) => m.role === "tool" && m.toolCallId === call.id);
  assert.equal(result?.content, "sent", "the approved call ran and its result reached CopilotKit");
  assert.equal(assistantTexts(agent.messages).at(-1), "The email is on its way.");
  const thread = await gatewayGet(`/v1/threads/${agent.threadId}?tenant=default`, stack.tokens.person);
  assert.equal(thread.status, "idle");
  assert.equal(thread.latestTurn.status, "succeeded");
}

test("an approval answered with useInterrupt's resolve() continues the turn to the tool result", async () => {
  const flow = await askForApproval();
  const sentBefore = gatewayExchanges.length;

  // What a `useInterrupt({ render: ({ resolve }) => <button onClick={() => resolve({ approved: true })}> })`
  // sends: the same runId again, and `forwardedProps.command = { resume, interruptEvent }`.
  await flow.interrupt.resolve({ approved: true });

  const sent = gatewayExchanges.slice(sentBefore).filter((x) => x.agent === "mailer");
  await Promise.all(sent.map((x) => x.read));
  assert.equal(sent.length, 1);
  assert.deepEqual(sent[0].body.forwardedProps.command, { resume: { approved: true }, interruptEvent: flow.event.value });
  await assertTurnFinishedWithTheToolResult(flow);
});

/** Answers the approval with the gateway's own form (§5.3) through `copilotkit.runAgent`. */
async function resumeWithTheResumeField(flow, runId) {
  const sentBefore = gatewayExchanges.length;
  await flow.copilotkit.runAgent({
    agent: flow.agent,
    ...(runId ? { runId } : {}),
    resume: [{ interruptId: flow.event.value.id, status: "resolved", payload: { approved: true } }],
  });
  const [sent] = gatewayExchanges.slice(sentBefore);
  await sent.read;
  const decision = sent.events.find((e) => e.type === "CUSTOM" && e.name === "gateway.resume");
  assert.deepEqual(decision?.value, { interruptId: flow.event.value.id, outcome: "decided", approved: true, decision: "approve" });
}

test("an approval answered with the gateway's resume field through CopilotKit continues the turn", async () => {
  const flow = await askForApproval();

  // What an app can send from a `useInterrupt` render or handler instead of resolve(): a new run.
  await resumeWithTheResumeField(flow);

  await assertTurnFinishedWithTheToolResult(flow);
});

test("a resume sent on the interrupted run's runId, as useInterrupt sends every resume, continues the turn", async () => {
  const flow = await askForApproval();

  // useInterrupt pins the runId of the run that ended with the interrupt on its resume run,
  // on its pre-1.0 path and on its 1.0 (`resume`) path alike.
  await resumeWithTheResumeField(flow, flow.interrupt.interruptedRunId);

  await assertTurnFinishedWithTheToolResult(flow);
});

test("after the approval shows, CopilotKit still lists the question before the proposal", async () => {
  const flow = await askForApproval();

  // The §5.4 MESSAGES_SNAPSHOT restates the conversation; CopilotKit keeps the messages it
  // knows by id and appends the others, so a user message renamed in the snapshot would move
  // below the answer it asked for.
  const conversation = flow.agent.messages.map((m) => `${m.role}: ${m.content}`);
  assert.deepEqual(conversation, ["user: Ship the Q3 report", "assistant: Let me send that."]);
});

/** Two turns on a new thread, straight at the gateway (another device, another runtime instance). */
async function threadStartedElsewhere() {
  const threadId = `ck-elsewhere-${randomUUID()}`;
  let messages = [];
  for (const text of ["First, from another device", "Second, from another device"]) {
    messages = [...messages, { id: randomUUID(), role: "user", content: text }];
    const response = await fetch(`${stack.gateway.url}/v1/agui/agents/helper?tenant=default`, {
      method: "POST",
      headers: { Authorization: `Bearer ${stack.tokens.server}`, "content-type": "application/json" },
      body: JSON.stringify({ threadId, runId: randomUUID(), messages }),
    });
    assert.equal(response.status, 200);
    assert.match(await response.text(), /"type":"RUN_FINISHED"/);
    messages = (await gatewayGet(`/v1/threads/${threadId}/messages?tenant=default`, stack.tokens.server)).messages;
  }
  return { threadId, messages };
}

const idsOf = (messages) => messages.map((m) => m.id);

test("a chat reopened with a stale copy shows the gateway's conversation once it sends (MESSAGES_SNAPSHOT)", async () => {
  const { threadId, messages } = await threadStartedElsewhere();
  const byId = (list) => new Map(list.map((m) => [m.id, m]));

  // The copy a tab kept while the answers were still streaming: the same ids, each answer cut
  // short. The run opens with the thread as the gateway has it, and CopilotKit takes it whole.
  const cutShort = messages.map((m) => (m.role === "assistant" && m.content ? { ...m, content: m.content.slice(0, 5) } : m));
  const tab = browser("helper");
  tab.agent.threadId = threadId;
  tab.agent.setMessages(cutShort);
  await send(tab.copilotkit, tab.agent, "Back with answers cut short");
  assert.deepEqual(tab.errors, [], "no error");
  let record = await gatewayGet(`/v1/threads/${threadId}/messages?tenant=default`, stack.tokens.server);
  assert.deepEqual(idsOf(tab.agent.messages), idsOf(record.messages), "CopilotKit holds the gateway's conversation, its ids and order");
  assert.deepEqual(assistantTexts(tab.agent.messages), assistantTexts(record.messages), "every answer whole");

  // A copy that names the person's messages with ids of its own (the gateway takes them by their
  // words, SPEC §6). @ag-ui/client 0.0.59 merges a snapshot into what it holds: it keeps the
  // messages it already had in their places, drops the ones the snapshot lacks, and appends
  // the rest. So CopilotKit ends up with exactly the gateway's messages and contents, but the
  // person's messages (new ids to it) after the answers: the order is CopilotKit's, not the
  // gateway's (docs/copilotkit.md).
  const renamed = record.messages.map((m) => (m.role === "user" ? { ...m, id: randomUUID() } : m));
  const other = browser("helper");
  other.agent.threadId = threadId;
  other.agent.setMessages(renamed);
  await send(other.copilotkit, other.agent, "Back with ids of my own");
  assert.deepEqual(other.errors, [], "no error");
  record = await gatewayGet(`/v1/threads/${threadId}/messages?tenant=default`, stack.tokens.server);
  assert.deepEqual(idsOf(other.agent.messages).sort(), idsOf(record.messages).sort(), "the gateway's messages, none of the copy's own ids");
  const gateway = byId(record.messages);
  for (const message of other.agent.messages) {
    assert.equal(message.content, gateway.get(message.id).content, `message ${message.id} says what the gateway recorded`);
  }
  assert.equal(other.agent.messages.at(-1).content, "Hello from the gateway: Back with ids of my own");
});

test("a LangGraph agent behind the gateway calls the page's frontend tool, and answers from its result", async () => {
  const { z } = await import("zod");
  const { copilotkit, agent, errors } = browser("graph");
  const shown = [];
  // What `useFrontendTool({ name: "show_city", ... })` registers on a page.
  copilotkit.addTool({
    name: "show_city",
    description: "Shows a city on the page.",
    parameters: z.object({ city: z.string() }),
    handler: async ({ city }) => {
      shown.push(city);
      return `shown ${city}`;
    },
  });

  await send(copilotkit, agent, 'use show_city {"city": "Paris"}');

  assert.deepEqual(errors, []);
  const sent = gatewayExchanges.filter((x) => x.agent === "graph" && x.body.threadId === agent.threadId);
  assert.deepEqual(sent[0]?.body.tools?.map((t) => t.name), ["show_city"], "CopilotKit declared the tool to the gateway");
  assert.deepEqual(shown, ["Paris"], `the graph called the page's tool; it answered ${JSON.stringify(assistantTexts(agent.messages))}`);
  const call = agent.messages.find((m) => m.role === "assistant" && m.toolCalls?.length)?.toolCalls[0];
  assert.match(call.id, /^t[0-9a-f]{24}:c1$/, "the call under the gateway's id");
  assert.equal(agent.messages.at(-1).role, "assistant");
  assert.equal(agent.messages.at(-1).content, "The tool answered: shown Paris");
  const record = await gatewayGet(`/v1/threads/${agent.threadId}/messages?tenant=default`, stack.tokens.server);
  assert.deepEqual(record.messages.map((m) => m.role), ["user", "assistant", "tool", "assistant"]);
  const thread = await gatewayGet(`/v1/threads/${agent.threadId}?tenant=default`, stack.tokens.server);
  assert.equal(thread.turnCount, 1, "the tool's result continued the same turn");
  assert.deepEqual(outboundRequests, [], "nothing may leave the machine");
});

test("connectAgent through the runtime: the in-memory runner knows nothing of turns it did not relay; the gateway runner restores them", async () => {
  const { threadId, messages } = await threadStartedElsewhere();

  // CopilotKit's default runner: a thread this runtime did not relay comes back empty.
  const plain = browser("helper");
  plain.agent.threadId = threadId;
  await plain.copilotkit.connectAgent({ agent: plain.agent });
  assert.deepEqual(plain.agent.messages, [], "the in-memory runner restores nothing");

  // GatewayThreadRunner (gateway-runner.mjs, shown in docs/copilotkit.md): the gateway's
  // connect stream, up to the end of its opening run.
  const restoring = browser("helper", {}, stack.restoringRuntimeUrl);
  restoring.agent.threadId = threadId;
  await restoring.copilotkit.connectAgent({ agent: restoring.agent });
  assert.deepEqual(restoring.errors, []);
  assert.deepEqual(idsOf(restoring.agent.messages), idsOf(messages), "the gateway's conversation, its ids and order");
  assert.deepEqual(assistantTexts(restoring.agent.messages), assistantTexts(messages));
  assert.equal(restoring.agent.isRunning, false, "CopilotKit's connect ends once the thread is shown");

  // And the restored chat goes on: the next message is one more turn of the same thread.
  await send(restoring.copilotkit, restoring.agent, "Third, after the restore");
  assert.deepEqual(restoring.errors, []);
  const record = await gatewayGet(`/v1/threads/${threadId}/messages?tenant=default`, stack.tokens.server);
  assert.deepEqual(idsOf(restoring.agent.messages), idsOf(record.messages));
  assert.deepEqual(outboundRequests, [], "nothing may leave the machine");
});
