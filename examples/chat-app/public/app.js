// The chat page: talks to an agent through the backend's /api routes (which pass everything to
// agui-gateway) and renders the AG-UI event stream as it arrives: streamed text, tool calls,
// approval and question cards for interrupts, the board, and a reconnect with Last-Event-ID
// when a stream drops. Plain ES modules, no build step, no framework.
import { readSse } from "./sse.js";
import { applyPatch } from "./json-patch.js";

const $ = (id) => document.getElementById(id);
const ui = {
  agent: $("agent"),
  status: $("status"),
  newChat: $("new-chat"),
  transcript: $("transcript"),
  empty: $("empty"),
  agentDescription: $("agent-description"),
  suggestions: $("suggestions"),
  composer: $("composer"),
  input: $("input"),
  attach: $("attach"),
  attachment: $("attachment"),
  send: $("send"),
  threadId: $("thread-id"),
  notes: $("notes"),
  boardCount: $("board-count"),
  boardEmpty: $("board-empty"),
};

// sessionStorage: a reload keeps the conversation (the gateway holds it), a new tab starts one.
// The thread id is stored once its first message is sent: only then does the gateway know it.
const STORAGE = { thread: "chat-app.thread", agent: "chat-app.agent" };

// Prompts that show each example agent at work; any other agent gets none.
const SUGGESTIONS = {
  assistant: ["Tell the team the launch moved to Thursday", "Share the Q3 roadmap draft with the team"],
  planner: ["Plan the quarterly review", "Plan a team lunch"],
};

// How often, and how patiently, a dropped stream is picked up again before the page gives up.
const RECONNECT_ATTEMPTS = 8;
const RECONNECT_FIRST_DELAY_MS = 250;
const RECONNECT_MAX_DELAY_MS = 4000;

// A link to a thread (`/#thread=<id>`, e.g. to open it on another tab or device) opens it in
// this tab: it becomes the tab's thread, and the page connects to it like a reloaded one.
const linkedThread = new URLSearchParams(location.hash.slice(1)).get("thread");
if (linkedThread && /^[A-Za-z0-9._:@-]{1,200}$/.test(linkedThread)) sessionStorage.setItem(STORAGE.thread, linkedThread);

const state = {
  threadId: sessionStorage.getItem(STORAGE.thread) || newThreadId(),
  agents: [],
  agent: sessionStorage.getItem(STORAGE.agent) || "",
  // The conversation as the gateway's stream named it (its message ids included): each new run
  // sends it back with one more user message, and the gateway checks it against its record.
  history: [],
  board: { board: { notes: [] } },
  busy: false,
  // Open interrupts of the latest turn: { agent, entries: Map(interruptId -> {interrupt, decision}) }.
  pending: null,
  reconnects: 0,
};

// Rendered pieces, by the AG-UI ids that address them.
const bubbles = new Map(); // messageId -> text element
const toolCards = new Map(); // toolCallId -> { card, status, args, result, approval, argsText }

function randomHex(bytes) {
  // getRandomValues works on plain-HTTP origins too (randomUUID needs a secure context).
  return Array.from(crypto.getRandomValues(new Uint8Array(bytes)), (b) => b.toString(16).padStart(2, "0")).join("");
}
function newThreadId() {
  return `chat-${randomHex(12)}`;
}
function newRunId() {
  return `run-${randomHex(12)}`;
}

/** Creates an element: h("div", { class: "x", onclick: f }, child, "text", …). */
function h(tag, attributes = {}, ...children) {
  const element = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) element.addEventListener(name.slice(2), value);
    else if (name === "class") element.className = value;
    else element.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

// ---------------------------------------------------------------------------------------------
// Page chrome: status, composer, agent picker.

function setStatus(kind, text) {
  ui.status.dataset.state = kind;
  ui.status.textContent = text;
}

function refreshComposer() {
  const blocked = state.busy || state.pending !== null;
  ui.send.disabled = blocked;
  ui.input.placeholder = state.pending ? "Answer the request above to continue…" : "Message the agent…";
  ui.agent.disabled = state.busy;
}

function setBusy(busy) {
  state.busy = busy;
  refreshComposer();
}

function agentTitle(name) {
  return state.agents.find((agent) => agent.name === name)?.title || name;
}

function renderEmptyState() {
  const agent = state.agents.find((a) => a.name === state.agent);
  ui.agentDescription.textContent = agent?.description || "Ask the agent anything.";
  ui.suggestions.replaceChildren(
    ...(SUGGESTIONS[state.agent] ?? []).map((text) =>
      h("button", { class: "suggestion", type: "button", onclick: () => send(text) }, text),
    ),
  );
}

function hideEmptyState() {
  ui.empty.hidden = true;
}

function scrollToEnd() {
  ui.transcript.scrollTop = ui.transcript.scrollHeight;
}

function addRow(element) {
  hideEmptyState();
  ui.transcript.append(element);
  scrollToEnd();
  return element;
}

function notice(kind, text) {
  return addRow(h("div", { class: `notice notice-${kind}`, role: kind === "error" ? "alert" : "note" }, text));
}

// ---------------------------------------------------------------------------------------------
// The conversation: user bubbles, assistant bubbles, tool cards.

function renderUserMessage(message) {
  const parts = typeof message.content === "string" ? [{ type: "text", text: message.content }] : message.content ?? [];
  const text = parts.filter((part) => part.type === "text").map((part) => part.text).join("");
  // An attached image shows above the text: inline data as a data: URL, a URL as it is.
  const images = parts
    .filter((part) => part.type === "image" && part.source)
    .map((part) => h("img", {
      alt: "attached image",
      src: part.source.type === "data" ? `data:${part.source.mimeType};base64,${part.source.value}` : part.source.value,
    }));
  return addRow(h("div", { class: "row row-user", "data-message-id": message.id }, h("div", { class: "bubble bubble-user" }, ...images, text)));
}

