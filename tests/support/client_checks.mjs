// client_checks.mjs: what the scripts that judge a test server by the official @ag-ui/client
// share (tests/upstream/check.mjs, tests/frameworks/check.mjs): starting the server, one run of
// the client with every event kept and schema-checked, the list of checks, and the summary
// that sets the exit code. Each script says only which servers it starts and what it checks.
//
// The client is the one tests/clients pins, so every suite is judged by the same version
// (`npm ci --prefix tests/clients`).
//
// Importing this module takes over console.warn and console.error: the client reports stripped
// or dropped material through console.warn, which for a server claimed valid is a failure (each
// run's `warnings`), and its "Agent execution failed" log repeats the rejection runAgent()
// throws (each run's `rejected`), so it is dropped.
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";

const require = createRequire(new URL("../clients/package.json", import.meta.url));
export const { HttpAgent, buildResumeArray } = require("@ag-ui/client");
const { EventSchema } = require("@ag-ui/core/schemas");

const clientWarnings = [];
console.warn = (...a) => clientWarnings.push(a.map(String).join(" "));
const consoleError = console.error;
console.error = (...a) => { if (!String(a[0]).startsWith("Agent execution failed")) consoleError(...a); };

/// A random suffix for thread, run and message ids.
export const randomId = () => Math.random().toString(36).slice(2);

/// Starts the server `spec` describes (`command`, `args`; `needs`, a path that must exist too;
/// `missing`, what to say when either does not). Its stdin is a pipe, so closing it is a way to
/// stop the server (and our death stops it). `ready` resolves to its first line of stdout.
export function startServer(name, spec, extraArgs = []) {
  if (!existsSync(spec.command) || (spec.needs && !existsSync(spec.needs))) {
    throw new Error(spec.missing ?? `${spec.command} not found`);
  }
  const child = spawn(spec.command, [...spec.args, ...extraArgs], { stdio: ["pipe", "pipe", "pipe"] });
  const stderr = [];
  child.stderr.on("data", (d) => stderr.push(d.toString()));
  const exited = new Promise((resolve) => child.once("exit", (code, signal) => resolve({ code, signal })));
  const ready = new Promise((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => reject(new Error(`${name} did not print its address:\n${stderr.join("")}`)), 30_000);
    child.stdout.on("data", (d) => {
      out += d.toString();
      if (!out.includes("\n")) return;
      clearTimeout(timer);
      resolve(out);
    });
    exited.then(({ code }) => { clearTimeout(timer); reject(new Error(`${name} exited with ${code}:\n${stderr.join("")}`)); });
  });
  return { child, exited, ready, stderr };
}

/// One run of `agent` (a new runId, `input` merged in), with every event it accepted kept, its
/// arrival time, the RUN_ERROR events, the client's rejection, the events the schema refuses
/// and the client's warnings during the run.
export async function runClient(agent, input = {}) {
  const events = [];
  const stamps = [];
  const runErrors = [];
  const warningsBefore = clientWarnings.length;
  let rejected;
  try {
    await agent.runAgent({ runId: `run-${randomId()}`, ...input }, {
      onEvent: ({ event }) => { events.push(event); stamps.push(Date.now()); },
      onRunErrorEvent: ({ event }) => { runErrors.push(event); },
    });
  } catch (e) {
    rejected = String(e?.message ?? e).replace(/\s+/g, " ");
  }
  const schemaProblems = events.flatMap((ev) => {
    const r = EventSchema.safeParse(ev);
    return r.success ? [] : [`${ev.type}: ${r.error.issues.map((i) => `/${i.path.join("/")} ${i.message}`).join("; ")}`];
  });
  return { agent, events, stamps, runErrors, rejected, schemaProblems, warnings: clientWarnings.slice(warningsBefore) };
}

/// The checks of one server: `check(label, problems, note)` records one (the falsy problems
/// dropped), `accepted(run)` is what the client held against a run it should accept.
export function checkList() {
  const results = [];
  const check = (label, problems, note) => results.push({ label, problems: problems.filter(Boolean), note });
  const accepted = (r) => [
    r.rejected && `client rejected: ${r.rejected.slice(0, 300)}`,
    ...r.schemaProblems, ...r.warnings.map((w) => `client warning: ${w.slice(0, 200)}`),
  ];
  return { results, check, accepted };
}

/// Checks each server the command line names (all of `servers` when it names none) with
/// `checkServer(name)`, prints the results under `heading(name)`, and exits 1 on any failure,
/// 0 with `passLine` otherwise.
export async function checkChosen(servers, checkServer, { heading = (name) => name, passLine }) {
  const chosen = process.argv.slice(2).length ? process.argv.slice(2) : Object.keys(servers);
  let failed = 0;
  for (const name of chosen) {
    if (!servers[name]) { console.log(`unknown server ${name}; one of ${Object.keys(servers).join(", ")}`); process.exit(2); }
    let results;
    try {
      results = await checkServer(name);
    } catch (e) {
      results = [{ label: "server starts", problems: [String(e?.message ?? e)] }];
    }
    console.log(heading(name));
    for (const { label, problems, note } of results) {
      console.log(`  ${problems.length ? "FAIL" : "ok  "}  ${label}`);
      if (note && !problems.length) console.log(`          ${note}`);
      for (const p of problems) console.log(`          ${p}`);
      if (problems.length) failed += 1;
    }
  }
  console.log(failed ? `FAIL: ${failed} check(s) failed` : passLine);
  process.exit(failed ? 1 : 0);
}
