#!/usr/bin/env node
// CopilotKit with the gateway as its runtime, in headless Chromium: a page built on the real
// @copilotkit/react-core v2 (pinned in package.json) whose `runtimeUrl` is the gateway's
// `/v1/copilotkit/acme` — no Node runtime in between. Node here only builds the page (esbuild),
// serves its static files from another origin (so the tenant's CORS is in play), and, for the
// cut case, relays TCP bytes to cut a stream as a network would. The `surface` agent is an `agui`
// agent in front of the Python upstream (tests/upstream/python, its A2UI surface drawn with
// ag-ui-a2ui-toolkit), started here; the `storyteller` agent is an `openai` agent on a scripted
// model that streams a long answer slowly (slow-model.mjs), started here too.
//
//   npm ci --ignore-scripts --prefix tests/copilotkit-direct
//   node tests/copilotkit-direct/run.mjs
//
// Needs a built gateway (AGUI_GATEWAY_BIN, else target/debug/agui-gateway) and Chromium
// (CHROMIUM_PATH, else /usr/bin/chromium), and tests/upstream/python/.venv and tests/mcp/.venv
// (scripts/test-clients makes them). Cases:
//   1. a message typed in <CopilotChat> is answered
//   2. a frontend tool (useFrontendTool) is called and the agent answers from its result
//   3. an approval shows through useInterrupt; Approve runs the call and finishes the turn;
//      useInterrupt's own resolve() approves on the run that asked, and denies with approved: false
//   4. a reload restores the chat and the waiting interrupt, which is then approved
//   5. Stop cancels the running turn in the gateway
//   6. a run stream cut by the network is completed through connect: the answer whole, once
//   7. a second tab on the same thread shows the conversation
//   8. useThreads lists the person's threads, renames and archives one
//   9. another person's useThreads lists none of them
//  10. the list is live: a thread created, renamed in a second tab and archived through the API
//      reaches the open list without a reload or refetch; another person's live list, told of
//      their own rename, never shows it
//  11. a tab showing a thread shows a run made in another tab as it happens, with no reload (the
//      gateway's `thread_run_activity` push makes CopilotChat connect)
//  12. an A2UI surface from the Python upstream is drawn by @copilotkit/a2ui-renderer, its button
//      clicked, the click answered by the agent, and the surface drawn again after a reload, its
//      button live (a second click answered too)
//  13. an MCP App from the Python MCP server (tests/mcp) is drawn by CopilotKit's MCP Apps renderer,
//      its page read through the gateway; its button's tool call waits for a person, is approved
//      in the page, and its result reaches the App (mcp-app.mjs)
//  14. Stop (CopilotChat's button) ends an `openai` answer mid-sentence: the page's answer stops
//      growing, the gateway's turn ends `cancelled` and the model's stream is closed unfinished
//  15. the gateway killed (SIGKILL) during an `openai` answer and started again on the same
//      database and port takes the turn over and asks the model again; a reload shows one whole
//      answer, no fragment of the cut one above it, led by acme's AI label as every answer is
//      (this case restarts the gateway: it runs last)
// Prints ok/not ok per case; exits non-zero on any failure.
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import * as esbuild from "esbuild";
import { chromium } from "playwright-core";
import { startCuttingRelay } from "../clients/lib/cutting-relay.mjs";
import { startGateway } from "../clients/lib/gateway.mjs";
import { startListening } from "../support/listen.mjs";
import { anMcpAppIsShownAndItsCallApproved, startMcpServer, startScriptedModel, weatherAgent } from "./mcp-app.mjs";
import { SLOW_ANSWER, SLOW_WORDS, slowAgent, startSlowModel } from "./slow-model.mjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const repoRoot = path.resolve(here, "../..");
const chromiumPath = process.env.CHROMIUM_PATH || "/usr/bin/chromium";
const SECRET = "a-copilotkit-direct-test-secret-0123456789";
const PATIENCE = 20_000;
// acme's `ai_label` (tests/fixtures/agents.toml): it leads every assistant message acme streams.
const AI_LABEL = "[AI] ";

