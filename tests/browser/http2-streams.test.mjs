#!/usr/bin/env node
// Fifty SSE runs at once from one page in headless Chromium, over HTTPS with HTTP/2. Over
// HTTP/1.1 Chromium holds at most 6 connections per origin, so the 7th stream would wait for
// one of the first six to end; over HTTP/2 all fifty share one connection.
//
//   npm ci --prefix tests/browser
//   node tests/browser/http2-streams.test.mjs
//
// Needs a built gateway (AGUI_GATEWAY_BIN, else target/debug/agui-gateway), Chromium
// (CHROMIUM_PATH, else /usr/bin/chromium) and openssl (examples/tls/make-test-ca.sh makes the
// certificate). Chromium trusts the test certificate by its public key
// (--ignore-certificate-errors-spki-list), nothing else. The page opens 50 `waiter` runs (each
// says one answer, then waits); all 50 must have their answer while every one is still open;
// then each is cancelled and every stream must end with RUN_FINISHED `cancelled`. Every
// request must have gone over h2 (the page's resource timing and the gateway's request log).
// Stays under the per-caller stream limit (limits.max_streams_per_caller, 64 by default).
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { createHash, X509Certificate } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { startGateway } from "../clients/lib/gateway.mjs";

const STREAMS = 50;
const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const chromiumPath = process.env.CHROMIUM_PATH || "/usr/bin/chromium";

const certDir = mkdtempSync(path.join(tmpdir(), "agui-h2-"));
execFileSync(path.join(repoRoot, "examples/tls/make-test-ca.sh"), [certDir, "127.0.0.1"]);
const chain = readFileSync(path.join(certDir, "server.crt"), "utf8");
const leaf = new X509Certificate(chain.slice(0, chain.indexOf("-----END CERTIFICATE-----") + 25));
const spkiHash = createHash("sha256").update(leaf.publicKey.export({ type: "spki", format: "der" })).digest("base64");

const config =
  `[tls]\ncert_file = ${JSON.stringify(path.join(certDir, "server.crt"))}\n` +
  `key_file = ${JSON.stringify(path.join(certDir, "server.key"))}\n\n` +
  readFileSync(path.join(repoRoot, "tests/fixtures/agents.toml"), "utf8");

// `read()`'s value once `done` says it is complete, or its last value after `patience` ms (the
// assertion that follows says what is missing).
async function eventually(read, done, patience = 10_000) {
  const started = Date.now();
  for (;;) {
    const value = await read();
    if (done(value) || Date.now() - started > patience) return value;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

let gateway;
let browser;
let failed = false;
try {
  gateway = await startGateway({ configToml: config, env: { AGUI_GATEWAY_BIN: undefined } });
  assert.match(gateway.url, /^https:\/\//, "the gateway serves HTTPS");
  browser = await chromium.launch({
    executablePath: chromiumPath,
    headless: true,
    args: ["--no-sandbox", `--ignore-certificate-errors-spki-list=${spkiHash}`],
  });
  const page = await browser.newPage();
  // Same origin as the runs: no CORS involved.
  const home = await page.goto(`${gateway.url}/livez`);
  assert.equal(home.status(), 200);

  await page.evaluate((count) => {
    window.answered = 0;
    window.threadIds = [];
    const run = async (i) => {
      const threadId = `th-h2-${i}-${crypto.randomUUID()}`;
      window.threadIds.push(threadId);
      const input = {
        threadId,
        runId: "run-1",
        protocolVersion: "1.0",
        state: {},
        messages: [{ id: `${threadId}-user`, role: "user", content: `stream ${i}` }],
        tools: [],
        context: [],
        forwardedProps: {},
      };
      const response = await fetch("/v1/agui/agents/waiter", {
        method: "POST",
        headers: { "content-type": "application/json", accept: "text/event-stream" },
        body: JSON.stringify(input),
      });
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let text = "";
      let counted = false;
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        text += decoder.decode(value, { stream: true });
        if (!counted && text.includes('"type":"TEXT_MESSAGE_END"')) {
          counted = true;
          window.answered += 1;
        }
      }
      return { threadId, status: response.status, text };
    };
    window.runs = Promise.all(Array.from({ length: count }, (_, i) => run(i)));
  }, STREAMS);

  // All fifty have their answer while every one of them is still open.
  const started = Date.now();
  let answered = 0;
  while (answered < STREAMS) {
    answered = await page.evaluate(() => window.answered);
    if (Date.now() - started > 30_000) assert.fail(`only ${answered} of ${STREAMS} streams got their answer within 30 s`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const open = await page.evaluate(() => window.answered);
  console.log(`PASS ${open} streams open at once, each with its answer (${Date.now() - started} ms)`);

  // Cancel each turn: every stream ends with its run's RUN_FINISHED, cancelled.
  const cancels = await page.evaluate(() =>
    Promise.all(window.threadIds.map(async (id) => (await fetch(`/v1/threads/${id}/cancel`, { method: "POST" })).status)),
  );
  assert.deepEqual([...new Set(cancels)], [202], `cancel answers: ${cancels}`);
  const runs = await page.evaluate(() => window.runs);
  assert.equal(runs.length, STREAMS);
  for (const run of runs) {
    assert.equal(run.status, 200, run.threadId);
    const events = run.text
      .split("\n")
      .filter((line) => line.startsWith("data: "))
      .map((line) => JSON.parse(line.slice(6)));
    assert.equal(events[0]?.type, "RUN_STARTED", `${run.threadId}: ${run.text.slice(0, 200)}`);
    assert.equal(events[0].threadId, run.threadId);
    assert.ok(events.some((e) => e.type === "TEXT_MESSAGE_END"), run.threadId);
    assert.equal(events.at(-1)?.type, "RUN_FINISHED", `${run.threadId} ends with ${events.at(-1)?.type}`);
    assert.deepEqual(events.at(-1).outcome, { type: "cancelled" });
  }
  console.log(`PASS ${runs.length} runs received whole, each ended by its cancel`);

  // Every request went over h2: as the page saw it, and as the gateway served it. The page
  // records a request's timing entry a while after its response ended, and the gateway's log
  // lines arrive through a pipe: wait until both hold every request (the page, then a run and
  // a cancel a stream) before counting.
  const requests = 1 + 2 * STREAMS;
  const protocols = await eventually(
    () =>
      page.evaluate(() =>
        [...performance.getEntriesByType("navigation"), ...performance.getEntriesByType("resource")].map(
          (e) => e.nextHopProtocol,
        ),
      ),
    (entries) => entries.length >= requests,
  );
  assert.ok(protocols.length >= requests, `resource entries: ${protocols.length}`);
  assert.deepEqual([...new Set(protocols)], ["h2"], `protocols the page used: ${[...new Set(protocols)]}`);
  const served = await eventually(
    () => gateway.logs.filter((l) => l.includes("finished processing request")),
    (lines) => lines.length >= requests,
  );
  const h2 = served.filter((l) => l.includes("version=HTTP/2.0"));
  assert.ok(served.length >= requests && h2.length === served.length, `${h2.length} of ${served.length} requests served as HTTP/2`);
  console.log(`PASS every request over h2 (${protocols.length} in the page, ${h2.length} in the gateway's log)`);
} catch (error) {
  failed = true;
  console.log(`FAIL ${error.stack ?? error}`);
} finally {
  await browser?.close();
  await gateway?.stop();
  rmSync(certDir, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
