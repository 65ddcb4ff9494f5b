// CopilotKit runtime (v2) as a benchmark peer (see BENCHMARKS.md).
//
// `CopilotRuntime` with its default in-memory agent runner and one stub agent, served by the
// runtime's own Node listener at POST /api/copilotkit/agent/bench/run. The stub emits the same
// events the gateway's `script` agent appends for the bench scenarios, from memory (nothing
// durable). What to stream comes from `forwardedProps.bench`:
//   {"burst": N, "bytes": B}  one message of N TEXT_MESSAGE_CONTENT events, as fast as possible
//                             (yielding to the event loop every 100 events);
//   {"tick": N, "everyMs": M} N CUSTOM `gateway.tick` events, one every M ms, each carrying
//                             {"n", "madeAtUs"} for append→receive latency.
// Run: COPILOTKIT_TELEMETRY_DISABLED=true node copilotkit_peer.mjs [--port N]
// It listens on 127.0.0.1 (a free port without --port) and prints
// `listening http://127.0.0.1:<port>` once the listener is bound: whoever starts it reads the
// port from that line instead of polling.

import { createServer } from "node:http";
import { setImmediate as yieldToLoop } from "node:timers/promises";
import { AbstractAgent, EventType } from "@ag-ui/client";
import { Observable } from "rxjs";
import { CopilotRuntime, InMemoryAgentRunner } from "@copilotkit/runtime/v2";
import { createCopilotNodeListener } from "@copilotkit/runtime/v2/node";

const nowUs = () => Number(process.hrtime.bigint() / 1000n) + clockOffsetUs;
// hrtime is monotonic; anchor it to the wall clock once so madeAtUs compares with the client's.
const clockOffsetUs = Date.now() * 1000 - Number(process.hrtime.bigint() / 1000n);

class BenchAgent extends AbstractAgent {
  clone() {
    return new BenchAgent();
  }

  run(input) {
    return new Observable((subscriber) => {
      let stopped = false;
      const bench = (input.forwardedProps && input.forwardedProps.bench) || {};
      const emit = (event) => subscriber.next(event);
      (async () => {
        emit({ type: EventType.RUN_STARTED, threadId: input.threadId, runId: input.runId });
        if (bench.burst !== undefined) {
          const messageId = `${input.runId}:m1`;
          const delta = "x".repeat(Math.max(1, bench.bytes ?? 64));
          emit({ type: EventType.TEXT_MESSAGE_START, messageId, role: "assistant" });
          for (let i = 0; i < bench.burst && !stopped; i++) {
            emit({ type: EventType.TEXT_MESSAGE_CONTENT, messageId, delta });
            if (i % 100 === 99) await yieldToLoop();
          }
          emit({ type: EventType.TEXT_MESSAGE_END, messageId });
        } else if (bench.tick !== undefined) {
          const every = bench.everyMs ?? 100;
          for (let n = 0; n < bench.tick && !stopped; n++) {
            if (n > 0) await new Promise((resolve) => setTimeout(resolve, every));
            emit({
              type: EventType.CUSTOM,
              name: "gateway.tick",
              value: { n, madeAtUs: nowUs() },
            });
          }
        }
        emit({ type: EventType.RUN_FINISHED, threadId: input.threadId, runId: input.runId });
        subscriber.complete();
      })().catch((error) => subscriber.error(error));
      return () => {
        stopped = true;
      };
    });
  }
}

const at = process.argv.indexOf("--port");
const port = at < 0 ? 0 : Number(process.argv[at + 1]);
const runtime = new CopilotRuntime({
  agents: { bench: new BenchAgent() },
  runner: new InMemoryAgentRunner(),
});
const listener = createCopilotNodeListener({ runtime, basePath: "/api/copilotkit" });
const server = createServer((request, response) => {
  if (request.url === "/livez") {
    response.writeHead(200, { "content-type": "application/json" });
    response.end('{"ok":true}');
    return;
  }
  listener(request, response);
});
server.keepAliveTimeout = 120_000;
server.listen(port, "127.0.0.1", () => {
  process.stdout.write(`listening http://127.0.0.1:${server.address().port}\n`);
});
