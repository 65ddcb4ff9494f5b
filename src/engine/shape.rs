//! The engine's shape: [`Engine`], the cheap handle every room's `impl Engine` block extends,
//! and `Inner`, the state it shares (the store, the log writer, the hub, the agents, the
//! turns running here); with how an engine starts and what any room may ask of it. It sits
//! below the rooms: it names only their plain types (the hub, the log writer, the agent
//! registry, a turn's signal), never their `impl Engine` blocks.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::watch;

use super::board;
use super::errors::{EngineError, StartError};
use super::log::{self, LogWriter};
use super::stream::followers::Followers;
use super::stream::hub::Hub;
use super::turn::agent::AgentRegistry;
use super::turn::{TurnServices, TurnSignal};
use crate::bus::Bus;
use crate::caller::Caller;
use crate::clock::Clock;
use crate::config::Config;
use crate::ids::ThreadId;
use crate::metrics::Metrics;
use crate::store::{Store, StoreError, ThreadRow};

/// The turn engine as the layers above hold it: a handle on its shared state, cheap to clone.
#[derive(Clone)]
pub struct Engine {
    pub(in crate::engine) inner: Arc<Inner>,
}

/// What the engine's handles share.
pub(in crate::engine) struct Inner {
    pub(in crate::engine) config: Arc<Config>,
    pub(in crate::engine) store: Arc<dyn Store>,
    /// How this instance and the others sharing the database wake each other.
    pub(in crate::engine) bus: Arc<dyn Bus>,
    /// Turns another instance runs that streams here follow (on a shared store).
    pub(in crate::engine) followers: Option<Arc<Followers>>,
    pub(in crate::engine) log: LogWriter,
    pub(in crate::engine) hub: Arc<Hub>,
    pub(in crate::engine) agents: Arc<AgentRegistry>,
    /// Agents' card schemas (§3), by name.
    pub(in crate::engine) cards: Arc<HashMap<String, Value>>,
    /// Names this instance: its lease (its `instances` row) and the turns it owns.
    pub(in crate::engine) instance: String,
    /// False for a command's engine, which never runs turns.
    pub(in crate::engine) serving: bool,
    /// The turns this instance runs: the epoch each runner holds and its signal switch.
    pub(in crate::engine) running: Mutex<HashMap<i64, Runner>>,
    /// Set by [`Engine::hand_over`]: this instance takes no turn over and runs no new one.
    pub(in crate::engine) stopping: std::sync::atomic::AtomicBool,
    /// Set by [`Engine::drain`]: the turns running here go on, but none is taken over or
    /// started here (a new one is handed to another instance at once).
    pub(in crate::engine) draining: std::sync::atomic::AtomicBool,
    /// Set when this instance's lease was found lapsed: the next heartbeat checks which turns
    /// it still holds (until a check succeeds).
    pub(in crate::engine) must_reconcile: std::sync::atomic::AtomicBool,
    pub(in crate::engine) metrics: Arc<Metrics>,
    /// What time it is, for every decision by the time of day (leases, expiries, quota
    /// windows) and every timestamp written.
    pub(in crate::engine) clock: Arc<dyn Clock>,
}

/// A turn this instance runs: the ownership epoch its runner holds, and its signal switch.
pub(in crate::engine) struct Runner {
    pub(in crate::engine) epoch: i64,
    pub(in crate::engine) switch: watch::Sender<TurnSignal>,
}

impl Engine {
    /// Starts the log writers, the wake-ups from other instances (PostgreSQL) and the lease
    /// keeper; on SQLite, first takes over the turns an earlier start left running.
    pub async fn start(
        config: Arc<Config>,
        store: Arc<dyn Store>,
        agents: Arc<AgentRegistry>,
    ) -> Result<Engine, StartError> {
        Engine::start_with(config, store, agents, crate::clock::system(), true, None).await
    }

    /// [`Engine::start`] on a wake-up bus already connected ([`crate::bus::connect`]): a server
    /// connects it before it migrates the database, so that a bus it cannot reach stops the
    /// start before anything was changed. Reads the time from `clock` (the machine's, or a
    /// test's).
    pub async fn start_on_bus(
        config: Arc<Config>,
        store: Arc<dyn Store>,
        agents: Arc<AgentRegistry>,
        bus: Arc<dyn Bus>,
        clock: Arc<dyn Clock>,
    ) -> Result<Engine, StartError> {
        Engine::start_with(config, store, agents, clock, true, Some(bus)).await
    }

    /// [`Engine::start`] reading the time from `clock` (a test's, moved by hand).
    pub async fn start_with_clock(
        config: Arc<Config>,
        store: Arc<dyn Store>,
        agents: Arc<AgentRegistry>,
        clock: Arc<dyn Clock>,
    ) -> Result<Engine, StartError> {
        Engine::start_with(config, store, agents, clock, true, None).await
    }

