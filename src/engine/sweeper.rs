//! The lease keeper and its sweeps: renewing this instance's lease each heartbeat, taking over
//! turns whose owner stopped renewing, denying interrupts past their expiry, and the wake-up
//! listener that carries other instances' appends and cancels (PostgreSQL).
//!
//! An instance holds one lease (its `instances` row), not one per turn: a heartbeat is one
//! `UPDATE` of that row whether the instance runs no turn or 50,000, and touches no `turns` row,
//! so it never queues behind the log writers' batches. When the renewal finds the lease lapsed
//! (the instance was away longer than `turns.lease_ms`), others may have claimed any of its
//! turns: it takes its lease up again, then checks once which turns it still holds and stops
//! the others' runners here ([`TurnSignal::Lost`]). Fencing by epoch keeps any write of theirs
//! out meanwhile.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::errors::EngineError;
use super::meaning::{Denial, Meaning};
use super::request::resume::EntryPlan;
use super::request::resumed_marker;
use super::runner::TurnStart;
use super::shape::{Engine, Inner};
use super::turn::TurnSignal;
use crate::metrics::CodeLabel;
use crate::store::{Decision, InterruptStatus, StoreError, TurnRow, WakeUp};

/// Every this many heartbeats the lease keeper does its upkeep: gives back turns that name this
/// instance but run nowhere here, and forgets instances that lapsed long ago.
const UPKEEP_EVERY_BEATS: u64 = 10;
/// An instance lapsed for this many leases, owning no running turn, is forgotten (its row
/// deleted), so the table does not grow with restarts.
const FORGET_AFTER_LEASES: i64 = 10;

impl Engine {
    /// Renews this instance's lease every heartbeat (and, when it had lapsed, stops the turns
    /// claimed meanwhile), takes over turns whose owner stopped renewing, and every few
    /// heartbeats does the lease upkeep.
    pub(super) fn spawn_lease_keeper(&self) {
        let weak = Arc::downgrade(&self.inner);
        let turns = self.inner.config.turns.clone();
        tokio::spawn(async move {
            let mut heartbeat = tokio::time::interval(Duration::from_millis(turns.heartbeat_ms));
            heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut sweep = tokio::time::interval(Duration::from_millis(turns.sweep_ms));
            sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut beats: u64 = 0;
            // Turns found naming this instance without a runner here at the last upkeep.
            let mut suspects = HashSet::new();
            loop {
                tokio::select! {
                    _ = heartbeat.tick() => {
                        let Some(inner) = weak.upgrade() else { return };
                        inner.renew_lease().await;
                        beats += 1;
                        if beats.is_multiple_of(UPKEEP_EVERY_BEATS) {
                            inner.lease_upkeep(&mut suspects).await;
                        }
                    }
                    _ = sweep.tick() => {
                        let Some(inner) = weak.upgrade() else { return };
                        Engine { inner }.sweep().await;
                    }
                }
            }
        });
    }

    /// One sweep, by the engine's clock: takes over turns whose owner's lease lapsed (or that
    /// were released) and denies interrupts past their expiry. The lease keeper runs it every
    /// `turns.sweep_ms`.
    pub async fn sweep(&self) {
        // On SQLite too: a turn released by a command-line decision is picked up. Never this
        // instance's own turns: if its own lease lapsed, its next heartbeat takes it up again
        // and keeps every turn nobody claimed, where claiming them here would restart each
        // from its checkpoint.
        if let Err(error) = self.take_over_lapsed(self.now_ms(), 64, false).await {
            tracing::warn!(%error, "looking for lapsed turns failed");
        }
        if let Err(error) = self.expire_interrupts().await {
            tracing::warn!(%error, "expiring interrupts failed");
        }
    }

    /// Claims, one at a time, up to `limit` running turns that are lapsed at `now` (their owner's
    /// lease lapsed, their owner has no lease, or they were released) and continues them.
    /// `include_own`: also turns naming this instance (their runner here, if any, is fenced off
    /// by the new epoch).
    pub(super) async fn take_over_lapsed(&self, now: i64, limit: usize, include_own: bool) -> Result<(), StoreError> {
        let inner = &self.inner;
        // A stopping instance would only take back the turns it is handing over; a draining one
        // takes on no turn.
        if inner.stopping.load(Ordering::Acquire) || inner.draining.load(Ordering::Acquire) {
            return Ok(());
        }
        for _ in 0..limit {
            let Some(turn) = inner.store.claim_lapsed_turn(&inner.instance, now, include_own).await? else {
                break;
            };
            tracing::info!(turn = %turn.public_id, "taking over a turn whose owner stopped");
            self.spawn_turn(turn, TurnStart::Takeover);
        }
        Ok(())
    }