// An image attached to the next message, as the 1.0 image part it is sent as.
let attached = null;

/** Reads the chosen file as base64 and shows it in the composer until the message is sent. */
async function attachImage(file) {
  const dataUrl = await new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result);
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
  const [, mimeType, value] = /^data:([^;]+);base64,(.*)$/.exec(dataUrl) ?? [];
  if (!value) return;
  attached = { type: "image", source: { type: "data", value, mimeType } };
  ui.attachment.replaceChildren(h("img", { src: dataUrl, alt: file.name }), file.name);
  ui.attachment.hidden = false;
}

function clearAttachment() {
  attached = null;
  ui.attach.value = "";
  ui.attachment.replaceChildren();
  ui.attachment.hidden = true;
}

/** Adds `content` under the agent's avatar, joining the row above when the same agent spoke last. */
function appendAssistant(agentName, content) {
  const last = ui.transcript.lastElementChild;
  if (last?.classList.contains("row-assistant") && last.dataset.agent === agentName) {
    last.querySelector(".assistant-body").append(content);
    scrollToEnd();
    return content;
  }
  const title = agentTitle(agentName);
  addRow(h(
    "div",
    { class: "row row-assistant", "data-agent": agentName },
    h("div", { class: "avatar", "aria-hidden": "true" }, title.slice(0, 1).toUpperCase()),
    h("div", { class: "assistant-body" }, h("div", { class: "speaker" }, title), content),
  ));
  return content;
}

function startAssistantText(messageId, agentName, { streaming }) {
  const existing = bubbles.get(messageId);
  if (existing) {
    // A run that follows a turn from its start says this message again: show it once.
    existing.textContent = "";
    existing.classList.toggle("streaming", streaming);
    return existing;
  }
  const text = h("div", { class: `bubble bubble-assistant${streaming ? " streaming" : ""}`, "data-message-id": messageId });
  bubbles.set(messageId, text);
  return appendAssistant(agentName, text);
}

function historyMessage(id) {
  return state.history.find((message) => message.id === id);
}

function toolCard(toolCallId, name, agentName) {
  const existing = toolCards.get(toolCallId);
  if (existing) return existing;
  const status = h("span", { class: "tool-status", "data-state": "calling" }, "Calling…");
  const args = h("div", { class: "tool-args" });
  const approval = h("div", { class: "tool-approval", hidden: true });
  const result = h("div", { class: "tool-result", hidden: true });
  const card = h(
    "div",
    { class: "tool-card", "data-tool-call-id": toolCallId, "data-tool-name": name },
    h("div", { class: "tool-head" }, h("span", { class: "tool-icon", "aria-hidden": "true" }, "⚙"), h("span", { class: "tool-name" }, name), status),
    args,
    approval,
    result,
  );
  const entry = { card, status, args, approval, result, argsText: "" };
  toolCards.set(toolCallId, entry);
  appendAssistant(agentName, card);
  return entry;
}

function setToolStatus(entry, kind, text) {
  entry.status.dataset.state = kind;
  entry.status.textContent = text;
}

function renderToolArgs(entry) {
  let parsed;
  try {
    parsed = JSON.parse(entry.argsText || "{}");
  } catch {
    entry.args.replaceChildren(h("code", { class: "tool-args-raw" }, entry.argsText));
    return;
  }
  if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
    entry.args.replaceChildren(h("code", { class: "tool-args-raw" }, JSON.stringify(parsed)));
    return;
  }
  entry.args.replaceChildren(
    h("dl", {}, ...Object.entries(parsed).flatMap(([key, value]) => [
      h("dt", {}, key),
      h("dd", {}, typeof value === "string" ? value : JSON.stringify(value)),
    ])),
  );
}

function setToolResult(entry, content) {
  const text = typeof content === "string" ? content : (content ?? []).map((part) => part.text ?? "").join("");
  entry.result.hidden = false;
  entry.result.replaceChildren(h("span", { class: "tool-result-label" }, "Result"), h("span", { class: "tool-result-text" }, text));
  // The gateway reports a denied, expired or edited-away call as a result starting "not run".
  if (/^not run/i.test(text)) setToolStatus(entry, "skipped", "Not run");
  else setToolStatus(entry, "done", "Done");
}

// ---------------------------------------------------------------------------------------------
// The board.

function renderBoard({ fresh = new Set() } = {}) {
  const notes = state.board?.board?.notes ?? [];
  ui.boardCount.textContent = String(notes.length);
  ui.boardEmpty.hidden = notes.length > 0;
  ui.notes.replaceChildren(
    ...notes.map((note) => {
      if (note.redacted) {
        return h("li", { class: "note note-redacted", "data-note-id": note.id },
          h("div", { class: "note-top" }, h("span", { class: "note-kind" }, note.kind ?? "note")),
          h("div", { class: "note-text" }, `Hidden: needs clearance ${note.label ?? ""}`.trim()));
      }
      const when = note.createdAt ? new Date(note.createdAt).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }) : "";
      return h(
        "li",
        { class: `note${fresh.has(note.id) ? " fresh" : ""}`, "data-note-id": note.id },
        h("div", { class: "note-top" }, h("span", { class: "note-kind" }, note.kind ?? "note"), h("span", { class: "note-meta" }, `#${note.id} · ${agentTitle(note.agent ?? "")} · ${when}`)),
        h("div", { class: "note-text" }, note.text ?? ""),
        (note.tags ?? []).length ? h("div", { class: "note-tags" }, ...note.tags.map((tag) => h("span", { class: "tag" }, tag))) : null,
      );
    }),
  );
}

function setBoard(next) {
  const before = new Set((state.board?.board?.notes ?? []).map((note) => note.id));
  state.board = next;
  const fresh = new Set((next?.board?.notes ?? []).map((note) => note.id).filter((id) => !before.has(id)));
  renderBoard({ fresh });
}

