// The gateway's console (docs/console.md). Reads only the public API (docs/api.md) with the
// person's own credential, so it shows nothing the API would not give them. No framework: DOM
// built with textContent only (never HTML from data), hash routes, a poll for the inbox and the
// connect stream for a running turn.

const TOKEN_KEY = "agui-console-token";
const POLL_MS = 3000;
const main = document.getElementById("main");
const statusLine = document.getElementById("status");

// ---- the credential ------------------------------------------------------------------------

/** A token passed as `#token=…` is kept for this tab and taken out of the address. */
function takeTokenFromAddress() {
  const match = /(?:^#|&)token=([^&]+)/.exec(location.hash);
  if (!match) return;
  sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(match[1]));
  history.replaceState(null, "", location.pathname + "#/inbox");
}

const token = () => sessionStorage.getItem(TOKEN_KEY);

/** Who the token names, for the header only (the gateway decides everything). */
function whoAmI() {
  const t = token();
  if (!t) return "local (development)";
  if (t.startsWith("agk_")) return "an API key";
  try {
    const claims = JSON.parse(atob(t.split(".")[1].replace(/-/g, "+").replace(/_/g, "/")));
    return claims.sub ? String(claims.sub) : "signed in";
  } catch {
    return "signed in";
  }
}

// ---- the API -------------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

async function api(method, path, { tenant, body, query } = {}) {
  const params = new URLSearchParams(query ?? {});
  if (tenant) params.set("tenant", tenant);
  const headers = { accept: "application/json" };
  if (token()) headers.authorization = `Bearer ${token()}`;
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(`${path}${params.size ? `?${params}` : ""}`, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  if (response.status === 204) return null;
  const json = await response.json().catch(() => null);
  if (!response.ok) {
    throw new ApiError(response.status, json?.error?.code ?? "error", json?.error?.message ?? response.statusText);
  }
  return json;
}

/** The tenants this caller reaches: the OpenAPI document names them to a signed-in caller. */
const tenantsOf = new Map(); // credential -> its tenants, read once
async function tenants() {
  const key = token() ?? "";
  if (!tenantsOf.has(key)) {
    const document = await api("GET", "/openapi.json");
    const parameters = document?.paths?.["/v1/threads"]?.get?.parameters ?? [];
    const tenant = parameters.find((p) => p.name === "tenant");
    tenantsOf.set(key, tenant?.schema?.enum ?? ["default"]);
  }
  return tenantsOf.get(key);
}

// What a refusal means, in words a person reads (the gateway's message follows).
const REFUSALS = {
  interrupt_expired: "This request expired: the gateway denied it and the turn went on without you.",
  not_a_decider: "You may not decide this one.",
  interrupt_changed: "The call changed since it was shown: a new request asks again.",
  invalid_resume: "The gateway did not take this answer.",
  permission_denied: "You may not see or do this.",
  unauthenticated: "Your sign-in was not accepted.",
  not_running: "No turn is running.",
  turn_in_progress: "A turn is still ending; try again.",
};

const refusalText = (error) =>
  error instanceof ApiError ? `${REFUSALS[error.code] ?? "Refused."} (${error.code}: ${error.message})` : String(error);

// ---- small DOM helpers ---------------------------------------------------------------------

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

const relative = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });

/** "3 minutes ago", "in 2 hours": with the exact time on hover. */
function when(iso) {
  const at = Date.parse(iso);
  if (Number.isNaN(at)) return "";
  return h("time", { datetime: iso, title: new Date(at).toLocaleString() }, ago(at));
}

function ago(at) {
  const seconds = (at - Date.now()) / 1000;
  const units = [["year", 31536000], ["day", 86400], ["hour", 3600], ["minute", 60], ["second", 1]];
  const [unit, size] = units.find(([, s]) => Math.abs(seconds) >= s) ?? ["second", 1];
  return relative.format(Math.round(seconds / size), unit);
}

/** Relative times move on without a new render. */
function refreshTimes() {
  for (const time of main.querySelectorAll("time[datetime]")) time.textContent = ago(Date.parse(time.dateTime));
}

