//! Counting a task's round trips to the database, in the crate's own tests (compiled only for
//! them): how many times the work of one task took a connection from a pool. A statement run
//! on its own takes one (most store calls run one; a read of an empty page of the log runs a
//! second), and a whole transaction takes one however many statements it holds: the unit the
//! walks in `docs/architecture.md` count in.
//!
//! The count is kept per task (a tokio task-local), so what other tasks do meanwhile — a turn's
//! runner, the log writers, the lease keeper — is not counted with the work measured; a test
//! counts a request by running it, and its stream up to the first event, inside [`counted`].

use std::cell::Cell;
use std::future::Future;

use sqlx::pool::PoolOptions;
use sqlx::Database;

tokio::task_local! {
    static TAKEN: Cell<usize>;
}

/// Runs `work` and counts the connections it took from the store's pools on this task.
pub(crate) async fn counted<F: Future>(work: F) -> (F::Output, usize) {
    TAKEN
        .scope(Cell::new(0), async {
            let output = work.await;
            (output, TAKEN.with(Cell::get))
        })
        .await
}

/// `options` with hooks that count each connection handed to a caller: an idle one
/// (`before_acquire`) or one opened for it (`after_connect`). Outside [`counted`] they count
/// nothing.
pub(super) fn counting<DB: Database>(options: PoolOptions<DB>) -> PoolOptions<DB> {
    options
        .after_connect(|_, _| {
            taken();
            Box::pin(async { Ok(()) })
        })
        .before_acquire(|_, _| {
            taken();
            Box::pin(async { Ok(true) })
        })
}

fn taken() {
    // Outside a counted scope (another task's work) there is nothing to count.
    let _ = TAKEN.try_with(|count| count.set(count.get() + 1));
}