    pub(super) fn spawn_wakeup_listener(&self, mut wakeups: tokio::sync::mpsc::Receiver<Vec<WakeUp>>) {
        let inner = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            while let Some(notification) = wakeups.recv().await {
                let Some(inner) = inner.upgrade() else { return };
                for wakeup in notification {
                    match wakeup {
                        WakeUp::Cancel { turn } => {
                            inner.signal_cancel(turn);
                        }
                        WakeUp::NewTurn { thread } => inner.hub.wake_thread(thread),
                        heard => {
                            if matches!(heard, WakeUp::Lost) {
                                inner.hub.wake_every_thread();
                            }
                            match &inner.followers {
                                Some(followers) => followers.heard(heard),
                                None => wake_streams(&inner.hub, heard),
                            }
                        }
                    }
                }
            }
        });
    }

    /// Denies, exactly once across instances, every open interrupt past its expiry, and sets
    /// their turns going again (§5.1 `expiresAt`).
    pub(super) async fn expire_interrupts(&self) -> Result<(), StoreError> {
        let store = &self.inner.store;
        for row in store.lapsed_interrupts(self.now_ms()).await? {
            let Some(turn) = store.turn_by_pk(row.turn).await? else { continue };
            let meaning = Meaning::Deny { comment: None, why: Denial::Expired };
            let plan = EntryPlan::Decide { interrupt_id: row.id.clone(), decision: meaning.stored(None), meaning };
            let decided = Box::pin(self.decide_expired(&turn, plan)).await;
            if let Err(error) = decided {
                tracing::warn!(%error, interrupt = %row.id, "could not expire an interrupt");
            }
        }
        Ok(())
    }

    pub(super) async fn decide_expired(&self, turn: &TurnRow, plan: EntryPlan) -> Result<(), EngineError> {
        let inner = &self.inner;
        let EntryPlan::Decide { interrupt_id, decision, meaning } = &plan else { return Ok(()) };
        let decisions = [Decision {
            interrupt_id: interrupt_id.clone(),
            status: InterruptStatus::Expired,
            decision: decision.to_string(),
            decided_by: "gateway".into(),
            decided_via: "expiry".into(),
        }];
        // An expiry is a deny (§5.3), and says so as every decision does.
        let outcomes = [meaning.outcome(interrupt_id, "expired")];
        let expired = outcomes.iter().collect::<Vec<_>>();
        let Some(thread) = inner.store.thread_by_pk(turn.thread).await? else {
            return Err(StoreError::Corrupt(format!("turn {} names a missing thread", turn.public_id)).into());
        };
        let audit = self.decision_audit(&thread.tenant, turn, "gateway", None, "interrupt.expire", &expired);
        let marker = resumed_marker(&outcomes, Default::default(), self.board(turn).await?, self.now_ms())?;
        if self.record(turn, &decisions, marker, &audit, None).await?.is_some() {
            tracing::info!(interrupt = %interrupt_id, "an interrupt expired and was denied");
            inner.metrics.interrupts_decided.get_or_create(&CodeLabel { code: "expired".into() }).inc();
        }
        Ok(())
    }
}

impl Inner {
    /// Renews this instance's lease: on the normal path one `UPDATE` of its row. A lease found
    /// lapsed is taken up again, and then (not before: a claim that committed before the lease
    /// was taken up again is seen, a later one cannot happen) the instance checks which of its
    /// turns it still holds.
    pub(super) async fn renew_lease(&self) {
        let now = self.clock.now_ms();
        let until = now + self.config.turns.lease_ms as i64;
        let lapsed = match self.store.renew_instance(&self.instance, now, until).await {
            Ok(renewed) => !renewed,
            Err(error) => {
                tracing::warn!(%error, "could not renew this instance's lease");
                return;
            }
        };
        if lapsed {
            // A stopping instance gave its lease up on purpose: never take it up again.
            if self.stopping.load(Ordering::Acquire) {
                return;
            }
            tracing::warn!(
                "this instance's lease had lapsed; taking it up again and checking which turns it still holds"
            );
            if let Err(error) = self.store.register_instance(&self.instance, now, until).await {
                tracing::warn!(%error, "could not take this instance's lease up again");
                return;
            }
            self.must_reconcile.store(true, Ordering::Release);
        }
        if self.must_reconcile.load(Ordering::Acquire) {
            match self.stop_lost_turns().await {
                Ok(()) => self.must_reconcile.store(false, Ordering::Release),
                // Tried again at the next heartbeat; meanwhile fencing refuses a lost runner's writes.
                Err(error) => tracing::warn!(%error, "could not check which turns this instance still holds"),
            }
        }
    }