/** A gateway app token for `sub` in `tenant` (HS256, as the token exchange issues them). */
function appToken(tenant, sub) {
  const encode = (value) => Buffer.from(JSON.stringify(value)).toString("base64url");
  const now = Math.floor(Date.now() / 1000);
  const head = encode({ alg: "HS256", typ: "JWT" });
  const body = encode({ iss: "agui-gateway", aud: "agui-gateway", sub, tenant, iat: now, exp: now + 3600 });
  const signature = createHmac("sha256", SECRET).update(`${head}.${body}`).digest("base64url");
  return `${head}.${body}.${signature}`;
}

/** Builds the page into `dir`: app.js, app.css and index.html. */
async function buildPage(dir) {
  await esbuild.build({
    entryPoints: [path.join(here, "page/app.jsx")],
    bundle: true,
    outfile: path.join(dir, "app.js"),
    format: "esm",
    jsx: "automatic",
    define: { "process.env.NODE_ENV": '"production"' },
    // KaTeX's fonts (math in answers) are not needed by these tests.
    loader: { ".woff": "empty", ".woff2": "empty", ".ttf": "empty" },
    logLevel: "error",
  });
  writeFileSync(
    path.join(dir, "index.html"),
    '<!doctype html><html><head><meta charset="utf-8"><link rel="stylesheet" href="/app.css"></head>' +
      '<body><div id="root"></div><script type="module" src="/app.js"></script></body></html>',
  );
}

