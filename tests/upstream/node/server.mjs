#!/usr/bin/env node
// server.mjs: a real AG-UI 1.0 server on the official @ag-ui/encoder, the upstream that the
// gateway's `agui` agent (SPEC §9.3) fronts in tests. tests/upstream/python/server.py serves
// the same routes on the official Python package, so one test can drive either.
//
//   node tests/upstream/node/server.mjs [--port N]
//
// Prints `listening http://127.0.0.1:<port>` once ready. Routes:
//   POST /agents/chat           text, a tool call with its result, text, a state snapshot, success
//   POST /agents/approval       a tool call that ends in an interrupt; continues on `resume`
//   POST /agents/invalid        an event @ag-ui/core's schema rejects (?case=null-delta|float-timestamp)
//   POST /agents/empty-delta    a valid edge: an empty TEXT_MESSAGE_CONTENT delta
//   POST /agents/out-of-order   content for a message that was never started
//   POST /agents/slow           /agents/chat with 200 ms between events
//   POST /agents/one-write      /agents/chat written to the socket in one write
//   POST /agents/thinking       a reasoning span with one message, an activity (snapshot, then a
//                               delta), text, success
//   POST /agents/fails          text, then RUN_ERROR carrying the tokens its model spent
//   POST /agents/parts-result   a tool call whose result is content parts (text and a picture's URL)
//   POST /agents/frontend-tool  calls the first tool the client declared, unanswered; given a
//                               role "tool" message last, says what the tool said
//   POST /agents/chunks         TEXT_MESSAGE_CHUNK, TOOL_CALL_CHUNK and REASONING_MESSAGE_CHUNK,
//                               the last chunked message left for RUN_FINISHED to close
//   POST /agents/many-steps     40 nested steps around one message
//   POST /agents/confirm        a call of its own (`call_up_1`, in no message) waiting on an
//                               interrupt without a responseSchema, as ADK's confirmations are;
//                               on `resume` it says exactly what it got: `cancelled`, or
//                               `resolved` with the payload (then the call's result)
//   POST /agents/stateful       a state snapshot whose `theme` is an object, text, success
//   POST /agents/once           a slow answer (as /agents/slow) on a thread's first run; every
//                               later run of that thread answers nothing (RUN_STARTED,
//                               RUN_FINISHED), as an upstream that keeps its own session and has
//                               seen the message does
//   POST /agents/subagents      two subagents (a parent and a nested one) whose text, tool call
//                               and step are attributed to them, one finished, one failed
//   POST /agents/slow-subagent  a subagent whose message comes a word every 100 ms, then the
//                               agent's own word
//   POST /agents/surface        an A2UI surface (`order-form`, a button) as the A2UI middleware
//                               shows one; given a person's action last, as the middleware gives
//                               it, says what was pressed
//   POST /agents/slow-words     one message of 100 words, a word every 100 ms
//   GET|DELETE /requests        every POST received, as {path, headers, body}, in order; an
//                               answer its client closed before it was whole also says
//                               `closedByClient: true`
//
// The Python server serves the routes above /agents/thinking and /agents/fails, and surface (the
// same form and answer, drawn there with ag-ui-a2ui-toolkit); parts-result, frontend-tool,
// chunks, many-steps, confirm, stateful, once and subagents are this one's.
//
// Chat's STATE_SNAPSHOT is {"upstream":{"runs":N}}: every run this process has started, on any
// agent, this one included; DELETE /requests does not reset it.
//
// The response format is negotiated exactly as a stock @ag-ui/encoder server does it: the
// encoder picks protobuf for an Accept that admits it, wildcards included (`*/*`), and SSE only
// for `text/event-stream` or no Accept at all. A client (the gateway) that wants SSE from such a
// server must say so.
import { EventEncoder } from "@ag-ui/encoder";
import { EventType } from "@ag-ui/core";
import { RunAgentInputSchema } from "@ag-ui/core/schemas";
import { serve } from "../../support/listen.mjs";

const APPROVAL_ID = "up-approval-1";
const APPROVAL_SCHEMA = {
  type: "object",
  properties: { approved: { type: "boolean" }, note: { type: "string" } },
  required: ["approved"],
};

const received = [];
let runsServed = 0;

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function lastUserText(messages) {
  const user = [...messages].reverse().find((m) => m.role === "user");
  if (!user) return "";
  if (typeof user.content === "string") return user.content;
  return user.content.filter((p) => p.type === "text").map((p) => p.text).join("");
}