// ---------------------------------------------------------------------------------------------
// AG-UI events -> the page and the history.

function applyEvent(event, run) {
  switch (event.type) {
    case "RUN_STARTED":
      run.started = true;
      break;
    case "MESSAGES_SNAPSHOT":
      adoptConversation(event.messages ?? [], run);
      break;
    case "STATE_SNAPSHOT":
      setBoard(event.snapshot ?? { board: { notes: [] } });
      break;
    case "STATE_DELTA":
      try {
        setBoard(applyPatch(state.board, event.delta));
      } catch (error) {
        console.warn(`a board delta did not apply (${error.message}); keeping the board as it was`);
      }
      break;
    case "TEXT_MESSAGE_START": {
      const message = historyMessage(event.messageId);
      if (message) message.content = "";
      else state.history.push({ id: event.messageId, role: "assistant", content: "" });
      startAssistantText(event.messageId, run.agent, { streaming: true });
      break;
    }
    case "TEXT_MESSAGE_CONTENT": {
      const message = historyMessage(event.messageId);
      if (message) message.content = (message.content ?? "") + event.delta;
      const bubble = bubbles.get(event.messageId);
      if (bubble) {
        bubble.textContent += event.delta;
        scrollToEnd();
      }
      break;
    }
    case "TEXT_MESSAGE_END":
      bubbles.get(event.messageId)?.classList.remove("streaming");
      break;
    case "TOOL_CALL_START": {
      // A call belongs to the message it names; without one it gets an assistant message of
      // its own named after the call, as @ag-ui/client does (and the gateway's record too).
      let owner = event.parentMessageId && historyMessage(event.parentMessageId);
      if (!owner) {
        owner = historyMessage(event.toolCallId) ?? { id: event.toolCallId, role: "assistant" };
        if (!state.history.includes(owner)) state.history.push(owner);
      }
      owner.toolCalls = (owner.toolCalls ?? []).filter((call) => call.id !== event.toolCallId);
      owner.toolCalls.push({ id: event.toolCallId, type: "function", function: { name: event.toolCallName, arguments: "" } });
      const entry = toolCard(event.toolCallId, event.toolCallName, run.agent);
      entry.argsText = "";
      renderToolArgs(entry);
      break;
    }
    case "TOOL_CALL_ARGS": {
      const call = state.history.flatMap((message) => message.toolCalls ?? []).find((c) => c.id === event.toolCallId);
      if (call) call.function.arguments += event.delta;
      const entry = toolCards.get(event.toolCallId);
      if (entry) {
        entry.argsText += event.delta;
        renderToolArgs(entry);
      }
      break;
    }
    case "TOOL_CALL_END": {
      const entry = toolCards.get(event.toolCallId);
      if (entry) setToolStatus(entry, "running", "Running…");
      break;
    }
    case "TOOL_CALL_RESULT": {
      if (!historyMessage(event.messageId)) {
        state.history.push({ id: event.messageId, role: "tool", toolCallId: event.toolCallId, content: event.content });
      }
      const entry = toolCards.get(event.toolCallId);
      if (entry) setToolResult(entry, event.content);
      break;
    }
    case "CUSTOM":
      if (event.name === "gateway.waiting") {
        // The turn waits for someone else's decision; this stream goes on once they decide.
        const who = (event.value?.waiting ?? []).map((w) => `${w.what} (decided by ${w.deciders})`).join("; ");
        notice("info", `Waiting for another person: ${who}`);
        setStatus("waiting", "Waiting for others");
      }
      break;
    case "RUN_FINISHED":
      run.finished = true;
      for (const bubble of bubbles.values()) bubble.classList.remove("streaming");
      if (event.outcome?.type === "interrupt") openInterrupts(event.outcome.interrupts ?? [], run.agent);
      else if (event.outcome?.type === "cancelled") notice("info", "The turn was cancelled.");
      break;
    case "RUN_ERROR":
      run.finished = true;
      run.error = event;
      for (const bubble of bubbles.values()) bubble.classList.remove("streaming");
      break;
    default:
      // Steps, reasoning, activity and other events: nothing to show in this app.
      break;
  }
}

// ---------------------------------------------------------------------------------------------
// Runs: one POST, its SSE stream, and reconnects with Last-Event-ID when it drops.

class HttpError extends Error {
  constructor(status, body) {
    super(body?.error?.message ? `${body.error.message} (HTTP ${status})` : `HTTP ${status}`);
    this.status = status;
  }
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/**
 * POSTs `body` to the agent and feeds every event to `onEvent` until the run's RUN_FINISHED or
 * RUN_ERROR. If the connection drops first, the same request goes out again with
 * `Last-Event-ID` = the last id received: the gateway continues right after it, nothing missed
 * and nothing twice. Errors that a retry cannot fix (a 4xx) are thrown.
 */
async function streamRun(agent, body, onEvent, run) {
  let lastEventId = null;
  for (let attempt = 0; ; attempt++) {
    let response;
    try {
      response = await fetch(`/api/agents/${encodeURIComponent(agent)}`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          accept: "text/event-stream",
          ...(lastEventId ? { "last-event-id": lastEventId } : {}),
        },
        body: JSON.stringify(body),
      });
      if (!response.ok) {
        const error = new HttpError(response.status, await response.json().catch(() => null));
        // 502-504: the backend could not reach the gateway (restarting?): worth another try.
        if (![502, 503, 504].includes(response.status)) throw error;
        throw Object.assign(error, { retry: true });
      }
      if (attempt > 0) {
        state.reconnects += 1;
        document.body.dataset.reconnects = String(state.reconnects);
        notice("reconnect", lastEventId
          ? `Connection dropped. Reconnected and continued after event ${lastEventId}.`
          : "Connection dropped. Reconnected and followed the turn from its start.");
        setStatus("reconnected", "Reconnected");
      }
      for await (const frame of readSse(response.body)) {
        // A refused run's lone RUN_ERROR has id 0, which names no position in the log.
        if (frame.id && frame.id !== "0") lastEventId = frame.id;
        let event;
        try {
          event = JSON.parse(frame.data);
        } catch {
          console.warn("skipped a frame that is not JSON");
          continue;
        }
        onEvent(event);
        if (run.finished) return;
      }
      // The stream ended without a terminal event: the gateway closed it (a restart, its
      // 30-minute cap) while the turn runs on. Continue it like a dropped connection.
    } catch (error) {
      if (error instanceof HttpError && !error.retry) throw error;
      console.warn(`the stream dropped: ${error.message}`);
    }
    if (attempt + 1 >= RECONNECT_ATTEMPTS) throw new Error("the connection to the agent was lost; reload the page to pick the conversation up again");
    setStatus("reconnecting", "Reconnecting…");
    await sleep(Math.min(RECONNECT_FIRST_DELAY_MS * 2 ** attempt, RECONNECT_MAX_DELAY_MS));
  }
}

