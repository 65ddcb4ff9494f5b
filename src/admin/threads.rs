//! `agui-gateway threads list|show|delete`: the same engine and checks as the HTTP routes, for
//! a person at a terminal. An operator lists and erases any thread of a tenant (the database
//! is theirs anyway); the erasure is audited with the actor `cli`.

use serde_json::{json, Value};

use super::{known_tenant, operator, CommandResult, Common, Wiring};
use crate::auth::Caller;
use crate::engine::threads::{title, ThreadFilter, TurnsToStop};
use crate::engine::{Engine, EngineError};
use crate::ids::ThreadId;
use crate::protocol::iso8601;
use crate::store::Visibility;

#[derive(clap::Subcommand)]
pub enum ThreadsCommand {
    /// List a tenant's threads, newest activity first, as JSON (`next_cursor` names the next
    /// page).
    List {
        #[command(flatten)]
        common: Common,
        #[arg(long, default_value = "default")]
        tenant: String,
        /// Only the threads this person would see listed (default: every thread).
        #[arg(long = "as")]
        person: Option<String>,
        /// Only threads whose latest turn ran this agent.
        #[arg(long)]
        agent: Option<String>,
        /// Only threads whose latest turn is running, waiting, succeeded, failed or cancelled.
        #[arg(long)]
        status: Option<String>,
        /// Threads per page (1 to 200).
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// The previous page's `next_cursor`.
        #[arg(long)]
        cursor: Option<String>,
    },
    /// Show a thread: its turns, open interrupts and conversation.
    Show {
        #[command(flatten)]
        common: Common,
        #[arg(long, default_value = "default")]
        tenant: String,
        /// Show it as this person sees it (a person's threads are private).
        #[arg(long = "as", default_value = "local")]
        person: String,
        thread: String,
    },
    /// Erase a thread with its turns, events, interrupts and board (refused while a turn of it
    /// runs or waits); audited as `cli`.
    Delete {
        #[command(flatten)]
        common: Common,
        #[arg(long, default_value = "default")]
        tenant: String,
        thread: String,
    },
}

impl ThreadsCommand {
    pub async fn run(self, wiring: &dyn Wiring) -> CommandResult {
        match self {
            ThreadsCommand::List { common, tenant, person, agent, status, limit, cursor } => {
                let config = common.load()?;
                known_tenant(&config, &tenant)?;
                let engine = wiring.engine(config).await?;
                let person = person.map(|p| operator(&p, Vec::new()));
                let filter = ThreadFilter { agent, status, cursor, limit: Some(limit) };
                let listed =
                    list_threads(&engine, &tenant, person.as_ref(), &filter).await.map_err(|e| e.to_string())?;
                println!("{}", serde_json::to_string_pretty(&listed)?);
                Ok(())
            }
            ThreadsCommand::Show { common, tenant, person, thread } => {
                let config = common.load()?;
                let engine = wiring.engine(config).await?;
                let shown = show_thread(&engine, &tenant, &operator(&person, Vec::new()), &thread)
                    .await
                    .map_err(|e| e.to_string())?;
                println!("{}", serde_json::to_string_pretty(&shown)?);
                Ok(())
            }
            ThreadsCommand::Delete { common, tenant, thread } => {
                let config = common.load()?;
                known_tenant(&config, &tenant)?;
                let engine = wiring.engine(config).await?;
                delete_thread(&engine, &tenant, &thread).await.map_err(|e| e.to_string())?;
                println!("deleted thread {thread} of tenant {tenant}");
                Ok(())
            }
        }
    }
}

/// A thread as an operator sees it: status, turns, open interrupts, the conversation.
pub async fn show_thread(engine: &Engine, tenant: &str, caller: &Caller, thread: &str) -> Result<Value, EngineError> {
    let thread_id = ThreadId::parse(thread).map_err(|message| EngineError::BadRequest { field: "thread", message })?;
    let thread = engine.readable_thread(tenant, caller, &thread_id).await?;
    let turns = engine.store().thread_turns(thread.pk).await?;
    let mut interrupts = Vec::new();
    if let Some(latest) = turns.last() {
        interrupts = engine.open_interrupts_for(caller, latest).await?;
    }
    let messages = engine.messages(&thread).await?;
    Ok(json!({
        "threadId": thread.thread_id,
        "tenant": thread.tenant,
        "turns": turns.iter().map(|t| json!({ "id": t.public_id, "agent": t.agent, "status": t.status.as_str() })).collect::<Vec<_>>(),
        "interrupts": interrupts,
        "messages": messages,
    }))
}

/// A page of the tenant's threads, newest activity first: every thread, or with `person` only
/// those that person would see listed.
pub async fn list_threads(
    engine: &Engine,
    tenant: &str,
    person: Option<&Caller>,
    filter: &ThreadFilter,
) -> Result<Value, EngineError> {
    let visibility = person.map_or(Visibility::All, Caller::visibility);
    let page = engine.list_threads(tenant, visibility, filter).await?;
    let threads: Vec<Value> = page
        .threads
        .iter()
        .map(|summary| {
            let owner = &summary.thread.owner;
            json!({
                "id": summary.thread.thread_id,
                "owner": format!("{}:{}", owner.kind.as_str(), owner.id).trim_end_matches(':'),
                "agent": summary.agent,
                "status": summary.status.as_str(),
                "title": title(&summary.first_user_text),
                "createdAt": iso8601(summary.thread.created_at_ms),
                "updatedAt": iso8601(summary.updated_at_ms),
            })
        })
        .collect();
    Ok(json!({ "threads": threads, "next_cursor": page.next_cursor }))
}

/// Erases one thread of the tenant, whoever owns it (an unfinished turn of it cancelled
/// first), audited as `actor: "cli"`.
pub async fn delete_thread(engine: &Engine, tenant: &str, thread: &str) -> Result<(), EngineError> {
    let thread_id = ThreadId::parse(thread).map_err(|message| EngineError::BadRequest { field: "thread", message })?;
    let Some(thread) = engine.store().find_thread(tenant, thread_id.as_str()).await? else {
        return Err(EngineError::NotFound(format!("tenant '{tenant}' has no thread '{thread_id}'")));
    };
    engine.erase_thread(&thread, "cli", None, "operator", TurnsToStop::Any).await
}
