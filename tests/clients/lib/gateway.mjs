// Starts a real gateway process for a client test: its own config, its own SQLite file, a
// random loopback port. Every Node suite uses this so each one judges the same binary the
// Rust tests built (`AGUI_GATEWAY_BIN`, else `target/debug/agui-gateway`).
import { spawn } from "node:child_process";
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
 * Returns `{ url, logs, stop }`; `url` has no trailing slash.
 */
export async function startGateway({ configToml, env = {}, args = [] } = {}) {
  const dir = mkdtempSync(path.join(tmpdir(), "agui-gw-"));
  const configPath = path.join(dir, "gateway.toml");
  writeFileSync(configPath, configToml ?? "");
  const database = `sqlite://${path.join(dir, "gateway.db")}`;
  // The gateway refuses unknown AGUI_GATEWAY_* settings, and the binary's path is not one.
  const childEnv = { ...process.env, NO_COLOR: "1", AGUI_GATEWAY_LOG_FILTER: "info,sqlx=warn", ...env };
  delete childEnv.AGUI_GATEWAY_BIN;
  const child = spawn(
    gatewayBinary(),
    ["serve", "--listen", "127.0.0.1:0", "--database", database, "--config", configPath, ...args],
    {
      env: childEnv,
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  const logs = [];
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
  const stop = async () => {
    if (child.exitCode === null) {
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.kill("SIGTERM");
      await Promise.race([exited, new Promise((r) => setTimeout(r, 5_000))]);
      if (child.exitCode === null) child.kill("SIGKILL");
    }
    rmSync(dir, { recursive: true, force: true });
  };
  return { url, logs, stop, child };
}