function textMessage(messageId, deltas) {
  return [
    { type: EventType.TEXT_MESSAGE_START, messageId, role: "assistant" },
    ...deltas.map((delta) => ({ type: EventType.TEXT_MESSAGE_CONTENT, messageId, delta })),
    { type: EventType.TEXT_MESSAGE_END, messageId },
  ];
}

function toolCall(toolCallId, toolCallName, parentMessageId, argDeltas) {
  return [
    { type: EventType.TOOL_CALL_START, toolCallId, toolCallName, parentMessageId },
    ...argDeltas.map((delta) => ({ type: EventType.TOOL_CALL_ARGS, toolCallId, delta })),
    { type: EventType.TOOL_CALL_END, toolCallId },
  ];
}

function runStarted(input) {
  runsServed += 1;
  return { type: EventType.RUN_STARTED, threadId: input.threadId, runId: input.runId, protocolVersion: "1.0" };
}

function runFinished(input, outcome) {
  return { type: EventType.RUN_FINISHED, threadId: input.threadId, runId: input.runId, outcome };
}

function chatEvents(input) {
  const { runId, messages } = input;
  const first = `${runId}-heard`;
  const call = `${runId}-weather`;
  const n = messages.length;
  const events = [
    runStarted(input),
    // The text is split so a gateway that keeps only the first or last delta is caught.
    ...textMessage(first, ["Upstream heard:", ` ${lastUserText(messages)}`]),
    ...toolCall(call, "get_weather", first, ['{"city":', '"Paris"}']),
    { type: EventType.TOOL_CALL_RESULT, messageId: `${runId}-weather-result`, toolCallId: call, content: "sunny", role: "tool" },
    ...textMessage(`${runId}-done`, ["Done after ", `${n} messages.`]),
  ];
  // Counted after RUN_STARTED so the snapshot includes this run.
  events.push({ type: EventType.STATE_SNAPSHOT, snapshot: { upstream: { runs: runsServed } } });
  events.push(runFinished(input, { type: "success" }));
  return events;
}

function approvalEvents(input) {
  const { threadId, runId } = input;
  // Deterministic from the thread so the resumed run can name the call the first run raised,
  // as an upstream that keeps no memory of its own must.
  const call = `${threadId}-send`;
  const resume = input.resume ?? [];
  if (resume.length === 0) {
    const ask = `${runId}-ask`;
    return [
      runStarted(input),
      ...textMessage(ask, ["I need approval ", "to send the email."]),
      ...toolCall(call, "send_email", ask, ['{"to":', '"team@example.com"}']),
      runFinished(input, {
        type: "interrupt",
        interrupts: [{
          id: APPROVAL_ID,
          reason: "tool_approval",
          message: "Send the email?",
          toolCallId: call,
          responseSchema: APPROVAL_SCHEMA,
        }],
      }),
    ];
  }
  const entry = resume.find((r) => r.interruptId === APPROVAL_ID);
  // An interrupt left unanswered must not be acted on or finished as success (AG-UI 1.0).
  // Entries for ids this server never raised are ignored, as the protocol asks.
  if (!entry) {
    return [{ type: EventType.RUN_ERROR, message: `missing resume for ${APPROVAL_ID}`, code: "missing_resume" }];
  }
  const payload = entry.payload;
  if (entry.status === "resolved" && typeof payload?.approved !== "boolean") {
    return [{ type: EventType.RUN_ERROR, message: `invalid resume payload for ${APPROVAL_ID}`, code: "invalid_resume" }];
  }
  const events = [runStarted(input)];
  if (entry.status === "resolved" && payload.approved === true) {
    const note = typeof payload.note === "string" ? payload.note : "none";
    events.push({ type: EventType.TOOL_CALL_RESULT, messageId: `${runId}-send-result`, toolCallId: call, content: "sent", role: "tool" });
    events.push(...textMessage(`${runId}-sent`, ["Sent. ", `Note: ${note}`]));
  } else {
    events.push(...textMessage(`${runId}-not-sent`, ["Not ", "sent."]));
  }
  events.push(runFinished(input, { type: "success" }));
  return events;
}