function say(text) {
  statusLine.textContent = text;
}

/** Counts screens: an answer that arrives after the person moved on is not shown. */
let screen = 0;

function show(...children) {
  main.replaceChildren(...children.filter((child) => child !== null && child !== undefined && child !== false));
}

const threadLink = (tenant, threadId) =>
  `#/threads/${encodeURIComponent(tenant)}/${encodeURIComponent(threadId)}`;

// ---- the inbox -----------------------------------------------------------------------------

let inboxTimer = null;
let inboxFocus = null; // the interrupt id named by #/interrupts/<id>
const outcomes = new Map(); // interrupt id -> what happened when this page decided it
let inboxSignature = null; // what the inbox showed last

async function loadInbox() {
  const names = await tenants();
  const mine = [];
  const others = [];
  for (const tenant of names) {
    const inbox = await api("GET", "/v1/interrupts", { tenant });
    mine.push(...inbox.interrupts);
    others.push(...inbox.waitingForOthers);
  }
  const oldestFirst = (a, b) => Date.parse(a.createdAt) - Date.parse(b.createdAt);
  return { mine: mine.sort(oldestFirst), others: others.sort(oldestFirst) };
}

async function showInbox() {
  const mine = screen;
  const render = async () => {
    let inbox;
    try {
      inbox = await loadInbox();
      if (mine !== screen) return;
    } catch (error) {
      if (mine !== screen) return;
      if (error instanceof ApiError && error.status === 401) return showSignIn(refusalText(error));
      say(refusalText(error));
      return;
    }
    const count = document.getElementById("inbox-count");
    count.hidden = inbox.mine.length === 0;
    count.textContent = String(inbox.mine.length);
    // A card the person is typing in stays as it is: only new and gone items change.
    const list = document.getElementById("mine");
    if (list && list.contains(document.activeElement) && document.activeElement.matches("input, textarea")) {
      return;
    }
    // Unchanged: keep the page (and the keyboard's place in it) as it is.
    const signature = JSON.stringify([inbox, [...outcomes.keys()], inboxFocus]);
    if (signature === inboxSignature && main.querySelector("#mine")) return refreshTimes();
    inboxSignature = signature;
    const focused = inboxFocus && !inbox.mine.some((i) => i.interrupt.id === inboxFocus);
    show(
      h("h1", {}, "Waiting for you"),
      focused && !outcomes.has(inboxFocus)
        ? h("p", { class: "notice", id: "focus-gone" },
            `Interrupt ${inboxFocus} is not waiting for you: it was decided, it expired, or it is not yours to decide.`)
        : null,
      inbox.mine.length === 0 && outcomes.size === 0 ? h("p", { class: "muted" }, "Nothing waits for you.") : null,
      h("ol", { id: "mine", class: "cards" },
        ...[...outcomes.values()].map((o) => h("li", { class: "card done", "data-interrupt": o.id }, o.text)),
        ...inbox.mine.filter((i) => !outcomes.has(i.interrupt.id)).map(interruptCard)),
      h("h2", {}, "Waiting for others"),
      inbox.others.length === 0
        ? h("p", { class: "muted" }, "Nothing of yours waits for anyone else.")
        : h("ul", { id: "others", class: "cards" }, ...inbox.others.map(othersCard)),
    );
    if (inboxFocus) {
      const card = main.querySelector(`[data-interrupt="${CSS.escape(inboxFocus)}"]`);
      if (card) {
        card.classList.add("focus");
        card.scrollIntoView({ block: "center" });
      }
    }
  };
  await render();
  inboxTimer = setInterval(render, POLL_MS);
}

