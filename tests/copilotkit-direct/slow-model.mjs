// The slow answer of the CopilotKit direct suite (run.mjs): a scripted OpenAI-compatible model
// that streams a long answer word by word, slowly enough for the page to press Stop (or the test
// to kill the gateway) while it streams, and the gateway's `openai` agent on it. The model keeps
// what it saw of each request, so a case can tell whether the gateway closed the stream before
// the answer was whole (a cancel dropping it) and how often a thread's answer was asked for (a
// takeover asking again).
import http from "node:http";

export const SLOW_WORDS = 100;
/** The whole answer: `w1 w2 … w100`, one word per chunk. */
export const SLOW_ANSWER = Array.from({ length: SLOW_WORDS }, (_, i) => `w${i + 1}`).join(" ");
const WORD_EVERY_MS = 70;

/**
 * Starts the model; resolves to `{ url, requests, stop }`. `requests` is every streamed answer
 * begun, in order: `said` (the conversation's last user message, which names the case's thread),
 * `written` (words sent so far), `whole` (all of them sent and the stream ended) and `cut` (the
 * socket closed before the last word was written).
 */
export async function startSlowModel() {
  const requests = [];
  const server = http.createServer((req, res) => {
    let body = "";
    req.on("data", (chunk) => (body += chunk));
    req.on("end", () => {
      if (req.method !== "POST" || !req.url.endsWith("/chat/completions")) return res.writeHead(404).end();
      let said;
      try {
        said = JSON.parse(body).messages.filter((m) => m.role === "user").at(-1)?.content;
      } catch {
        return res.writeHead(400).end();
      }
      const seen = { said: typeof said === "string" ? said : JSON.stringify(said), written: 0, whole: false, cut: false };
      requests.push(seen);
      const frame = (fields) => `data: ${JSON.stringify({ id: "chatcmpl-slow", object: "chat.completion.chunk", model: "slow", ...fields })}\n\n`;
      res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-cache" });
      res.flushHeaders();
      let timer;
      // Closed before the whole answer went out: the gateway dropped the stream (a cancel) or
      // died (a crash). Either way the rest is never written.
      res.on("close", () => {
        clearTimeout(timer);
        if (!seen.whole) seen.cut = true;
      });
      const next = () => {
        if (res.destroyed) return;
        if (seen.written < SLOW_WORDS) {
          const word = `${seen.written === 0 ? "" : " "}w${seen.written + 1}`;
          res.write(frame({ choices: [{ index: 0, delta: seen.written === 0 ? { role: "assistant", content: word } : { content: word }, finish_reason: null }] }));
          seen.written += 1;
          timer = setTimeout(next, WORD_EVERY_MS);
          return;
        }
        seen.whole = true;
        res.end(
          frame({ choices: [{ index: 0, delta: {}, finish_reason: "stop" }] }) +
            frame({ choices: [], usage: { prompt_tokens: 12, completion_tokens: SLOW_WORDS, total_tokens: 12 + SLOW_WORDS } }) +
            "data: [DONE]\n\n",
        );
      };
      next();
    });
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}/v1`,
    requests,
    stop: () => {
      server.close();
      server.closeAllConnections();
    },
  };
}

/** The `storyteller` agent: an `openai` agent on the slow model, no tools. */
export const slowAgent = (modelUrl) => `
[[agents]]
name = "storyteller"
kind = "openai"
title = "Storyteller"
base_url = "${modelUrl}"
model = "slow"
`;
