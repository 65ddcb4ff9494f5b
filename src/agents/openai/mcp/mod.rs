//! The `openai` agent's MCP tool servers (docs/agents.md): tools published by MCP servers over
//! the Streamable HTTP transport, through the official SDK's client (`rmcp`).
//!
//! **One client per server**, made the first time a turn needs the server and reused by every
//! call and turn after. It speaks MCP 2026-07-28 when the server does (`server/discover`, then
//! self-contained requests: no session, the revision's request headers, all of it the SDK's)
//! and falls back to the earlier `initialize` handshake when the server is older (the SDK's own
//! fallback); an expired session of an older server is re-established by the SDK. A client
//! whose transport failed or closed is dropped, and the next exchange makes a new one: a
//! server restarted, replaced or briefly down is simply reached again. (An error the server
//! answers, or a timeout, keeps the client: other turns may have calls in flight on it.)
//!
//! **Tools** are listed (`tools/list`) the first time a turn needs them and kept for as long
//! as the server says they stay fresh (`ttlMs`, 2026-07-28), else the server's configured
//! `tools_ttl_secs`; the first use after that lists them again. The listing is kept here, not
//! in the SDK's response cache (turned off), because it must outlive a client that is
//! replaced: a refresh that fails keeps the last good listing (and the next use tries again),
//! and a server that was never listed is left out of that model call and asked again on the
//! next one, so a server down at start never stops the gateway or a turn. As with HTTP tools,
//! every failure (unreachable, schema mismatch, an error result) becomes the text the model
//! reads as the tool's result.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use rmcp::model::{CallToolRequestParams, ProtocolVersion};
use rmcp::service::{ClientInitializeError, Peer, RunningService, ServiceError};
use rmcp::transport::streamable_http_client::{
    StreamableHttpClientTransport, StreamableHttpClientTransportConfig, StreamableHttpError,
};
use rmcp::{ClientCacheConfig, ClientLifecycleMode, ClientServiceExt, RoleClient, MAX_CLIENT_CACHE_TTL};
use serde_json::{json, Value};
use tokio::sync::Mutex;

use super::secret_args;
use crate::agents::http::AgentHttp;
use crate::config::McpServerConfig;
pub(super) use result::McpOutcome;

mod apps;
mod result;

/// The key of a `tools/call` request's `_meta` that carries the call's idempotency key.
pub(super) const IDEMPOTENCY_META_KEY: &str = "idempotencyKey";

/// The longest function name chat-completions servers take (OpenAI's limit).
const MAX_FUNCTION_NAME: usize = 64;

/// One tool of an MCP server, as listed.
#[derive(Debug, Clone)]
pub(super) struct McpTool {
    /// The server's name for it.
    name: String,
    description: String,
    input_schema: Value,
    /// The URI of the tool's UI (MCP Apps: `_meta.ui.resourceUri`, or the earlier
    /// `_meta["ui/resourceUri"]`), when its server offers one.
    resource_uri: Option<String>,
}

/// A server's last good listing.
#[derive(Debug, Clone)]
struct Listing {
    tools: Arc<Vec<McpTool>>,
    /// Until when it is used without asking the server again.
    fresh_until: Instant,
}

/// The client of one server, numbered so a failed exchange drops only the client it used.
#[derive(Debug)]
struct Client {
    number: u64,
    service: RunningService<RoleClient, ()>,
}

#[derive(Debug)]
struct McpServer {
    config: McpServerConfig,
    /// The one client, once made; replaced after a failed exchange.
    client: Mutex<Option<Client>>,
    /// How many clients were made (the number of the next).
    made: std::sync::atomic::AtomicU64,
    /// The last good listing; `None` until a listing succeeded. Read without waiting (`find`).
    listed: RwLock<Option<Listing>>,
    /// Held while listing, so concurrent turns ask the server once.
    listing: Mutex<()>,
}

impl McpServer {
    fn listed(&self) -> Option<Listing> {
        self.listed.read().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// The last good listing if it is still fresh.
    fn fresh(&self) -> Option<Arc<Vec<McpTool>>> {
        self.listed().filter(|listing| Instant::now() < listing.fresh_until).map(|listing| listing.tools)
    }
}

/// The agent's MCP servers, spoken to with the agents' HTTP client (the SDK's transport takes
/// it as it is: the gateway's outbound TLS, no redirect followed, so the configured secret
/// headers go to no other address).
#[derive(Debug, Clone)]
pub(super) struct McpServers {
    servers: Arc<Vec<McpServer>>,
    http: AgentHttp,
}

impl McpServers {
    pub(super) fn new(configs: &[McpServerConfig], http: AgentHttp) -> McpServers {
        let servers = configs.iter().map(|config| McpServer {
            config: config.clone(),
            client: Mutex::new(None),
            made: std::sync::atomic::AtomicU64::new(0),
            listed: RwLock::new(None),
            listing: Mutex::new(()),
        });
        McpServers { servers: Arc::new(servers.collect()), http }
    }