/** Runs one request to its end; returns the run's record ({ started, finished, error }). */
async function runAgent(agent, body) {
  const run = { agent, started: false, finished: false, error: null };
  setBusy(true);
  setStatus("streaming", "Streaming…");
  // The run's own stream shows this turn; the thread's connect stream would show it a second
  // time, so it pauses for the run and picks the thread up again after it.
  await stopWatching();
  try {
    await streamRun(agent, body, (event) => applyEvent(event, run), run);
  } catch (error) {
    run.error = { message: error.message, code: error.status ? `http_${error.status}` : "network" };
  } finally {
    setBusy(false);
    if (body.threadId === state.threadId) startWatching(agent);
  }
  // A run that ended leaves the thread on its branch: the current one.
  branchHead = null;
  refreshBranches();
  if (run.error) {
    notice("error", `${run.error.message}${run.error.code ? ` [${run.error.code}]` : ""}`);
    setStatus("error", "Error");
  } else if (state.pending) {
    setStatus("waiting", "Waiting for you");
  } else if (ui.status.dataset.state !== "reconnected") {
    setStatus("idle", "Ready");
  }
  refreshComposer();
  return run;
}

async function send(text) {
  text = text.trim();
  if (!text || state.busy || state.pending || !state.agent) return;
  ui.input.value = "";
  autosize();
  sessionStorage.setItem(STORAGE.thread, state.threadId);
  // With an image attached the message is 1.0 content parts: the text, then the image.
  const content = attached ? [{ type: "text", text }, attached] : text;
  clearAttachment();
  const message = { id: `user-${randomHex(8)}`, role: "user", content };
  const row = renderUserMessage(message);
  state.history.push(message);
  const run = await runAgent(state.agent, {
    threadId: state.threadId,
    runId: newRunId(),
    protocolVersion: "1.0",
    messages: state.history,
  });
  if (run.error && !run.started) {
    // Refused before the turn started (e.g. another turn still running): the message is not
    // the thread's, so it leaves the history the next run sends.
    state.history = state.history.filter((m) => m !== message);
    row.classList.add("row-failed");
    if (run.error.code === "history_mismatch") {
      // Our copy disagrees with the gateway's record: take the record, as the gateway asks.
      const reloaded = await fetch(`/api/threads/${encodeURIComponent(state.threadId)}/messages`);
      if (reloaded.ok) {
        state.history = (await reloaded.json()).messages;
        notice("info", "The conversation was reloaded from the gateway. Send your message again.");
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Interrupts: approval cards and question forms, answered with a resume run.

function openInterrupts(interrupts, agent) {
  if (!interrupts.length) return;
  // The page's own run and the thread's connect stream both report the same wait: show it once.
  if (state.pending && interrupts.every((interrupt) => state.pending.entries.has(interrupt.id))) return;
  state.pending = { agent, entries: new Map(interrupts.map((interrupt) => [interrupt.id, { interrupt, decision: null }])) };
  for (const interrupt of interrupts) renderInterrupt(interrupt, agent);
  refreshComposer();
}

function isApproval(interrupt) {
  return interrupt.reason === "tool_call" || Boolean(interrupt.responseSchema?.properties?.approved);
}

function renderInterrupt(interrupt, agent) {
  if (isApproval(interrupt)) {
    const entry = interrupt.toolCallId && toolCards.get(interrupt.toolCallId);
    const details = interrupt.metadata?.["gateway/details"];
    const card = approvalCard(interrupt, entry ? safeJson(entry.argsText) : details);
    if (entry) {
      setToolStatus(entry, "waiting", "Needs approval");
      entry.approval.hidden = false;
      entry.approval.replaceChildren(card);
      entry.card.classList.add("has-approval");
      scrollToEnd();
    } else {
      appendAssistant(agent, h("div", { class: "tool-card has-approval" }, card));
    }
  } else {
    appendAssistant(agent, questionCard(interrupt));
  }
}

function safeJson(text) {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

function expiryLine(interrupt) {
  const parts = [];
  if (interrupt.expiresAt) {
    parts.push(`Expires ${new Date(interrupt.expiresAt).toLocaleString([], { hour: "2-digit", minute: "2-digit", month: "short", day: "numeric" })}`);
  }
  const deciders = interrupt.metadata?.["gateway/deciders"];
  if (deciders) parts.push(`decided by ${deciders}`);
  return parts.length ? h("div", { class: "interrupt-meta" }, parts.join(" · ")) : null;
}

const FIELD_LABELS = { comment: "Comment (optional)", editedArgs: "Arguments", answer: "Your answer" };
const MULTILINE_FIELDS = new Set(["comment"]);

/**
 * A form for the members of a JSON Schema object: strings (a select for an `enum`, a text box
 * that must equal a `const`), numbers, booleans, and nested objects. An object schema that
 * lists no properties (such as `editedArgs`) is shaped after `initial`, its proposed value.
 * Returns `{ element, read() }`; read() gives the value, leaving out empty optional members.
 */
function schemaForm(schema, initial, { only } = {}) {
  const required = new Set(schema.required ?? []);
  const readers = [];
  const element = h("div", { class: "schema-form" });
  let properties = Object.entries(schema.properties ?? {});
  if (!properties.length && initial && typeof initial === "object") {
    properties = Object.entries(initial).map(([key, value]) => [key, { type: value === null ? "string" : Array.isArray(value) ? "array" : typeof value }]);
  }
  // `only` picks members and sets their order (the schema's own order is alphabetical).
  if (only) properties = only.map((name) => [name, schema.properties?.[name]]).filter(([, property]) => property);
  for (const [name, property] of properties) {
    const value = initial?.[name];
    const label = property.title || FIELD_LABELS[name] || name;
    if (property.type === "object") {
      const nested = schemaForm(property, value ?? {});
      element.append(h("fieldset", { class: "field-group" }, h("legend", {}, label), nested.element));
      readers.push([name, () => nested.read(), true]);
      continue;
    }
    let input;
    let read;
    if (property.type === "boolean") {
      input = h("input", { type: "checkbox", name, checked: value === true });
      read = () => input.checked;
    } else if (property.type === "number" || property.type === "integer") {
      input = h("input", { type: "number", name, value: value ?? "", step: property.type === "integer" ? "1" : "any" });
      read = () => (input.value === "" ? undefined : Number(input.value));
    } else if (Array.isArray(property.enum)) {
      input = h("select", { name }, ...property.enum.map((option) => h("option", { value: option, selected: option === value }, option)));
      read = () => input.value;
    } else if (property.type === "array" || (value !== null && typeof value === "object")) {
      input = h("textarea", { name, rows: 2, spellcheck: "false" });
      input.value = JSON.stringify(value ?? [], null, 0);
      read = () => JSON.parse(input.value);
    } else {
      const long = MULTILINE_FIELDS.has(name) || (typeof value === "string" && value.length > 48);
      input = long ? h("textarea", { name, rows: 3 }) : h("input", { type: "text", name });
      input.value = value ?? "";
      if (property.const !== undefined) input.placeholder = `Type ${property.const}`;
      read = () => (input.value === "" && !required.has(name) ? undefined : input.value);
    }
    const hint = property.const !== undefined ? `Type “${property.const}” to confirm` : null;
    element.append(h("label", { class: "field" }, h("span", { class: "field-label" }, hint ?? label), input));
    readers.push([name, read, required.has(name)]);
  }
  return {
    element,
    read() {
      const out = {};
      for (const [name, read] of readers) {
        const value = read();
        if (value !== undefined) out[name] = value;
      }
      return out;
    },
  };
}

function approvalCard(interrupt, proposedArgs) {
  const schema = interrupt.responseSchema ?? { properties: { approved: { type: "boolean" } } };
  const properties = schema.properties ?? {};
  // Members the schema requires besides `approved` (a typed confirmation) must be filled for
  // any approval; `editedArgs` and `comment` belong to the Edit form.
  const inlineNames = (schema.required ?? []).filter((name) => name !== "approved" && name !== "editedArgs");
  const inline = inlineNames.length ? schemaForm(schema, {}, { only: inlineNames }) : null;
  const canEdit = Boolean(properties.editedArgs);
  const editNames = ["editedArgs", "comment"].filter((name) => properties[name]);
  const edit = canEdit ? schemaForm(schema, { editedArgs: proposedArgs ?? {} }, { only: editNames }) : null;

  const error = h("div", { class: "interrupt-error", role: "alert", hidden: true });
  const editForm = edit
    ? h("form", { class: "edit-form", hidden: true, onsubmit: (e) => {
        e.preventDefault();
        submit({ status: "resolved", payload: { approved: true, ...(inline?.read() ?? {}), ...edit.read() } }, "Approved with changes");
      } },
      edit.element,
      h("div", { class: "actions" },
        h("button", { class: "button button-primary", type: "submit" }, "Approve with changes"),
        h("button", { class: "button button-ghost", type: "button", onclick: () => toggleEdit(false) }, "Cancel")))
    : null;
  const buttons = h("div", { class: "actions" },
    h("button", { class: "button button-primary", type: "button", onclick: () => submit({ status: "resolved", payload: { approved: true, ...(inline?.read() ?? {}) } }, "Approved") }, "Approve"),
    canEdit ? h("button", { class: "button button-secondary", type: "button", onclick: () => toggleEdit(true) }, "Edit") : null,
    h("button", { class: "button button-danger", type: "button", onclick: () => submit({ status: "resolved", payload: { approved: false } }, "Rejected") }, "Reject"));
  const card = h("div", { class: "approval", "data-interrupt-id": interrupt.id },
    h("div", { class: "interrupt-title" }, h("span", { class: "pill pill-warn" }, "Approval needed"), h("span", {}, interrupt.message ?? "Allow this call?")),
    inline?.element,
    buttons,
    editForm,
    error,
    expiryLine(interrupt));

  function toggleEdit(open) {
    editForm.hidden = !open;
    buttons.hidden = open;
    if (open) editForm.scrollIntoView({ block: "nearest" });
  }
  function submit(answer, label) {
    try {
      checkAgainstSchema(schema, answer);
    } catch (problem) {
      error.hidden = false;
      error.textContent = problem.message;
      return;
    }
    error.hidden = true;
    decide(interrupt.id, answer, card, label);
  }
  return card;
}

function questionCard(interrupt) {
  const answerSchema = interrupt.responseSchema?.properties?.answer ?? { type: "string" };
  const choices = answerSchema.enum ?? interrupt.metadata?.["gateway/choices"] ?? [];
  const card = h("div", { class: "question", "data-interrupt-id": interrupt.id });
  const answer = (text) => decide(interrupt.id, { status: "resolved", payload: { answer: text } }, card, `Answered: ${text}`);
  let body;
  if (choices.length) {
    body = h("div", { class: "choices" }, ...choices.map((choice) => h("button", { class: "button button-choice", type: "button", onclick: () => answer(choice) }, choice)));
  } else {
    const field = h("input", { type: "text", "aria-label": "Your answer", placeholder: "Type your answer" });
    body = h("form", { class: "answer-form", onsubmit: (e) => { e.preventDefault(); if (field.value.trim()) answer(field.value.trim()); } },
      field, h("button", { class: "button button-primary", type: "submit" }, "Answer"));
  }
  card.append(
    h("div", { class: "interrupt-title" }, h("span", { class: "pill pill-info" }, "Question"), h("span", { class: "question-text" }, interrupt.message ?? "")),
    body,
    h("div", { class: "actions actions-quiet" },
      h("button", { class: "button button-link", type: "button", onclick: () => decide(interrupt.id, { status: "cancelled" }, card, "Skipped") }, "Skip")),
    expiryLine(interrupt),
  );
  return card;
}

// Catches what the person can fix before the gateway refuses it (the gateway checks the payload
// against the same schema, with a full validator).
function checkAgainstSchema(schema, answer) {
  if (answer.status !== "resolved") return;
  const payload = answer.payload ?? {};
  for (const name of schema.required ?? []) {
    if (payload[name] === undefined || payload[name] === "") throw new Error(`Fill in ${FIELD_LABELS[name] ?? name}.`);
  }
  for (const [name, property] of Object.entries(schema.properties ?? {})) {
    if (property.const !== undefined && payload[name] !== undefined && payload[name] !== property.const) {
      throw new Error(`Type “${property.const}” exactly to confirm.`);
    }
  }
}

function decide(interruptId, answer, card, label) {
  const pending = state.pending;
  const entry = pending?.entries.get(interruptId);
  if (!entry || state.busy) return;
  entry.decision = answer;
  entry.card = card;
  entry.label = label;
  card.classList.add("decided");
  for (const control of card.querySelectorAll("button, input, select, textarea")) control.disabled = true;
  const open = [...pending.entries.values()].filter((e) => !e.decision).length;
  if (open) {
    setStatus("waiting", `${open} more to answer`);
    return;
  }
  // The gateway takes every open interrupt of the caller at once (all or nothing).
  resume(pending);
}

async function resume(pending) {
  const entries = [...pending.entries.entries()];
  state.pending = null;
  for (const [, entry] of entries) {
    const declined = entry.decision.status === "cancelled" || entry.decision.payload?.approved === false;
    entry.card.replaceChildren(h("div", { class: `decision${declined ? " decision-declined" : ""}` }, entry.label));
    const tool = entry.interrupt.toolCallId && toolCards.get(entry.interrupt.toolCallId);
    if (tool) setToolStatus(tool, entry.decision.payload?.approved ? "running" : "skipped", entry.label);
  }
  const run = await runAgent(pending.agent, {
    threadId: state.threadId,
    runId: newRunId(),
    protocolVersion: "1.0",
    messages: state.history,
    resume: entries.map(([interruptId, { decision }]) => ({ interruptId, ...decision })),
  });
  if (run.error && !run.started) {
    // Nothing was decided (a resume is all or nothing): show the cards again. An approval inside
    // its tool card is redrawn in place; a standalone card is replaced.
    for (const [, entry] of entries) {
      if (!entry.card.closest(".tool-approval")) (entry.card.closest(".tool-card") ?? entry.card).remove();
    }
    openInterrupts(entries.map(([, entry]) => entry.interrupt), pending.agent);
  }
}

// ---------------------------------------------------------------------------------------------
// Start-up: the agents, and the thread as the gateway holds it (a reloaded page).

async function loadAgents() {
  const response = await fetch("/api/agents");
  if (!response.ok) throw new HttpError(response.status, await response.json().catch(() => null));
  state.agents = (await response.json()).agents ?? [];
  ui.agent.replaceChildren(...state.agents.map((agent) => h("option", { value: agent.name }, agent.title || agent.name)));
  if (!state.agents.some((agent) => agent.name === state.agent)) state.agent = state.agents[0]?.name ?? "";
  ui.agent.value = state.agent;
  renderEmptyState();
}

function renderHistory(messages, agent) {
  for (const message of messages) {
    if (message.role === "user") renderUserMessage(message);
    else if (message.role === "assistant") {
      if (message.content) startAssistantText(message.id, agent, { streaming: false }).textContent = message.content;
      for (const call of message.toolCalls ?? []) {
        const entry = toolCard(call.id, call.function.name, agent);
        entry.argsText = call.function.arguments;
        renderToolArgs(entry);
        setToolStatus(entry, "running", "Proposed");
      }
    } else if (message.role === "tool") {
      const entry = toolCards.get(message.toolCallId);
      if (entry) setToolResult(entry, message.content);
    }
  }
}

async function loadThread() {
  ui.threadId.textContent = state.threadId;
  if (!sessionStorage.getItem(STORAGE.thread)) return;
  // Which agent the thread last spoke with: the connect route is an agent's. 403: a thread that
  // does not exist yet (the gateway answers it like one we may not read).
  const response = await fetch(`/api/threads/${encodeURIComponent(state.threadId)}`);
  if (response.status === 403) return;
  if (!response.ok) throw new HttpError(response.status, await response.json().catch(() => null));
  const thread = await response.json();
  const agent = thread.latestTurn?.agent ?? state.agent;
  if (state.agents.some((a) => a.name === agent)) {
    state.agent = agent;
    ui.agent.value = agent;
  }
  // The connect stream says the rest: the conversation, the board, a turn still running (live,
  // to its end), a pending approval, and every later turn, whichever tab or device starts it.
  const opened = startWatching(agent);
  await opened.snapshot;
}

// ---------------------------------------------------------------------------------------------
// Watching the thread: the gateway's connect stream, open whenever this page runs nothing itself.

// { agent, threadId, controller, done, snapshot } while a connect stream is open or reconnecting.
let watch = null;

/**
 * Opens the thread's connect stream (unless one is open): its events go through applyEvent like
 * a run's, a drop is picked up again with Last-Event-ID. Returns the watch; `snapshot` resolves
 * once the stream has shown the thread (or failed to).
 */
function startWatching(agent) {
  if (watch) return watch;
  const controller = new AbortController();
  let shown;
  const snapshot = new Promise((resolve) => (shown = resolve));
  const current = { agent, threadId: state.threadId, controller, snapshot, runs: 0 };
  current.done = followThread(current, shown)
    .catch((error) => {
      if (controller.signal.aborted) return;
      notice("error", `Stopped following the thread: ${error.message}`);
      setStatus("error", "Error");
    })
    .finally(() => {
      shown();
      if (watch === current) watch = null;
    });
  watch = current;
  return current;
}

/** Closes the connect stream, if one is open, and waits until it no longer touches the page. */
async function stopWatching() {
  const current = watch;
  watch = null;
  if (!current) return;
  current.controller.abort();
  await current.done;
}

// What a connect stream's opening run holds when no turn is running: the thread, nothing live.
const OPENING_EVENTS = new Set(["RUN_STARTED", "MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED", "RUN_ERROR"]);

function goLive(run) {
  run.live = true;
  setBusy(true);
  setStatus("streaming", "Streaming…");
}

async function followThread(current, shown) {
  const { agent, threadId, controller } = current;
  let lastEventId = null;
  let run = null;
  let fruitless = 0;
  for (;;) {
    let progressed = false;
    try {
      const response = await fetch(`/api/agents/${encodeURIComponent(agent)}/connect`, {
        method: "POST",
        headers: {
          "content-type": "application/json",
          accept: "text/event-stream",
          ...(lastEventId ? { "last-event-id": lastEventId } : {}),
        },
        body: JSON.stringify({ threadId, runId: newRunId(), protocolVersion: "1.0", messages: [] }),
        signal: controller.signal,
      });
      if (!response.ok) {
        const error = new HttpError(response.status, await response.json().catch(() => null));
        if (![502, 503, 504].includes(response.status)) throw error;
      } else {
        for await (const frame of readSse(response.body)) {
          if (controller.signal.aborted) return;
          if (frame.id && frame.id !== "0") lastEventId = frame.id;
          progressed = true;
          let event;
          try {
            event = JSON.parse(frame.data);
          } catch {
            continue;
          }
          if (event.type === "RUN_STARTED") {
            // A later turn (not the stream's opening run) answered whatever this page still
            // offered to answer: someone decided elsewhere, in another tab or on another device.
            const later = current.runs > 0;
            if (later && state.pending) settledElsewhere();
            current.runs += 1;
            run = { agent, started: true, finished: false, error: null, watching: true, live: false };
            if (later) goLive(run);
          }
          if (!run) continue;
          // The opening run only shows the thread, unless a turn is running: then its events
          // follow, and the page is busy like the tab that started it.
          if (!run.live && !OPENING_EVENTS.has(event.type)) goLive(run);
          applyEvent(event, run);
          if (event.type === "STATE_SNAPSHOT") shown();
          if (run.finished) {
            shown();
            if (run.live) setBusy(false);
            if (run.error) {
              notice("error", `${run.error.message ?? "the turn failed"}${run.error.code ? ` [${run.error.code}]` : ""}`);
              setStatus("error", "Error");
            } else if (state.pending) setStatus("waiting", "Waiting for you");
            else if (run.live) setStatus("idle", "Ready");
            refreshComposer();
            run = null;
          }
        }
      }
    } catch (error) {
      if (controller.signal.aborted) return;
      if (error instanceof HttpError) throw error;
      console.warn(`the thread's stream dropped: ${error.message}`);
    }
    if (controller.signal.aborted) return;
    // A connect stream has no end of its own: the gateway closed it (its stream_max_secs, a
    // restart) or the network dropped it. Pick it up after the last event seen.
    fruitless = progressed ? 0 : fruitless + 1;
    if (fruitless >= RECONNECT_ATTEMPTS) throw new Error("the connection to the thread was lost; reload the page to pick it up again");
    await sleep(Math.min(RECONNECT_FIRST_DELAY_MS * 2 ** fruitless, RECONNECT_MAX_DELAY_MS));
  }
}

/** Retires the open approval and question cards: the turn went on without this page. */
function settledElsewhere() {
  state.pending = null;
  for (const card of ui.transcript.querySelectorAll(".approval:not(.decided), .question:not(.decided)")) {
    card.replaceWith(h("div", { class: "decision" }, "Answered elsewhere"));
  }
  refreshComposer();
}

/**
 * The conversation as the gateway recorded it (MESSAGES_SNAPSHOT) becomes the page's history.
 * When it says something the page does not show (a reload, another tab's message), the
 * transcript is drawn again from it; interrupts still open come again with the run's outcome.
 */
function adoptConversation(messages, run) {
  const same = messages.length === state.history.length
    && messages.every((message, i) => message.id === state.history[i].id
      && JSON.stringify(message.content ?? "") === JSON.stringify(state.history[i].content ?? ""));
  state.history = messages;
  refreshBranches();
  if (same) return;
  redrawConversation(messages, run.agent);
}

/** Draws the transcript again from `messages` (the page's history). */
function redrawConversation(messages, agent) {
  for (const row of [...ui.transcript.querySelectorAll(".row, .branch-bar")]) row.remove();
  bubbles.clear();
  toolCards.clear();
  state.pending = null;
  renderHistory(messages, agent);
  refreshComposer();
}

// ---------------------------------------------------------------------------------------------
// Branches (SPEC §6): Regenerate, Rewrite (an edit of a message) and the "‹ 2 / 3 ›" switch
// between a message's alternatives. The gateway keeps every answer; each of these starts a turn
// beside another, and the thread shows one branch at a time.

/** The turn the shown branch ends at (a branch opened with ‹ ›); null: the current branch. */
let branchHead = null;

/** Puts the actions and the alternatives switch under each user message of the shown branch. */
async function refreshBranches() {
  const threadId = state.threadId;
  if (!threadId || state.busy) return;
  const query = branchHead ? `?turn=${encodeURIComponent(branchHead)}` : "";
  const response = await fetch(`/api/threads/${encodeURIComponent(threadId)}/messages${query}`);
  if (!response.ok || threadId !== state.threadId) return;
  const view = await response.json();
  for (const old of ui.transcript.querySelectorAll(".branch-bar")) old.remove();
  const rows = [...ui.transcript.querySelectorAll(".row-user")];
  (view.alternatives ?? []).forEach((alternatives, i) => {
    const row = rows[i];
    if (!row) return;
    const { index, count, turns } = alternatives;
    const bar = h("div", { class: "branch-bar" },
      count > 1 ? h("button", { class: "button-branch", type: "button", "aria-label": "Previous alternative", disabled: index <= 1, onclick: () => openBranch(turns[index - 2].head) }, "‹") : null,
      count > 1 ? h("span", { class: "branch-position" }, `${index} / ${count}`) : null,
      count > 1 ? h("button", { class: "button-branch", type: "button", "aria-label": "Next alternative", disabled: index >= count, onclick: () => openBranch(turns[index].head) }, "›") : null,
      h("button", { class: "button-branch", type: "button", onclick: () => rewrite(row.dataset.messageId) }, "Rewrite"),
      i === rows.length - 1 ? h("button", { class: "button-branch", type: "button", onclick: () => regenerate() }, "Regenerate") : null);
    row.after(bar);
  });
}

/** Shows the branch that ends at turn `head`; the next message goes on from it. */
async function openBranch(head) {
  if (state.busy || state.pending) return;
  const response = await fetch(`/api/threads/${encodeURIComponent(state.threadId)}/messages?turn=${encodeURIComponent(head)}`);
  if (!response.ok) return notice("error", `The branch could not be loaded [http_${response.status}]`);
  branchHead = head;
  state.history = (await response.json()).messages;
  redrawConversation(state.history, state.agent);
  await refreshBranches();
}

/** Sends the shown branch up to (and with) its user message at `index`, as `message`. */
async function branchFrom(index, message) {
  if (state.busy || state.pending || !state.agent) return;
  state.history = [...state.history.slice(0, index), message];
  branchHead = null;
  redrawConversation(state.history, state.agent);
  await runAgent(state.agent, { threadId: state.threadId, runId: newRunId(), protocolVersion: "1.0", messages: state.history });
}

/** Another answer to the newest user message of the shown branch. */
function regenerate() {
  const index = state.history.findLastIndex((message) => message.role === "user");
  if (index >= 0) return branchFrom(index, state.history[index]);
}

/** The user message `messageId` with other words: answered on a new branch. */
function rewrite(messageId) {
  const index = state.history.findIndex((message) => message.role === "user" && message.id === messageId);
  if (index < 0) return;
  const old = state.history[index];
  const before = typeof old.content === "string" ? old.content : (old.content ?? []).filter((p) => p.type === "text").map((p) => p.text).join("");
  const words = window.prompt("Rewrite your message", before)?.trim();
  if (!words || words === before) return;
  const content = typeof old.content === "string" ? words : [{ type: "text", text: words }, ...old.content.filter((p) => p.type !== "text")];
  return branchFrom(index, { ...old, content });
}

function startNewChat() {
  if (state.busy && !watch) return;
  // The old thread is not this page's any more: stop showing its turns.
  stopWatching();
  setBusy(false);
  state.threadId = newThreadId();
  sessionStorage.removeItem(STORAGE.thread);
  state.history = [];
  state.pending = null;
  bubbles.clear();
  toolCards.clear();
  ui.transcript.replaceChildren(ui.empty);
  ui.empty.hidden = false;
  ui.threadId.textContent = state.threadId;
  setBoard({ board: { notes: [] } });
  setStatus("idle", "Ready");
  refreshComposer();
  ui.input.focus();
}

function autosize() {
  ui.input.style.height = "auto";
  ui.input.style.height = `${Math.min(ui.input.scrollHeight, 160)}px`;
}

ui.composer.addEventListener("submit", (event) => {
  event.preventDefault();
  send(ui.input.value);
});
ui.input.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    send(ui.input.value);
  }
});
ui.input.addEventListener("input", autosize);
ui.attach.addEventListener("change", () => {
  const file = ui.attach.files?.[0];
  if (file) attachImage(file).catch((error) => notice("error", `Could not read the image: ${error.message}`));
});
ui.agent.addEventListener("change", () => {
  state.agent = ui.agent.value;
  sessionStorage.setItem(STORAGE.agent, state.agent);
  renderEmptyState();
});
ui.newChat.addEventListener("click", startNewChat);

renderBoard();
refreshComposer();
try {
  await loadAgents();
  await loadThread();
} catch (error) {
  notice("error", `Could not load the conversation: ${error.message}`);
  setStatus("error", "Error");
}
document.body.dataset.ready = "true";
