//! An MCP App's own request as its host forwards it (`@ag-ui/mcp-apps-middleware`, CopilotKit's
//! MCP Apps renderer): a run whose `forwardedProps.__proxiedMCPRequest` is
//! `{serverHash?, serverId?, method, params?}`, answered by a `RUN_FINISHED` whose `result` is
//! the MCP method's result (or `{error}`).

use serde_json::Value;

/// The member of `forwardedProps` that carries the request.
pub const PROXIED_REQUEST: &str = "__proxiedMCPRequest";

/// The request, read.
#[derive(Debug, Clone, PartialEq)]
pub struct ProxiedRequest {
    /// `serverId`, else `serverHash`: the server's name.
    pub server: String,
    pub method: String,
    /// `{}` when absent.
    pub params: Value,
}

/// The App's request a run carries, if it carries one (`__proxiedMCPRequest` is an object);
/// `Err((field, why))` for one that does not read.
pub fn proxied_request(forwarded_props: Option<&Value>) -> Result<Option<ProxiedRequest>, (String, String)> {
    let Some(request) = forwarded_props.and_then(|props| props.get(PROXIED_REQUEST)).filter(|r| r.is_object()) else {
        return Ok(None);
    };
    let field = |name: &str| format!("forwardedProps.{PROXIED_REQUEST}.{name}");
    let text = |name: &str| request.get(name).and_then(Value::as_str).filter(|s| !s.is_empty());
    let Some(server) = text("serverId").or_else(|| text("serverHash")) else {
        return Err((field("serverId"), "names no server (serverId or serverHash)".into()));
    };
    let Some(method) = text("method") else {
        return Err((field("method"), "is not a method name".into()));
    };
    let params = match request.get("params") {
        None | Some(Value::Null) => Value::Object(Default::default()),
        Some(Value::Object(params)) => Value::Object(params.clone()),
        Some(_) => return Err((field("params"), "is not an object".into())),
    };
    Ok(Some(ProxiedRequest { server: server.to_string(), method: method.to_string(), params }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_request_is_read_by_its_server_id_or_hash() {
        let props = json!({ PROXIED_REQUEST: { "serverHash": "calc", "method": "ping" } });
        let read = proxied_request(Some(&props)).expect("reads").expect("a request");
        assert_eq!((read.server.as_str(), read.method.as_str(), read.params), ("calc", "ping", json!({})));
        assert_eq!(proxied_request(Some(&json!({ "other": 1 }))), Ok(None));
        let nameless = json!({ PROXIED_REQUEST: { "method": "ping" } });
        assert!(proxied_request(Some(&nameless)).is_err());
    }
}