    /// The configured server and the server's name of the tool a model's name stands for
    /// (`<server>__<tool>`): by the configuration, so a takeover knows its calls before any
    /// server answers, and by the last good listing once there is one (a name it lacks stands
    /// for nothing, so no person is asked to approve a tool that does not exist).
    pub(super) fn find(&self, offered: &str) -> Option<(&McpServerConfig, String)> {
        self.servers.iter().find_map(|server| {
            let tool = offered.strip_prefix(server.config.name.as_str())?.strip_prefix(McpServerConfig::SEPARATOR)?;
            let allowed = server.config.tools.is_empty() || server.config.tools.iter().any(|t| t == tool);
            let listed = server.listed().is_none_or(|listing| listing.tools.iter().any(|t| t.name == tool));
            (allowed && listed && !tool.is_empty()).then(|| (&server.config, tool.to_string()))
        })
    }

    /// The function definitions of every listed tool, for a model call. A server that cannot
    /// be listed now and never was is left out (and logged); the next model call asks it again.
    pub(super) async fn definitions(&self) -> Vec<Value> {
        let mut definitions = Vec::new();
        for server in self.servers.iter() {
            match self.tools(server).await {
                Ok(tools) => definitions.extend(tools.iter().map(|tool| {
                    secret_args::offered_definition(
                        &offered_name(&server.config, &tool.name),
                        &tool.description,
                        &tool.input_schema,
                        &server.config.secret_args,
                        false,
                    )
                })),
                Err(why) => {
                    tracing::warn!(server = %server.config.name, "MCP tools left out of this model call: {why}")
                }
            }
        }
        definitions
    }

    /// Calls `tool` of `server` with the model's `arguments`, validated against the tool's
    /// listed input schema first (a mismatch never reaches the server). `idempotency_key` goes
    /// in the request's `_meta`.
    #[tracing::instrument(name = "mcp_tool_call", skip_all, fields(server = %server.name, tool = %tool))]
    pub(super) async fn call(
        &self,
        server: &McpServerConfig,
        tool: &str,
        arguments: &str,
        idempotency_key: &str,
    ) -> McpOutcome {
        let Some(state) = self.server(&server.name) else {
            return McpOutcome::failed(format!("error: the MCP server '{}' is not configured", server.name));
        };
        let mut args: Value = match serde_json::from_str(arguments) {
            Ok(Value::Object(args)) => Value::Object(args),
            Ok(_) => return McpOutcome::failed("error: the arguments are not a JSON object".to_string()),
            Err(e) => return McpOutcome::failed(format!("error: the arguments are not JSON ({e})")),
        };
        let listed = match self.tools(state).await {
            Ok(listed) => listed,
            Err(why) => return McpOutcome::failed(format!("error: {why}; nothing was run")),
        };
        let Some(described) = listed.iter().find(|t| t.name == tool) else {
            return McpOutcome::failed(format!(
                "error: the MCP server '{}' offers no tool '{tool}'; nothing was run",
                server.name
            ));
        };
        // The credentials go in place of the model's placeholders only now (secret_args.rs).
        if let Err(why) = secret_args::fill_in_and_check(&mut args, &described.input_schema, &server.secret_args, false)
        {
            return McpOutcome::failed(why);
        }
        let request = json!({ "name": tool, "arguments": args, "_meta": { IDEMPOTENCY_META_KEY: idempotency_key } });
        let params: CallToolRequestParams = match serde_json::from_value(request) {
            Ok(params) => params,
            Err(e) => return McpOutcome::failed(format!("error: the call could not be made ({e})")),
        };
        let answered = self
            .exchange(state, |peer| async move {
                peer.call_tool(params).await.map_err(|e| (broken(&e), format!("the call failed ({e})")))
            })
            .await;
        match answered {
            Ok(result) => McpOutcome::of(&result),
            Err(why) => McpOutcome::failed(format!("error: {why}")),
        }
    }

    /// The UI resource of the tool the model calls `offered`, as (server, tool, URI), when its
    /// server offers one (by the last good listing).
    pub(super) fn app_of(&self, offered: &str) -> Option<(String, String, String)> {
        let (config, tool) = self.find(offered)?;
        let listing = self.server(&config.name)?.listed()?;
        let uri = listing.tools.iter().find(|t| t.name == tool)?.resource_uri.clone()?;
        Some((config.name.clone(), tool, uri))
    }

    fn server(&self, name: &str) -> Option<&McpServer> {
        self.servers.iter().find(|s| s.config.name == name)
    }

