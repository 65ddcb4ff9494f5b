#!/usr/bin/env node
// agui-check.mjs: a black-box AG-UI 1.0 probe of one live run endpoint.
//
//   cd tests/clients && npm ci
//   node agui-check.mjs <url> [--message TEXT] [--input run-input.json]
//        [--header "Name: value"]... [--timeout SECONDS] [--strict] [--quiet] [--http2]
//
// `@ag-ui/client` and `@ag-ui/core` are loaded from the current directory (tests/clients has
// them pinned in its package-lock.json), so run it from there. It POSTs one run and judges it
// three ways:
//
//   client    the official `HttpAgent.runAgent()` (its event enforcement and verification are
//             always on in 1.0.0) must resolve;
//   wire      HTTP 200, `text/event-stream`, LF-only SSE framing, one JSON object per data
//             frame, each valid against `EventSchema` from `@ag-ui/core/schemas` (properties
//             the schema does not describe are a warning: the client drops them);
//   run       what the client leaves unchecked: the stream ends with RUN_FINISHED or RUN_ERROR,
//             the last RUN_STARTED echoes the input's threadId and runId and declares a
//             MAJOR.MINOR protocolVersion, each RUN_FINISHED names the run its RUN_STARTED
//             opened.
//
// Over https:// the report names the protocol each connection negotiated (ALPN); --http2 lets
// Node's fetch offer h2 (an undici agent with `allowH2`) and fails unless h2 was used. A private
// CA is trusted with NODE_EXTRA_CA_CERTS=ca.pem.
//
// What the client prints with console.warn is a WARN, or a FAIL with --strict.
// Prints a short report (with the messages the client holds at the end, as JSON on the line
// `messages`) and a last line `PASS  <url>` or `FAIL  <url>`.
// Exit status: 0 PASS, 1 FAIL, 2 usage (bad arguments, unreadable input, packages missing).
import { createRequire } from "node:module";
import { pathToFileURL } from "node:url";
import { readFileSync } from "node:fs";
import { randomUUID } from "node:crypto";
import { recordProtocols } from "./lib/protocols.mjs";

const USAGE =
  "usage: node agui-check.mjs <url> [--message TEXT] [--input run-input.json] " +
  '[--header "Name: value"]... [--timeout SECONDS] [--strict] [--quiet] [--http2]';

function usage(problem) {
  process.stderr.write(`${problem}\n${USAGE}\n`);
  process.exit(2);
}

function parseArgs(args) {
  const options = { message: "ping", input: {}, headers: {}, timeoutSecs: 60, strict: false, quiet: false, http2: false };
  const value = (i, flag) => {
    if (i >= args.length) usage(`${flag} needs a value`);
    return args[i];
  };
  for (let i = 0; i < args.length; i++) {
    const arg = args[i];
    switch (arg) {
      case "--message":
        options.message = value(++i, arg);
        break;
      case "--input": {
        const file = value(++i, arg);
        try {
          options.input = JSON.parse(readFileSync(file, "utf8"));
        } catch (e) {
          usage(`cannot read the run input ${file}: ${e.message}`);
        }
        if (typeof options.input !== "object" || options.input === null || Array.isArray(options.input)) {
          usage(`the run input ${file} is not a JSON object`);
        }
        break;
      }
      case "--header": {
        const header = value(++i, arg);
        const colon = header.indexOf(":");
        if (colon < 1) usage(`a header is "Name: value", not ${JSON.stringify(header)}`);
        options.headers[header.slice(0, colon).trim()] = header.slice(colon + 1).trim();
        break;
      }
      case "--timeout":
        options.timeoutSecs = Number(value(++i, arg));
        if (!(options.timeoutSecs > 0)) usage("--timeout takes a positive number of seconds");
        break;
      case "--strict":
        options.strict = true;
        break;
      case "--quiet":
        options.quiet = true;
        break;
      case "--http2":
        options.http2 = true;
        break;
      default:
        if (arg.startsWith("--") || options.url !== undefined) usage(`unexpected argument ${arg}`);
        options.url = arg;
    }
  }
  if (options.url === undefined) usage("no url given");
  if (options.http2 && !options.url.startsWith("https://")) usage("--http2 needs an https:// url (h2 is negotiated by ALPN)");
  return options;
}

function loadPackages() {
  const require = createRequire(pathToFileURL(`${process.cwd()}/`));
  try {
    return {
      HttpAgent: require("@ag-ui/client").HttpAgent,
      EventSchema: require("@ag-ui/core/schemas").EventSchema,
      undici: options.url.startsWith("https://") ? require("undici") : undefined,
    };
  } catch (e) {
    process.stderr.write(
      `cannot load @ag-ui/client and @ag-ui/core from ${process.cwd()}: ${e.message}\n` +
        "run this from tests/clients after `npm ci` there\n",
    );
    process.exit(2);
  }
}

const options = parseArgs(process.argv.slice(2));
const { HttpAgent, EventSchema, undici } = loadPackages();
const protocols = undici ? recordProtocols(undici, { allowH2: options.http2 }) : undefined;

