//! Credentials a tool takes inside its arguments (SPEC §2 credentials, `secret_args`): the
//! model is offered each such argument as a string whose only value is the placeholder naming
//! the credential, and sends the placeholder; the gateway puts the value in only when it calls
//! the tool. So the stream, the log and `gateway/details` hold the placeholder and the value
//! exists only in the request to the tool. Both tool kinds use it: an HTTP tool's arguments
//! and an MCP server's tools' arguments, each checked against the tool's schema here too.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use crate::redact::secret_placeholder;

/// Argument name → the environment variable holding the credential it carries.
pub(super) type SecretArgs = BTreeMap<String, String>;

/// The secret arguments among `secret_args` that a tool whose schema is `parameters` takes:
/// all of them for a tool whose schema the configuration writes (`declared`), only those its
/// schema names for a tool a server describes.
fn taken<'a>(
    secret_args: &'a SecretArgs,
    parameters: &'a Value,
    declared: bool,
) -> impl Iterator<Item = (&'a String, &'a String)> {
    secret_args
        .iter()
        .filter(move |(argument, _)| declared || parameters["properties"].get(argument.as_str()).is_some())
}

/// The function definition the model is offered: each secret argument the tool takes a
/// string whose only value is its placeholder, and the description saying so.
pub(super) fn offered_definition(
    name: &str,
    description: &str,
    parameters: &Value,
    secret_args: &SecretArgs,
    declared: bool,
) -> Value {
    let mut offered = parameters.clone();
    let mut description = description.to_string();
    for (argument, variable) in taken(secret_args, parameters, declared) {
        let placeholder = secret_placeholder(variable);
        if let Some(object) = offered.as_object_mut() {
            let properties = object.entry("properties").or_insert_with(|| json!({}));
            if let Some(properties) = properties.as_object_mut() {
                properties.insert(argument.clone(), json!({ "type": "string", "const": placeholder }));
            }
        }
        description.push_str(&format!(
            " The argument `{argument}` is a credential the gateway holds: send exactly \"{placeholder}\"."
        ));
    }
    json!({ "type": "function", "function": { "name": name, "description": description.trim(), "parameters": offered } })
}

/// Makes the model's arguments the call's: puts the credentials in place of the placeholders
/// the model sent, just before the call, and checks the arguments against the tool's schema
/// (the credentials themselves, not their placeholders, are in them now). An error is the text
/// the model reads: a credential whose variable is not set, or arguments off the schema, run
/// nothing.
pub(super) fn fill_in_and_check(
    args: &mut Value,
    parameters: &Value,
    secret_args: &SecretArgs,
    declared: bool,
) -> Result<(), String> {
    let mut checked = parameters.clone();
    for (argument, variable) in taken(secret_args, parameters, declared) {
        let Some(object) = args.as_object_mut() else { break };
        let Ok(value) = std::env::var(variable) else {
            return Err(format!("error: the credential for `{argument}` is not configured; nothing was run"));
        };
        object.insert(argument.clone(), Value::String(value));
        if let Some(properties) = checked.get_mut("properties").and_then(Value::as_object_mut) {
            if !declared {
                // The server's own schema for the argument stays: the credential must meet it.
                continue;
            }
            properties.insert(argument.clone(), json!({ "type": "string" }));
        }
    }
    if let Ok(validator) = jsonschema::validator_for(&checked) {
        let errors: Vec<String> = validator.iter_errors(args).map(|e| e.to_string()).collect();
        if !errors.is_empty() {
            return Err(format!("error: the arguments do not match the tool's schema: {}", errors.join("; ")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_described_tool_is_offered_the_placeholder_only_for_arguments_it_takes() {
        let secret_args: SecretArgs = [("token".to_string(), "AGUI_SECRET_ARGS_TEST".to_string())].into();
        let takes =
            json!({ "type": "object", "properties": { "token": { "type": "string" }, "q": { "type": "string" } } });
        let offered = offered_definition("lookup", "Looks up.", &takes, &secret_args, false);
        let placeholder = secret_placeholder("AGUI_SECRET_ARGS_TEST");
        assert_eq!(offered["function"]["parameters"]["properties"]["token"]["const"], placeholder.as_str());
        assert!(offered["function"]["description"].as_str().is_some_and(|d| d.contains(&placeholder)));
        let other = json!({ "type": "object", "properties": { "q": { "type": "string" } } });
        let offered = offered_definition("search", "Searches.", &other, &secret_args, false);
        assert_eq!(offered["function"]["parameters"], other, "a tool without the argument is offered as it is");
        assert_eq!(offered["function"]["description"], "Searches.");
    }

    #[test]
    fn the_value_goes_in_only_when_its_variable_is_set() {
        let secret_args: SecretArgs = [("token".to_string(), "AGUI_SECRET_ARGS_FILL".to_string())].into();
        let schema = json!({ "type": "object", "properties": { "token": { "type": "string", "minLength": 3 } } });
        let mut args = json!({ "token": secret_placeholder("AGUI_SECRET_ARGS_FILL") });
        std::env::remove_var("AGUI_SECRET_ARGS_FILL");
        assert!(
            fill_in_and_check(&mut args, &schema, &secret_args, false).is_err_and(|e| e.contains("nothing was run"))
        );
        std::env::set_var("AGUI_SECRET_ARGS_FILL", "ab");
        let short = fill_in_and_check(&mut args, &schema, &secret_args, false);
        assert!(
            short.is_err_and(|e| e.contains("schema")),
            "a server's schema for the argument still checks the value"
        );
        std::env::set_var("AGUI_SECRET_ARGS_FILL", "the-value");
        fill_in_and_check(&mut args, &schema, &secret_args, false).expect("filled in");
        assert_eq!(args["token"], "the-value");
    }
}
