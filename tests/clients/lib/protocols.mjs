// Node's fetch over HTTPS with the protocol of every connection recorded. Node 20's fetch
// (undici) offers ALPN `http/1.1` only; with `allowH2` the global dispatcher offers `h2` too,
// and the official client, which calls the global fetch, then speaks HTTP/2 where the server
// picks it. `undici` is the package pinned in tests/clients (the version Node 20 bundles), so
// its global dispatcher is the one Node's own fetch uses.

/**
 * Installs an undici Agent as the global dispatcher (`allowH2`: offer h2; `ca`: trust only it). Returns the list it appends each new TLS
 * connection's negotiated protocol to (`h2`, `http/1.1`, or `none` without ALPN).
 */
export function recordProtocols(undici, { allowH2, ca }) {
  const { Agent, buildConnector, setGlobalDispatcher } = undici;
  const protocols = [];
  // `ca` (PEM) replaces the trusted roots for these connections; without it Node's own apply
  // (NODE_EXTRA_CA_CERTS included).
  const connectTls = buildConnector({ allowH2, ...(ca ? { ca } : {}) });
  const connect = (options, callback) =>
    connectTls(options, (error, socket) => {
      if (!error && options.protocol === "https:") protocols.push(socket.alpnProtocol || "none");
      callback(error, socket);
    });
  setGlobalDispatcher(new Agent({ allowH2, connect }));
  return protocols;
}
