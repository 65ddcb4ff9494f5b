#!/usr/bin/env node
// check.mjs: proves the framework servers — a LangGraph graph on ag-ui-langgraph
// (langgraph/server.py), a Mastra agent on @ag-ui/mastra (mastra/server.mjs), a Google ADK agent
// on ag-ui-adk, a Microsoft Agent Framework agent on agent-framework-ag-ui, an AWS Strands agent
// on ag-ui-strands, a CrewAI flow on ag-ui-crewai and a Pydantic AI agent on its own AG-UI
// adapter (<name>/server.py) — work as their
// frameworks promise when the official @ag-ui/client HttpAgent (verification always on) talks
// to them directly, with no gateway: a text answer, a frontend tool round trip, the client's
// context reaching the agent, LangGraph's `interrupt()` and its resume, and for the servers on
// the shared script (scripted.py) their human-in-the-loop approved and denied (a denied tool
// never runs). What passes here and fails through the gateway is the gateway's fault.
//
//   node tests/frameworks/check.mjs [langgraph|mastra|adk|agent_framework|strands|crewai|pydantic_ai]...
//                                                             (default: all)
//
// Needs `npm ci` in tests/clients (the pinned client) and tests/frameworks/mastra, and the venv
// of each Python server's requirements.txt (scripts/test installs them all). Prints a summary;
// exits 1 on any failure.
import { fileURLToPath } from "node:url";
// The client (tests/clients' pinned one), the server's start, one run, the checks' summary.
import { HttpAgent, buildResumeArray, checkChosen, checkList, randomId, runClient, startServer } from "../support/client_checks.mjs";

const here = (p) => fileURLToPath(new URL(p, import.meta.url));
const SERVERS = {
  langgraph: {
    command: here("langgraph/.venv/bin/python"),
    args: [here("langgraph/server.py")],
    missing: "the venv is missing: python3 -m venv tests/frameworks/langgraph/.venv && " +
      "tests/frameworks/langgraph/.venv/bin/pip install -r tests/frameworks/langgraph/requirements.txt",
  },
  mastra: {
    command: process.execPath,
    args: [here("mastra/server.mjs")],
    needs: here("mastra/node_modules/@ag-ui/mastra"),
    missing: "run npm ci --prefix tests/frameworks/mastra",
  },
};
// The servers on the shared script (scripted.py), each in its own venv. `contextReaches`:
// whether the adapter hands the run's context to the agent (Agent Framework's passes only
// A2UI's entries; Pydantic AI's none). `decision`: what a person answers to the server's confirmation, as its
// interrupt's responseSchema asks.
const approvedBool = (approved) => ({ approved });
const SCRIPTED = {
  adk: { decision: approvedBool },
  agent_framework: { decision: approvedBool, contextReaches: false },
  strands: { decision: approvedBool },
  crewai: { decision: (approved) => (approved ? "approved" : "rejected") },
  pydantic_ai: { decision: approvedBool, contextReaches: false },
};
for (const name of Object.keys(SCRIPTED)) {
  SERVERS[name] = {
    command: here(`${name}/.venv/bin/python`),
    args: [here(`${name}/server.py`)],
    missing: `the venv is missing: python3 -m venv tests/frameworks/${name}/.venv && ` +
      `tests/frameworks/${name}/.venv/bin/pip install -r tests/frameworks/${name}/requirements.txt`,
  };
}

const SHOW_CITY = {
  name: "show_city",
  description: "Shows a city on the page.",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
};

/** One run of the official client, every event it accepted kept and schema-checked. */
async function run(url, { agent, text, input = {} } = {}) {
  agent ??= new HttpAgent({ url, threadId: `thread-${randomId()}` });
  if (text !== undefined) agent.addMessage({ id: `u-${randomId()}`, role: "user", content: text });
  return runClient(agent, input);
}

const types = (events) => [...new Set(events.map((e) => e.type))].join(" ");
// What the client made of the run: the last assistant message's text (chunks expanded).
const lastAnswer = (agent) => {
  const m = [...agent.messages].reverse().find((x) => x.role === "assistant" && typeof x.content === "string" && x.content);
  return m?.content ?? "";
};