/** Serves the built page's files (and nothing else) on a random port. */
async function serveStatic(dir) {
  const types = { ".html": "text/html", ".js": "text/javascript", ".css": "text/css" };
  const server = http.createServer((req, res) => {
    const name = new URL(req.url, "http://x").pathname === "/" ? "index.html" : new URL(req.url, "http://x").pathname.slice(1);
    if (!/^[a-z]+\.(html|js|css)$/.test(name)) return res.writeHead(404).end();
    try {
      res.writeHead(200, { "content-type": types[path.extname(name)] }).end(readFileSync(path.join(dir, name)));
    } catch {
      res.writeHead(404).end();
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { origin: `http://127.0.0.1:${server.address().port}`, stop: () => server.close() };
}

/** The Python upstream AG-UI server (tests/upstream/python); resolves to `{ url, stop }` once it
 * listens. */
async function startPythonUpstream() {
  const python = path.join(repoRoot, "tests/upstream/python/.venv/bin/python");
  if (!existsSync(python)) throw new Error("create tests/upstream/python/.venv (scripts/test-clients does)");
  return startListening(python, [path.join(repoRoot, "tests/upstream/python/server.py")], "the Python upstream");
}

const upstream = await startPythonUpstream();
const mcp = await startMcpServer(repoRoot);
const model = await startScriptedModel();
const slowModel = await startSlowModel();
const work = mkdtempSync(path.join(tmpdir(), "ck-direct-"));
await buildPage(work);
const site = await serveStatic(work);
// The shared test agents, with acme's CORS origin set to the page's and app tokens on.
const agents = readFileSync(path.join(repoRoot, "tests/fixtures/agents.toml"), "utf8").replace(
  'name = "acme"\n',
  `name = "acme"\ncors_origins = ["${site.origin}"]\n`,
);
// `surface`: an A2UI surface and the answer to a click on it, from the Python upstream.
const surfaceAgent = `
[[agents]]
name = "surface"
kind = "agui"
title = "Surface"
url = "${upstream.url}/agents/surface"
timeout_secs = 20
`;
const gateway = await startGateway({
  configToml: `[limits]\nkeepalive_secs = 1\n\n[auth.app_tokens]\nsecret = "${SECRET}"\n\n${agents}${surfaceAgent}${weatherAgent(model.url, mcp.url)}${slowAgent(slowModel.url)}`,
});
const relay = await startCuttingRelay(gateway.url);
const alice = appToken("acme", "alice");
const bob = appToken("acme", "bob");
const runtime = `${gateway.url}/v1/copilotkit/acme`;

/** The thread's conversation as the gateway recorded it. */
async function gatewayMessages(thread, token = alice) {
  const response = await fetch(`${gateway.url}/v1/threads/${thread}/messages?tenant=acme`, {
    headers: { authorization: `Bearer ${token}` },
  });
  return (await response.json()).messages;
}

/** The gateway's own record of a thread, as alice may read it. */
async function gatewayThread(thread, token = alice) {
  const response = await fetch(`${gateway.url}/v1/threads/${thread}?tenant=acme`, {
    headers: { authorization: `Bearer ${token}` },
  });
  return response.json();
}

/** The thread's turns as the gateway recorded them, oldest first (each `id`, `status`, …). */
async function gatewayTurns(thread, token = alice) {
  const response = await fetch(`${gateway.url}/v1/threads/${thread}/turns?tenant=acme`, {
    headers: { authorization: `Bearer ${token}` },
  });
  return (await response.json()).turns;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Reads `read()` every 100 ms until `done` holds of what it read, or PATIENCE has passed;
 * returns the last reading either way, for the assertion after it to judge. */
async function readUntil(read, done) {
  const deadline = Date.now() + PATIENCE;
  let value = await read();
  while (!done(value) && Date.now() < deadline) {
    await sleep(100);
    value = await read();
  }
  return value;
}

const browser = await chromium.launch({ executablePath: chromiumPath, headless: true, args: ["--no-sandbox"] });
const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
const seenUrls = [];
context.on("request", (request) => seenUrls.push(request.url()));

/** Opens the page on `agent` and `thread` as `token` (through `via`, the gateway by default);
 * `onPage` sees the page before it loads. */
async function open({ agent, thread, token = alice, via = runtime, extra = "", onPage }) {
  const page = await context.newPage();
  page.on("pageerror", (error) => console.error(`  page error: ${error.message}`));
  onPage?.(page);
  const query = new URLSearchParams({ runtime: via, token, agent, ...(thread ? { thread } : {}) });
  await page.goto(`${site.origin}/?${query}${extra}`);
  await page.waitForFunction(() => window.page?.agent && window.page.copilotkit?.runtimeConnectionStatus === "connected", null, {
    timeout: PATIENCE,
  });
  return page;
}

/** Types `text` into the chat's input and sends it, as a person does. */
async function say(page, text) {
  const input = page.locator("textarea").first();
  await input.fill(text);
  await input.press("Enter");
}

/** The agent's messages in the page. */
const messagesOf = (page) => page.evaluate(() => JSON.parse(JSON.stringify(window.page.agent.messages)));
const textOf = (messages) =>
  messages
    .filter((m) => m.role === "assistant" && typeof m.content === "string")
    .map((m) => m.content)
    .join("|");

async function waitForText(page, text) {
  await page.getByText(text, { exact: false }).first().waitFor({ timeout: PATIENCE });
}

/** How many of the slow answer's words (`w1 w2 …`) the page's agent holds. */
const wordsShown = async (page) => (textOf(await messagesOf(page)).match(/\bw\d+\b/g) ?? []).length;

/** Waits until the page shows the slow answer's first `count` words: the answer streams. */
async function waitForWords(page, count) {
  await page.waitForFunction(
    (count) =>
      window.page.agent.messages.some((m) => m.role === "assistant" && (String(m.content ?? "").match(/\bw\d+\b/g) ?? []).length >= count),
    count,
    { timeout: PATIENCE },
  );
}

const cases = [];
const test = (name, body) => cases.push({ name, body });
let failures = 0;

test("a message typed in CopilotChat is answered by the gateway", async () => {
  const page = await open({ agent: "demo", thread: "ck-chat" });
  await say(page, "What is AG-UI?");
  await waitForText(page, "Done.");
  const messages = await messagesOf(page);
  assert.match(textOf(messages), /Hello! You said: "What is AG-UI\?"/);
  const record = await gatewayThread("ck-chat");
  assert.equal(record.turnCount, 1, JSON.stringify(record));
  await page.close();
});

test("a frontend tool is called and the agent answers from its result", async () => {
  const page = await open({ agent: "checker", thread: "ck-tool" });
  await say(page, "the plan");
  await waitForText(page, "You said yes, go ahead.");
  const calls = await page.evaluate(() => window.page.toolCalls);
  assert.deepEqual(calls, ["Proceed with the plan?"]);
  await page.close();
});

test("an approval shows through useInterrupt and Approve finishes the turn", async () => {
  const page = await open({ agent: "mailer", thread: "ck-approve" });
  await say(page, "the minutes");
  await page.getByTestId("interrupt").waitFor({ timeout: PATIENCE });
  await page.getByRole("button", { name: "Approve" }).click();
  await waitForText(page, "Mailer sent it.");
  const record = await gatewayThread("ck-approve");
  assert.equal(record.latestTurn.status, "succeeded", JSON.stringify(record));
  await page.close();
});

test("useInterrupt's own resolve() approves on the run that asked, and denies with approved: false", async () => {
  const page = await open({ agent: "mailer", thread: "ck-resolve" });
  await say(page, "the agenda");
  await page.getByTestId("interrupt").waitFor({ timeout: PATIENCE });
  await page.getByRole("button", { name: "Resolve" }).click();
  await waitForText(page, "Mailer sent it.");
  const approved = await gatewayMessages("ck-resolve");
  assert.ok(approved.some((m) => m.role === "tool" && m.content === "sent"), JSON.stringify(approved));
  assert.equal((await gatewayThread("ck-resolve")).latestTurn.status, "succeeded");
  await page.close();

  const denying = await open({ agent: "mailer", thread: "ck-cancel" });
  await say(denying, "the secrets");
  await denying.getByTestId("interrupt").waitFor({ timeout: PATIENCE });
  await denying.getByRole("button", { name: "Deny" }).click();
  await denying.getByTestId("interrupt").waitFor({ state: "detached", timeout: PATIENCE });
  let denied = [];
  for (let tries = 0; tries < 100 && !denied.some((m) => m.role === "tool"); tries++) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    denied = await gatewayMessages("ck-cancel");
  }
  const result = denied.find((m) => m.role === "tool");
  assert.match(result?.content ?? "", /not run: the call was denied/, JSON.stringify(denied));
  assert.ok(!denied.some((m) => m.role === "tool" && m.content === "sent"), "the denied tool never ran");
  await denying.close();
});

test("a reload restores the chat and the waiting interrupt", async () => {
  const page = await open({ agent: "mailer", thread: "ck-reload" });
  await say(page, "the report");
  await page.getByTestId("interrupt").waitFor({ timeout: PATIENCE });
  await page.reload();
  await page.waitForFunction(() => window.page?.agent, null, { timeout: PATIENCE });
  await waitForText(page, "Mailer drafting: the report");
  await page.getByTestId("interrupt").waitFor({ timeout: PATIENCE });
  await page.getByRole("button", { name: "Approve" }).click();
  await waitForText(page, "Mailer sent it.");
  const messages = await messagesOf(page);
  assert.equal(messages.filter((m) => m.role === "user").length, 1, JSON.stringify(messages));
  await page.close();
});

test("Stop cancels the running turn", async () => {
  const page = await open({ agent: "waiter", thread: "ck-stop" });
  await say(page, "take your time");
  await waitForText(page, "waiting");
  await page.evaluate(() => window.page.copilotkit.stopAgent({ agent: window.page.agent }));
  const deadline = Date.now() + PATIENCE;
  let record;
  do {
    await new Promise((r) => setTimeout(r, 200));
    record = await gatewayThread("ck-stop");
  } while (record.latestTurn?.status !== "cancelled" && Date.now() < deadline);
  assert.equal(record.latestTurn?.status, "cancelled", JSON.stringify(record));
  await page.close();
});

test("a run stream cut by the network is completed through connect, whole and once", async () => {
  const whole = "Streaming slowly so a client can drop mid-message: over the wire";
  const page = await open({ agent: "slow", thread: "ck-cut", via: `${relay.url}/v1/copilotkit/acme` });
  relay.arm("TEXT_MESSAGE_CONTENT", 3);
  await say(page, "over the wire");
  const deadline = Date.now() + PATIENCE;
  while (relay.seen.cuts === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  assert.equal(relay.seen.cuts, 1, "the stream was cut");
  await page.waitForFunction(() => !window.page.agent.isRunning, null, { timeout: PATIENCE });
  const cut = textOf(await messagesOf(page));
  assert.ok(!cut.includes("And a second answer"), `cut mid-answer: ${cut}`);
  await page.evaluate(() => window.page.copilotkit.connectAgent({ agent: window.page.agent }));
  await waitForText(page, "And a second answer after the tool.");
  const messages = await messagesOf(page);
  const text = textOf(messages);
  assert.equal(text.split(whole).length - 1, 1, `the first answer once: ${text}`);
  assert.equal(text.split("And a second answer after the tool.").length - 1, 1, `the second once: ${text}`);
  await page.close();
});

test("a second tab on the same thread shows the conversation", async () => {
  const page = await open({ agent: "demo", thread: "ck-chat" });
  await waitForText(page, 'You said: "What is AG-UI?"');
  await waitForText(page, "Done.");
  await page.close();
});

test("useThreads lists the person's threads, renames and archives one", async () => {
  const page = await open({ agent: "demo", thread: "ck-chat", extra: "&threads=1" });
  await page.locator('[data-thread="ck-chat"]').waitFor({ timeout: PATIENCE });
  await page.evaluate(() => window.page.threads.renameThread("ck-chat", "About AG-UI"));
  await page.locator('[data-thread="ck-chat"]', { hasText: "About AG-UI" }).waitFor({ timeout: PATIENCE });
  await page.evaluate(() => window.page.threads.refetchThreads());
  await page.locator('[data-thread="ck-chat"]', { hasText: "About AG-UI" }).waitFor({ timeout: PATIENCE });
  await page.evaluate(() => window.page.threads.archiveThread("ck-chat"));
  await page.evaluate(() => window.page.threads.refetchThreads());
  await page.waitForFunction(() => !document.querySelector('[data-thread="ck-chat"]'), null, { timeout: PATIENCE });
  const listed = await fetch(`${runtime}/threads?agentId=demo&includeArchived=true`, {
    headers: { authorization: `Bearer ${alice}` },
  }).then((r) => r.json());
  const entry = listed.threads.find((t) => t.id === "ck-chat");
  assert.equal(entry?.name, "About AG-UI", JSON.stringify(listed));
  assert.equal(entry?.archived, true);
  await page.close();
});

test("another person's useThreads lists none of those threads", async () => {
  const page = await open({ agent: "demo", thread: "ck-bob", token: bob, extra: "&threads=1" });
  await say(page, "bob here");
  await waitForText(page, "Done.");
  await page.evaluate(() => window.page.threads.refetchThreads());
  await page.locator('[data-thread="ck-bob"]').waitFor({ timeout: PATIENCE });
  const listed = await page.evaluate(() => window.page.threads.threads.map((t) => t.id));
  assert.deepEqual(listed, ["ck-bob"]);
  await page.close();
});

test("the thread list is live: changes made elsewhere reach it, another person's never", async () => {
  const ids = (page) => page.evaluate(() => window.page.threads.threads.map((t) => t.id));
  const bobs = await open({ agent: "demo", thread: "ck-bob", token: bob, extra: "&threads=1" });
  await bobs.locator('[data-thread="ck-bob"]').waitFor({ timeout: PATIENCE });
  const first = await open({ agent: "demo", thread: "ck-live", extra: "&threads=1" });
  await first.waitForFunction(() => window.page.threads && !window.page.threads.isLoading, null, { timeout: PATIENCE });
  assert.ok(!(await ids(first)).includes("ck-live"), "a new thread is not listed before its first run");
  // Created: the run's thread shows up in the list that was loaded before it existed.
  await say(first, "a live thread");
  await waitForText(first, "Done.");
  await first.locator('[data-thread="ck-live"]').waitFor({ timeout: PATIENCE });
  // Renamed in a second tab: the first tab's list shows the name, with no fetch of its own.
  const second = await open({ agent: "demo", thread: "ck-live", extra: "&threads=1" });
  await second.locator('[data-thread="ck-live"]').waitFor({ timeout: PATIENCE });
  await second.evaluate(() => window.page.threads.renameThread("ck-live", "Named in another tab"));
  await first.locator('[data-thread="ck-live"]', { hasText: "Named in another tab" }).waitFor({ timeout: PATIENCE });
  // Archived through the API: it leaves both open lists.
  const archived = await fetch(`${runtime}/threads/ck-live/archive`, {
    method: "POST",
    headers: { authorization: `Bearer ${alice}`, "content-type": "application/json" },
    body: "{}",
  });
  assert.equal(archived.status, 200);
  for (const page of [first, second]) {
    await page.waitForFunction(() => !document.querySelector('[data-thread="ck-live"]'), null, { timeout: PATIENCE });
  }
  // Bob's list is live too (his own rename reaches it), and never held alice's thread.
  const renamed = await fetch(`${runtime}/threads/ck-bob`, {
    method: "PATCH",
    headers: { authorization: `Bearer ${bob}`, "content-type": "application/json" },
    body: JSON.stringify({ name: "Bob's renamed thread" }),
  });
  assert.equal(renamed.status, 200);
  await bobs.locator('[data-thread="ck-bob"]', { hasText: "Bob's renamed thread" }).waitFor({ timeout: PATIENCE });
  assert.deepEqual(await ids(bobs), ["ck-bob"]);
  for (const page of [first, second, bobs]) await page.close();
});

test("a tab showing a thread shows a run made in another tab, with no reload", async () => {
  // The watching tab's live list has joined its channel (the gateway's reply to the join).
  let joined;
  const channelJoined = new Promise((resolve) => (joined = resolve));
  const watching = await open({
    agent: "demo",
    thread: "ck-activity",
    onPage: (page) =>
      page.on("websocket", (socket) =>
        socket.on("framereceived", ({ payload }) => {
          if (String(payload).includes("user_meta:") && String(payload).includes("phx_reply")) joined();
        }),
      ),
  });
  await channelJoined;
  const typing = await open({ agent: "demo", thread: "ck-activity" });
  await say(typing, "heard in the other tab");
  await waitForText(typing, 'You said: "heard in the other tab"');
  await waitForText(watching, 'You said: "heard in the other tab"');
  const seen = textOf(await messagesOf(watching));
  assert.equal(seen.split('You said: "heard in the other tab"').length, 2, `the answer once: ${seen}`);
  for (const page of [watching, typing]) await page.close();
});

test("an A2UI surface is drawn, its button clicked and answered, and drawn again after a reload, still live", async () => {
  // The renderer's own DOM: the surface's container and a real <button> of its Button component.
  const surface = (page) => page.locator('.a2ui-surface[data-surface-id="order-form"]');
  const orderButton = (page) => surface(page).getByRole("button", { name: "Order", exact: true });
  const answer = 'You pressed order on order-form. User performed action "order" on surface "order-form"';

  const page = await open({ agent: "surface", thread: "ck-surface" });
  await say(page, "a pizza, please");
  await waitForText(page, "Here is the form.");
  await surface(page).getByText("Order a pizza?").waitFor({ timeout: PATIENCE });
  await orderButton(page).click();
  // The agent read the click as the A2UI middleware gives it and named it.
  await waitForText(page, answer);
  assert.match(textOf(await messagesOf(page)), /You pressed order on order-form\. User performed action "order" on surface "order-form" \(component: go\)\. Context: \{"size":"large"\}/);

  // The gateway kept the surface and took the click as the second turn's input.
  const record = await gatewayMessages("ck-surface");
  const drawn = record.filter((m) => m.role === "activity");
  assert.equal(drawn.length, 1, JSON.stringify(record));
  assert.equal(drawn[0].activityType, "a2ui-surface");
  assert.equal(drawn[0].content.a2ui_operations[0].createSurface.surfaceId, "order-form");
  const call = record.find((m) => m.role === "assistant" && m.toolCalls?.[0]?.function.name === "log_a2ui_event");
  assert.ok(call, JSON.stringify(record));
  assert.equal(JSON.parse(call.toolCalls[0].function.arguments).sourceComponentId, "go");
  assert.equal((await gatewayThread("ck-surface")).turnCount, 2);

  // A reload draws the surface again from the gateway's thread (the page keeps nothing itself),
  // with the answer to the click below it.
  await page.reload();
  await page.waitForFunction(() => window.page?.agent, null, { timeout: PATIENCE });
  await orderButton(page).waitFor({ timeout: PATIENCE });
  await surface(page).getByText("Order a pizza?").waitFor({ timeout: PATIENCE });
  await waitForText(page, answer);
  const restored = await messagesOf(page);
  assert.equal(restored.filter((m) => m.role === "activity" && m.activityType === "a2ui-surface").length, 1, JSON.stringify(restored));

  // The restored surface's button is live: a second click is the third turn, answered too.
  await orderButton(page).click();
  await page.waitForFunction(
    (said) => window.page.agent.messages.filter((m) => m.role === "assistant" && typeof m.content === "string" && m.content.includes(said)).length === 2,
    answer,
    { timeout: PATIENCE },
  );
  assert.equal((await gatewayThread("ck-surface")).turnCount, 3);
  await page.close();
});

test("an MCP App is drawn, its page read through the gateway; its call is approved and reaches it", () =>
  anMcpAppIsShownAndItsCallApproved({ open, say, waitForText, gatewayMessages, mcp, patience: PATIENCE }),
);

test("Stop ends an openai answer mid-sentence: in the page, in the gateway's turn and at the model", async () => {
  const said = "a long answer, then stop";
  const page = await open({ agent: "storyteller", thread: "ck-stop-openai" });
  await say(page, said);
  await waitForWords(page, 3);
  // CopilotChat's own Stop: while a run runs, its send button stops it (stopAgent, which aborts
  // the run's stream and posts the gateway's `…/agent/storyteller/stop/ck-stop-openai`).
  await page.getByTestId("copilot-send-button").click();
  const atStop = await wordsShown(page);
  // The answer stops growing: for 2 s (28 more words, had it gone on) it stays far below whole.
  let most = atStop;
  for (const until = Date.now() + 2_000; Date.now() < until; ) {
    await sleep(100);
    most = Math.max(most, await wordsShown(page));
  }
  assert.ok(most < 20, `the page's answer grew to ${most} words after the stop at ${atStop}`);
  // The gateway's turn ended cancelled, not succeeded after the model finished on its own.
  const turns = await readUntil(() => gatewayTurns("ck-stop-openai"), (turns) => turns.at(-1)?.status !== "running");
  assert.deepEqual(turns.map((turn) => turn.status), ["cancelled"], JSON.stringify(turns));
  // The model saw its stream closed by the gateway with most of the answer still unwritten: the
  // cancel dropped the request at once, not at the answer's end (which the page could not tell).
  const asked = await readUntil(
    () => slowModel.requests.filter((request) => request.said === said),
    (asked) => asked[0]?.cut,
  );
  assert.equal(asked.length, 1, JSON.stringify(asked));
  assert.ok(asked[0].cut && asked[0].written < SLOW_WORDS / 2, `the model's stream: ${JSON.stringify(asked[0])}`);
  await page.close();
});

// Last: it kills the gateway. What the first process streamed of the answer before it died is a
// fragment in its log; the restarted one must take the turn over, ask the model again, and show
// a reloaded page the whole answer once, the fragment withdrawn, both while the second answer
// streams (the reload's connect) and once the turn is over (the stored conversation).
test("a restart during an openai answer leaves one whole answer after a reload", async () => {
  const said = "a long answer, through a crash";
  const page = await open({ agent: "storyteller", thread: "ck-restart" });
  await say(page, said);
  await waitForWords(page, 3);
  // A crash, not a stop: no drain, no hand-over; the turn is left `running` in the database.
  // Same database and port, so the page's runtimeUrl reaches the new process.
  await gateway.restart();
  const asked = await readUntil(
    () => slowModel.requests.filter((request) => request.said === said),
    (asked) => asked.length >= 2,
  );
  assert.equal(asked.length, 2, `the model was asked again after the restart: ${JSON.stringify(asked)}`);
  assert.ok(asked[0].cut && asked[0].written < SLOW_WORDS, `the first answer was cut: ${JSON.stringify(asked[0])}`);

  // The answers as shown, judged last: the label is another matter than the fragment.
  const answers = [];
  /** The page, once the turn is over, shows the user's message and under it one assistant
   * answer with all the words in order; none of the cut answer, in its own message or in this
   * one, at any moment since the reload (`window.mostAnswers`, the most drawn at once). */
  const showsOneWholeAnswer = async (when) => {
    await page.waitForFunction(
      (last) => !window.page.agent.isRunning && window.page.agent.messages.some((m) => m.role === "assistant" && m.content?.endsWith(last)),
      `w${SLOW_WORDS}`,
      { timeout: PATIENCE },
    );
    const messages = await messagesOf(page);
    assert.deepEqual(messages.map((m) => m.role), ["user", "assistant"], `${when}: ${JSON.stringify(messages)}`);
    assert.equal(messages[0].content, said);
    assert.equal(messages[1].content.match(/\bw\d+\b/g)?.join(" "), SLOW_ANSWER, `${when}: ${messages[1].content}`);
    const drawn = await page.getByTestId("copilot-assistant-message").allInnerTexts();
    assert.equal(drawn.length, 1, `${when}: ${JSON.stringify(drawn)}`);
    assert.equal(drawn[0].match(/\bw\d+\b/g)?.join(" "), SLOW_ANSWER, `${when}: ${drawn[0]}`);
    assert.equal(await page.evaluate(() => window.mostAnswers), 1, `${when}: a second answer was drawn for a while`);
    answers.push([when, messages[1].content]);
  };
  const reload = async () => {
    await page.reload();
    await page.waitForFunction(() => window.page?.agent, null, { timeout: PATIENCE });
    await page.evaluate(() => {
      window.mostAnswers = 0;
      const count = () => document.querySelectorAll('[data-testid="copilot-assistant-message"]').length;
      setInterval(() => (window.mostAnswers = Math.max(window.mostAnswers, count())), 20);
    });
  };
  // Reloaded while the second answer streams: the thread is loaded through connect.
  await reload();
  await showsOneWholeAnswer("reloaded during the answer");
  // Reloaded once the turn is over: the conversation the gateway stored.
  await reload();
  await showsOneWholeAnswer("reloaded after it");

  assert.ok(slowModel.requests.filter((request) => request.said === said)[1].whole, "the second answer went out whole");
  const turns = await gatewayTurns("ck-restart");
  assert.deepEqual(turns.map((turn) => turn.status), ["succeeded"], JSON.stringify(turns));
  const stored = (await gatewayMessages("ck-restart")).filter((m) => m.role === "assistant");
  assert.deepEqual(stored.map((m) => m.content.match(/\bw\d+\b/g)?.join(" ")), [SLOW_ANSWER], JSON.stringify(stored));
  answers.push(["stored", stored[0].content]);
  // Led by acme's AI label as every assistant message it streams is (docs/config.md
  // `ai_label`), the answer written by the process that took the turn over too.
  for (const [when, content] of answers) {
    assert.equal(content, AI_LABEL + SLOW_ANSWER, `${when}: the answer after the takeover is not labelled`);
  }
  await page.close();
});

try {
  for (const { name, body } of cases) {
    try {
      await body();
      console.log(`ok - ${name}`);
    } catch (error) {
      failures += 1;
      console.log(`not ok - ${name}\n  ${String(error?.stack ?? error).split("\n").join("\n  ")}`);
    }
  }
  // Nothing but the page's own origin, the gateway and the relay was asked for anything.
  const foreign = seenUrls.filter(
    (url) => !url.startsWith(site.origin) && !url.startsWith(gateway.url) && !url.startsWith(relay.url),
  );
  if (foreign.length > 0) {
    failures += 1;
    console.log(`not ok - the page called only the gateway\n  ${[...new Set(foreign)].join("\n  ")}`);
  } else {
    console.log("ok - the page called only the gateway");
  }
} finally {
  await browser.close();
  relay.stop();
  site.stop();
  await gateway.stop();
  upstream.stop();
  mcp.stop();
  model.stop();
  slowModel.stop();
  rmSync(work, { recursive: true, force: true });
}
if (failures > 0) {
  console.log(gateway.logs.slice(-40).join("\n"));
  process.exit(1);
}
