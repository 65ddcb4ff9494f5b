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

/// Each decision goes upstream in the terms of the interrupt the upstream sent: its one
/// meaning, never a form the upstream may read otherwise (docs/agents.md, "Decisions upstream").
#[test]
fn decisions_go_upstream_in_the_upstreams_own_terms() {
    let decided = |meaning: Meaning, payload: Option<Value>| Decided {
        interrupt_id: "int_1".into(),
        tool_call_id: None,
        decision: meaning.stored(payload.as_ref()),
    };
    let interrupt = |schema: Option<Value>, refusal: Option<&str>| UpstreamInterrupt {
        id: "u1".into(),
        gateway_id: None,
        response_schema: schema,
        refusal: refusal.map(str::to_string),
    };
    let resolved = |payload: Value| Ok(json!({"interruptId": "u1", "status": "resolved", "payload": payload}));
    let approve = Meaning::Approve { comment: None, edited_args: None };
    let said_no = Meaning::Deny { comment: Some("not now".into()), why: Denial::Said };
    let yes_no = interrupt(Some(json!({"type": "object", "properties": {"approved": {"type": "boolean"}}})), None);
    assert_eq!(
        resume_entry(&yes_no, &decided(said_no.clone(), Some(json!({"approved": false})))),
        resolved(json!({"approved": false})),
        "a schema's own key: `resolved` with it `false`, never dropped"
    );
    let expired = Meaning::Deny { comment: None, why: Denial::Expired };
    let cancelled = Meaning::Deny { comment: None, why: Denial::Cancelled };

    // No schema (Google ADK's confirmation): a yes as the person gave it; a "no" is AG-UI's
    // own, `cancelled` (with the person's `approved: false`), never a `resolved` an upstream
    // that named no key may take as a yes.
    let unstated = interrupt(None, None);
    let yes = json!({"approved": true, "editedArgs": {"to": "me"}});
    assert_eq!(resume_entry(&unstated, &decided(approve.clone(), Some(yes.clone()))), resolved(yes));
    let no = json!({"approved": false, "comment": "not now"});
    assert_eq!(
        resume_entry(&unstated, &decided(said_no.clone(), Some(no.clone()))),
        Ok(json!({"interruptId": "u1", "status": "cancelled", "payload": no}))
    );
    assert_eq!(
        resume_entry(&unstated, &decided(expired.clone(), None)),
        Ok(json!({"interruptId": "u1", "status": "cancelled"}))
    );

    // A schema with its own boolean key: that key is set, never dropped.
    let alias = json!({"type": "object", "properties": {"accepted": {"type": "boolean"}}});
    let accepting = interrupt(Some(alias), None);
    assert_eq!(resume_entry(&accepting, &decided(cancelled.clone(), None)), resolved(json!({"accepted": false})));
    assert_eq!(
        resume_entry(&accepting, &decided(approve, Some(json!({"approved": true})))),
        resolved(json!({"approved": true, "accepted": true})),
        "a yes under a key of ours gets the upstream's key besides"
    );

    // A list of options (CrewAI): an answer is the option; a "no" is the refusal option, or,
    // without one, nothing is sent at all.
    let options = json!({"type": "string", "enum": ["approved", "rejected"]});
    let picked = Meaning::Answer { value: json!("approved"), choice: Some("approved".into()) };
    let listed = interrupt(Some(options.clone()), Some("rejected"));
    assert_eq!(resume_entry(&listed, &decided(picked, Some(json!("approved")))), resolved(json!("approved")));
    assert_eq!(resume_entry(&listed, &decided(expired.clone(), None)), resolved(json!("rejected")));
    assert_eq!(resume_entry(&listed, &decided(cancelled.clone(), None)), resolved(json!("rejected")));
    let unrefusable = interrupt(Some(options), None);
    let refused = resume_entry(&unrefusable, &decided(cancelled, None)).expect_err("no way to say no");
    assert!(refused.contains("deny_option"), "{refused}");

    // A free answer: as given; declined, `cancelled`.
    let free = interrupt(Some(json!({"type": "object", "properties": {"city": {"type": "string"}}})), None);
    let answer = Meaning::Answer { value: json!({"city": "Paris"}), choice: None };
    assert_eq!(
        resume_entry(&free, &decided(answer, Some(json!({"city": "Paris"})))),
        resolved(json!({"city": "Paris"}))
    );
    assert_eq!(resume_entry(&free, &decided(expired, None)), Ok(json!({"interruptId": "u1", "status": "cancelled"})));
    // A decision stored before meanings were still goes as the person sent it.
    let earlier = Decided {
        interrupt_id: "int_1".into(),
        tool_call_id: None,
        decision: json!({"approved": true, "answer": "Paris", "gateway/inferred": ["approved"]}),
    };
    assert_eq!(resume_entry(&free, &earlier), resolved(json!({"answer": "Paris"})));
}