function interruptCard(item) {
  const interrupt = item.interrupt;
  const metadata = interrupt.metadata ?? {};
  const schema = interrupt.responseSchema ?? {};
  const properties = schema.properties ?? {};
  const details = metadata["gateway/details"];
  const choices = metadata["gateway/choices"] ?? properties.answer?.enum ?? [];
  const result = h("p", { class: "result", role: "alert" });
  const comment = h("input", { type: "text", name: "comment", placeholder: "Comment (optional)", "aria-label": "Comment" });
  const confirm = properties.confirm?.const;
  const confirmInput = confirm
    ? h("input", { type: "text", name: "confirm", placeholder: `Type ${confirm} to confirm`, "aria-label": "Confirmation" })
    : null;
  const edit = properties.editedArgs
    ? h("textarea", { name: "editedArgs", rows: "5", "aria-label": "Edited arguments (JSON)", hidden: true },
        JSON.stringify(details ?? {}, null, 2))
    : null;

  const decide = async (status, payload) => {
    result.textContent = "Sending…";
    try {
      const outcome = await api("POST", `/v1/interrupts/${encodeURIComponent(interrupt.id)}/decision`, {
        tenant: item.tenant,
        body: payload === undefined ? { status } : { status, payload },
      });
      const text = outcome.outcome === "already_decided"
        ? `“${interrupt.message}”: someone decided it first.`
        : `“${interrupt.message}”: ${decidedWords(interrupt, outcome, payload)}.`;
      outcomes.set(interrupt.id, { id: interrupt.id, text });
      say(text);
      route();
    } catch (error) {
      result.textContent = refusalText(error);
      result.dataset.code = error.code ?? "";
    }
  };
  const approval = (approved) => {
    const payload = { approved };
    if (comment.value.trim()) payload.comment = comment.value.trim();
    if (approved && confirmInput) payload.confirm = confirmInput.value;
    if (approved && edit && !edit.hidden) {
      try {
        payload.editedArgs = JSON.parse(edit.value);
      } catch {
        result.textContent = "The edited arguments are not JSON.";
        return;
      }
    }
    decide("resolved", payload);
  };

  // A list of options (the gateway's question with choices, or an upstream's, as CrewAI's
  // outcomes) is answered by picking one; a schema that is the list itself takes the option
  // as the payload, not wrapped.
  const question = interrupt.reason === "input_required" || choices.length > 0;
  const picked = (choice) => (Array.isArray(schema.enum) ? choice : { answer: choice });
  const answerInput = question && choices.length === 0
    ? h("input", { type: "text", name: "answer", placeholder: "Your answer", "aria-label": "Answer" })
    : null;
  const actions = question
    ? h("div", { class: "actions" },
        ...choices.map((choice) => h("button", { type: "button", class: "choice", onclick: () => decide("resolved", picked(choice)) }, choice)),
        answerInput,
        answerInput ? h("button", { type: "button", class: "primary", onclick: () => decide("resolved", { answer: answerInput.value }) }, "Answer") : null,
        h("button", { type: "button", class: "deny", onclick: () => decide("cancelled") }, "Decline"))
    : h("div", { class: "actions" },
        confirmInput,
        comment,
        h("button", { type: "button", class: "primary approve", onclick: () => approval(true) }, "Approve"),
        h("button", { type: "button", class: "deny", onclick: () => approval(false) }, "Deny"),
        edit ? h("button", { type: "button", onclick: () => { edit.hidden = !edit.hidden; if (!edit.hidden) edit.focus(); } }, "Edit arguments") : null);

  return h("li", { class: "card", tabindex: "0", "data-interrupt": interrupt.id },
    h("h3", {}, interrupt.message ?? interrupt.reason),
    h("p", { class: "meta" },
      item.threadReadable ? h("a", { href: threadLink(item.tenant, item.threadId) }, item.threadId) : h("span", {}, item.threadId),
      ` · ${item.tenant} · ${item.agent ?? ""} · asked by ${item.startedBy} `, when(item.createdAt),
      " · expires ", when(interrupt.expiresAt ?? item.expiresAt)),
    metadata["gateway/asks-because"] ? h("p", { class: "why" }, `Why: ${metadata["gateway/asks-because"]}`) : null,
    details ? h("pre", { class: "details", "aria-label": "The call's arguments" }, JSON.stringify(details, null, 2)) : null,
    h("p", { class: "deciders" }, `Decided by ${item.deciders}`, item.fourEyes ? h("span", { class: "badge" }, "four eyes") : null),
    edit,
    actions,
    result);
}

