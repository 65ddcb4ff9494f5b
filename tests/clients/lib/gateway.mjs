// Starts a real gateway process for a client test: its own config, its own SQLite file, a
// random loopback port. Every Node suite uses this so each one judges the same binary the
// Rust tests built (`AGUI_GATEWAY_BIN`, else `target/debug/agui-gateway`).
import { execFileSync, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../../..");

export function gatewayBinary() {
  return process.env.AGUI_GATEWAY_BIN || path.join(repoRoot, "target/debug/agui-gateway");
}

/**
 * Starts `agui-gateway serve` with `configToml` and resolves once it listens.
 * Returns `{ url, logs, stop, child, restart }`; `url` has no trailing slash. `restart()` kills
 * the process as a crash does (SIGKILL: no drain, no hand-over) and starts it again on the same
 * config, database and address, so clients holding `url` reach it again; it resolves once the
 * new process listens (`child` is then the new one, `logs` goes on with its lines).
 * `restart({ signal: "SIGTERM" })` stops it as an orchestrator does instead: the signal, then
 * the wait for the process to exit by itself (drain, hand-over; SIGKILL only if it is still
 * there after `exitTimeoutMs`, default 60 s). Either way `restart` resolves to how the old
 * process ended, `{ code, signal }` as Node's `exit` event gives them (a process that had
 * already exited: its own).
 */
export async function startGateway({ configToml, env = {}, args = [] } = {}) {
  const dir = mkdtempSync(path.join(tmpdir(), "agui-gw-"));
  const configPath = path.join(dir, "gateway.toml");
  writeFileSync(configPath, configToml ?? "");
  const database = `sqlite://${path.join(dir, "gateway.db")}`;
  // The gateway refuses unknown AGUI_GATEWAY_* settings, and the binary's path is not one.
  const childEnv = { ...process.env, NO_COLOR: "1", AGUI_GATEWAY_LOG_FILTER: "info,sqlx=warn", ...env };
  delete childEnv.AGUI_GATEWAY_BIN;
  const logs = [];
  // One process on `listen`: resolves to it and its URL once it says it listens.
  const launch = async (listen) => {
    const child = spawn(
      gatewayBinary(),
      ["serve", "--listen", listen, "--database", database, "--config", configPath, ...args],
      {
        env: childEnv,
        stdio: ["ignore", "pipe", "pipe"],
      },
    );
    const url = await new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`the gateway did not start:\n${logs.join("\n")}`)), 30_000);
      let buffered = "";
      const onData = (chunk) => {
        buffered += chunk.toString();
        let newline;
        while ((newline = buffered.indexOf("\n")) >= 0) {
          const line = buffered.slice(0, newline);
          buffered = buffered.slice(newline + 1);
          logs.push(line);
          if (line.includes("agui-gateway listening")) {
            // Pretty logs say `address=127.0.0.1:1234`; JSON logs say `"address":"127.0.0.1:1234"`.
            const match = line.match(/address"?[=:]"?([0-9.]+:[0-9]+)/);
            // `scheme=https` when it serves a certificate (tls.cert_file).
            const scheme = line.match(/scheme"?[=:]"?(https?)/)?.[1] ?? "http";
            if (match) {
              clearTimeout(timer);
              resolve(`${scheme}://${match[1]}`);
            }
          }
        }
      };
      child.stdout.on("data", onData);
      child.stderr.on("data", onData);
      child.on("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`the gateway exited with ${code}:\n${logs.join("\n")}`));
      });
    });
    return { child, url };
  };
  let { child, url } = await launch("127.0.0.1:0");
  const restart = async ({ signal = "SIGKILL", exitTimeoutMs = 60_000 } = {}) => {
    const killed = child;
    if (killed.exitCode === null && killed.signalCode === null) {
      const exited = new Promise((resolve) => killed.once("exit", resolve));
      killed.kill(signal);
      if (signal !== "SIGKILL") {
        // A gateway asked to stop takes up to turns.drain_secs + shutdown_grace_secs; one that
        // is still there long after is stuck, and the test should hear of it, not hang.
        let timer;
        const timedOut = new Promise((resolve) => {
          timer = setTimeout(() => resolve(true), exitTimeoutMs);
        });
        const stuck = await Promise.race([exited.then(() => false), timedOut]);
        clearTimeout(timer);
        if (stuck) {
          killed.kill("SIGKILL");
          await exited;
          throw new Error(`the gateway did not exit within ${exitTimeoutMs} ms of ${signal}:\n${logs.join("\n")}`);
        }
      }
      await exited;
    }
    const ended = { code: killed.exitCode, signal: killed.signalCode };
    // The same address: the port is free again once the stopped process is gone.
    ({ child } = await launch(new URL(url).host));
    gateway.child = child;
    return ended;
  };
  const stop = async () => {
    if (child.exitCode === null) {
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGTERM");
      await Promise.race([exited, new Promise((r) => setTimeout(r, 5_000))]);
      if (child.exitCode === null) child.kill("SIGKILL");
    }
    rmSync(dir, { recursive: true, force: true });
  };
  const gateway = { url, logs, stop, child, restart };
  return gateway;
}

/**
 * The two script agents the chat-client suites (CopilotKit, TanStack AI) talk to, as gateway
 * config: `helper` answers "Hello from the gateway: <input>"; `mailer` asks a person to approve
 * its `send_email` call, then says "The email is on its way.".
 */
export const CHAT_AGENTS_TOML = `
[[agents]]
name = "helper"
kind = "script"
title = "Helper"
steps = [ { say = "Hello from the gateway: {input}" } ]

[[agents]]
name = "mailer"
kind = "script"
title = "Mailer"
steps = [
  { say = "Let me send that." },
  { tool = "send_email", args = { to = "team@example.com", body = "{input}" }, result = "sent", approval = "always" },
  { say = "The email is on its way." },
]
`;

/**
 * Starts the gateway as `startGateway` does, with app tokens switched on under a fresh secret.
 * Resolves to `{ gateway, mint }`: `mint(person)` is an app token for `person` of the `default`
 * tenant, minted by the binary's own `token mint` with that secret.
 */
export async function startGatewayWithAppTokens({ env = {}, ...options } = {}) {
  const secret = { AGUI_GATEWAY_AUTH_APP_TOKENS_SECRET: randomBytes(32).toString("hex") };
  const gateway = await startGateway({ ...options, env: { ...env, ...secret } });
  const mint = (person) => {
    // The gateway refuses unknown AGUI_GATEWAY_* settings, and the binary's path is not one.
    const childEnv = { ...process.env, ...env, ...secret };
    delete childEnv.AGUI_GATEWAY_BIN;
    return execFileSync(gatewayBinary(), ["token", "mint", "--tenant", "default", "--sub", person], {
      env: childEnv,
      encoding: "utf8",
    }).trim();
  };
  return { gateway, mint };
}
