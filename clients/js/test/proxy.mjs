// A TCP proxy for the reconnect tests: it forwards bytes between a client and the gateway and,
// when told to, drops a connection after a given number of response bytes, destroying both
// sockets the way a broken network or a restarting load balancer would. It records what each
// connection asked (its Last-Event-ID and body) and how many response bytes it passed, so a test
// can prove the cuts happened where it meant them to.
import net from "node:net";

/**
 * Starts the proxy in front of `target` (an http://host:port URL).
 *
 * `cutPlan(index)` says how the index-th connection (from 0) ends: undefined lets it run;
 * a number cuts it after that many response bytes in total; `{ afterHead: k }` cuts it k bytes
 * after the end of the response head (so the client has its 200 but not yet a whole event).
 */
export async function startCuttingProxy(target, cutPlan = () => undefined) {
  const upstreamUrl = new URL(target);
  const connections = [];
  const sockets = new Set();
  const server = net.createServer((client) => {
    const record = {
      index: connections.length,
      request: Buffer.alloc(0),
      response: [],
      responseBytes: 0,
      responseHeadBytes: undefined,
      cut: false,
      plan: undefined,
    };
    record.plan = cutPlan(record.index);
    connections.push(record);
    const upstream = net.connect(Number(upstreamUrl.port), upstreamUrl.hostname);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on("close", () => sockets.delete(socket));
      // A destroyed peer shows up as ECONNRESET or EPIPE here; the cut is on purpose.
      socket.on("error", () => {});
    }

    client.on("data", (chunk) => {
      record.request = Buffer.concat([record.request, chunk]);
      upstream.write(chunk);
    });
    client.on("end", () => upstream.end());
    upstream.on("end", () => client.end());
    client.on("close", () => upstream.destroy());
    upstream.on("close", () => client.destroy());

    let head = Buffer.alloc(0);
    upstream.on("data", (chunk) => {
      if (record.cut) return;
      if (record.responseHeadBytes === undefined) {
        head = Buffer.concat([head, chunk]);
        const end = head.indexOf("\r\n\r\n");
        if (end >= 0) record.responseHeadBytes = end + 4;
      }
      const limit = cutLimit(record);
      if (limit !== undefined && record.responseBytes + chunk.length >= limit) {
        const keep = Math.max(0, limit - record.responseBytes);
        record.responseBytes += keep;
        record.response.push(chunk.subarray(0, keep));
        record.cut = true;
        upstream.destroy();
        // The bytes before the cut are flushed first, so the client really holds a partial
        // response when its connection goes.
        client.write(chunk.subarray(0, keep), () => client.destroy());
        return;
      }
      record.responseBytes += chunk.length;
      record.response.push(chunk);
      client.write(chunk);
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}`,
    connections,
    /** How many connections the proxy cut. */
    get cuts() {
      return connections.filter((c) => c.cut).length;
    },
    async close() {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

function cutLimit(record) {
  const plan = record.plan;
  if (plan === undefined) return undefined;
  if (typeof plan === "number") return plan;
  // A cut relative to the head waits until the head has been seen.
  if (record.responseHeadBytes === undefined) return undefined;
  return record.responseHeadBytes + plan.afterHead;
}

/**
 * The ids of the events a connection passed whole (`id:` line, `data:` line, blank line), and
 * the id of an event it passed only part of, if it was cut inside one after that event's id line.
 */
export function eventsPassed(record) {
  const text = Buffer.concat(record.response).toString("utf8");
  const whole = [...text.matchAll(/^id: (\S+)\ndata: [^\n]*\n\n/gm)].map((m) => m[1]);
  const lastIdLine = [...text.matchAll(/^id: (\S+)$/gm)].at(-1)?.[1];
  return { whole, partial: lastIdLine !== whole.at(-1) ? lastIdLine : undefined };
}

/** The Last-Event-ID header a recorded request carried, or undefined. */
export function lastEventIdOf(record) {
  const head = requestHead(record);
  const match = head.match(/^last-event-id:[ \t]*(.*?)[ \t]*$/im);
  return match ? match[1] : undefined;
}

/** The body of a recorded request (HttpAgent sends it with a Content-Length). */
export function requestBodyOf(record) {
  const end = record.request.indexOf("\r\n\r\n");
  const head = requestHead(record);
  const length = Number(head.match(/^content-length:[ \t]*(\d+)/im)?.[1] ?? 0);
  return record.request.subarray(end + 4, end + 4 + length).toString("utf8");
}

function requestHead(record) {
  const end = record.request.indexOf("\r\n\r\n");
  return record.request.subarray(0, end < 0 ? record.request.length : end).toString("latin1");
}
