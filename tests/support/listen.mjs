// listen.mjs: how the repository's Node test servers (the upstream AG-UI servers, the Mastra
// server, the bench's upstream) start and stop, so each says only what it serves. Node's own
// modules only: any of them may import it, whatever packages it installs.
//
// `serve(server, name)` answers a request handler's failure with a 500 (or drops a response
// already under way), listens on 127.0.0.1 (`--port N`, else a free port), prints
// `listening http://127.0.0.1:<port>` once ready, and ends the process on SIGTERM, SIGINT, or
// when the parent that started it goes away (it closes our stdin).
import fs from "node:fs";
import http from "node:http";

export function portOf(argv) {
  const at = argv.indexOf("--port");
  if (at < 0) return 0;
  const port = Number(argv[at + 1]);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    console.error(`--port needs a number, got ${argv[at + 1]}`);
    process.exit(2);
  }
  return port;
}

/// An HTTP server for `handle(req, res)` (async), started and stopped as above.
export function serve(handle, name, { keepAliveTimeout } = {}) {
  const server = http.createServer((req, res) => {
    handle(req, res).catch((e) => {
      console.error(`${name}: ${req.method} ${req.url}: ${e.stack ?? e}`);
      if (!res.headersSent) {
        res.writeHead(500, { "Content-Type": "application/json" });
        res.end(JSON.stringify({ error: "internal" }));
      } else {
        res.destroy();
      }
    });
  });
  if (keepAliveTimeout) server.keepAliveTimeout = keepAliveTimeout;
  const shutdown = () => {
    server.close();
    server.closeAllConnections();
    process.exit(0);
  };
  process.on("SIGTERM", shutdown);
  process.on("SIGINT", shutdown);
  // A parent that dies without signalling closes our stdin. Only a pipe or socket is watched:
  // a terminal or /dev/null as stdin (a shell, CI) must not end the server at once.
  const stdin = fs.fstatSync(0);
  if (stdin.isFIFO() || stdin.isSocket()) {
    process.stdin.on("end", shutdown);
    process.stdin.on("close", shutdown);
    process.stdin.resume();
  }
  server.listen(portOf(process.argv), "127.0.0.1", () => {
    process.stdout.write(`listening http://127.0.0.1:${server.address().port}\n`);
  });
  return server;
}
