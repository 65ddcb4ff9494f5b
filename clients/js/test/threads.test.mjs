// listThreads() and deleteThread() against a real gateway: a sidebar's pages of conversations,
// newest first, its filters, and erasing one (refused while its turn waits for a decision).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { listThreads, deleteThread } from "@agui-gateway/resumable-client";
import { startGateway } from "../../../tests/clients/lib/gateway.mjs";

const CONFIG = `
[[tenants]]
name = "default"

[[agents]]
name = "demo"
kind = "script"
steps = [ { say = "You said: {input}" } ]

[[agents]]
name = "approver"
kind = "script"
steps = [ { tool = "send_email", result = "sent", approval = "always" }, { say = "Sent." } ]
`;

let gateway;
let options;

before(async () => {
  gateway = await startGateway({ configToml: CONFIG, env: { AGUI_GATEWAY_BIN: undefined } });
  options = { baseUrl: gateway.url, tenant: "default" };
});

after(async () => {
  await gateway?.stop();
});

/** Runs a first turn on `threadId` and reads its stream to the end. */
async function firstTurn(agent, threadId, text) {
  const runId = `run-${randomUUID()}`;
  const response = await fetch(`${gateway.url}/v1/agui/agents/${agent}?tenant=default`, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "text/event-stream" },
    body: JSON.stringify({
      threadId,
      runId,
      protocolVersion: "1.0",
      messages: [{ id: `${runId}-user`, role: "user", content: text }],
      tools: [],
      context: [],
      state: {},
      forwardedProps: {},
    }),
  });
  assert.equal(response.status, 200);
  await response.text();
}

test("listThreads pages through the caller's threads newest first, and deleteThread erases one", async () => {
  const made = [];
  for (let n = 0; n < 5; n++) {
    const threadId = `sidebar-${n}-${randomUUID()}`;
    await firstTurn("demo", threadId, `question ${n}`);
    made.push(threadId);
  }
  const waiting = `waiting-${randomUUID()}`;
  await firstTurn("approver", waiting, "mail the team");

  const seen = [];
  let cursor;
  let pages = 0;
  do {
    const page = await listThreads({ ...options, limit: 2, cursor, agent: "demo" });
    seen.push(...page.threads.map((thread) => thread.id));
    cursor = page.nextCursor ?? undefined;
    pages += 1;
  } while (cursor);
  assert.equal(pages, 3);
  assert.deepEqual(seen, [...made].reverse(), "every demo thread once, newest first");

  const [newest] = (await listThreads({ ...options, limit: 1, agent: "demo" })).threads;
  assert.equal(newest.title, "question 4");
  assert.equal(newest.status, "succeeded");
  assert.match(newest.updatedAt, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);

  const onlyWaiting = await listThreads({ ...options, status: "waiting" });
  assert.deepEqual(onlyWaiting.threads.map((thread) => thread.id), [waiting]);
  assert.equal(onlyWaiting.nextCursor, null);

  await deleteThread(made[0], options);
  const left = (await listThreads(options)).threads.map((thread) => thread.id);
  assert.ok(!left.includes(made[0]) && left.includes(made[1]), "the deleted thread is gone");

  // A thread whose turn waits for a decision is erased too: the gateway cancels the turn first.
  await deleteThread(waiting, options);
  const afterWaiting = (await listThreads(options)).threads.map((thread) => thread.id);
  assert.ok(!afterWaiting.includes(waiting), "the waiting thread is gone");
  assert.deepEqual((await listThreads({ ...options, status: "waiting" })).threads, []);
  await assert.rejects(deleteThread(made[0], options), (error) => error.status === 403);
  await assert.rejects(listThreads({ ...options, cursor: "not-a-cursor" }), (error) => {
    assert.equal(error.status, 400);
    assert.equal(error.payload.error.code, "bad_request");
    return true;
  });
});
