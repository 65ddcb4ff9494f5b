//! The stages a pipelined batch passes through, in its writer's order: written (events first,
//! then its fence once the batch before it took its own), then committed once the batch before
//! it committed. Each batch tells the one behind it of each stage, failures included. A batch
//! with none before it in flight is, where the store can, written and committed in one
//! statement.

use std::time::{Duration, Instant};

use futures_util::FutureExt;
use tokio::sync::oneshot;

use crate::store::{BatchOutcome, Store, StoreError, TurnWrites, WrittenAhead};

/// How long a pipelined batch waits for the batch before it to take its fence. Two batches of
/// one writer only meet on the same rows when two runners of a turn wrote the same sequence
/// numbers (which the writer keeps out of one pipeline), so this only bounds what such a
/// clash the writer did not foresee could cost: the later batch rolls back and goes again.
const FENCE_WAIT: Duration = Duration::from_secs(2);

/// What a batch's task did.
pub(super) enum Finished {
    /// Committed, with what its fence refused, when its COMMIT was sent and acknowledged.
    Committed { outcome: BatchOutcome, sent: Instant, acknowledged: Instant },
    /// It failed; its transaction was rolled back first (nothing of it is committed, unless
    /// its COMMIT was sent and the answer was lost: the retry finds out).
    Failed(StoreError),
    /// A batch before it did not commit: rolled back (or never begun), to be written again.
    Abandoned,
}

/// The signals a batch gives the one behind it: its fence was taken (the gate of the next
/// batch's fence), and it committed (the gate of the next batch's COMMIT). `false` or a
/// dropped sender: it did not.
pub(super) struct Stages {
    pub(super) fenced: oneshot::Receiver<bool>,
    pub(super) committed: oneshot::Receiver<bool>,
}

pub(super) struct StageSenders {
    pub(super) fenced: Option<oneshot::Sender<bool>>,
    pub(super) committed: Option<oneshot::Sender<bool>>,
}

impl StageSenders {
    pub(super) fn fenced(&mut self, ok: bool) {
        if let Some(sender) = self.fenced.take() {
            let _ = sender.send(ok);
        }
    }

    pub(super) fn committed(&mut self, ok: bool) {
        self.fenced(ok);
        if let Some(sender) = self.committed.take() {
            let _ = sender.send(ok);
        }
    }
}

/// Whether the earlier batch reached the stage (`None`: there is no earlier batch in flight).
async fn reached(stage: Option<oneshot::Receiver<bool>>) -> bool {
    match stage {
        None => true,
        Some(stage) => stage.await.unwrap_or(false),
    }
}

/// A batch's way through its own transaction: written (events first when pipelined, its fence
/// only once the batch before it took its own), then committed once the batch before it
/// committed. It tells the batch behind it of each stage, failures included, and rolls back
/// before it tells of a failure, so the batch behind it never waits on its locks.
pub(super) async fn write_and_commit(
    store: &dyn Store,
    batch: &[TurnWrites],
    earlier: Option<Stages>,
    mut stages: StageSenders,
    pipelined: bool,
    now_ms: i64,
) -> Finished {
    if earlier.is_none() {
        // Nothing in flight before it: where the store can, the whole batch is one statement
        // that commits as it returns (one round trip instead of BEGIN, INSERT, fence, COMMIT).
        let sent = Instant::now();
        match store.commit_at_once(batch, now_ms).await {
            Ok(Some(outcome)) => {
                let acknowledged = Instant::now();
                stages.committed(true);
                return Finished::Committed { outcome, sent, acknowledged };
            }
            Ok(None) => {}
            Err(error) => {
                stages.committed(false);
                return Finished::Failed(error);
            }
        }
    }
    let (earlier_fenced, earlier_committed) = match earlier {
        Some(Stages { fenced, committed }) => (Some(fenced), Some(committed)),
        None => (None, None),
    };
    let written = if pipelined {
        let gate = async move {
            // Past the wait, the batch before it is presumed stuck on this one's rows: this one
            // gives way (rolls back and goes again after it).
            tokio::time::timeout(FENCE_WAIT, reached(earlier_fenced)).await.unwrap_or(false)
        };
        match store.write_batch_ahead(batch, gate.boxed(), now_ms).await {
            Ok(WrittenAhead::Open { open, followed }) => {
                Ok(Some((BatchOutcome { followed, ..Default::default() }, open)))
            }
            // Its fence refused an append it had inserted: written again fence first, still
            // after the batch before it took its fence (the gate passed).
            Ok(WrittenAhead::Refused) => store.write_batch(batch, now_ms).await.map(|w| Some((w.outcome, w.open))),
            Ok(WrittenAhead::Abandoned) => Ok(None),
            Err(error) => Err(error),
        }
    } else {
        store.write_batch(batch, now_ms).await.map(|w| Some((w.outcome, w.open)))
    };
    let (outcome, open) = match written {
        Ok(Some(written)) => written,
        Ok(None) => {
            stages.committed(false);
            return Finished::Abandoned;
        }
        Err(error) => {
            stages.committed(false);
            return Finished::Failed(error);
        }
    };
    stages.fenced(true);
    if !reached(earlier_committed).await {
        open.rollback().await;
        stages.committed(false);
        return Finished::Abandoned;
    }
    let sent = Instant::now();
    match open.commit().await {
        Ok(()) => {
            let acknowledged = Instant::now();
            stages.committed(true);
            Finished::Committed { outcome, sent, acknowledged }
        }
        Err(error) => {
            stages.committed(false);
            Finished::Failed(error)
        }
    }
}
