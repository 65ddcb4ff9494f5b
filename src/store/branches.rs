//! A thread's turns as a tree (SPEC §6): each turn names its parent, the turn whose answer its
//! client had last. A branch is the path from a first turn to one turn; the current branch ends
//! at the thread's newest turn. Pure functions over the rows [`super::ThreadStore::thread_turns`]
//! reads (oldest first), so every view folds a branch the same way.

use super::rows::threads::TurnRow;

/// The branch that ends at `head`: its turns from the first, `head` last. Empty when `head` is
/// not one of `turns`. A parent that is not among `turns` ends the walk (never loops).
pub fn ending_at(turns: &[TurnRow], head: i64) -> Vec<TurnRow> {
    let mut path = Vec::new();
    let mut next = Some(head);
    while let Some(pk) = next {
        let Some(turn) = turns.iter().find(|t| t.pk == pk) else { break };
        if path.len() > turns.len() {
            break;
        }
        path.push(turn.clone());
        next = turn.parent;
    }
    path.reverse();
    path
}

/// The current branch: the one ending at the thread's newest turn.
pub fn current(turns: &[TurnRow]) -> Vec<TurnRow> {
    match newest(turns) {
        Some(head) => ending_at(turns, head.pk),
        None => Vec::new(),
    }
}

/// The thread's newest turn (the last started): the head of the current branch, and the only
/// one that may still run.
pub fn newest(turns: &[TurnRow]) -> Option<&TurnRow> {
    turns.iter().max_by_key(|t| t.ordinal)
}

/// The turns that go on from `parent` (the first turns for `None`), oldest first: the
/// alternatives a user message offers.
pub fn children(turns: &[TurnRow], parent: Option<i64>) -> Vec<&TurnRow> {
    let mut found: Vec<&TurnRow> = turns.iter().filter(|t| t.parent == parent).collect();
    found.sort_by_key(|t| t.ordinal);
    found
}

/// Where a turn stands among its alternatives: its 0-based place and the turns sharing its
/// parent (itself included), oldest first.
pub fn alternatives<'a>(turns: &'a [TurnRow], turn: &TurnRow) -> (usize, Vec<&'a TurnRow>) {
    let siblings = children(turns, turn.parent);
    let place = siblings.iter().position(|t| t.pk == turn.pk).unwrap_or(0);
    (place, siblings)
}

/// The newest turn of the branches that go through `turn`: where a client that opens the
/// alternative `turn` lands (its branch as it was last continued).
pub fn latest_through(turns: &[TurnRow], turn: &TurnRow) -> i64 {
    let mut latest = turn;
    for candidate in turns {
        if candidate.ordinal > latest.ordinal && ending_at(turns, candidate.pk).iter().any(|t| t.pk == turn.pk) {
            latest = candidate;
        }
    }
    latest.pk
}