// What was decided, in the words of the decision's one meaning as the gateway read it (its
// answer says `decision`: approve, deny or answer, and the option an answer picked): the card
// never guesses the meaning from what it sent (a typed answer is shown as typed).
function decidedWords(interrupt, outcome, payload) {
  const question = interrupt.reason === "input_required";
  const typed = typeof payload?.answer === "string" ? payload.answer : null;
  switch (outcome.decision) {
    case "approve": return "approved";
    case "answer": return outcome.choice ?? typed ? `answered “${outcome.choice ?? typed}”` : "answered";
    case "deny": return question ? "declined" : "denied";
    default: return outcome.approved ? "approved" : "denied";
  }
}

function othersCard(item) {
  return h("li", { class: "card other", "data-interrupt": item.interruptId },
    h("h3", {}, item.what),
    h("p", { class: "meta" },
      item.threadReadable ? h("a", { href: threadLink(item.tenant, item.threadId) }, item.threadId) : item.threadId,
      ` · ${item.tenant} · `, when(item.createdAt), " · expires ", when(item.expiresAt)),
    h("p", { class: "deciders" }, `Waiting for ${item.deciders}`, item.fourEyes ? h("span", { class: "badge" }, "four eyes") : null));
}

// ---- threads -------------------------------------------------------------------------------

async function showThreads(query) {
  const names = await tenants();
  const tenant = query.get("tenant") || names[0];
  const status = query.get("status") || "";
  const agent = query.get("agent") || "";
  const filters = { limit: "50" };
  if (status) filters.status = status;
  if (agent) filters.agent = agent;
  if (query.get("cursor")) filters.cursor = query.get("cursor");
  const mine = screen;
  let page;
  try {
    page = await api("GET", "/v1/threads", { tenant, query: filters });
    if (mine !== screen) return;
  } catch (error) {
    if (mine !== screen) return;
    if (error instanceof ApiError && error.status === 401) return showSignIn(refusalText(error));
    show(h("h1", {}, "Threads"), h("p", { class: "error" }, refusalText(error)));
    return;
  }
  const go = (changes) => {
    const next = new URLSearchParams({ tenant, status, agent, ...changes });
    for (const [k, v] of [...next]) if (!v) next.delete(k);
    location.hash = `#/threads?${next}`;
  };
  const select = (name, values, current) =>
    h("label", {}, `${name} `,
      h("select", { name, onchange: (e) => go({ [name]: e.target.value, cursor: "" }) },
        ...values.map(([value, label]) => h("option", { value, selected: value === current }, label))));
  show(
    h("h1", {}, "Threads"),
    h("form", { class: "filters", onsubmit: (e) => e.preventDefault() },
      select("tenant", names.map((n) => [n, n]), tenant),
      select("status", [["", "any"], ...["running", "waiting", "succeeded", "failed", "cancelled"].map((s) => [s, s])], status),
      h("label", {}, "agent ",
        h("input", { name: "agent", value: agent, size: "12", onchange: (e) => go({ agent: e.target.value, cursor: "" }) }))),
    page.threads.length === 0
      ? h("p", { class: "muted" }, "No threads.")
      : h("ul", { class: "threads" }, ...page.threads.map((t) =>
          h("li", {},
            h("a", { href: threadLink(tenant, t.id) }, t.title ?? t.id),
            h("span", { class: `pill ${t.status}` }, t.status),
            h("span", { class: "meta" }, ` ${t.agent} · `, when(t.updatedAt))))),
    page.next_cursor ? h("button", { type: "button", onclick: () => go({ cursor: page.next_cursor }) }, "Older threads") : null,
  );
}

let liveStream = null; // the AbortController of the thread view's connect stream

