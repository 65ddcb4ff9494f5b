//! The fakes the tests stand the gateway against, in one place:
//!
//! - [`chunks`]: the OpenAI chat-completions streaming wire format (`chat.completion.chunk`
//!   frames), to script a model's answers with;
//! - [`model`]: [`ScriptedModel`], a model server on a random port that answers each request
//!   as its script says and records what it was sent;
//! - [`tools`]: HTTP tools that record how they were called;
//! - [`two_instances`]: [`TwoInstances`], two gateway processes on one PostgreSQL database,
//!   for the kill-and-take-over scenarios (SPEC §4.6), with the no-gap check;
//! - [`serve`]: any router on a random loopback port.
//!
//! [`ScriptedModel`]: model::ScriptedModel
//! [`TwoInstances`]: two_instances::TwoInstances

pub mod chunks;
pub mod model;
pub mod tools;
pub mod two_instances;

use std::net::SocketAddr;

/// Serves `app` on a random loopback port for the rest of the test; returns its address.
pub async fn serve(app: axum::Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let address = listener.local_addr().expect("address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    address
}