    /// One exchange with the server on its client, within its timeout; a client whose
    /// transport broke is dropped (`exchange` says so with its error). Errors name no URL.
    async fn exchange<T, F, Fut>(&self, state: &McpServer, exchange: F) -> Result<T, String>
    where
        F: FnOnce(Peer<RoleClient>) -> Fut,
        Fut: std::future::Future<Output = Result<T, (bool, String)>>,
    {
        let config = &state.config;
        let attempt = async {
            let (number, peer) = self.client(state).await?;
            match exchange(peer).await {
                Ok(answer) => Ok(answer),
                Err((broke, why)) => {
                    if broke {
                        self.drop_client(state, number).await;
                    }
                    Err(why)
                }
            }
        };
        match tokio::time::timeout(Duration::from_secs(config.timeout_secs), attempt).await {
            Ok(Ok(answer)) => Ok(answer),
            // The client's errors name the server's URL, which may carry a secret.
            Ok(Err(why)) => Err(format!("the MCP server '{}': {}", config.name, crate::redact::redact_urls_in(&why))),
            Err(_) => Err(format!("the MCP server '{}' did not answer within {} s", config.name, config.timeout_secs)),
        }
    }

    /// The server's tools: the last listing while it is fresh, else listed again; when that
    /// fails, the last good listing if there is one (the next use asks again).
    async fn tools(&self, server: &McpServer) -> Result<Arc<Vec<McpTool>>, String> {
        if let Some(tools) = server.fresh() {
            return Ok(tools);
        }
        let _listing = server.listing.lock().await;
        if let Some(tools) = server.fresh() {
            return Ok(tools);
        }
        match self.list(server).await {
            Ok(listing) => {
                let tools = listing.tools.clone();
                *server.listed.write().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some(listing);
                Ok(tools)
            }
            Err(why) => match server.listed() {
                Some(last) => {
                    tracing::warn!(server = %server.config.name, "MCP tools not listed again, the last listing kept: {why}");
                    Ok(last.tools)
                }
                None => Err(why),
            },
        }
    }

    /// Lists the server's tools (every page), keeping those the configuration allows and the
    /// model can take, fresh for the server's `ttlMs` or else the configured `tools_ttl_secs`.
    async fn list(&self, server: &McpServer) -> Result<Listing, String> {
        let config = &server.config;
        let listing = async {
            let (number, peer) = self.client(server).await?;
            let listed = peer.list_all_tools_with_cache_hint().await;
            if listed.as_ref().is_err_and(broken) {
                self.drop_client(server, number).await;
            }
            listed.map_err(|e| format!("its tools could not be listed ({e})"))
        };
        let listed = match tokio::time::timeout(Duration::from_secs(config.timeout_secs), listing).await {
            Ok(Ok(listed)) => listed,
            Ok(Err(why)) => {
                return Err(format!("the MCP server '{}': {}", config.name, crate::redact::redact_urls_in(&why)))
            }
            Err(_) => {
                return Err(format!(
                    "the MCP server '{}' did not answer within {} s",
                    config.name, config.timeout_secs
                ));
            }
        };
        // The server's word wins (an earlier revision gives none); either is capped as the
        // SDK caps it, so a wild `ttlMs` cannot keep a listing for good.
        let ttl = listed.ttl_ms.map(Duration::from_millis).unwrap_or(Duration::from_secs(config.tools_ttl_secs));
        let fresh_until = Instant::now() + ttl.min(MAX_CLIENT_CACHE_TTL);
        let mut kept = Vec::new();
        for tool in listed.items {
            let name = tool.name.to_string();
            if !config.tools.is_empty() && !config.tools.contains(&name) {
                continue;
            }
            let offered = offered_name(config, &name);
            let valid = offered.len() <= MAX_FUNCTION_NAME
                && offered.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
            let input_schema = Value::Object((*tool.input_schema).clone());
            if !valid || jsonschema::validator_for(&input_schema).is_err() {
                tracing::warn!(server = %config.name, tool = %name, "an MCP tool left out: its name does not make a function name, or its input schema is no JSON Schema");
                continue;
            }
            kept.push(McpTool {
                name,
                description: tool.description.map(|d| d.to_string()).unwrap_or_default(),
                input_schema,
                resource_uri: resource_uri(tool.meta.as_ref().map(|meta| &meta.0)),
            });
        }
        Ok(Listing { tools: Arc::new(kept), fresh_until })
    }

    /// The server's client (its number and a handle to it), made now if there is none or the
    /// one there has closed.
    async fn client(&self, server: &McpServer) -> Result<(u64, Peer<RoleClient>), String> {
        let mut slot = server.client.lock().await;
        if let Some(client) = slot.as_ref() {
            if !client.service.is_closed() && !client.service.is_transport_closed() {
                return Ok((client.number, client.service.peer().clone()));
            }
        }
        *slot = None;
        let service = self.connect(&server.config).await?;
        // The listing is kept above the client (it outlives a replaced one), so the SDK's own
        // response cache would only be a second clock.
        service.set_response_cache_config(ClientCacheConfig::disabled()).await;
        let number = server.made.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let peer = service.peer().clone();
        *slot = Some(Client { number, service });
        Ok((number, peer))
    }