// The encoder does not validate (it serialises whatever it is given), so these invalid events
// go through it like any other; each is one a buggy producer really sends.
const INVALID_CASES = {
  // A required field as null: what pydantic-era producers put on the wire.
  "null-delta": (messageId) => ({ type: EventType.TEXT_MESSAGE_CONTENT, messageId, delta: null }),
  // timestamp must be an integer; `time.time() * 1000` is not.
  "float-timestamp": (messageId) => ({ type: EventType.TEXT_MESSAGE_CONTENT, messageId, delta: "hello", timestamp: 1700000000000.5 }),
};

function invalidEvents(input, kind) {
  const messageId = `${input.runId}-bad`;
  return [
    runStarted(input),
    { type: EventType.TEXT_MESSAGE_START, messageId, role: "assistant" },
    INVALID_CASES[kind](messageId),
    { type: EventType.TEXT_MESSAGE_END, messageId },
    runFinished(input, { type: "success" }),
  ];
}

function emptyDeltaEvents(input) {
  // "" is a valid delta in @ag-ui/core 1.0.0; a gateway must pass it, not fail the turn.
  return [
    runStarted(input),
    ...textMessage(`${input.runId}-empty`, ["", "Still here."]),
    runFinished(input, { type: "success" }),
  ];
}

function outOfOrderEvents(input) {
  return [
    runStarted(input),
    { type: EventType.TEXT_MESSAGE_CONTENT, messageId: `${input.runId}-never-started`, delta: "orphan" },
    runFinished(input, { type: "success" }),
  ];
}

function thinkingEvents(input) {
  const { runId } = input;
  const span = `${runId}-think`;
  const thought = `${runId}-thought`;
  const plan = `${runId}-plan`;
  return [
    runStarted(input),
    { type: EventType.REASONING_START, messageId: span },
    { type: EventType.REASONING_MESSAGE_START, messageId: thought, role: "reasoning" },
    { type: EventType.REASONING_MESSAGE_CONTENT, messageId: thought, delta: "Weighing " },
    { type: EventType.REASONING_MESSAGE_CONTENT, messageId: thought, delta: "the options." },
    { type: EventType.REASONING_MESSAGE_END, messageId: thought },
    { type: EventType.REASONING_END, messageId: span },
    { type: EventType.ACTIVITY_SNAPSHOT, messageId: plan, activityType: "plan", content: { steps: ["search", "answer"], done: 0 } },
    { type: EventType.ACTIVITY_DELTA, messageId: plan, activityType: "plan", patch: [{ op: "replace", path: "/done", value: 1 }] },
    ...textMessage(`${runId}-answer`, ["Decided."]),
    runFinished(input, { type: "success" }),
  ];
}

// An A2UI surface as @ag-ui/a2ui-middleware shows one: a form with a button. Given a person's
// action last (the middleware's `log_a2ui_event` call and its result), it answers the action
// instead, naming what the call's arguments and the result said.
function surfaceEvents(input) {
  const { runId, messages } = input;
  const [call, result] = messages.slice(-2);
  const logged = call?.role === "assistant" && call.toolCalls?.length === 1 && call.toolCalls[0].function.name === "log_a2ui_event";
  if (logged && result?.role === "tool" && result.toolCallId === call.toolCalls[0].id) {
    const action = JSON.parse(call.toolCalls[0].function.arguments);
    return [
      runStarted(input),
      ...textMessage(`${runId}-answer`, [`You pressed ${action.name} on ${action.surfaceId}. `, result.content]),
      runFinished(input, { type: "success" }),
    ];
  }
  const operations = [
    { version: "v0.9", createSurface: { surfaceId: "order-form", catalogId: "https://a2ui.org/specification/v0_9/basic_catalog.json" } },
    {
      version: "v0.9",
      updateComponents: {
        surfaceId: "order-form",
        components: [
          { id: "root", component: "Column", children: ["title", "go"] },
          { id: "title", component: "Text", text: "Order a pizza?" },
          { id: "go", component: "Button", child: "go-text", action: { event: { name: "order", context: { size: "large" } } } },
          { id: "go-text", component: "Text", text: "Order" },
        ],
      },
    },
  ];
  return [
    runStarted(input),
    ...textMessage(`${runId}-intro`, ["Here is the form."]),
    { type: EventType.ACTIVITY_SNAPSHOT, messageId: `a2ui-surface-${runId}`, activityType: "a2ui-surface", content: { a2ui_operations: operations }, replace: true },
    runFinished(input, { type: "success" }),
  ];
}

