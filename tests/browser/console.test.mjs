#!/usr/bin/env node
// The gateway's console (/console/, docs/console.md) in headless Chromium, used as people use
// it: a real gateway with app tokens on, the chat app example for the person chatting, and a
// console tab per person, each signed in with that person's own token.
//
//   npm ci --prefix tests/browser
//   node tests/browser/console.test.mjs
//
// Needs a built gateway (AGUI_GATEWAY_BIN, else target/debug/agui-gateway) and Chromium
// (CHROMIUM_PATH, else /usr/bin/chromium). Cases:
//   1. four eyes: Alice's chat waits; her console lists the payment as waiting for others (her
//      link to it says it is not hers); Bob (finance) approves it from his inbox; the chat goes on
//   2. a question answered from the console (its choices are buttons), the turn goes on
//   3. refusals in words: an approval that expired meanwhile; a person no longer a decider
//   4. each person sees only their own inbox
//   5. the console cannot read what the API refuses the same person: another person's thread,
//      a redacted note, another tenant
//   6. a thread: conversation, board, the running turn live, cancel; the threads list with its
//      filter; delete with a confirmation; a tenant admin reads a thread's audit trail
//   7. phone-sized, keyboard: j moves to a card, a approves it
// Screenshots of each screen go to target/screenshots/console-*.png (docs/img/ with
// AGUI_UPDATE_SCREENSHOTS=1). Prints PASS/FAIL per case.
import assert from "node:assert/strict";
import { spawn, execFileSync } from "node:child_process";
import { mkdirSync, writeFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { startGateway, gatewayBinary } from "../clients/lib/gateway.mjs";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const exampleDir = path.join(repoRoot, "examples/chat-app");
// The screenshots the docs show are taken again into docs/img only when asked
// (AGUI_UPDATE_SCREENSHOTS=1): a test run leaves the checkout as it found it.
const imageDir = path.join(repoRoot, process.env.AGUI_UPDATE_SCREENSHOTS === "1" ? "docs/img" : "target/screenshots");
const chromiumPath = process.env.CHROMIUM_PATH || "/usr/bin/chromium";

const CONFIG = `
[[tenants]]
name = "default"
admin_roles = ["admin"]

[[tenants]]
name = "acme"

# A payment a second person with the role finance approves (four eyes); it sends data out, so
# an AG-UI turn asks first (gateway/asks-because).
[[agents]]
name = "payments"
kind = "script"
title = "Payments"
description = "Prepares a payment that someone in finance approves."
chunk_chars = 8
steps = [
  { say = "I prepared the payment for \\"{input}\\"." },
  { tool = "wire_money", args = { amount = "1200 EUR", to = "ACME GmbH", memo = "{input}" }, result = "Payment sent", approval = "when_tainted", exfiltrates = true, four_eyes = true, deciders = ["role:finance"] },
  { say = "Paid. The payment is on its way." },
]

[[agents]]
name = "planner"
kind = "script"
steps = [
  { ask = "Which day suits you best?", choices = ["Monday", "Wednesday", "Friday"] },
  { say = "{answer} it is." },
]

# An approval that expires quickly.
[[agents]]
name = "quick"
kind = "script"
steps = [
  { tool = "purge_cache", args = { region = "eu" }, result = "purged", approval = "always", ttl_secs = 8 },
  { say = "Done." },
]

# An approval for team leads.
[[agents]]
name = "budget"
kind = "script"
steps = [
  { tool = "raise_budget", args = { team = "web", by = "10%" }, result = "raised", approval = "always", deciders = ["role:lead"] },
  { say = "Raised." },
]

# A note only people cleared for "hr" read, and one everybody does.
[[agents]]
name = "noter"
kind = "script"
steps = [
  { note = "Salary review for {input}: +4%", kind = "hr", labels = ["hr"] },
  { note = "Topic: {input}", kind = "topic" },
  { say = "Noted." },
]

# A turn that runs long enough to watch and cancel.
[[agents]]
name = "slow"
kind = "script"
steps = [ { say = "Working on it." }, { wait_ms = 60000 }, { say = "Finished." } ]
`;

const secret = randomBytes(48).toString("base64");
const authEnv = { AGUI_GATEWAY_AUTH_APP_TOKENS_SECRET: secret };

function mint(configPath, tenant, sub, roles = []) {
  const args = ["token", "mint", "--config", configPath, "--tenant", tenant, "--sub", sub];
  if (roles.length) args.push("--roles", roles.join(","));
  const env = { ...process.env, ...authEnv };
  delete env.AGUI_GATEWAY_BIN;
  return execFileSync(gatewayBinary(), args, { env }).toString().trim();
}

async function startBackend(env) {
  const child = spawn(process.execPath, [path.join(exampleDir, "server.mjs")], {
    env: { ...process.env, PORT: "0", HOST: "127.0.0.1", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const url = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error("the chat backend did not start")), 10_000);
    const onData = (chunk) => {
      const match = chunk.toString().match(/chat app listening on (http:\/\/[0-9.]+:[0-9]+)/);
      if (match) {
        clearTimeout(timer);
        resolve(match[1]);
      }
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    child.on("exit", (code) => reject(new Error(`the chat backend exited with ${code}`)));
  });
  return { url, stop: () => { child.removeAllListeners("exit"); child.kill("SIGTERM"); } };
}

const results = [];
async function runCase(name, body) {
  try {
    await body();
    results.push([true, name]);
    console.log(`PASS ${name}`);
  } catch (error) {
    results.push([false, name]);
    console.log(`FAIL ${name}\n${error?.stack ?? error}`);
  }
}

let gateway;
let backend;
let browser;
try {
  gateway = await startGateway({ configToml: CONFIG, env: authEnv });
  const configPath = gateway.child.spawnargs[gateway.child.spawnargs.indexOf("--config") + 1];
  const tokens = {
    alice: mint(configPath, "default", "alice"),
    aliceLead: mint(configPath, "default", "alice", ["lead"]),
    bob: mint(configPath, "default", "bob", ["finance"]),
    carol: mint(configPath, "default", "carol"),
    erin: mint(configPath, "default", "erin", ["admin"]),
    dora: mint(configPath, "acme", "dora", ["finance"]),
  };
  const call = async (who, method, route, body) => {
    const response = await fetch(`${gateway.url}${route}`, {
      method,
      headers: { authorization: `Bearer ${tokens[who]}`, "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: response.status, body: await response.text() };
  };
  /** Starts a turn as `who` and reads its stream to its end (or to a wait for others). */
  const startTurn = async (who, agent, threadId, text, { until, runId = "run-1" } = {}) => {
    const response = await fetch(`${gateway.url}/v1/agui/agents/${agent}?tenant=default`, {
      method: "POST",
      headers: { authorization: `Bearer ${tokens[who]}`, "content-type": "application/json" },
      body: JSON.stringify({ threadId, runId, protocolVersion: "1.0", messages: [{ id: "u1", role: "user", content: text }] }),
    });
    assert.equal(response.status, 200);
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let seen = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return seen;
      seen += value;
      if (until && seen.includes(until)) {
        reader.cancel().catch(() => {});
        return seen;
      }
    }
  };

  backend = await startBackend({ AGUI_GATEWAY_URL: gateway.url, AGUI_APP_TOKEN: tokens.alice });
  browser = await chromium.launch({ executablePath: chromiumPath, headless: true, args: ["--no-sandbox"] });
  const problems = [];
  /** A console tab signed in as `who` (the token passed in the address, kept in the tab). */
  const consoleAs = async (who, { hash = "#/inbox", viewport = { width: 1200, height: 800 } } = {}) => {
    const context = await browser.newContext({ viewport, deviceScaleFactor: 1 });
    const page = await context.newPage();
    page.setDefaultTimeout(30_000);
    page.on("pageerror", (error) => problems.push(`${who}: ${error.message}`));
    page.on("console", (message) => {
      if (/Content.Security.Policy|Refused to/i.test(message.text())) problems.push(`${who}: ${message.text()}`);
    });
    await page.goto(`${gateway.url}/console/#token=${encodeURIComponent(tokens[who])}`);
    await page.locator("h1").first().waitFor();
    assert.ok(!page.url().includes("token="), "the token leaves the address bar");
    if (hash !== "#/inbox") await page.evaluate((h) => { location.hash = h; }, hash);
    return page;
  };
  const shot = async (page, name) => {
    const words = await page.locator("main").innerText();
    assert.ok(!/\b(null|undefined|NaN)\b|\[object \w+\]/.test(words), `the ${name} screen shows no placeholder: ${words}`);
    mkdirSync(imageDir, { recursive: true });
    await page.mouse.move(0, 0);
    writeFileSync(path.join(imageDir, `console-${name}.png`), await page.screenshot({ fullPage: true }));
  };

  await runCase("four eyes: the chat waits, Bob approves from his inbox, the chat goes on", async () => {
    const chat = await (await browser.newContext({ viewport: { width: 1100, height: 760 } })).newPage();
    chat.setDefaultTimeout(30_000);
    await chat.goto(backend.url);
    await chat.waitForSelector("body[data-ready=true]");
    await chat.selectOption("#agent", "payments");
    await chat.locator("#input").fill("Invoice 2026-117");
    await chat.locator("#input").press("Enter");
    await chat.locator('#status[data-state="waiting"]').waitFor();
    const threadId = await chat.locator("#thread-id").textContent();

    // Alice may not approve her own payment: it waits for others, and her link to it says so.
    const alice = await consoleAs("alice");
    const others = alice.locator("#others .card", { hasText: "wire_money" });
    await others.waitFor();
    assert.match(await others.textContent(), /anyone with the role finance \(not the person who started the turn\)/);
    assert.equal(await alice.locator("#mine .card").count(), 0, "nothing of it is Alice's to decide");
    const inbox = JSON.parse((await call("alice", "GET", "/v1/interrupts?tenant=default")).body);
    const id = inbox.waitingForOthers[0].interruptId;
    await alice.evaluate((i) => { location.hash = `#/interrupts/${i}`; }, id);
    await alice.locator("#focus-gone").waitFor();

    // Bob's inbox: who asked, why, the call and its arguments, four eyes.
    const bob = await consoleAs("bob", { hash: `#/interrupts/${id}` });
    // The link's item, singled out once the inbox opened on it.
    const card = bob.locator(`#mine .card.focus[data-interrupt="${id}"]`);
    await card.waitFor();
    const text = await card.textContent();
    for (const expected of ["wire_money", "asked by alice", "ACME GmbH", "1200 EUR", "four eyes", threadId]) {
      assert.ok(text.includes(expected), `the card shows ${expected}: ${text}`);
    }
    assert.match(text, /Why: /, "the reason it asks");
    assert.equal(await card.locator("a").count(), 0, "Bob may not open Alice's thread: no link to it");
    await shot(bob, "inbox");
    await card.getByRole("button", { name: "Approve", exact: true }).click();
    await bob.locator("#mine .card.done", { hasText: "approved" }).waitFor();

    // The chat page goes on by itself.
    await chat.locator(".bubble-assistant", { hasText: "Paid. The payment is on its way." }).waitFor();
    await chat.locator('#status[data-state="idle"]').waitFor();
    await bob.locator("#mine .card:not(.done)").count().then((n) => assert.equal(n, 0));
    await alice.locator("#others .card").waitFor({ state: "detached" });
    await chat.context().close();
    await alice.context().close();
    await bob.context().close();
  });

  await runCase("a question is answered from the console with its choice buttons", async () => {
    await startTurn("alice", "planner", "th-plan", "the offsite");
    const alice = await consoleAs("alice");
    const card = alice.locator("#mine .card", { hasText: "Which day suits you best?" });
    await card.waitFor();
    assert.deepEqual(await card.locator("button.choice").allTextContents(), ["Monday", "Wednesday", "Friday"]);
    await card.getByRole("button", { name: "Wednesday" }).click();
    await alice.locator("#mine .card.done", { hasText: "answered “Wednesday”" }).waitFor();
    const said = async () => JSON.parse((await call("alice", "GET", "/v1/threads/th-plan/messages?tenant=default")).body);
    for (let i = 0; i < 100 && !JSON.stringify(await said()).includes("Wednesday it is."); i++) await new Promise((r) => setTimeout(r, 100));
    assert.ok(JSON.stringify(await said()).includes("Wednesday it is."), "the turn went on with the answer");
    await alice.context().close();
  });

  await runCase("refusals are shown in words: expired, and no longer a decider", async () => {
    await startTurn("alice", "quick", "th-quick", "purge it");
    const alice = await consoleAs("alice");
    const card = alice.locator("#mine .card", { hasText: "purge_cache" });
    await card.waitFor();
    // The page keeps what it showed (its refreshes fail) while the interrupt expires.
    await alice.route((url) => url.pathname === "/v1/interrupts", (route) => route.abort());
    const expiresAt = Date.parse(await card.locator("time").nth(1).getAttribute("datetime"));
    await new Promise((r) => setTimeout(r, Math.max(0, expiresAt - Date.now()) + 300));
    await card.getByRole("button", { name: "Approve", exact: true }).click();
    const refusal = card.locator(".result");
    await refusal.filter({ hasText: "expired" }).waitFor();
    assert.match(await refusal.textContent(), /This request expired: the gateway denied it/);
    assert.equal(await refusal.getAttribute("data-code"), "interrupt_expired");

    // Alice as a team lead sees the budget approval; then her token loses the role (a new
    // sign-in without it): she still reads the thread, but is no decider.
    await startTurn("alice", "budget", "th-budget", "more budget", { until: "gateway.waiting" });
    const lead = await consoleAs("aliceLead");
    const raise = lead.locator("#mine .card", { hasText: "raise_budget" });
    await raise.waitFor();
    await lead.route((url) => url.pathname === "/v1/interrupts", (route) => route.abort());
    await lead.evaluate((t) => sessionStorage.setItem("agui-console-token", t), tokens.alice);
    await raise.getByRole("button", { name: "Approve", exact: true }).click();
    await raise.locator('.result[data-code="not_a_decider"]').waitFor();
    assert.match(await raise.locator(".result").textContent(), /You may not decide this one/);
    await alice.context().close();
    await lead.context().close();
  });

  await runCase("each person sees only their own inbox", async () => {
    // Open now: Alice's question, her budget (a lead's) and her payment (Bob's) — none of it Carol's.
    await startTurn("alice", "payments", "th-role", "Invoice 9", { until: "gateway.waiting" });
    await startTurn("alice", "planner", "th-plan-2", "the party");
    const carol = await consoleAs("carol");
    await carol.getByText("Nothing waits for you.").waitFor();
    assert.equal(await carol.locator("#mine .card").count(), 0);
    assert.equal(await carol.locator("#others .card").count(), 0);
    const bob = await consoleAs("bob");
    await bob.locator("#mine .card", { hasText: "Invoice 9" }).waitFor();
    assert.equal(await bob.locator("#mine .card", { hasText: "Which day" }).count(), 0, "Alice's question is hers");
    const alice = await consoleAs("alice");
    await alice.locator("#mine .card", { hasText: "Which day" }).waitFor();
    assert.equal(await alice.locator("#mine .card", { hasText: "Invoice 9" }).count(), 0, "her payment is Bob's to approve");
    await alice.locator("#others .card", { hasText: "wire_money" }).waitFor();
    for (const page of [carol, bob, alice]) await page.context().close();
  });

  await runCase("the console cannot read what the API refuses: another's thread, a redacted note, another tenant", async () => {
    await startTurn("alice", "noter", "th-notes", "Jordan");
    // Carol opening Alice's thread: refused by the API, and nothing of it on the page.
    assert.equal((await call("carol", "GET", "/v1/threads/th-notes?tenant=default")).status, 403);
    const carol = await consoleAs("carol", { hash: "#/threads/default/th-notes" });
    await carol.locator("#thread-error").waitFor();
    assert.match(await carol.locator("#thread-error").textContent(), /permission_denied/);
    assert.ok(!(await carol.content()).includes("Jordan"), "no word of the thread");
    assert.equal(await carol.locator("#audit").count(), 0, "nor its audit trail");
    // Alice reads her thread, but not the note labelled hr: redacted on the page as in the API.
    const alice = await consoleAs("alice", { hash: "#/threads/default/th-notes" });
    await alice.locator(".note.redacted").waitFor();
    await alice.locator(".note", { hasText: "Topic: Jordan" }).waitFor();
    assert.ok(!(await alice.content()).includes("Salary review"), "the redacted note's text never reaches the page");
    // Dora of acme: her inbox holds acme only, and default's thread is refused.
    const dora = await consoleAs("dora", { hash: "#/threads/default/th-notes" });
    await dora.locator("#thread-error").waitFor();
    assert.ok(!(await dora.content()).includes("Jordan"));
    await dora.evaluate(() => { location.hash = "#/inbox"; });
    await dora.getByText("Nothing waits for you.").waitFor();
    assert.equal((await call("dora", "GET", "/v1/interrupts?tenant=default")).status, 403);
    // Erin administers the tenant: Alice's thread's trail (who, what, via), still not its content.
    const erin = await consoleAs("erin", { hash: "#/threads/default/th-notes" });
    await erin.locator("#audit td", { hasText: "run.start" }).waitFor();
    await erin.locator("#audit td", { hasText: "board.read" }).first().waitFor();
    assert.ok((await erin.locator("#audit").textContent()).includes("person:alice"));
    assert.ok(!(await erin.content()).includes("Jordan"), "the trail holds no content");
    await shot(erin, "audit");
    for (const page of [carol, alice, dora, erin]) await page.context().close();
  });

  await runCase("a thread live: conversation, board, a running turn's events, cancel; the list; delete with a confirmation", async () => {
    await startTurn("alice", "slow", "th-slow", "the report", { until: "TEXT_MESSAGE_END" });
    const alice = await consoleAs("alice", { hash: "#/threads/default/th-slow" });
    await alice.locator("#turn-status", { hasText: "running" }).waitFor();
    await alice.locator(".log li", { hasText: "TEXT_MESSAGE_CONTENT" }).first().waitFor();
    await alice.locator(".message.user", { hasText: "the report" }).waitFor();
    await alice.getByRole("button", { name: "Cancel the turn" }).click();
    await alice.locator("#turn-status", { hasText: "cancelled" }).waitFor();
    await alice.locator("#turns li .pill.cancelled").waitFor();
    // A regenerate (the same message, a new run) is a second turn on a new branch: each turn
    // is listed with its own status, the cancelled one on another branch.
    await startTurn("alice", "slow", "th-slow", "the report", { until: "TEXT_MESSAGE_END", runId: "run-2" });
    await alice.evaluate(() => { location.hash = "#/inbox"; });
    await alice.locator("h1", { hasText: "Waiting for you" }).waitFor();
    await alice.evaluate(() => { location.hash = "#/threads/default/th-slow"; });
    await alice.locator("#turns li .pill.running").waitFor();
    const turnRows = await alice.locator("#turns li").allTextContents();
    assert.equal(turnRows.length, 2, `two turns listed: ${turnRows}`);
    assert.match(turnRows[0], /cancelled.*another branch/, "the first turn, cancelled, on another branch");
    assert.match(turnRows[1], /running/, "the regenerated turn runs");
    assert.doesNotMatch(turnRows[1], /another branch/);
    await alice.getByRole("button", { name: "Cancel the turn" }).click();
    await alice.locator("#turns li .pill.running").waitFor({ state: "detached" });

    await alice.evaluate(() => { location.hash = "#/threads/default/th-notes"; });
    await alice.locator(".note", { hasText: "Topic: Jordan" }).waitFor();
    await alice.locator(".message.assistant", { hasText: "Noted." }).waitFor();
    await shot(alice, "thread");

    await alice.evaluate(() => { location.hash = "#/threads?tenant=default"; });
    await alice.locator(".threads li").first().waitFor();
    await alice.selectOption("select[name=status]", "cancelled");
    // The filtered list replaces the whole one: only the cancelled thread stays.
    await alice.locator(".threads li", { hasText: "Jordan" }).waitFor({ state: "detached" });
    assert.deepEqual(await alice.locator(".threads li a").allTextContents(), ["the report"], "the filter keeps the cancelled thread only");
    assert.match(alice.url(), /status=cancelled/, "the filter is in the address");
    await alice.selectOption("select[name=status]", "");
    await alice.locator(".threads li", { hasText: "Jordan" }).waitFor();
    await shot(alice, "threads");

    await alice.locator(".threads li a", { hasText: "the report" }).click();
    await alice.getByRole("button", { name: "Delete thread…" }).click();
    assert.equal((await call("alice", "GET", "/v1/threads/th-slow?tenant=default")).status, 200, "nothing erased before the confirmation");
    await alice.getByRole("button", { name: "Delete for good" }).click();
    await alice.locator("h1", { hasText: "Threads" }).waitFor();
    assert.equal((await call("alice", "GET", "/v1/threads/th-slow?tenant=default")).status, 403, "erased");
    await alice.context().close();
  });

  await runCase("on a phone, by keyboard: j moves to the first card, a approves it", async () => {
    const phone = await consoleAs("bob", { viewport: { width: 390, height: 844 } });
    const card = phone.locator("#mine .card", { hasText: "Invoice 9" });
    await card.waitFor();
    const overflow = await phone.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    assert.ok(overflow <= 0, `nothing wider than the phone (${overflow}px)`);
    await shot(phone, "phone");
    await phone.keyboard.press("j");
    assert.ok(await card.evaluate((el) => el === document.activeElement), "j focuses the first card");
    await phone.keyboard.press("a");
    await phone.locator("#mine .card.done", { hasText: "approved" }).waitFor();
    await phone.context().close();
  });

  await runCase("the pages raised no error and the policy refused nothing", async () => {
    assert.deepEqual(problems, []);
  });
} catch (error) {
  results.push([false, "setting up"]);
  console.log(`FAIL setting up\n${error?.stack ?? error}`);
} finally {
  await browser?.close();
  backend?.stop();
  await gateway?.stop();
}

const failed = results.filter(([ok]) => !ok);
console.log(`${results.length - failed.length} passed, ${failed.length} failed`);
process.exit(failed.length ? 1 : 0);
