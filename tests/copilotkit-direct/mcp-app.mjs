// The MCP App case of the CopilotKit direct suite (run.mjs): what it needs besides the page. The
// real Python MCP server (tests/mcp/server.py, whose `weather` tool shows the App
// `ui://weather/view.html` and whose `umbrella` tool the App's button calls), a scripted
// OpenAI-compatible model that calls `weather`, the gateway's `openai` agent on both, and the
// case itself. The App is drawn by CopilotKit's own MCP Apps renderer (built into react-core v2
// for activity type `mcp-apps`); the page adds nothing for it.
import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import http from "node:http";
import path from "node:path";
import { startListening } from "../support/listen.mjs";

/** Starts tests/mcp/server.py; resolves to `{ url, calls, stop }` once it listens. */
export async function startMcpServer(repoRoot) {
  const python = path.join(repoRoot, "tests/mcp/.venv/bin/python");
  if (!existsSync(python)) throw new Error("create tests/mcp/.venv (scripts/test-clients does)");
  const { url, stop } = await startListening(python, [path.join(repoRoot, "tests/mcp/server.py")], "the MCP server");
  // What reached the server: every tool call it ran.
  const calls = () => fetch(`${url}/calls`).then((r) => r.json());
  return { url, calls, stop };
}

export const WEATHER_ANSWER = "Here is the weather in Oslo.";

/**
 * A scripted OpenAI-compatible model (as tests/browser/chat-app.test.mjs has one): a conversation
 * with no tool result yet is answered with a call of `forecast__weather` for Oslo, any later one
 * with WEATHER_ANSWER, streamed as chat-completion chunks.
 */
export async function startScriptedModel() {
  const server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (chunk) => (body += chunk));
    req.on("end", () => {
      if (req.method !== "POST" || !req.url.endsWith("/chat/completions")) return res.writeHead(404).end();
      let answered = false;
      try {
        answered = JSON.parse(body).messages.some((m) => m.role === "tool");
      } catch {
        return res.writeHead(400).end();
      }
      const frame = (delta, finish = null) =>
        `data: ${JSON.stringify({ id: "chatcmpl-1", object: "chat.completion.chunk", model: "scripted", choices: [{ index: 0, delta, finish_reason: finish }] })}\n\n`;
      const call = { index: 0, id: "call_weather", type: "function", function: { name: "forecast__weather", arguments: '{"city":"Oslo"}' } };
      res.writeHead(200, { "content-type": "text/event-stream" });
      res.end(
        (answered
          ? frame({ role: "assistant", content: WEATHER_ANSWER }) + frame({}, "stop")
          : frame({ role: "assistant", tool_calls: [call] }) + frame({}, "tool_calls")) + "data: [DONE]\n\n",
      );
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { url: `http://127.0.0.1:${server.address().port}/v1`, stop: () => server.close() };
}

/** The `weather` agent: an `openai` agent on the model with the MCP server's App tools, every
 * call of which waits for a person's approval (the App's own call too). */
export const weatherAgent = (modelUrl, mcpUrl) => `
[[agents]]
name = "weather"
kind = "openai"
title = "Weather"
base_url = "${modelUrl}"
model = "scripted"

[[agents.mcp_servers]]
name = "forecast"
url = "${mcpUrl}/mcp"
timeout_secs = 10
tools = ["weather", "umbrella"]
approval = "always"
`;

/**
 * The case: the model's `weather` call is approved in the page, CopilotKit's renderer shows the
 * App (its page read through the gateway) with the call's result; the App's button calls
 * `umbrella`, which waits for a person; approved in the page, its result reaches the App.
 */
export async function anMcpAppIsShownAndItsCallApproved({ open, say, waitForText, gatewayMessages, mcp, patience }) {
  const page = await open({ agent: "weather", thread: "ck-mcp-app" });
  await say(page, "the weather in Oslo?");
  const approve = async () => {
    await page.getByTestId("interrupt").waitFor({ timeout: patience });
    await page.getByRole("button", { name: "Approve" }).click();
    await page.getByTestId("interrupt").waitFor({ state: "detached", timeout: patience });
  };
  await approve();
  await waitForText(page, WEATHER_ANSWER);

  // The renderer's sandbox iframe, and in it the App's own page (an inner srcdoc iframe).
  const apps = page.locator('[data-testid="mcp-app-iframe"]');
  const app = (n) => apps.nth(n).contentFrame().locator("iframe").contentFrame();
  await app(0).locator("#title").getByText("Weather").waitFor({ timeout: patience });
  await app(0).locator("#shown").getByText("sunny in Oslo").waitFor({ timeout: patience });

  // The App's button: its `tools/call` waits for a person; nothing runs before the approval.
  const ran = (await mcp.calls()).length;
  await app(0).getByRole("button", { name: "Send an umbrella" }).click();
  await page.getByTestId("interrupt").getByText("umbrella").waitFor({ timeout: patience });
  assert.equal((await mcp.calls()).length, ran, "nothing ran before the approval");
  // The App's own request is answered with no content: its result comes with the approval.
  await app(0).locator("#answered").getByText("answered: nothing yet").waitFor({ timeout: patience });
  await approve();
  // The approved call's result is the `mcp-apps` activity of the approval's turn (a second one
  // in the chat, under the first), drawn as the App again, which is given the result.
  const umbrella = "an umbrella is on its way to Oslo";
  await app(1).locator("#shown").getByText(umbrella).waitFor({ timeout: patience });
  assert.equal(await app(0).locator("#shown").textContent(), "sunny in Oslo");
  const made = (await mcp.calls()).slice(ran);
  assert.deepEqual(made.map((c) => [c.tool, c.arguments]), [["umbrella", { city: "Oslo" }]]);

  // The gateway kept the App's activities in the thread.
  const record = await gatewayMessages("ck-mcp-app");
  const shown = record.filter((m) => m.role === "activity" && m.activityType === "mcp-apps");
  assert.ok(shown.some((m) => m.content.result?.content?.[0]?.text === umbrella), JSON.stringify(record));
  await page.close();
}