async function showThread(tenant, threadId) {
  let thread;
  let messages = [];
  let turns = []; // every turn of every branch, oldest first
  let audit = null; // the thread's audit trail, for the tenant's admins only
  const load = async () => {
    thread = await api("GET", `/v1/threads/${encodeURIComponent(threadId)}`, { tenant });
    messages = (await api("GET", `/v1/threads/${encodeURIComponent(threadId)}/messages`, { tenant })).messages;
    turns = (await api("GET", `/v1/threads/${encodeURIComponent(threadId)}/turns`, { tenant })).turns;
    audit = await api("GET", `/v1/threads/${encodeURIComponent(threadId)}/audit`, { tenant })
      .then((answer) => answer.audit)
      .catch(() => null);
  };
  const mine = screen;
  try {
    await load();
    if (mine !== screen) return;
  } catch (error) {
    if (mine !== screen) return;
    if (error instanceof ApiError && error.status === 401) return showSignIn(refusalText(error));
    // A tenant's admin reads the trail of a thread whose content is not theirs to read.
    const trail = await api("GET", `/v1/threads/${encodeURIComponent(threadId)}/audit`, { tenant })
      .then((answer) => answer.audit)
      .catch(() => null);
    show(h("h1", {}, threadId), h("p", { class: "error", id: "thread-error" }, refusalText(error)),
      trail ? h("p", { class: "muted" }, "You administer this tenant: the thread's audit trail is yours to read, its content is not.") : null,
      trail ? auditSection(trail) : null);
    return;
  }
  const log = h("ol", { class: "log", "aria-label": "Live events" });
  const result = h("p", { class: "result", role: "alert" });
  const render = () => {
    const turn = thread.latestTurn ?? {};
    const conversation = h("ol", { class: "conversation" }, ...messages.map(messageItem));
    const board = h("ul", { class: "board" }, ...(thread.board?.notes ?? []).map(noteItem));
    const dangerZone = h("div", { class: "danger" });
    const askDelete = () => dangerZone.replaceChildren(
      h("p", {}, `Delete “${threadId}” with its turns, events, interrupts and board? This cannot be undone.`),
      h("button", { type: "button", class: "deny", id: "confirm-delete", onclick: erase }, "Delete for good"),
      h("button", { type: "button", onclick: () => dangerZone.replaceChildren() }, "Keep it"));
    const erase = async () => {
      try {
        await api("DELETE", `/v1/threads/${encodeURIComponent(threadId)}`, { tenant });
        say(`Thread ${threadId} deleted.`);
        location.hash = `#/threads?tenant=${encodeURIComponent(tenant)}`;
      } catch (error) {
        result.textContent = refusalText(error);
      }
    };
    const cancel = async () => {
      try {
        await api("POST", `/v1/threads/${encodeURIComponent(threadId)}/cancel`, { tenant });
        say("Cancelling the turn…");
      } catch (error) {
        result.textContent = refusalText(error);
      }
    };
    show(
      h("h1", {}, threadId),
      h("p", { class: "meta" }, `${tenant} · ${thread.turnCount} ${thread.turnCount === 1 ? "turn" : "turns"} · latest `,
        h("span", { class: `pill ${turn.status}`, id: "turn-status" }, turn.status ?? "none"),
        ` on ${turn.agent ?? "?"}`),
      h("div", { class: "actions" },
        thread.status === "running" || thread.status === "waiting"
          ? h("button", { type: "button", onclick: cancel, id: "cancel" }, "Cancel the turn") : null,
        h("button", { type: "button", class: "deny", onclick: askDelete, id: "delete" }, "Delete thread…")),
      dangerZone,
      result,
      thread.interrupts?.length
        ? h("p", { class: "notice" }, `${thread.interrupts.length} waiting for you: `, h("a", { href: "#/inbox" }, "decide in the inbox"))
        : null,
      h("div", { class: "columns" },
        h("section", { "aria-label": "Conversation" }, h("h2", {}, "Conversation"), conversation),
        h("section", { "aria-label": "Board" }, h("h2", {}, "Board"),
          (thread.board?.notes ?? []).length ? board : h("p", { class: "muted" }, "No notes."),
          h("h2", {}, "Live"), log)),
      turnsSection(turns),
      audit ? auditSection(audit) : null,
    );
  };
  render();
  let shown = JSON.stringify([thread, messages, turns, audit]);
  follow(tenant, threadId, thread.latestTurn?.agent, log, async () => {
    try {
      await load();
      if (mine !== screen) return;
      // Unchanged (a replayed opening, say): keep the page, and a confirmation being given.
      const now = JSON.stringify([thread, messages, turns, audit]);
      if (now === shown) return;
      shown = now;
      render();
    } catch (error) {
      say(refusalText(error));
    }
  });
}

