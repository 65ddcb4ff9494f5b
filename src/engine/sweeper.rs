//! The lease keeper and its sweeps: renewing this instance's leases each heartbeat, taking
//! over turns whose owner stopped renewing, denying interrupts past their expiry, and the
//! wake-up listener that carries other instances' appends and cancels (PostgreSQL).

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::decide::resumed_marker;
use super::interrupts::EntryPlan;
use super::runner::{TurnStart, CANCEL_SIGNAL, NEW_TURN_SIGNAL};
use super::turn::TurnSignal;
use super::{Engine, EngineError, Inner};
use crate::metrics::CodeLabel;
use crate::store::{Decision, InterruptStatus, StoreError, TurnRow};

impl Engine {
    /// Renews the leases of this instance's turns every heartbeat, stops turns whose lease was
    /// lost, and takes over turns whose owner stopped renewing.
    pub(super) fn spawn_lease_keeper(&self) {
        let weak = Arc::downgrade(&self.inner);
        let turns = self.inner.config.turns.clone();
        tokio::spawn(async move {
            let mut heartbeat = tokio::time::interval(Duration::from_millis(turns.heartbeat_ms));
            heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut sweep = tokio::time::interval(Duration::from_millis(turns.sweep_ms));
            sweep.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = heartbeat.tick() => {
                        let Some(inner) = weak.upgrade() else { return };
                        inner.renew_leases().await;
                    }
                    _ = sweep.tick() => {
                        let Some(inner) = weak.upgrade() else { return };
                        Engine { inner }.sweep().await;
                    }
                }
            }
        });
    }

    /// One sweep, by the engine's clock: takes over turns whose lease lapsed and denies
    /// interrupts past their expiry. The lease keeper runs it every `turns.sweep_ms`.
    pub async fn sweep(&self) {
        // On SQLite too: a turn released by a command-line decision is picked up.
        if let Err(error) = self.take_over_lapsed(self.now_ms(), 64, true).await {
            tracing::warn!(%error, "looking for lapsed turns failed");
        }
        if let Err(error) = self.expire_interrupts().await {
            tracing::warn!(%error, "expiring interrupts failed");
        }
    }

    /// Claims up to `limit` running turns whose lease lapsed before `now` and continues them.
    /// `include_own`: a lapsed lease of this instance's own is claimed too (its runner here, if
    /// any, was too slow to renew it and is fenced off by the new epoch).
    pub(super) async fn take_over_lapsed(&self, now: i64, limit: usize, include_own: bool) -> Result<(), StoreError> {
        let inner = &self.inner;
        // A stopping instance would only take back the turns it is handing over.
        if inner.stopping.load(std::sync::atomic::Ordering::Acquire) {
            return Ok(());
        }
        for _ in 0..limit {
            let lease_until = self.now_ms() + inner.config.turns.lease_ms as i64;
            let Some(turn) = inner.store.claim_lapsed_turn(&inner.instance, now, lease_until, include_own).await?
            else {
                break;
            };
            tracing::info!(turn = %turn.public_id, "taking over a turn whose owner stopped");
            self.spawn_turn(turn, TurnStart::Takeover, None);
        }
        Ok(())
    }

    pub(super) fn spawn_wakeup_listener(&self, mut wakeups: tokio::sync::mpsc::Receiver<Vec<(i64, i64)>>) {
        let inner = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            while let Some(pairs) = wakeups.recv().await {
                let Some(inner) = inner.upgrade() else { return };
                // An empty list means notifications may have been lost: wake every stream.
                let wake_all = pairs.is_empty();
                let (cancels, appends): (Vec<_>, Vec<_>) =
                    pairs.into_iter().partition(|(_, seq)| *seq == CANCEL_SIGNAL);
                for (turn, _) in cancels {
                    inner.signal_cancel(turn);
                }
                let (starts, appends): (Vec<_>, Vec<_>) =
                    appends.into_iter().partition(|(_, seq)| *seq == NEW_TURN_SIGNAL);
                for (thread, _) in starts {
                    inner.hub.wake_thread(Some(thread));
                }
                if wake_all {
                    inner.hub.wake_thread(None);
                }
                if wake_all || !appends.is_empty() {
                    inner.hub.wake(&appends);
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
            let plan = EntryPlan::Decide {
                interrupt_id: row.id.clone(),
                decision: json!({ "approved": false, "expired": true }),
                approved: false,
            };
            let decided = Box::pin(self.decide_expired(&turn, plan)).await;
            if let Err(error) = decided {
                tracing::warn!(%error, interrupt = %row.id, "could not expire an interrupt");
            }
        }
        Ok(())
    }

    pub(super) async fn decide_expired(&self, turn: &TurnRow, plan: EntryPlan) -> Result<(), EngineError> {
        let inner = &self.inner;
        let EntryPlan::Decide { interrupt_id, decision, .. } = &plan else { return Ok(()) };
        let decisions = [Decision {
            interrupt_id: interrupt_id.clone(),
            status: InterruptStatus::Expired,
            decision: decision.to_string(),
            decided_by: "gateway".into(),
            decided_via: "expiry".into(),
        }];
        let outcomes = [json!({ "interruptId": interrupt_id, "outcome": "expired" })];
        let expired = outcomes.iter().collect::<Vec<_>>();
        let audit = self.decision_audit(turn, "gateway", None, "interrupt.expire", &expired).await?;
        let marker = resumed_marker(&outcomes, Default::default(), self.board(turn).await?, self.now_ms())?;
        if self.record(turn, &decisions, marker, &audit).await?.is_some() {
            tracing::info!(interrupt = %interrupt_id, "an interrupt expired and was denied");
            inner.metrics.interrupts_decided.get_or_create(&CodeLabel { code: "expired".into() }).inc();
        }
        Ok(())
    }
}

impl Inner {
    /// Extends the leases of the turns this instance runs, each under its runner's epoch. A
    /// running turn missing from the renewal was claimed by another runner (this one was away
    /// too long) and stops; the store would refuse its writes anyway.
    pub(super) async fn renew_leases(&self) {
        let until = self.clock.now_ms() + self.config.turns.lease_ms as i64;
        let held: Vec<(i64, i64)> = self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(turn, runner)| (*turn, runner.epoch))
            .collect();
        match self.store.renew_leases(&self.instance, until, &held).await {
            Ok(renewed) => {
                let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
                for (turn, epoch) in held {
                    if renewed.contains(&turn) {
                        continue;
                    }
                    // Only the runner asked about: a later claim's may have replaced it.
                    if let Some(runner) = running.get(&turn).filter(|r| r.epoch == epoch) {
                        if *runner.switch.borrow() == TurnSignal::Run {
                            tracing::warn!(turn, "lost the lease of a running turn; stopping it here");
                            runner.switch.send_replace(TurnSignal::Lost);
                        }
                    }
                }
            }
            Err(error) => tracing::warn!(%error, "could not renew turn leases"),
        }
    }
}