function frontendToolEvents(input) {
  const { runId, messages } = input;
  const last = messages[messages.length - 1];
  if (last?.role === "tool") {
    const said = typeof last.content === "string" ? last.content : JSON.stringify(last.content);
    return [runStarted(input), ...textMessage(`${runId}-answer`, ["The tool said: ", said]), runFinished(input, { type: "success" })];
  }
  const tool = (input.tools ?? [])[0];
  if (!tool) {
    return [runStarted(input), ...textMessage(`${runId}-none`, ["No tool ", "to call."]), runFinished(input, { type: "success" })];
  }
  // A client tool: called, never answered here (the client runs it), as CopilotKit agents do.
  const ask = `${runId}-ask`;
  return [
    runStarted(input),
    ...textMessage(ask, ["Calling ", tool.name]),
    ...toolCall(`${runId}-call`, tool.name, ask, ['{"color":', '"blue"}']),
    runFinished(input, { type: "success" }),
  ];
}

function failsEvents(input) {
  // A run whose model spent tokens before it failed: 1.0's RUN_ERROR carries them.
  return [
    runStarted(input),
    ...textMessage(`${input.runId}-started`, ["Looking into it."]),
    {
      type: EventType.RUN_ERROR,
      message: "the model stopped",
      code: "model_error",
      usage: [{ provider: "acme", model: "m-1", inputTokens: 7, outputTokens: 3, totalTokens: 10 }],
    },
  ];
}

function partsResultEvents(input) {
  // AG-UI 1.0 final: a tool result made of content parts.
  const { runId } = input;
  const call = `${runId}-map`;
  return [
    runStarted(input),
    ...toolCall(call, "draw_map", undefined, ['{"city":"Paris"}']),
    {
      type: EventType.TOOL_CALL_RESULT,
      messageId: `${runId}-map-result`,
      toolCallId: call,
      content: PARTS_RESULT,
      role: "tool",
    },
    ...textMessage(`${runId}-done`, ["Here is the map."]),
    runFinished(input, { type: "success" }),
  ];
}

const PARTS_RESULT = [
  { type: "text", text: "A map of Paris." },
  { type: "image", source: { type: "url", value: "https://maps.example/paris.png", mimeType: "image/png" } },
];

function chunkEvents(input) {
  const { runId } = input;
  return [
    runStarted(input),
    { type: EventType.REASONING_MESSAGE_CHUNK, messageId: `${runId}-thought`, delta: "Thinking it over." },
    { type: EventType.TEXT_MESSAGE_CHUNK, messageId: `${runId}-m`, role: "assistant", delta: "Chunked " },
    { type: EventType.TEXT_MESSAGE_CHUNK, delta: "text." },
    { type: EventType.TOOL_CALL_CHUNK, toolCallId: `${runId}-c`, toolCallName: "lookup", parentMessageId: `${runId}-m`, delta: '{"q":' },
    { type: EventType.TOOL_CALL_CHUNK, toolCallId: `${runId}-c`, delta: '"x"}' },
    { type: EventType.TOOL_CALL_RESULT, messageId: `${runId}-r`, toolCallId: `${runId}-c`, content: "found", role: "tool" },
    { type: EventType.TEXT_MESSAGE_CHUNK, messageId: `${runId}-m2`, delta: "After the call." },
    // No end for the last chunked message: RUN_FINISHED closes it, as the client expands it.
    runFinished(input, { type: "success" }),
  ];
}

const STEPS = 40;

function manyStepsEvents(input) {
  const names = Array.from({ length: STEPS }, (_, i) => `step-${i + 1}`);
  return [
    runStarted(input),
    ...names.map((stepName) => ({ type: EventType.STEP_STARTED, stepName })),
    ...textMessage(`${input.runId}-deep`, [`${STEPS} steps deep.`]),
    ...names.reverse().map((stepName) => ({ type: EventType.STEP_FINISHED, stepName })),
    runFinished(input, { type: "success" }),
  ];
}

const CONFIRM_ID = "up-confirm-1";