    /// Drops the client numbered `number` if it is still the server's: the next exchange makes
    /// a new one. Dropping it ends its tasks (and the session of an earlier-revision server).
    async fn drop_client(&self, server: &McpServer, number: u64) {
        let mut slot = server.client.lock().await;
        if slot.as_ref().is_some_and(|client| client.number == number) {
            *slot = None;
        }
    }

    /// A new client of the server, with its configured headers: 2026-07-28 preferred
    /// (`server/discover`), the earlier handshake (`initialize`) for a server that is older.
    async fn connect(&self, config: &McpServerConfig) -> Result<RunningService<RoleClient, ()>, String> {
        let http = self.http.client().map_err(str::to_string)?.clone();
        let mut headers = HashMap::new();
        let mut authorization = None;
        let secrets = config.secret_headers.iter().filter_map(|(h, var)| Some((h, std::env::var(var).ok()?)));
        for (name, value) in config.headers.iter().map(|(h, v)| (h, v.clone())).chain(secrets) {
            // The transport sends the authorization header itself.
            if name.eq_ignore_ascii_case("authorization") {
                authorization = Some(value.strip_prefix("Bearer ").unwrap_or(&value).to_string());
                continue;
            }
            let header = reqwest::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("'{name}' is not a header name"))?;
            let value = reqwest::header::HeaderValue::from_str(&value)
                .map_err(|_| format!("the value of the header '{name}' is not a header value"))?;
            headers.insert(header, value);
        }
        let mut transport_config =
            StreamableHttpClientTransportConfig::with_uri(config.url.as_str()).custom_headers(headers);
        if let Some(token) = authorization {
            transport_config = transport_config.auth_header(token);
        }
        let transport = StreamableHttpClientTransport::with_client(http, transport_config);
        let host = reqwest::Url::parse(&config.url).ok().and_then(|url| url.host_str().map(str::to_string));
        let lifecycle = ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
            legacy_version: Some(ProtocolVersion::V_2025_11_25),
        };
        ().serve_with_lifecycle(transport, lifecycle).await.map_err(|e| {
            let host = host.as_deref().unwrap_or("?");
            format!("it could not be reached: {}", initialize_failure(&e, host))
        })
    }
}

/// Whether a failed exchange leaves its client unfit for the next: its transport failed or
/// closed (the server unreachable, a session it could not re-open, a server that no longer
/// speaks the revision the client found). An error the server answered, or an exchange cut
/// short here (a timeout), leaves a working client, which other turns may be using.
fn broken(error: &ServiceError) -> bool {
    matches!(error, ServiceError::TransportSend(_) | ServiceError::TransportClosed)
}

/// Why a client could not be made, in words. The transport's error and the HTTP client's
/// within it keep their causes out of the source chain: both are opened by hand; a failed
/// fallback to the earlier revision says why the fallback failed.
fn initialize_failure(error: &ClientInitializeError, host: &str) -> String {
    match error {
        ClientInitializeError::TransportError { error, .. } => {
            match error.error.downcast_ref::<StreamableHttpError<reqwest::Error>>() {
                Some(StreamableHttpError::Client(client)) => failure_reason(client, host),
                _ => failure_reason(error, host),
            }
        }
        ClientInitializeError::LegacyFallbackFailed { fallback, .. } => initialize_failure(fallback, host),
        other => failure_reason(other, host),
    }
}

/// Why an exchange failed, in words: a failed TLS handshake says what was wrong with the
/// certificate (as for HTTP tools); anything else is its innermost cause (the SDK's outer
/// errors name its own types).
fn failure_reason(error: &(dyn std::error::Error + 'static), host: &str) -> String {
    if let Some(tls) = crate::tls::describe_failure(error, host) {
        return tls;
    }
    let mut cause = error;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}

/// The name the model calls a server's tool by.
fn offered_name(server: &McpServerConfig, tool: &str) -> String {
    format!("{}{}{tool}", server.name, McpServerConfig::SEPARATOR)
}

/// The URI of a tool's UI in its `_meta` (MCP Apps): `ui.resourceUri`, or the flat
/// `ui/resourceUri` key earlier drafts used, as the middleware reads it.
fn resource_uri(meta: Option<&serde_json::Map<String, Value>>) -> Option<String> {
    let meta = meta?;
    let uri = meta.get("ui").and_then(|ui| ui.get("resourceUri")).or_else(|| meta.get("ui/resourceUri"))?;
    uri.as_str().map(str::to_string)
}
