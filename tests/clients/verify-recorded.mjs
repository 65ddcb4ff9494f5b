#!/usr/bin/env node
// verify-recorded.mjs: puts many recorded SSE streams before the official client at once.
//
//   node verify-recorded.mjs streams.json [messages.json]
//
// With messages.json, writes there what the client holds at the end of each stream, by name:
// each message's role and words (a MESSAGES_SNAPSHOT mid-run shows as the client applied it).
//
// streams.json is `[{ "name", "input": RunAgentInput-ish {threadId, runId, messages}, "body": "<SSE text>" }]`.
// Each body is served to `@ag-ui/client`'s HttpAgent through its fetch hook, so enforcement, chunk
// expansion and verifyEvents judge exactly the bytes a client received (a stream joined from the
// pieces of a dropped connection, say). Every event is also validated with @ag-ui/core/schemas,
// and the stream must end with a terminal event. Exit 0 when all pass.
import { readFileSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const { HttpAgent } = require("@ag-ui/client");
const { EventSchema } = require("@ag-ui/core/schemas");

const streams = JSON.parse(readFileSync(process.argv[2], "utf8"));
const warnings = [];
let current = "";
console.warn = (...a) => warnings.push(`${current}: ${a.map(String).join(" ").replace(/\s+/g, " ")}`);
console.error = () => {};
let failed = 0;
const held = {};
for (const { name, input, body } of streams) {
  current = name;
  const problems = [];
  const fetchRecorded = async () => new Response(body, { status: 200, headers: { "content-type": "text/event-stream" } });
  const agent = new HttpAgent({ url: "http://recorded.invalid/", fetch: fetchRecorded, threadId: input.threadId, initialMessages: input.messages });
  try {
    await agent.runAgent({ runId: input.runId });
  } catch (e) {
    problems.push(`client rejected: ${String(e?.message ?? e).replace(/\s+/g, " ").slice(0, 300)}`);
  }
  held[name] = agent.messages.map((m) => ({ role: m.role, content: typeof m.content === "string" ? m.content : null }));
  const events = body.split("\n\n").flatMap((frame) => {
    const data = frame.split("\n").filter((l) => l.startsWith("data:")).map((l) => l.slice(5).replace(/^ /, ""));
    return data.length ? [JSON.parse(data.join("\n"))] : [];
  });
  events.forEach((ev, i) => {
    const r = EventSchema.safeParse(ev);
    if (!r.success) problems.push(`#${i} ${ev.type}: ${r.error.issues.map((x) => `/${x.path.join("/")} ${x.message}`).join("; ")}`);
  });
  if (!["RUN_FINISHED", "RUN_ERROR"].includes(events.at(-1)?.type)) problems.push("no terminal event");
  if (problems.length) {
    failed += 1;
    console.log(`FAIL ${name}\n  ${problems.join("\n  ")}`);
  }
}
for (const w of warnings.slice(0, 5)) console.log(`WARN ${w.slice(0, 600)}`);
console.log(`${streams.length - failed}/${streams.length} streams pass the official client`);
if (process.argv[3]) writeFileSync(process.argv[3], JSON.stringify(held));
process.exit(failed || warnings.length ? 1 : 0);