const failures = [];
const warnings = [];
const fail = (text) => failures.push(text);
const warn = (text) => warnings.push(text);
const failOrWarn = (text) => (options.strict ? fail : warn)(text);

// ---------------------------------------------------------------------------------------------
// The run: the official client, with a fetch that keeps a copy of every byte it is given.

const input = options.input;
const threadId = input.threadId ?? `thread-${randomUUID()}`;
const runId = input.runId ?? `run-${randomUUID()}`;

const response = { status: undefined, contentType: undefined, bytes: Promise.resolve(Buffer.alloc(0)) };

async function recordingFetch(url, init) {
  const res = await fetch(url, init);
  response.status = res.status;
  response.contentType = res.headers.get("content-type");
  // The copy is split off before the client reads; reading it keeps whatever arrived, even
  // when the run is aborted part way.
  const copy = res.clone();
  response.bytes = (async () => {
    const chunks = [];
    if (!copy.body) return Buffer.alloc(0);
    const reader = copy.body.getReader();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        chunks.push(value);
      }
    } catch {
      // aborted: judge what came
    }
    return Buffer.concat(chunks);
  })();
  return res;
}

// The client reports what it had to drop or repair with console.warn; keep those for the report.
const clientWarnings = [];
const realWarn = console.warn;
const realError = console.error;
console.warn = (...parts) => clientWarnings.push(parts.map(String).join(" ").replace(/\s+/g, " ").trim());
console.error = (...parts) => {
  // The client logs a failed run before rejecting with the same error, which is reported below.
  if (String(parts[0]).startsWith("Agent execution failed")) return;
  realError(...parts);
};

const abort = new AbortController();
let timedOut = false;
const deadline = setTimeout(() => {
  timedOut = true;
  abort.abort();
}, options.timeoutSecs * 1000);

const agent = new HttpAgent({
  url: options.url,
  headers: options.headers,
  fetch: recordingFetch,
  threadId,
  initialMessages: input.messages ?? [{ id: `msg-${randomUUID()}`, role: "user", content: options.message }],
  initialState: input.state ?? {},
});

const seen = {};
let clientVerdict;
try {
  await agent.runAgent(
    {
      runId,
      tools: input.tools,
      context: input.context,
      forwardedProps: input.forwardedProps,
      resume: input.resume,
      abortController: abort,
    },
    {
      onRunFinishedEvent: ({ outcome, pendingToolCallIds, interrupts }) => {
        seen.finished = { outcome, pendingToolCallIds, interrupts };
      },
      onRunErrorEvent: ({ event }) => {
        seen.error = event;
      },
    },
  );
  clientVerdict = timedOut ? "aborted (timed out)" : "accepted";
} catch (e) {
  const reason = describeClientError(e);
  clientVerdict = `REJECTED: ${reason}`;
  fail(`@ag-ui/client rejected the stream: ${reason}`);
}
const body = await response.bytes;
clearTimeout(deadline);
console.warn = realWarn;
console.error = realError;
if (timedOut) fail(`no end of the run within ${options.timeoutSecs}s`);

function describeClientError(e) {
  const message = String(e?.message ?? e);
  // A schema failure's message is the list of zod issues as JSON.
  try {
    const issues = JSON.parse(message);
    if (Array.isArray(issues) && issues.length) {
      return "schema: " + issues.map((i) => `/${(i.path ?? []).join("/")} ${i.message}`).join("; ");
    }
  } catch {
    // a plain message
  }
  return message;
}

// ---------------------------------------------------------------------------------------------
// The wire.

const events = [];
// Event type -> the property names its schema describes.
const describedProperties = new Map(
  EventSchema.options.map((option) => {
    const literal = option.shape.type;
    return [literal.value ?? literal.def?.values?.[0], new Set(Object.keys(option.shape))];
  }),
);

if (response.status === undefined) {
  fail("no HTTP response");
} else {
  if (response.status !== 200) fail(`HTTP ${response.status}: a run answers 200`);
  if (!/^text\/event-stream(\s*;|\s*$)/i.test(response.contentType ?? "")) {
    fail(`Content-Type ${response.contentType ?? "(none)"}: a run is text/event-stream`);
  }
}
if (response.status === 200) readFrames(new TextDecoder().decode(body));

function readFrames(text) {
  if (text.includes("\r")) {
    fail("CR in the stream: SSE frames must end lines with LF alone (the client splits on \\n\\n)");
    text = text.replace(/\r\n?/g, "\n");
  }
  if (text.length > 0 && !text.endsWith("\n\n")) warn("the stream does not end with a blank line");
  let frame = 0;
  for (const block of text.split("\n\n")) {
    if (block.trim() === "") continue;
    frame += 1;
    const data = [];
    for (const line of block.split("\n")) {
      if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
      else if (line.startsWith(":") || /^(id|event|retry)(:|$)/.test(line)) continue;
      else warn(`frame ${frame}: the client ignores the line ${JSON.stringify(line.slice(0, 60))}`);
    }
    if (data.length === 0) continue; // a comment, e.g. a keep-alive
    const payload = data.join("\n");
    let event;
    try {
      event = JSON.parse(payload);
    } catch (e) {
      fail(`frame ${frame}: data is not one JSON value (${e.message}): ${JSON.stringify(payload.slice(0, 80))}`);
      continue;
    }
    if (typeof event !== "object" || event === null || Array.isArray(event)) {
      fail(`frame ${frame}: data is not a JSON object`);
      continue;
    }
    events.push(event);
    judgeEvent(event, events.length);
  }
}