    /// An engine for a one-off command next to serving instances: it neither takes turns over
    /// nor holds a lease (a turn a decision of its sets going names it only until it is
    /// released for them, and is lapsed meanwhile, as its owner has no lease).
    pub async fn start_passive(
        config: Arc<Config>,
        store: Arc<dyn Store>,
        agents: Arc<AgentRegistry>,
    ) -> Result<Engine, StartError> {
        Engine::start_with(config, store, agents, crate::clock::system(), false, None).await
    }

    async fn start_with(
        config: Arc<Config>,
        store: Arc<dyn Store>,
        agents: Arc<AgentRegistry>,
        clock: Arc<dyn Clock>,
        serving: bool,
        bus: Option<Arc<dyn Bus>>,
    ) -> Result<Engine, StartError> {
        let hub = Arc::new(Hub::default());
        let shared = store.is_shared();
        let bus = match bus {
            Some(bus) => bus,
            None => crate::bus::connect(&config.bus, store.clone()).await?,
        };
        let followers = (shared && serving).then(|| Followers::start(store.clone(), clock.clone(), bus.clone(), &hub));
        let writers = if shared { config.event_log.writers } else { 1 };
        let metrics = Metrics::new();
        let batching = log::Batching {
            batch_max_events: config.event_log.batch_max_events,
            pipeline_depth: config.event_log.pipeline_depth,
        };
        let log = LogWriter::start(
            store.clone(),
            clock.clone(),
            bus.clone(),
            hub.clone(),
            writers,
            batching,
            metrics.clone(),
        );
        let cards = Arc::new(config.agents.iter().filter_map(|a| Some((a.name.clone(), a.card.clone()?))).collect());
        let instance = uuid::Uuid::new_v4().simple().to_string()[..16].to_string();
        let engine = Engine {
            inner: Arc::new(Inner {
                config,
                store: store.clone(),
                bus: bus.clone(),
                followers,
                log,
                hub,
                agents,
                cards,
                instance,
                serving,
                running: Mutex::new(HashMap::new()),
                stopping: std::sync::atomic::AtomicBool::new(false),
                draining: std::sync::atomic::AtomicBool::new(false),
                must_reconcile: std::sync::atomic::AtomicBool::new(false),
                metrics,
                clock,
            }),
        };
        if !serving {
            return Ok(engine);
        }
        // The lease first: a turn this instance starts is lapsed while its owner has no row.
        let now = engine.now_ms();
        let until = now + engine.inner.config.turns.lease_ms as i64;
        store.register_instance(&engine.inner.instance, now, until).await?;
        // The partitions' upkeep by the engine's clock: the migrations made the partitions, but
        // only the upkeep records which ones new turns have passed (and drops emptied ones).
        store.keep_log_partitions(engine.inner.config.event_log.turns_per_partition(), now).await?;
        if let Some(wakeups) = bus.listen().await? {
            engine.spawn_wakeup_listener(wakeups);
        }
        engine.spawn_lease_keeper();
        engine.spawn_retention();
        if !shared {
            // One instance only: every turn still marked running was left by an earlier start.
            engine.take_over_lapsed(i64::MAX, usize::MAX, false).await?;
        }
        Ok(engine)
    }

    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.inner.metrics
    }

    /// This instance's name: the id of its lease and the owner its turns name.
    pub fn instance(&self) -> &str {
        &self.inner.instance
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    pub fn config(&self) -> &Arc<Config> {
        &self.inner.config
    }

    /// The clock the engine decides by.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// Milliseconds since the epoch, by the engine's clock.
    pub(crate) fn now_ms(&self) -> i64 {
        self.inner.clock.now_ms()
    }

    /// The thread's board as its current branch sees it: its notes folded in pin order (§7), whole (callers see it through
    /// their [`board::Clearance`]).
    pub async fn thread_board(&self, thread: i64) -> Result<Vec<Value>, StoreError> {
        let store = &self.inner.store;
        let turns = store.thread_turns(thread).await?;
        Ok(board::current(store.notes(thread).await?, &turns))
    }

    /// The thread, when it exists and the caller may read it. A thread the caller may not read
    /// is reported exactly like a missing one.
    pub async fn readable_thread(
        &self,
        tenant: &str,
        caller: &Caller,
        thread_id: &ThreadId,
    ) -> Result<ThreadRow, EngineError> {
        match self.inner.store.find_thread(tenant, thread_id.as_str()).await? {
            Some(thread) if caller.may_read(&thread) => Ok(thread),
            Some(_) => Err(EngineError::PermissionDenied),
            None => Err(EngineError::NotFound(format!("thread '{thread_id}' not found"))),
        }
    }
}

impl Inner {
    /// What a turn's context takes from the engine (see [`TurnServices`]).
    pub(in crate::engine) fn turn_services(&self) -> TurnServices<'_> {
        TurnServices {
            config: &self.config,
            log: &self.log,
            store: &self.store,
            agents: self.agents.clone(),
            cards: &self.cards,
            clock: &self.clock,
        }
    }
}
