//! What a writer does when a batch fails: the batch is tried again on its own (as one
//! transaction, recognising its own commit after an interruption), else append by append, so
//! one turn's bad append does not sink the others that shared its batch.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::append::{verdict, Append, LogError};
use super::writer::Writer;
use crate::retry::Backoff;
use crate::store::{BatchOutcome, Store, StoreError, TurnWrites, WriteOp};

impl Writer {
    /// A batch that failed, retried alone (nothing else of this writer is in flight): as one
    /// transaction again (after an interruption, recognising its own commit), else append by
    /// append, so one turn's bad append does not sink the others that shared its batch.
    pub(super) async fn recover(&self, appends: Vec<Append>, batch: Vec<TurnWrites>, error: StoreError) {
        let interrupted = error.is_transient();
        // Pipelined, a batch inserts before its fence: a refused append's rows (a stale runner's
        // sequence numbers) can fail the whole insert, which the fence-first retry avoids.
        let outcomes = if interrupted || (self.depth > 1 && error.is_refused_by_database()) {
            tracing::warn!(%error, appends = batch.len(), "an event log batch failed; trying it again on its own");
            match commit_with_retry(self.store.as_ref(), self.clock.as_ref(), &batch, interrupted).await {
                Ok(outcome) => Some((0..batch.len()).map(|index| verdict(&outcome, index)).collect()),
                Err(error) => {
                    tracing::warn!(%error, appends = batch.len(), "an event log batch failed; committing its appends one by one");
                    None
                }
            }
        } else {
            tracing::warn!(%error, appends = batch.len(), "an event log batch failed; committing its appends one by one");
            None
        };
        let outcomes = match outcomes {
            Some(outcomes) => outcomes,
            None => {
                let mut outcomes = Vec::with_capacity(batch.len());
                for (append, writes) in appends.iter().zip(&batch) {
                    // An earlier append of the same runner failed just now: this one would
                    // leave a hole.
                    let outcome = if append.health.is_fenced() {
                        Err(LogError::Fenced)
                    } else if append.health.is_failed() {
                        Err(LogError::Abandoned)
                    } else {
                        match commit_with_retry(
                            self.store.as_ref(),
                            self.clock.as_ref(),
                            std::slice::from_ref(writes),
                            false,
                        )
                        .await
                        {
                            Ok(outcome) => verdict(&outcome, 0),
                            Err(error) => Err(LogError::Commit(Arc::new(error))),
                        }
                    };
                    append.health.record(&outcome);
                    outcomes.push(outcome);
                }
                outcomes
            }
        };
        // Who follows these turns was not read: other instances catch up by their own check.
        self.settle(appends, batch, outcomes, &[], Instant::now());
    }
}

/// Commits a batch; waits out a database that is away (connection errors, a restart, a
/// deadlock) with backoff, but gives up at once on any other error the database reported
/// (retrying cannot fix it).
///
/// A connection can die after the database committed but before it answered; the retry then
/// meets its own rows. That case is recognised (each append's first event is stored, byte for
/// byte, so the batch went in whole) and counted as committed, so no event is written twice or
/// lost.
///
/// `interrupted`: an earlier attempt already failed in a way that may have committed it (the
/// first attempt then waits a moment, as any retry does).
async fn commit_with_retry(
    store: &dyn Store,
    clock: &dyn crate::clock::Clock,
    batch: &[TurnWrites],
    mut interrupted: bool,
) -> Result<BatchOutcome, StoreError> {
    let mut backoff = Backoff::new(Duration::from_millis(20), Duration::from_secs(2));
    if interrupted {
        backoff.wait().await;
    }
    loop {
        match store.commit_batch(batch, clock.now_ms()).await {
            Ok(outcome) => return Ok(outcome),
            Err(error) if error.is_transient() => {
                interrupted = true;
                let delay = backoff.next_delay();
                tracing::warn!(%error, retry_in_ms = delay.as_millis() as u64, "event log commit failed; retrying");
                tokio::time::sleep(delay).await;
            }
            Err(error) if error.is_refused_by_database() => {
                if interrupted {
                    if let Some(outcome) = already_committed(store, batch).await {
                        return Ok(outcome);
                    }
                }
                return Err(error);
            }
            Err(other) => return Err(other),
        }
    }
}

/// Whether an earlier attempt of this batch committed: the batch's transaction is all or
/// nothing, so if any append's first event is stored exactly as the batch holds it, the batch
/// went in, and the appends with no event stored were the ones its fence refused.
async fn already_committed(store: &dyn Store, batch: &[TurnWrites]) -> Option<BatchOutcome> {
    let mut found_any = false;
    let mut refused = Vec::new();
    for (index, writes) in batch.iter().enumerate() {
        let Some(event) = writes.ops.iter().find_map(|op| match op {
            WriteOp::Event { event, .. } => Some(event),
            _ => None,
        }) else {
            continue;
        };
        match store.events_after(writes.turn, event.seq - 1, 1).await {
            Ok(found) if found.first().is_some_and(|s| s.seq == event.seq && s.body == event.body) => found_any = true,
            Ok(_) => refused.push(index),
            Err(_) => return None,
        }
    }
    // Who follows the turns is not known here: the followers' check catches them up.
    found_any.then_some(BatchOutcome { refused, ..BatchOutcome::default() })
}
