//! Tenant isolation at the store: a lookup by an id a client supplies takes the tenant, and
//! another tenant's id finds nothing there — isolation does not rest on the engine filtering
//! what the store returned. Against the store API on both stores, like `fencing.rs`.

use std::sync::Arc;

use agui_gateway::store::{
    self, ApiKeyRow, AuditEntry, InterruptRow, InterruptStatus, KeyKind, StartTurn, Store, TurnWrites, WriteOp,
};

use crate::helpers::*;
use crate::on_both_stores;

async fn open_store(db: &TestDatabase) -> Arc<dyn Store> {
    let store = store::connect(&db.url, 4).await.expect("store opens");
    store.migrate().await.expect("migrations");
    store
}

fn audit(tenant: &str, action: &str) -> AuditEntry {
    AuditEntry {
        tenant: tenant.into(),
        action: action.into(),
        actor: "cli".into(),
        via: None,
        detail: "{}".into(),
        at_ms: 5,
    }
}

async fn another_tenants_ids_find_nothing(backend: Backend) {
    let db = TestDatabase::new(backend).await;
    let store = open_store(&db).await;

    // Tenant "acme": a thread with a turn waiting on an interrupt, and an API key.
    let new = new_turn_of("acme", "th-acme", "a");
    let (thread, turn) = match store.start_turn(&new).await.expect("start") {
        StartTurn::Started { thread, turn } => (thread, turn),
        other => panic!("the turn did not start: {other:?}"),
    };
    let interrupt_id = unique("int");
    let interrupt = InterruptRow {
        id: interrupt_id.clone(),
        thread: thread.pk,
        turn: turn.pk,
        shown: "{}".into(),
        deciders: r#"{"persons": [], "roles": []}"#.into(),
        four_eyes: false,
        started_by: "test".into(),
        expires_at_ms: i64::MAX,
        status: InterruptStatus::Open,
        decision: None,
        decided_by: None,
        decided_seq: None,
        created_at_ms: 2,
        policy_digest: String::new(),
    };
    let opened = store
        .commit_batch(
            &[TurnWrites { turn: turn.pk, epoch: turn.epoch, ops: vec![WriteOp::OpenInterrupt(interrupt)] }],
            now_ms(),
        )
        .await
        .expect("commit");
    assert!(opened.refused.is_empty(), "the interrupt opened");
    let key = ApiKeyRow {
        id: unique("k"),
        tenant: "acme".into(),
        name: "ci".into(),
        kind: KeyKind::Tenant,
        scopes: "threads:read".into(),
        secret_sha256: "00".into(),
        created_by: "cli".into(),
        created_at_ms: 3,
        revoked_at_ms: None,
    };
    store.create_api_key(&key, &audit("acme", "key.create")).await.expect("key");

    // The owning tenant finds each of them.
    assert_eq!(store.find_thread("acme", "th-acme").await.expect("q").map(|t| t.pk), Some(thread.pk));
    assert_eq!(store.find_interrupt("acme", &interrupt_id).await.expect("q").map(|i| i.turn), Some(turn.pk));
    assert_eq!(store.find_api_key("acme", &key.id).await.expect("q").map(|k| k.tenant), Some("acme".into()));

    // Another tenant finds none of them, and cannot revoke the key.
    assert_eq!(store.find_thread("other", "th-acme").await.expect("q"), None);
    assert_eq!(store.find_interrupt("other", &interrupt_id).await.expect("q"), None);
    assert_eq!(store.find_api_key("other", &key.id).await.expect("q"), None);
    assert!(store.list_api_keys(Some("other")).await.expect("q").is_empty());
    assert!(!store.revoke_api_key("other", &key.id, &audit("other", "key.revoke")).await.expect("revoke"));
    let kept = store.find_api_key("acme", &key.id).await.expect("q").expect("the key");
    assert_eq!(kept.revoked_at_ms, None, "another tenant's revoke changed nothing");
    assert!(store.audit_rows(Some("other"), 0, 100).await.expect("q").is_empty(), "and wrote no audit row");

    // A presented credential is the one lookup without a tenant: it establishes the tenant.
    assert_eq!(store.key_for_credential(&key.id).await.expect("q").map(|k| k.tenant), Some("acme".into()));
}
on_both_stores!(another_tenants_ids_find_nothing);
