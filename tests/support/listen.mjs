// listen.mjs: how the repository's Node test servers (the upstream AG-UI servers, the Mastra
// server, the bench's upstream) start and stop, so each says only what it serves. Node's own
// modules only: any of them may import it, whatever packages it installs.
//
// `startListening(command, args, name)` is the other side, for a test that starts such a server
// (or a Python one printing the same line): it resolves once the server says where it listens.
//
// `serve(server, name)` answers a request handler's failure with a 500 (or drops a response
// already under way), listens on 127.0.0.1 (`--port N`, else a free port), prints
// `listening http://127.0.0.1:<port>` once ready, and ends the process on SIGTERM, SIGINT, or
// when the parent that started it goes away (it closes our stdin).
import { spawn } from "node:child_process";
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

/// Starts `command` with `args`: a server that prints `listening <url>` once ready. Its stdin is
/// a pipe, so it ends when this process does. Resolves to `{ url, child, stop }`; rejects when
/// it exits first or says nothing within 30 s. `name` names it in those errors.
export function startListening(command, args, name) {
  const child = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
  return new Promise((resolve, reject) => {
    let out = "";
    const timer = setTimeout(() => reject(new Error(`${name} did not start`)), 30_000);
    child.stdout.on("data", (d) => {
      out += d.toString();
      const match = /^listening (\S+)\n/.exec(out);
      if (match) {
        clearTimeout(timer);
        resolve({ url: match[1], child, stop: () => child.kill("SIGKILL") });
      }
    });
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`${name} exited with ${code}`));
    });
  });
}