function confirmEvents(input) {
  const { runId } = input;
  const entry = (input.resume ?? []).find((r) => r.interruptId === CONFIRM_ID);
  if (!entry) {
    return [
      runStarted(input),
      ...toolCall("call_up_1", "send_email", undefined, ['{"to":"team@example.com"}']),
      runFinished(input, {
        type: "interrupt",
        interrupts: [{ id: CONFIRM_ID, reason: "confirmation", message: "Send the email?", toolCallId: "call_up_1" }],
      }),
    ];
  }
  const got = `${entry.status}${entry.payload === undefined ? "" : ` ${JSON.stringify(entry.payload)}`}`;
  const events = [runStarted(input)];
  if (entry.status === "resolved") {
    events.push({ type: EventType.TOOL_CALL_RESULT, messageId: `${runId}-sent`, toolCallId: "call_up_1", content: "sent", role: "tool" });
  }
  events.push(...textMessage(`${runId}-got`, ["Got: ", got]));
  events.push(runFinished(input, { type: "success" }));
  return events;
}

function statefulEvents(input) {
  return [
    runStarted(input),
    // An editable key set to a value outside the gateway's schema for it (a string).
    { type: EventType.STATE_SNAPSHOT, snapshot: { theme: {}, upstream: "set" } },
    ...textMessage(`${input.runId}-themed`, ["Themed."]),
    runFinished(input, { type: "success" }),
  ];
}

const threadsSeen = new Set();

function onceEvents(input) {
  if (threadsSeen.has(input.threadId)) return [runStarted(input), runFinished(input, { type: "success" })];
  threadsSeen.add(input.threadId);
  const words = Array.from({ length: 40 }, (_, i) => `w${i} `);
  return [runStarted(input), ...textMessage(`${input.runId}-story`, words), runFinished(input, { type: "success" })];
}

function subagentEvents(input) {
  const { runId } = input;
  const [research, fetch] = [`${runId}-research`, `${runId}-fetch`];
  return [
    runStarted(input),
    ...textMessage(`${runId}-plan`, ["Asking the researcher."]),
    { type: EventType.SUBAGENT_STARTED, subagentRunId: research, name: "researcher", description: "Finds things" },
    { type: EventType.STEP_STARTED, stepName: "search", subagentRunId: research },
    ...textMessage(`${runId}-found`, ["Found ", "two papers."]).map((e) => ({ ...e, subagentRunId: research })),
    { type: EventType.SUBAGENT_STARTED, subagentRunId: fetch, name: "fetcher", parentSubagentRunId: research },
    { type: EventType.TOOL_CALL_START, toolCallId: `${runId}-get`, toolCallName: "get_paper", subagentRunId: fetch },
    { type: EventType.TOOL_CALL_ARGS, toolCallId: `${runId}-get`, delta: '{"n":1}', subagentRunId: fetch },
    { type: EventType.TOOL_CALL_END, toolCallId: `${runId}-get`, subagentRunId: fetch },
    { type: EventType.SUBAGENT_ERROR, subagentRunId: fetch, message: "the archive is down", code: "unavailable" },
    { type: EventType.STEP_FINISHED, stepName: "search", subagentRunId: research },
    { type: EventType.SUBAGENT_FINISHED, subagentRunId: research, result: { papers: 2 }, outcome: { type: "success" } },
    ...textMessage(`${runId}-done`, ["The researcher found two papers."]),
    runFinished(input, { type: "success" }),
  ];
}

// A subagent that says its words slowly (with gapMs): an instance relaying it can be killed in
// the middle of the subagent's message.
function slowSubagentEvents(input) {
  const { runId } = input;
  const research = `${runId}-research`;
  const words = Array.from({ length: 30 }, (_, i) => `s${i} `);
  return [
    runStarted(input),
    { type: EventType.SUBAGENT_STARTED, subagentRunId: research, name: "researcher" },
    ...textMessage(`${runId}-found`, words).map((e) => ({ ...e, subagentRunId: research })),
    { type: EventType.SUBAGENT_FINISHED, subagentRunId: research, outcome: { type: "success" } },
    ...textMessage(`${runId}-done`, ["The researcher is done."]),
    runFinished(input, { type: "success" }),
  ];
}

// One long message said slowly: a client cancels (or an instance stops) in the middle of it.
function slowWordsEvents(input) {
  const words = Array.from({ length: 100 }, (_, i) => `u${i + 1} `);
  return [runStarted(input), ...textMessage(`${input.runId}-words`, words), runFinished(input, { type: "success" })];
}

function sendJson(res, status, value) {
  const body = JSON.stringify(value);
  res.writeHead(status, { "Content-Type": "application/json", "Content-Length": Buffer.byteLength(body) });
  res.end(body);
}