async function checkServer(name) {
  const { results, check, accepted } = checkList();
  const server = startServer(name, SERVERS[name]);
  try {
    const line = await server.ready;
    const match = /^listening (http:\/\/127\.0\.0\.1:\d+)\n$/.exec(line);
    check("prints exactly `listening http://127.0.0.1:<port>`", [!match && `stdout was ${JSON.stringify(line)}`]);
    if (!match) return results;
    const url = `${match[1]}/agent`;

    {
      const r = await run(url, { text: "hello there" });
      check("text: accepted, the scripted answer", [
        ...accepted(r),
        lastAnswer(r.agent) !== "You said: hello there" && `answer ${JSON.stringify(lastAnswer(r.agent))} (${types(r.events)})`,
        r.events[0]?.type !== "RUN_STARTED" && "RUN_STARTED is not first",
        r.events.at(-1)?.type !== "RUN_FINISHED" && `last event ${r.events.at(-1)?.type}`,
      ]);
    }

    {
      const first = await run(url, { text: 'use show_city {"city": "Paris"}', input: { tools: [SHOW_CITY] } });
      const call = first.events.find((e) => e.type === "TOOL_CALL_START");
      const args = first.events.filter((e) => e.type === "TOOL_CALL_ARGS").map((e) => e.delta).join("");
      check("frontend tool: the agent calls the tool the client declared, and stops", [
        ...accepted(first),
        call?.toolCallName !== "show_city" && `no show_city call (${types(first.events)})`,
        (() => { try { return JSON.parse(args).city !== "Paris" && `args ${args}`; } catch { return `args ${args}`; } })(),
        first.events.some((e) => e.type === "TOOL_CALL_RESULT") && "the server ran the client's tool",
      ]);
      if (call) {
        first.agent.addMessage({ id: `tool-${call.toolCallId}`, role: "tool", toolCallId: call.toolCallId, content: "shown Paris" });
        const second = await run(url, { agent: first.agent, input: { tools: [SHOW_CITY] } });
        check("frontend tool: with the client's result the agent answers from it", [
          ...accepted(second),
          lastAnswer(second.agent) !== "The tool answered: shown Paris" && `answer ${JSON.stringify(lastAnswer(second.agent))}`,
        ]);
      }
      const without = await run(url, { text: 'use show_city {"city": "Paris"}' });
      check("frontend tool: without `tools` the agent knows no such tool", [
        ...accepted(without),
        without.events.some((e) => e.type === "TOOL_CALL_START") && "called a tool it was never given",
        !lastAnswer(without.agent).startsWith("I was given no tool named show_city.") && `answer ${JSON.stringify(lastAnswer(without.agent))}`,
      ]);
    }

    {
      const context = [{ description: "user name", value: "Ada" }, { description: "city", value: "Paris" }];
      const r = await run(url, { text: "what context", input: { context } });
      const none = await run(url, { text: "what context" });
      const reaches = SCRIPTED[name]?.contextReaches ?? true;
      const expected = reaches ? "Context seen: user name=Ada; city=Paris" : "No context was given to me.";
      check(reaches ? "context: the client's entries reach the agent" : "context: accepted (the adapter does not pass it on)", [
        ...accepted(r), ...accepted(none),
        lastAnswer(r.agent) !== expected && `answer ${JSON.stringify(lastAnswer(r.agent))}`,
        lastAnswer(none.agent) !== "No context was given to me." && `without context: ${JSON.stringify(lastAnswer(none.agent))}`,
      ]);
    }

    if (name === "langgraph") {
      const first = await run(url, { text: "send the report" });
      const call = first.events.find((e) => e.type === "TOOL_CALL_START");
      const pending = first.agent.pendingInterrupts ?? [];
      check("interrupt(): RUN_FINISHED with an interrupt outcome naming the call", [
        ...accepted(first),
        first.events.at(-1)?.outcome?.type !== "interrupt" && `outcome ${JSON.stringify(first.events.at(-1)?.outcome)}`,
        pending.length !== 1 && `pendingInterrupts ${JSON.stringify(pending)}`,
        pending[0]?.reason !== "tool_approval" && "reason",
        pending[0]?.message !== "Send the report to team@example.com?" && `message ${pending[0]?.message}`,
        call?.toolCallName !== "send_report" && "no send_report call",
        pending[0]?.toolCallId !== call?.toolCallId && "the interrupt does not name the call",
        JSON.stringify(pending[0]?.responseSchema?.required) !== '["approved"]' && "responseSchema",
        first.events.some((e) => e.type === "TOOL_CALL_RESULT") && "the tool ran before approval",
      ]);
      if (pending.length === 1) {
        const resume = buildResumeArray(pending, { [pending[0].id]: { status: "resolved", payload: { approved: true, note: "ship it" } } });
        const second = await run(url, { agent: first.agent, input: { resume } });
        const result = second.events.find((e) => e.type === "TOOL_CALL_RESULT");
        check("interrupt(): resumed with the `resume` array, the tool runs and the graph answers", [
          ...accepted(second),
          result?.content !== "sent to team@example.com, note: ship it" && `result ${JSON.stringify(result)}`,
          lastAnswer(second.agent) !== "Report sent to team@example.com, note: ship it." && `answer ${JSON.stringify(lastAnswer(second.agent))}`,
          second.events.at(-1)?.outcome?.type === "interrupt" && "still interrupted",
        ]);
      }
    }
    if (SCRIPTED[name]) {
      const base = url.replace(/\/agent$/, "");
      const sent = async (to) => (await (await fetch(`${base}/executions`)).json()).filter((x) => x.args?.to === to).length;
      for (const approved of [true, false]) {
        const to = `${approved ? "yes" : "no"}-${randomId()}@example.com`;
        const first = await run(url, { text: `send the report to ${to}` });
        const pending = first.agent.pendingInterrupts ?? [];
        check(`human-in-the-loop: the tool call ends the run with an interrupt outcome`, [
          ...accepted(first),
          first.events.at(-1)?.outcome?.type !== "interrupt" && `outcome ${JSON.stringify(first.events.at(-1)?.outcome)}`,
          pending.length !== 1 && `pendingInterrupts ${JSON.stringify(pending)}`,
          (await sent(to)) !== 0 && "the tool ran before the decision",
        ]);
        if (pending.length !== 1) continue;
        const decision = { status: "resolved", payload: SCRIPTED[name].decision(approved) };
        const resume = buildResumeArray(pending, { [pending[0].id]: decision });
        const second = await run(url, { agent: first.agent, input: { resume } });
        const answer = lastAnswer(second.agent);
        check(approved ? "human-in-the-loop: approved, the tool runs and the agent answers" : "human-in-the-loop: denied, the tool never runs", [
          ...accepted(second),
          (await sent(to)) !== (approved ? 1 : 0) && `the tool ran ${await sent(to)} time(s)`,
          answer !== (approved ? `Report sent to ${to}.` : "Report not sent.") && `answer ${JSON.stringify(answer)}`,
        ]);
      }
    }
  } finally {
    server.child.kill("SIGKILL");
  }
  return results;
}

await checkChosen(SERVERS, checkServer, {
  passLine: "PASS: each framework's server works with the official client directly",
});