/** Each turn of the thread, oldest first: its status, agent, start and branch. */
function turnsSection(turns) {
  return h("section", { "aria-label": "Turns", id: "turns" }, h("h2", {}, "Turns"),
    h("ol", { class: "turns" }, ...turns.map((turn) => h("li", { "data-turn": turn.id },
      h("span", { class: `pill ${turn.status}` }, turn.status), ` ${turn.agent} · `, when(turn.createdAt),
      turn.onCurrentBranch ? null : h("span", { class: "muted" }, " · another branch")))));
}

/** The thread's audit trail: who did what, when, via what (no content). */
function auditSection(audit) {
  return h("section", { "aria-label": "Audit trail", id: "audit" }, h("h2", {}, "Audit trail"),
    h("table", { class: "audit" },
      h("thead", {}, h("tr", {}, ...["When", "What", "Who", "Via"].map((name) => h("th", { scope: "col" }, name)))),
      h("tbody", {}, ...audit.map((row) => h("tr", {},
        h("td", {}, when(row.at)), h("td", {}, row.action), h("td", {}, row.actor),
        h("td", {}, row.via ?? row.detail?.via ?? "direct"))))));
}

function messageItem(message) {
  const text = typeof message.content === "string"
    ? message.content
    : (message.content ?? []).map((part) => part.text ?? `[${part.type}]`).join(" ");
  return h("li", { class: `message ${message.role}` },
    h("span", { class: "role" }, message.role),
    h("p", {}, text),
    ...(message.toolCalls ?? []).map((call) =>
      h("pre", { class: "details" }, `${call.function.name}(${call.function.arguments})`)));
}

function noteItem(note) {
  if (note.redacted) {
    return h("li", { class: "note redacted" }, `Note ${note.id} (${note.kind}, ${note.agent}): redacted — label ${note.label}`);
  }
  return h("li", { class: "note" },
    h("span", { class: "kind" }, note.kind), ` ${note.text} `,
    ...(note.tags ?? []).map((tag) => h("span", { class: "tag" }, tag)));
}

/**
 * The thread's connect stream (docs/api.md): each event as a line of the live log; the view
 * loads the thread again when a run of it ends or a message completes.
 */
async function follow(tenant, threadId, agent, log, changed) {
  if (!agent) return;
  liveStream?.abort();
  const controller = new AbortController();
  liveStream = controller;
  const headers = { "content-type": "application/json", accept: "text/event-stream" };
  if (token()) headers.authorization = `Bearer ${token()}`;
  try {
    const response = await fetch(`/v1/agui/agents/${encodeURIComponent(agent)}/connect?tenant=${encodeURIComponent(tenant)}`, {
      method: "POST",
      headers,
      body: JSON.stringify({ threadId, runId: `console-${Date.now()}`, protocolVersion: "1.0" }),
      signal: controller.signal,
    });
    if (!response.ok) {
      log.append(h("li", { class: "muted" }, "The live view is not available to you."));
      return;
    }
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    let opened = false;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = frame.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5)).join("\n");
        if (!data) continue;
        const event = JSON.parse(data);
        log.append(h("li", {}, h("code", {}, event.type), " ", eventSummary(event)));
        while (log.children.length > 200) log.firstChild.remove();
        if (event.type === "RUN_STARTED" && opened) changed();
        if (["RUN_FINISHED", "RUN_ERROR", "TEXT_MESSAGE_END", "TOOL_CALL_RESULT", "STATE_DELTA"].includes(event.type)) {
          opened = true;
          changed();
        }
      }
    }
  } catch (error) {
    if (error.name !== "AbortError") log.append(h("li", { class: "muted" }, "The live view stopped."));
  }
}

