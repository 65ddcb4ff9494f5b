// The stack a CopilotKit app puts in front of the gateway, for the tests in this folder: a real
// gateway process (tests/clients/lib/gateway.mjs) with app tokens switched on, and a real
// `@copilotkit/runtime` v2 endpoint on a loopback port whose agents are `HttpAgent`s pointed at
// the gateway's AG-UI route. Nothing here fakes CopilotKit or the gateway.
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { createServer } from "node:http";
import { CHAT_AGENTS_TOML, startGatewayWithAppTokens } from "../clients/lib/gateway.mjs";
import { startListening } from "../support/listen.mjs";

// Read by CopilotKit's telemetry client when its module loads, so it is set before the
// runtime is imported below (an app sets it in its environment).
process.env.COPILOTKIT_TELEMETRY_DISABLED = "true";

const { CopilotRuntime } = await import("@copilotkit/runtime/v2");
const { createCopilotNodeListener } = await import("@copilotkit/runtime/v2/node");
const { HttpAgent } = await import("@ag-ui/client");
const { GatewayThreadRunner } = await import("./gateway-runner.mjs");

/**
 * The LangGraph graph of tests/frameworks/langgraph (ag-ui-langgraph on a scripted fake model),
 * started for the `graph` agent. Resolves to `{ url, stop }` once it listens.
 */
async function startLangGraph() {
  const python = fileURLToPath(new URL("../frameworks/langgraph/.venv/bin/python", import.meta.url));
  if (!existsSync(python)) {
    throw new Error("create tests/frameworks/langgraph/.venv (scripts/test and scripts/test-clients do)");
  }
  const server = fileURLToPath(new URL("../frameworks/langgraph/server.py", import.meta.url));
  return startListening(python, [server], "the LangGraph server");
}

export const GATEWAY_CONFIG = `
[[tenants]]
name = "default"
${CHAT_AGENTS_TOML}`;

/**
 * Every request this process makes to a host that is not loopback. The tests assert it stays
 * empty: with telemetry disabled the runtime must not phone home, and the gateway is local.
 */
export const outboundRequests = [];
const loopback = new Set(["127.0.0.1", "localhost", "[::1]", "::1"]);
const realFetch = globalThis.fetch;
globalThis.fetch = (input, init) => {
  const url = new URL(typeof input === "string" || input instanceof URL ? input : input.url);
  if (!loopback.has(url.hostname)) {
    outboundRequests.push(url.origin);
    return Promise.reject(new Error(`refused outbound request to ${url.origin}`));
  }
  return realFetch(input, init);
};

/**
 * What the runtime's `HttpAgent`s sent to the gateway and what came back, one entry per request:
 * `{ agent, body, status, events, read }` (`read` settles once `events` is filled). When
 * CopilotKit and the gateway disagree, this is the exact exchange to look at.
 */
export const gatewayExchanges = [];
function recordingFetch(agent) {
  return async (url, init) => {
    const response = await globalThis.fetch(url, init);
    const entry = { agent, body: JSON.parse(init.body), status: response.status, events: [] };
    gatewayExchanges.push(entry);
    entry.read = response
      .clone()
      .text()
      .then((text) => {
        entry.events = text
          .split("\n\n")
          .flatMap((frame) => frame.split("\n").filter((line) => line.startsWith("data:")))
          .map((line) => JSON.parse(line.slice(5)));
      })
      .catch(() => {});
    return response;
  };
}

/**
 * Starts the gateway and a CopilotKit runtime in front of it. The runtime registers:
 * - `helper`: the gateway's text agent, with the gateway credential set on the server side;
 * - `mailer`: the gateway's approval agent, with no credential of its own, so the one the
 *   browser sends (`Authorization`) is forwarded to the gateway by CopilotKit's default
 *   header policy: the person who answers the approval is the person who asked;
 * - `graph`: the gateway's `agui` agent in front of a LangGraph graph (ag-ui-langgraph,
 *   tests/frameworks/langgraph), which admits the page's frontend tool `show_city`.
 * A second runtime with the same agents answers connects from the gateway (GatewayThreadRunner,
 * gateway-runner.mjs) instead of from its own memory: `restoringRuntimeUrl`.
 * Returns `{ gateway, runtimeUrl, restoringRuntimeUrl, tokens: { server, person }, stop }`.
 */
export async function startStack() {
  const langgraph = await startLangGraph();
  // `graph`: the gateway's `agui` agent in front of the LangGraph graph, admitting the page's
  // frontend tool `show_city`.
  const graphAgent = `
[[agents]]
name = "graph"
kind = "agui"
title = "Graph"
url = "${langgraph.url}/agent"
timeout_secs = 20
frontend_tools = ["show_city"]
`;
  const { gateway, mint } = await startGatewayWithAppTokens({ configToml: GATEWAY_CONFIG + graphAgent });
  const tokens = { server: mint("app-server"), person: mint("alice") };
  const agentUrl = (name) => `${gateway.url}/v1/agui/agents/${name}?tenant=default`;

  const agents = () => ({
    helper: new HttpAgent({
      url: agentUrl("helper"),
      headers: { Authorization: `Bearer ${tokens.server}` },
      fetch: recordingFetch("helper"),
    }),
    mailer: new HttpAgent({ url: agentUrl("mailer"), fetch: recordingFetch("mailer") }),
    graph: new HttpAgent({
      url: agentUrl("graph"),
      headers: { Authorization: `Bearer ${tokens.server}` },
      fetch: recordingFetch("graph"),
    }),
  });
  const servers = [];
  const serve = async (runtime) => {
    const listener = createCopilotNodeListener({ runtime, basePath: "/api/copilotkit" });
    const server = createServer((req, res) => listener(req, res));
    await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
    servers.push(server);
    return `http://127.0.0.1:${server.address().port}/api/copilotkit`;
  };
  const runtimeUrl = await serve(new CopilotRuntime({ agents: agents() }));
  const restoringRuntimeUrl = await serve(
    new CopilotRuntime({
      agents: agents(),
      runner: new GatewayThreadRunner({
        connectUrl: (agentId) => `${gateway.url}/v1/agui/agents/${agentId}/connect?tenant=default`,
      }),
    }),
  );

  const stop = async () => {
    for (const server of servers) {
      server.closeAllConnections?.();
      await new Promise((resolve) => server.close(resolve));
    }
    await gateway.stop();
    langgraph.stop();
  };
  return { gateway, runtimeUrl, restoringRuntimeUrl, tokens, stop };
}
