// A CopilotKit runtime runner whose `connect` reads the thread from the gateway, not from the
// runtime's memory. docs/copilotkit.md shows it as an app would write it; the tests run it.
//
// CopilotKit's default `InMemoryAgentRunner` answers `<CopilotChat>`'s connect (the thread a
// reloaded page asks for) from the events of the runs this runtime process relayed itself: after
// a restart, on another instance, or for turns started elsewhere, the thread comes back empty.
// The gateway holds every thread in its log and streams it on its connect route
// (`POST /v1/agui/agents/{agent}/connect`, docs/api.md): RUN_STARTED, MESSAGES_SNAPSHOT,
// STATE_SNAPSHOT, a running turn live to its end, a waiting turn's interrupt, then every later
// turn. CopilotKit's connect is one replay that ends, so this runner passes the stream on up to
// the end of its opening run and closes it there. Runs go through the in-memory runner as before.
import { InMemoryAgentRunner } from "@copilotkit/runtime/v2";
import { Observable } from "rxjs";

export class GatewayThreadRunner extends InMemoryAgentRunner {
  /**
   * `connectUrl(agentId)`: the gateway's connect route for a runtime agent, e.g.
   * `${GATEWAY}/v1/agui/agents/${agentId}/connect?tenant=acme`.
   * `headers`: sent on every connect (the server's own credential), overriding forwarded ones.
   */
  constructor({ connectUrl, headers = {}, fetch: fetchImpl = (url, init) => fetch(url, init), ...options }) {
    super(options);
    this.connectUrl = connectUrl;
    this.headers = headers;
    this.fetchImpl = fetchImpl;
  }

  connect(request) {
    return new Observable((subscriber) => {
      const abort = new AbortController();
      (async () => {
        const response = await this.fetchImpl(this.connectUrl(request.agentId), {
          method: "POST",
          headers: {
            ...(request.headers ?? {}),
            ...this.headers,
            "content-type": "application/json",
            accept: "text/event-stream",
          },
          // Only threadId matters to the gateway. No protocolVersion: CopilotKit's @ag-ui/client
          // is pre-1.0, and the gateway renders the stream the way it renders CopilotKit's runs.
          body: JSON.stringify({ threadId: request.threadId, runId: `connect-${crypto.randomUUID()}`, messages: [] }),
          signal: abort.signal,
        });
        // A thread the gateway does not show this caller (unknown, another tenant's): nothing
        // to restore, as the in-memory runner answers an unknown thread.
        if (!response.ok || !response.body) {
          await response.body?.cancel();
          subscriber.complete();
          return;
        }
        const decoder = new TextDecoder();
        let buffer = "";
        for await (const chunk of response.body) {
          buffer += decoder.decode(chunk, { stream: true });
          let end;
          while ((end = buffer.indexOf("\n\n")) >= 0) {
            const frame = buffer.slice(0, end);
            buffer = buffer.slice(end + 2);
            const data = frame
              .split("\n")
              .filter((line) => line.startsWith("data:"))
              .map((line) => line.slice(5).replace(/^ /, ""))
              .join("\n");
            if (!data) continue;
            const event = JSON.parse(data);
            subscriber.next(event);
            if (event.type === "RUN_FINISHED" || event.type === "RUN_ERROR") {
              abort.abort();
              subscriber.complete();
              return;
            }
          }
        }
        subscriber.complete();
      })().catch((error) => {
        if (!abort.signal.aborted) subscriber.error(error);
      });
      return () => abort.abort();
    });
  }
}