function judgeEvent(event, n) {
  const parsed = EventSchema.safeParse(event);
  if (!parsed.success) {
    for (const issue of parsed.error.issues) fail(`event ${n} ${event.type}: /${issue.path.join("/")} ${issue.message}`);
    return;
  }
  // The schema lets unknown properties through, but the client's enforcement removes what the
  // event's schema does not describe, so nothing downstream ever sees them.
  const described = describedProperties.get(event.type);
  const undescribed = described ? Object.keys(event).filter((key) => !described.has(key)) : [];
  if (undescribed.length) {
    warn(`event ${n} ${event.type}: undescribed properties ${undescribed.join(", ")} (the client removes them)`);
  }
}

// ---------------------------------------------------------------------------------------------
// The run's boundaries.

if (events.length > 0) {
  const last = events[events.length - 1];
  if (last.type !== "RUN_FINISHED" && last.type !== "RUN_ERROR") {
    fail(`the stream ends with ${last.type}, not RUN_FINISHED or RUN_ERROR: the run is cut off`);
  }

  const started = events.filter((e) => e.type === "RUN_STARTED");
  const lastStarted = started[started.length - 1];
  if (lastStarted) {
    if (lastStarted.threadId !== threadId) {
      fail(`RUN_STARTED threadId ${JSON.stringify(lastStarted.threadId)}, the input's is ${JSON.stringify(threadId)}`);
    }
    if (lastStarted.runId !== runId) {
      fail(`the last RUN_STARTED runId ${JSON.stringify(lastStarted.runId)}, the input's is ${JSON.stringify(runId)}`);
    }
    const version = lastStarted.protocolVersion;
    if (version === undefined) failOrWarn('RUN_STARTED declares no protocolVersion (1.0 sends "1.0")');
    else if (typeof version !== "string" || !/^\d+\.\d+$/.test(version)) {
      fail(`RUN_STARTED protocolVersion ${JSON.stringify(version)} is not MAJOR.MINOR (1.0 sends "1.0")`);
    }
  }

  let open;
  for (const event of events) {
    if (event.type === "RUN_STARTED") open = event;
    else if (event.type === "RUN_FINISHED" && open && (event.threadId !== open.threadId || event.runId !== open.runId)) {
      fail(
        `RUN_FINISHED for ${event.threadId}/${event.runId} closes the run RUN_STARTED opened as ${open.threadId}/${open.runId}`,
      );
    }
  }
} else if (response.status === 200) {
  fail("the stream carries no events");
}

for (const text of clientWarnings) failOrWarn(`client: ${text.slice(0, 300)}`);

if (options.http2 && !protocols.includes("h2")) {
  fail(`--http2: no connection negotiated h2 (${protocols.join(", ") || "no TLS connection"})`);
}

// ---------------------------------------------------------------------------------------------
// The report.

function outcomeLine() {
  if (seen.error) {
    const { message, code } = seen.error;
    const made = code === "abort" ? " (made by the client when the run was aborted)" : "";
    return `RUN_ERROR ${JSON.stringify(message)}${code ? ` code=${code}` : ""}${made}`;
  }
  if (seen.finished) {
    const { outcome, pendingToolCallIds, interrupts } = seen.finished;
    let line = `RUN_FINISHED outcome=${outcome}`;
    if (pendingToolCallIds?.length) line += ` pendingToolCallIds=${pendingToolCallIds.join(",")}`;
    if (interrupts?.length) line += ` interrupts=${interrupts.map((i) => i.id).join(",")}`;
    return line;
  }
  return "none";
}

const passed = failures.length === 0;
if (!options.quiet) {
  const lines = [
    `AG-UI 1.0 check of ${options.url}`,
    `  http     ${response.status ?? "-"} ${response.contentType ?? ""}`.trimEnd(),
    ...(protocols ? [`  tls      protocol ${[...new Set(protocols)].join(", ") || "-"}`] : []),
    `  events   ${events.length}: ${events.map((e) => e.type).join(" ")}`.trimEnd(),
    `  client   ${clientVerdict}`,
    `  outcome  ${outcomeLine()}`,
    // What the client holds at the end (each message's role and words): a snapshot applied
    // mid-run shows here as the client applied it.
    `  messages ${JSON.stringify(agent.messages.map((m) => ({ role: m.role, content: typeof m.content === "string" ? m.content : null })))}`,
    ...failures.map((f) => `  FAIL  ${f}`),
    ...warnings.map((w) => `  WARN  ${w}`),
  ];
  process.stdout.write(lines.join("\n") + "\n");
}
process.stdout.write(`${passed ? "PASS" : "FAIL"}  ${options.url}\n`);
process.exit(passed ? 0 : 1);
