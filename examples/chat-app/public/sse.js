// A Server-Sent-Events reader for a fetch() response body. The browser's EventSource cannot
// POST a body, and AG-UI runs are POSTs, so the page reads the stream itself: frames split on
// blank lines, `id:` and `data:` fields, `:` comments (the gateway's keepalives) skipped.

/**
 * Yields `{ id, data }` for each complete frame of `body` (a ReadableStream of bytes). `id` is
 * the frame's own `id:` (null when it had none); `data` joins its `data:` lines with "\n".
 * A frame cut off by the end of the stream is dropped, as EventSource does: only whole events
 * count, so a reconnect never acts on half of one.
 */
export async function* readSse(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let id = null;
  let data = [];
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let newline;
      while ((newline = buffer.indexOf("\n")) >= 0) {
        const line = buffer.slice(0, newline).replace(/\r$/, "");
        buffer = buffer.slice(newline + 1);
        if (line === "") {
          if (data.length) yield { id, data: data.join("\n") };
          id = null;
          data = [];
          continue;
        }
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "data") data.push(value);
        else if (field === "id") id = value;
      }
    }
  } finally {
    reader.releaseLock();
  }
}
