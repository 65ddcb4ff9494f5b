#!/usr/bin/env node
// interrupt-flow.mjs: the official client through an approval, as an app would drive it.
//
//   node interrupt-flow.mjs <agent url>
//
// runAgent() ends with an interrupt outcome; the client's own `pendingInterrupts` and
// `buildResumeArray` answer it; the second runAgent() continues the turn to RUN_FINISHED
// success. Verification is always on in @ag-ui/client 1.0; every event is also validated with
// @ag-ui/core/schemas. Prints PASS/FAIL; exit 0 on PASS.
import { createRequire } from "node:module";
import { randomUUID } from "node:crypto";

const require = createRequire(import.meta.url);
const { HttpAgent, buildResumeArray } = require("@ag-ui/client");
const { EventSchema } = require("@ag-ui/core/schemas");

const url = process.argv[2];
const problems = [];
const warnings = [];
console.warn = (...a) => warnings.push(a.map(String).join(" "));
const seen = [];
const agent = new HttpAgent({
  url,
  threadId: `thread-${randomUUID()}`,
  initialMessages: [{ id: `msg-${randomUUID()}`, role: "user", content: "send the report" }],
});
const subscriber = {
  onEvent: ({ event }) => {
    seen.push(event);
    const r = EventSchema.safeParse(event);
    if (!r.success) problems.push(`${event.type}: ${r.error.issues.map((i) => i.message).join("; ")}`);
  },
};
try {
  await agent.runAgent({ runId: `run-${randomUUID()}` }, subscriber);
  const pending = agent.pendingInterrupts ?? [];
  if (pending.length !== 1) problems.push(`expected one pending interrupt, got ${pending.length}`);
  const answers = Object.fromEntries(pending.map((i) => [i.id, { status: "resolved", payload: { approved: true } }]));
  const resume = buildResumeArray(pending, answers);
  let outcome;
  await agent.runAgent({ runId: `run-${randomUUID()}`, resume }, { ...subscriber, onRunFinishedEvent: (p) => { outcome = p.outcome; } });
  if (outcome !== "success") problems.push(`the continued run ended with ${outcome}`);
  if ((agent.pendingInterrupts ?? []).length) problems.push("interrupts still pending after the resume");
  if (!seen.some((e) => e.type === "TOOL_CALL_RESULT")) problems.push("the approved call never ran");
} catch (e) {
  problems.push(`client rejected: ${String(e?.message ?? e).replace(/\s+/g, " ").slice(0, 300)}`);
}
for (const w of warnings) problems.push(`client warning: ${w.slice(0, 200)}`);
console.log(problems.length ? `FAIL ${url}\n  ${problems.join("\n  ")}` : `PASS ${url} (${seen.length} events)`);
process.exit(problems.length ? 1 : 0);
