// A TCP relay in front of a gateway that can cut one response mid-stream, as a dropped network
// would: the browser suites point a page (or a backend) at it instead of the gateway.
import net from "node:net";

/**
 * A TCP relay between the backend and the gateway that can cut one response mid-stream: after
 * `arm(marker, count)`, the connection whose gateway bytes bring the `count`-th `marker` is
 * closed half-way through that chunk, as a dropped network would. It also records every
 * `Last-Event-ID` request header that passes.
 */
export async function startCuttingRelay(targetUrl) {
  const target = new URL(targetUrl);
  const seen = { lastEventIds: [], cuts: 0 };
  let plan = null;
  const sockets = new Set();
  const server = net.createServer((client) => {
    const upstream = net.connect(Number(target.port), target.hostname);
    sockets.add(client).add(upstream);
    const closeBoth = () => {
      client.destroy();
      upstream.destroy();
    };
    client.on("data", (data) => {
      const header = /\r\nlast-event-id:\s*([^\r\n]+)/i.exec(data.toString("latin1"));
      if (header) seen.lastEventIds.push(header[1].trim());
      upstream.write(data);
    });
    upstream.on("data", (data) => {
      if (plan) {
        plan.seen += data.toString("utf8").split(plan.marker).length - 1;
        if (plan.seen >= plan.count) {
          plan = null;
          seen.cuts += 1;
          client.write(data.subarray(0, Math.floor(data.length / 2)), closeBoth);
          return;
        }
      }
      client.write(data);
    });
    for (const socket of [client, upstream]) {
      socket.on("error", closeBoth);
      socket.on("close", () => {
        sockets.delete(socket);
        closeBoth();
      });
    }
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    seen,
    arm(marker, count) {
      plan = { marker, count, seen: 0 };
    },
    stop() {
      for (const socket of sockets) socket.destroy();
      server.close();
    },
  };
}
