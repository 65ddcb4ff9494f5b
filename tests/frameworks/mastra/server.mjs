#!/usr/bin/env node
// server.mjs: a Mastra agent served over AG-UI by @ag-ui/mastra, on the AI SDK's mock language
// model (MockLanguageModelV2 from `ai/test`), for the gateway's `agui` agent tests (SPEC §9.3).
// The agent, its tool loop and every AG-UI event are the framework's own (`MastraAgent.run`);
// only the model is a mock that answers by a script instead of a network.
//
//   node tests/frameworks/mastra/server.mjs [--port N]
//
// Set up with `npm ci --prefix tests/frameworks/mastra` (scripts/test does). Prints
// `listening http://127.0.0.1:<port>` once ready. Needs no network. Routes:
//   POST /agent            the agent: `MastraAgent.getLocalAgent({ mastra, agentId })`, its
//                          events written by @ag-ui/encoder (SSE), as a stock AG-UI server does
//   GET|DELETE /requests   every RunAgentInput this process was sent, as {path, body}, in order
//
// What @ag-ui/mastra (0.2.4) does with the input: `tools` become the stream's `clientTools`
// (no `execute`: a call of one ends the run, and the client's `role: "tool"` message on the
// next run is the result); `context` is put in the agent's RuntimeContext under "ag-ui"
// (`{ context }`), where the agent's `instructions` function reads it; `state` goes to the
// agent's working memory when it has memory (this one has none); `forwardedProps` and `resume`
// are not read. Text is sent as TEXT_MESSAGE_CHUNK events and the run ends RUN_FINISHED without
// an outcome; Mastra has no AG-UI interrupt.
//
// The model's script, by the last message of the prompt Mastra builds:
//   a tool result              "The tool answered: <result>"
//   `use <tool> <json args>`   a call of `<tool>` when the run's tools name it, else
//                              "I was given no tool named <tool>. Tools given: <names>."
//   `what context`             "Context seen: <description>=<value>; ..." from the system
//                              prompt, or "No context was given to me."
//   anything else              "You said: <text>" (streamed word by word)
import { EventEncoder } from "@ag-ui/encoder";
import { MastraAgent } from "@ag-ui/mastra";
import { Agent } from "@mastra/core/agent";
import { Mastra } from "@mastra/core/mastra";
import { MockLanguageModelV2, simulateReadableStream } from "ai/test";
import { serve } from "../../support/listen.mjs";

const received = [];

const textOf = (content) =>
  typeof content === "string" ? content : content.filter((p) => p.type === "text").map((p) => p.text).join("");

function outputText(output) {
  if (output == null) return "";
  if (output.type === "text" || output.type === "error-text") return output.value;
  return typeof output.value === "string" ? output.value : JSON.stringify(output.value);
}

let calls = 0;

// The scripted answer, as AI SDK v2 stream parts.
function answer({ prompt, tools }) {
  const last = prompt[prompt.length - 1];
  const usage = { inputTokens: 3, outputTokens: 5, totalTokens: 8 };
  const words = (text) => {
    const id = `txt-${++calls}`;
    const parts = text.split(" ").map((w, i) => (i === 0 ? w : ` ${w}`));
    return [
      { type: "text-start", id },
      ...parts.map((delta) => ({ type: "text-delta", id, delta })),
      { type: "text-end", id },
      { type: "finish", finishReason: "stop", usage },
    ];
  };
  if (last.role === "tool") {
    const result = last.content.find((p) => p.type === "tool-result");
    return words(`The tool answered: ${outputText(result?.output)}`);
  }
  const text = textOf(last.content).trim();
  if (text.startsWith("use ")) {
    const rest = text.slice(4);
    const space = rest.indexOf(" ");
    const name = space < 0 ? rest : rest.slice(0, space);
    const args = space < 0 ? "{}" : rest.slice(space + 1);
    const given = (tools ?? []).map((t) => t.name);
    if (!given.includes(name)) {
      return words(`I was given no tool named ${name}. Tools given: ${given.join(", ") || "none"}.`);
    }
    return [
      { type: "tool-call", toolCallId: `call-${++calls}`, toolName: name, input: JSON.stringify(JSON.parse(args)) },
      { type: "finish", finishReason: "tool-calls", usage },
    ];
  }
  if (text === "what context") {
    const system = prompt.filter((m) => m.role === "system").map((m) => m.content).join("\n");
    const at = system.indexOf("Context:\n");
    const seen = at < 0 ? "" : system.slice(at + "Context:\n".length).split("\n").filter(Boolean).join("; ");
    return words(seen ? `Context seen: ${seen}` : "No context was given to me.");
  }
  return words(`You said: ${text}`);
}

const model = new MockLanguageModelV2({
  provider: "scripted",
  modelId: "scripted-v2",
  doStream: async (options) => ({
    stream: simulateReadableStream({ chunks: [{ type: "stream-start", warnings: [] }, ...answer(options)] }),
  }),
});

const assistant = new Agent({
  name: "assistant",
  // The client's context arrives in the RuntimeContext under "ag-ui" (@ag-ui/mastra).
  instructions: ({ runtimeContext }) => {
    const context = runtimeContext?.get("ag-ui")?.context ?? [];
    const lines = context.map((c) => `${c.description}=${c.value}`);
    return ["You are a scripted test assistant.", ...(lines.length ? ["Context:", ...lines] : [])].join("\n");
  },
  model,
});

const mastra = new Mastra({ agents: { assistant }, logger: false, telemetry: { enabled: false } });

function sendJson(res, status, body) {
  res.writeHead(status, { "Content-Type": "application/json" });
  res.end(JSON.stringify(body));
}

async function readBody(req) {
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  return Buffer.concat(chunks).toString("utf8");
}

async function handle(req, res) {
  const url = new URL(req.url, "http://127.0.0.1");
  if (url.pathname === "/requests") {
    if (req.method === "DELETE") {
      received.length = 0;
      res.writeHead(204);
      return res.end();
    }
    return sendJson(res, 200, received);
  }
  if (req.method !== "POST") return sendJson(res, 405, { error: "POST only" });
  const raw = await readBody(req);
  let body;
  try {
    body = JSON.parse(raw);
  } catch {
    return sendJson(res, 400, { error: "not JSON" });
  }
  received.push({ path: url.pathname, body });
  if (url.pathname !== "/agent") return sendJson(res, 404, { error: `no agent at ${url.pathname}` });

  const agent = MastraAgent.getLocalAgent({ mastra, agentId: "assistant" });
  const encoder = new EventEncoder({ accept: req.headers.accept });
  res.writeHead(200, { "Content-Type": encoder.getContentType(), "Cache-Control": "no-cache", Connection: "keep-alive" });
  res.socket?.setNoDelay(true);
  await new Promise((resolve) => {
    const subscription = agent.run(body).subscribe({
      next: (event) => res.write(encoder.encodeBinary({ ...event, timestamp: event.timestamp ?? Date.now() })),
      error: (error) => {
        res.write(encoder.encodeBinary({ type: "RUN_ERROR", message: String(error?.message ?? error), timestamp: Date.now() }));
        resolve();
      },
      complete: resolve,
    });
    res.on("close", () => {
      subscription.unsubscribe();
      resolve();
    });
  });
  res.end();
}

serve(handle, "mastra");
