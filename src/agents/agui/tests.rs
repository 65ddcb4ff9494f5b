//! Unit tests of `agents/agui/mod.rs`.

use super::*;

#[test]
fn an_upstream_interrupts_ttl_is_read_from_its_expiry_by_the_engines_clock() {
    let config: AguiAgentConfig =
        serde_json::from_value(json!({ "url": "http://upstream.test/", "interrupt_ttl_secs": 600 })).expect("config");
    let tls = crate::tls::client_config(&Default::default()).expect("the outbound TLS configuration");
    let agent = AguiAgent::new(config, &tls);
    // The engine's clock, far from the machine's: the TTL is the upstream's expiry minus it.
    let now = 1_700_000_000_000;
    let asked = |expires_at: Option<String>| crate::protocol::events::Interrupt {
        id: "u1".into(),
        reason: "tool_approval".into(),
        message: None,
        tool_call_id: None,
        response_schema: None,
        expires_at,
        metadata: None,
        subagent_run_id: None,
    };
    let upstream = Upstream::default();
    let in_90s = Some(crate::protocol::iso8601(now + 90_000));
    assert_eq!(agent.spec(&asked(in_90s), &upstream, now).ttl_ms, 90_000);
    // Past by that clock: the shortest TTL; none given: the configured one.
    let past = Some(crate::protocol::iso8601(now - 5_000));
    assert_eq!(agent.spec(&asked(past), &upstream, now).ttl_ms, 1_000);
    assert_eq!(agent.spec(&asked(None), &upstream, now).ttl_ms, 600_000);
}

#[test]
fn decisions_become_resume_entries_as_the_person_made_them() {
    let decided = |decision: Value| Decided { interrupt_id: "int_1".into(), tool_call_id: None, decision };
    let plain = UpstreamInterrupt { id: "u1".into(), gateway_id: None, response_schema: None };
    // An answer: the gateway's inferred `approved` is its own, not sent.
    assert_eq!(
        resume_entry(&plain, &decided(json!({"approved": true, "answer": "Paris", "gateway/inferred": ["approved"]}))),
        json!({"interruptId": "u1", "status": "resolved", "payload": {"answer": "Paris"}})
    );
    // An answer that is not an object (CrewAI asks for a plain string) goes as given.
    assert_eq!(
        resume_entry(
            &plain,
            &decided(json!({"approved": true, "gateway/payload": "rejected", "gateway/inferred": ["approved"]}))
        ),
        json!({"interruptId": "u1", "status": "resolved", "payload": "rejected"})
    );
    // A denial without a schema that asks for `approved` is a denial, never an empty resolve.
    assert_eq!(
        resume_entry(&plain, &decided(json!({"approved": false, "comment": "not now"}))),
        json!({"interruptId": "u1", "status": "cancelled", "payload": {"approved": false, "comment": "not now"}})
    );
    // An approval with edits carries them, as sent.
    assert_eq!(
        resume_entry(&plain, &decided(json!({"approved": true, "editedArgs": {"to": "me"}}))),
        json!({"interruptId": "u1", "status": "resolved", "payload": {"approved": true, "editedArgs": {"to": "me"}}})
    );
    assert_eq!(
        resume_entry(&plain, &decided(json!({"approved": false, "expired": true}))),
        json!({"interruptId": "u1", "status": "cancelled"})
    );
    assert_eq!(
        resume_entry(&plain, &decided(json!({"approved": false, "cancelled": true}))),
        json!({"interruptId": "u1", "status": "cancelled"})
    );
    let approval = UpstreamInterrupt {
        id: "u2".into(),
        gateway_id: None,
        response_schema: Some(json!({"type": "object", "properties": {"approved": {"type": "boolean"}}})),
    };
    assert_eq!(
        resume_entry(&approval, &decided(json!({"approved": false}))),
        json!({"interruptId": "u2", "status": "resolved", "payload": {"approved": false}})
    );
}
