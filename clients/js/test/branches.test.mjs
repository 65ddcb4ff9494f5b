// regenerate(), edit() and loadBranch() against a real gateway: a Regenerate button gets another
// answer on a new branch, an edit answers the new words, and "‹ 1 / 2 ›" opens the old branch,
// from which the conversation goes on. Every run goes through the official @ag-ui/client
// pipeline (enforcement, verification, the reducer).
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { ResumableHttpAgent, loadBranch } from "@agui-gateway/resumable-client";
import { startGateway } from "../../../tests/clients/lib/gateway.mjs";

const CONFIG = `
[[tenants]]
name = "default"

[[agents]]
name = "demo"
kind = "script"
steps = [ { say = "You said: {input}" } ]
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

function agentFor(threadId) {
  return new ResumableHttpAgent({ url: `${gateway.url}/v1/agui/agents/demo?tenant=default`, threadId });
}

const answers = (agent) => agent.messages.filter((m) => m.role === "assistant");
const users = (agent) => agent.messages.filter((m) => m.role === "user").map((m) => m.content);

test("regenerate() gets another answer on a new branch, and the old one stays", async () => {
  const threadId = `regen-${randomUUID()}`;
  const agent = agentFor(threadId);
  agent.addMessage({ id: "u1", role: "user", content: "hello" });
  await agent.runAgent();
  const [first] = answers(agent);
  await agent.regenerate();
  const [second] = answers(agent);
  assert.equal(answers(agent).length, 1, "the old answer is no longer shown");
  assert.notEqual(second.id, first.id, "another answer, not a replay");
  const branch = await loadBranch(threadId, options);
  assert.deepEqual([branch.alternatives[0].index, branch.alternatives[0].count], [2, 2]);
  const old = await loadBranch(threadId, { ...options, turn: branch.alternatives[0].turns[0].head });
  assert.equal(old.current, false);
  assert.ok(old.messages.some((m) => m.id === first.id), "the first answer is one click away");
});

test("edit() answers the new words, and the old branch goes on when opened", async () => {
  const threadId = `edit-${randomUUID()}`;
  const agent = agentFor(threadId);
  agent.addMessage({ id: "u1", role: "user", content: "first" });
  await agent.runAgent();
  agent.addMessage({ id: "u2", role: "user", content: "second" });
  await agent.runAgent();
  await agent.edit("u2", "second, edited");
  assert.deepEqual(users(agent), ["first", "second, edited"]);
  assert.match(answers(agent).at(-1).content, /second, edited/);

  const current = await loadBranch(threadId, options);
  assert.deepEqual([current.alternatives[1].index, current.alternatives[1].count], [2, 2]);
  // "‹": open the first alternative and go on from it.
  const other = await loadBranch(threadId, { ...options, turn: current.alternatives[1].turns[0].head });
  agent.setMessages(other.messages);
  agent.addMessage({ id: "u3", role: "user", content: "third" });
  await agent.runAgent();
  const now = await loadBranch(threadId, options);
  assert.deepEqual(
    now.messages.filter((m) => m.role === "user").map((m) => m.content),
    ["first", "second", "third"],
    "the opened branch went on and is the current one",
  );
});