function headersOf(req) {
  // Node joins repeated headers with ", " (set-cookie aside), which is what the Python
  // server records too.
  return Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k, Array.isArray(v) ? v.join(", ") : v]));
}

async function readBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return Buffer.concat(chunks).toString("utf8");
}

const ROUTES = {
  "/agents/chat": { events: chatEvents },
  "/agents/slow": { events: chatEvents, gapMs: 200 },
  "/agents/one-write": { events: chatEvents, oneWrite: true },
  "/agents/approval": { events: approvalEvents },
  "/agents/invalid": { events: invalidEvents, sseOnly: true },
  "/agents/empty-delta": { events: emptyDeltaEvents },
  "/agents/out-of-order": { events: outOfOrderEvents },
  "/agents/thinking": { events: thinkingEvents },
  "/agents/surface": { events: surfaceEvents },
  "/agents/fails": { events: failsEvents },
  "/agents/parts-result": { events: partsResultEvents },
  "/agents/frontend-tool": { events: frontendToolEvents },
  "/agents/chunks": { events: chunkEvents },
  "/agents/many-steps": { events: manyStepsEvents },
  "/agents/confirm": { events: confirmEvents },
  "/agents/stateful": { events: statefulEvents },
  "/agents/once": { events: onceEvents, gapMs: 200 },
  "/agents/subagents": { events: subagentEvents },
  "/agents/slow-subagent": { events: slowSubagentEvents, gapMs: 100 },
  "/agents/slow-words": { events: slowWordsEvents, gapMs: 100 },
};

async function handle(req, res) {
  const url = new URL(req.url, "http://upstream");
  if (url.pathname === "/requests") {
    if (req.method === "GET") return sendJson(res, 200, received);
    if (req.method === "DELETE") {
      received.length = 0;
      res.writeHead(204);
      return res.end();
    }
    return sendJson(res, 405, { error: "GET or DELETE" });
  }
  if (req.method !== "POST") return sendJson(res, 404, { error: `no route ${req.method} ${url.pathname}` });

  const raw = await readBody(req);
  let body;
  try {
    body = JSON.parse(raw);
  } catch {
    body = raw; // recorded as sent, so a test sees what arrived even when it is not JSON
  }
  const entry = { path: req.url, headers: headersOf(req), body };
  received.push(entry);

  const route = ROUTES[url.pathname];
  if (!route) return sendJson(res, 404, { error: `no agent at ${url.pathname}` });
  // The official schema is the judge of what the gateway sends upstream; a stock server
  // refuses a malformed RunAgentInput before any stream opens.
  const parsed = RunAgentInputSchema.safeParse(body);
  if (!parsed.success) {
    return sendJson(res, 400, { error: "invalid RunAgentInput", issues: parsed.error.issues });
  }
  const input = body;
  let kind;
  if (url.pathname === "/agents/invalid") {
    kind = url.searchParams.get("case") ?? "null-delta";
    if (!INVALID_CASES[kind]) return sendJson(res, 400, { error: `unknown case ${kind}; one of ${Object.keys(INVALID_CASES).join(", ")}` });
  }

  const encoder = new EventEncoder({ accept: req.headers.accept });
  const proto = encoder.getContentType() !== "text/event-stream";
  // A schema-invalid event has no faithful protobuf form: it would be coerced on encoding.
  if (proto && route.sseOnly) return sendJson(res, 406, { error: "this agent answers text/event-stream only" });

  const events = route.events(input, kind);
  res.writeHead(200, { "Content-Type": encoder.getContentType(), "Cache-Control": "no-cache", Connection: "keep-alive" });
  res.socket?.setNoDelay(true);
  let gone = false;
  res.on("close", () => {
    gone = true;
    if (!res.writableFinished) entry.closedByClient = true;
  });
  if (route.oneWrite) {
    const encoded = events.map((event) => encoder.encodeBinary({ ...event, timestamp: event.timestamp ?? Date.now() }));
    res.write(Buffer.concat(encoded));
    return res.end();
  }
  for (const [i, event] of events.entries()) {
    if (gone) return;
    if (i > 0 && route.gapMs) await sleep(route.gapMs);
    if (gone) return;
    res.write(encoder.encodeBinary({ ...event, timestamp: event.timestamp ?? Date.now() }));
  }
  res.end();
}

serve(handle, "upstream");
