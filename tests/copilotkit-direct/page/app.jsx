// A CopilotKit app whose runtimeUrl is the gateway itself: three lines of provider and chat,
// plus the hooks a real app adds (a frontend tool, an approval through useInterrupt, a thread
// list through useThreads) and, for the `surface` agent, A2UI surfaces drawn by
// @copilotkit/a2ui-renderer. Built by run.mjs with esbuild; the test drives it in Chromium and
// reads `window.page` to look inside.
import React, { useEffect } from "react";
import { createRoot } from "react-dom/client";
import {
  CopilotChat,
  CopilotKitProvider,
  useAgent,
  useCopilotKit,
  useFrontendTool,
  useInterrupt,
  useThreads,
} from "@copilotkit/react-core/v2";
import "@copilotkit/react-core/v2/styles.css";
import { basicCatalog } from "@copilotkit/a2ui-renderer";
import { z } from "zod";

const params = new URLSearchParams(location.search);
const runtimeUrl = params.get("runtime");
const token = params.get("token");
const agentId = params.get("agent") ?? "demo";
const threadId = params.get("thread") ?? undefined;

window.page = { toolCalls: [] };

// A2UI surfaces: the gateway's runtime info says `a2uiEnabled: false` (it runs no A2UI middleware
// of its own), so the provider draws `a2ui-surface` activity only for a page that hands it a
// catalog, as an app using the renderer does. Only for the agent that draws one: the catalog also
// goes to the agent as context on every run.
const a2ui = agentId === "surface" ? { catalog: basicCatalog } : undefined;

/** The page's own tool: the agent asks, the page answers. */
function ConfirmTool() {
  useFrontendTool({
    name: "confirm_dialog",
    description: "Ask the person to confirm.",
    parameters: z.object({ question: z.string() }),
    handler: async ({ question }) => {
      window.page.toolCalls.push(question);
      return "yes, go ahead";
    },
  });
  return null;
}

/**
 * An approval: the gateway's interrupt, answered with its `resume` in a new run (Approve), or
 * with useInterrupt's own `resolve()` (Resolve, Deny), which resumes on the run that asked. (Its
 * `cancel()` only hides an interrupt of CopilotKit's pre-1.0 client: a denial is a resolve.)
 */
function Approvals() {
  const { copilotkit } = useCopilotKit();
  const { agent } = useAgent({ agentId });
  useInterrupt({
    agentId,
    render: ({ event, resolve }) => (
      <div data-testid="interrupt">
        <p>{event.value.message}</p>
        <button
          onClick={() =>
            copilotkit.runAgent({
              agent,
              resume: [{ interruptId: event.value.id, status: "resolved", payload: { approved: true } }],
            })
          }
        >
          Approve
        </button>
        <button onClick={() => resolve({ approved: true })}>Resolve</button>
        <button onClick={() => resolve({ approved: false })}>Deny</button>
      </div>
    ),
  });
  return null;
}

/** The person's threads, as useThreads lists them. */
function Threads() {
  const threads = useThreads({ agentId, includeArchived: params.get("archived") === "true" });
  useEffect(() => {
    window.page.threads = threads;
  });
  return (
    <ul data-testid="threads" data-loading={String(threads.isLoading)}>
      {threads.threads.map((thread) => (
        <li key={thread.id} data-thread={thread.id} data-archived={String(!!thread.archived)}>
          {thread.name ?? "Untitled"}
        </li>
      ))}
    </ul>
  );
}

/** What the test reads: the agent's messages and whether it runs. */
function Probe() {
  const { copilotkit } = useCopilotKit();
  const { agent } = useAgent({ agentId });
  useEffect(() => {
    window.page.copilotkit = copilotkit;
    window.page.agent = agent;
  });
  return null;
}

function App() {
  return (
    <CopilotKitProvider runtimeUrl={runtimeUrl} headers={{ Authorization: `Bearer ${token}` }} a2ui={a2ui}>
      {/* Only for the agent that admits it: a client tool an agent does not list under
          `frontend_tools` makes the gateway refuse the run (400 tool_not_admitted). */}
      {agentId === "checker" ? <ConfirmTool /> : null}
      <Approvals />
      <Probe />
      {params.get("threads") === "1" ? <Threads /> : null}
      <div style={{ height: "600px" }}>
        <CopilotChat agentId={agentId} threadId={threadId} />
      </div>
    </CopilotKitProvider>
  );
}

createRoot(document.getElementById("root")).render(<App />);