    /// The runners here, each `turn → epoch`.
    fn runner_epochs(&self) -> HashMap<i64, i64> {
        self.running.lock().unwrap_or_else(|p| p.into_inner()).iter().map(|(turn, r)| (*turn, r.epoch)).collect()
    }

    /// Stops every runner here whose turn the database no longer gives this instance at the
    /// runner's epoch: another instance claimed it while this one's lease was lapsed.
    async fn stop_lost_turns(&self) -> Result<(), StoreError> {
        let held = self.runner_epochs();
        let owned: HashSet<(i64, i64)> = self.store.owned_turns(&self.instance).await?.into_iter().collect();
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        for (turn, epoch) in held {
            if owned.contains(&(turn, epoch)) {
                continue;
            }
            // Only the runner asked about: a later claim's may have replaced it.
            if let Some(runner) = running.get(&turn).filter(|r| r.epoch == epoch) {
                if *runner.switch.borrow() == TurnSignal::Run {
                    tracing::warn!(
                        turn,
                        "lost a running turn while this instance's lease was lapsed; stopping it here"
                    );
                    runner.switch.send_replace(TurnSignal::Lost);
                }
            }
        }
        Ok(())
    }

    /// Every few heartbeats: the log's partitions are kept ahead of the turns to come (and
    /// emptied ones dropped, PostgreSQL); a turn that names this instance at an epoch no runner
    /// here holds, at two upkeeps in a row (so never a turn between its claim and its runner's
    /// start), is given back for a sweep to take over (e.g. its runner ended while the database
    /// was away and could not give it back); and instances lapsed for long owning no running
    /// turn are forgotten.
    pub(super) async fn lease_upkeep(&self, suspects: &mut HashSet<(i64, i64)>) {
        if self.stopping.load(Ordering::Acquire) {
            return;
        }
        match self.store.owned_turns(&self.instance).await {
            Ok(owned) => {
                let runners = self.runner_epochs();
                let unrun: HashSet<(i64, i64)> =
                    owned.into_iter().filter(|(turn, epoch)| runners.get(turn) != Some(epoch)).collect();
                for (turn, epoch) in unrun.intersection(suspects) {
                    tracing::warn!(turn, "a turn named this instance but ran nowhere here; giving it back");
                    if let Err(error) = self.store.release_turn(*turn, &self.instance, *epoch).await {
                        tracing::warn!(turn, %error, "could not give a turn back");
                    }
                }
                *suspects = unrun.difference(suspects).copied().collect();
            }
            Err(error) => tracing::warn!(%error, "could not read which turns this instance owns"),
        }
        let span = self.config.event_log.turns_per_partition();
        match self.store.keep_log_partitions(span, self.clock.now_ms()).await {
            Ok(upkeep) => {
                if !upkeep.created.is_empty() || !upkeep.dropped.is_empty() {
                    tracing::info!(made = ?upkeep.created, dropped = ?upkeep.dropped, "kept the log's partitions");
                }
            }
            Err(error) => tracing::warn!(%error, "could not keep the log's partitions"),
        }
        let forget_before = self.clock.now_ms() - FORGET_AFTER_LEASES * self.config.turns.lease_ms as i64;
        match self.store.forget_instances(forget_before).await {
            Ok(0) => {}
            Ok(forgotten) => tracing::info!(forgotten, "forgot instances whose lease lapsed long ago"),
            Err(error) => tracing::warn!(%error, "could not forget long-lapsed instances"),
        }
    }
}

/// A wake-up for streams that read the table themselves (no turn is followed here).
fn wake_streams(hub: &crate::engine::stream::hub::Hub, wakeup: WakeUp) {
    match wakeup {
        WakeUp::Committed { turn, seq } => hub.wake(turn, seq),
        WakeUp::Events { turn, events } => hub.wake(turn, events.last().map_or(0, |e| e.seq)),
        WakeUp::Lost => hub.wake_every_feed(),
        WakeUp::Cancel { .. } | WakeUp::NewTurn { .. } => {}
    }
}