function eventSummary(event) {
  switch (event.type) {
    case "TEXT_MESSAGE_CONTENT": return event.delta;
    case "TOOL_CALL_START": return event.toolCallName;
    case "RUN_FINISHED": return event.outcome?.type ?? "";
    case "RUN_ERROR": return `${event.code}: ${event.message}`;
    case "CUSTOM": return event.name;
    case "STEP_STARTED": case "STEP_FINISHED": return event.stepName;
    default: return "";
  }
}

// ---- sign-in -------------------------------------------------------------------------------

function showSignIn(why) {
  clearInterval(inboxTimer);
  const input = h("input", { type: "password", name: "token", autocomplete: "off", required: true, "aria-label": "Token", id: "token" });
  show(
    h("h1", {}, "Sign in"),
    why ? h("p", { class: "error" }, why) : null,
    h("p", {}, "Paste your app token or identity-provider token: the console reads the gateway's API with it, and keeps it in this tab only."),
    h("form", { class: "signin", onsubmit: (e) => {
      e.preventDefault();
      sessionStorage.setItem(TOKEN_KEY, input.value.trim());
      location.hash = "#/inbox";
      route();
    } }, input, h("button", { type: "submit", class: "primary" }, "Sign in")),
  );
  input.focus();
}

// ---- routes and keys -----------------------------------------------------------------------

let lastRoute = null; // the screen shown: a new one clears the last screen's status line

async function route() {
  screen += 1;
  clearInterval(inboxTimer);
  const [previous] = location.hash.split("?");
  if (previous !== lastRoute) say("");
  lastRoute = previous;
  liveStream?.abort();
  takeTokenFromAddress();
  document.getElementById("who").textContent = whoAmI();
  document.getElementById("sign-out").hidden = !token();
  const [path, search] = location.hash.replace(/^#/, "").split("?");
  const query = new URLSearchParams(search ?? "");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  for (const link of document.querySelectorAll("[data-nav]")) {
    link.toggleAttribute("aria-current", link.dataset.nav === (parts[0] === "threads" ? "threads" : "inbox"));
  }
  try {
    if (parts[0] === "signin") return showSignIn();
    if (parts[0] === "threads" && parts.length >= 3) return await showThread(parts[1], parts[2]);
    if (parts[0] === "threads") return await showThreads(query);
    inboxFocus = parts[0] === "interrupts" ? parts[1] : null;
    return await showInbox();
  } catch (error) {
    if (error instanceof ApiError && error.status === 401) return showSignIn(refusalText(error));
    show(h("p", { class: "error" }, refusalText(error)));
  }
}

/** j / k move between the inbox's cards; a approves and d denies the focused one. */
function onKey(event) {
  if (event.target.matches("input, textarea, select") || event.ctrlKey || event.metaKey || event.altKey) return;
  const cards = [...main.querySelectorAll("#mine > .card:not(.done)")];
  const at = cards.indexOf(document.activeElement);
  const press = (selector) => document.activeElement?.querySelector?.(selector)?.click();
  switch (event.key) {
    case "j": cards[Math.min(at + 1, cards.length - 1)]?.focus(); break;
    case "k": cards[Math.max(at - 1, 0)]?.focus(); break;
    case "a": press("button.approve"); break;
    case "d": press("button.deny"); break;
    case "g": location.hash = "#/inbox"; break;
    case "t": location.hash = "#/threads"; break;
    default: return;
  }
  event.preventDefault();
}

document.getElementById("sign-out").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  location.hash = "#/signin";
});
window.addEventListener("hashchange", route);
document.addEventListener("keydown", onKey);
route();
