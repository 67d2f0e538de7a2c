use super::fleet::COST_PERSONAS;
use super::*;
use mindfleet_core::dump::{ActorsDump, ChildDump, InboxDump, NodeDump, PersonaDump, WorkingMemoryDump};
use mindfleet_core::messages::PersonaStatus;
use mindfleet_core::record::RecentDecision;
use mindfleet_core::record::SelfStateData;

fn persona(name: &str) -> PersonaDump {
    PersonaDump {
        name: name.into(),
        node: None,
        role: "assistant".into(),
        status: PersonaStatus::Running,
        brain: "rules".into(),
        brain_degraded: None,
        rooms: vec!["general".into()],
        domains: vec!["chat".into()],
        actors: ActorsDump {
            persona: ChildDump::running(0),
            inbox: ChildDump::running(0),
            self_state: ChildDump::running(0),
            working_memory: ChildDump::running(0),
        },
        self_state: Some(SelfStateData::default()),
        inbox: InboxDump { len: 2, capacity: 64, shed: 0, duplicates: 0, top: Vec::new() },
        working_memory: WorkingMemoryDump::default(),
        decisions: Vec::new(),
        in_flight: None,
        plan: None,
        tools_now: Vec::new(),
        waiting_approval: Vec::new(),
        cadence_ms: 0,
        budget_left: 0.75,
        references: None,
        conversation: None,
        study: None,
        drafts_replaced: Default::default(),
    }
}

fn dump(personas: Vec<PersonaDump>) -> FleetDump {
    FleetDump {
        fleet: "t".into(),
        generated_at: String::new(),
        supervisor: ChildDump::running(0),
        admin: Default::default(),
        scheduler: Default::default(),
        coordination: Default::default(),
        embedding: Default::default(),
        llm: Default::default(),
        index: Default::default(),
        storage: Default::default(),
        personas,
        outbox: Vec::new(),
        recent_events: Vec::new(),
        dead_letters: Vec::new(),
        webhooks: Vec::new(),
        nodes: Vec::new(),
        tools: Default::default(),
    }
}

#[test]
fn an_update_holds_what_changed_and_the_order_when_a_card_came_or_went() {
    let cost = CostReport::default();
    let before = Frame::of(&dump(vec![persona("ada"), persona("bob")]), &cost);
    let first = before.update(None);
    assert_eq!((first.cards.len(), first.order.clone()), (2, Some(vec!["ada", "bob"])));
    assert!(first.rooms_html.is_some() && first.fleet_html.is_some());
    assert!(before.update(Some(&before)).cards.is_empty(), "nothing changed");
    let mut calm = persona("ada");
    calm.self_state.as_mut().unwrap().cognitive_load = 0.001;
    let calm = Frame::of(&dump(vec![calm, persona("bob")]), &cost);
    assert!(!calm.differs(&before) && calm.update(Some(&before)).cards.is_empty(), "no change the page shows");

    let mut ada = persona("ada");
    ada.inbox.len = 9;
    let after = Frame::of(&dump(vec![ada, persona("bob")]), &cost);
    let u = after.update(Some(&before));
    assert_eq!(u.cards.iter().map(|c| c.name).collect::<Vec<_>>(), ["ada"]);
    assert!(u.order.is_none() && u.rooms_html.is_none(), "same cards, same rooms");
    let json = serde_json::to_value(&u).unwrap();
    assert!(json.get("order").is_none() && json.get("rooms").is_none(), "{json}");

    let gone = Frame::of(&dump(vec![persona("ada"), persona("cy")]), &cost);
    let u = gone.update(Some(&before));
    assert_eq!(u.cards.iter().map(|c| c.name).collect::<Vec<_>>(), ["cy"]);
    assert_eq!(u.order, Some(vec!["ada", "cy"]), "bob went, cy came");
}

#[test]
fn the_badge_says_what_the_persona_is_doing_failure_and_dormancy_first() {
    let mut p = persona("helper");
    assert_eq!(status_of(&p), "idle");
    p.in_flight = Some("e1".into());
    assert_eq!(status_of(&p), "thinking", "an event in hand, no plan yet");
    p.self_state.as_mut().unwrap().cognitive_load = 0.95;
    assert_eq!(status_of(&p), "overloaded");
    p.self_state.as_mut().unwrap().dormant = true;
    assert_eq!(status_of(&p), "dormant");
    p.status = PersonaStatus::Failed;
    assert_eq!(status_of(&p), "failed");
}

#[test]
fn a_card_escapes_what_people_typed() {
    let mut p = persona("helper");
    p.self_state.as_mut().unwrap().recent_decisions.push(RecentDecision {
        decision: "engage".into(),
        reason: "<script>alert('x')</script> & more".into(),
        at_us: 1,
    });
    let c = card(&p);
    assert_eq!(c.budget_used, 0.25);
    let html = render_card(&c);
    assert!(html.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; more"), "{html}");
    assert!(!html.contains("<script>"), "{html}");
    assert!(html.contains(r#"data-status="idle""#) && html.contains("2 / 64"), "{html}");
}

#[test]
fn the_cost_chart_draws_the_top_personas_on_one_scale() {
    use mindfleet_core::sched::{CostRow, CostSeries};
    let row = |k: &str, tokens| CostRow { key: k.into(), inferences: 1, tokens };
    let series = |k: &str, tokens: Vec<u64>| CostSeries { key: k.into(), tokens };
    let mut cost = CostReport {
        by_persona: vec![row("ada", 300), row("bob", 100)],
        timeline: vec![series("ada", vec![0, 200, 100]), series("bob", vec![100, 0, 0])],
        bucket_secs: 30.0,
        ..CostReport::default()
    };
    let mut d = dump(vec![persona("ada")]);
    let html = render_fleet(&fleet_view(&d, &cost));
    // ada's peak (200) is the top of the shared scale, bob's 100 half way.
    assert!(
        html.contains(r#"<tr data-persona="ada"><th scope="row">ada</th><td>300</td><td title="0 200 100">"#),
        "{html}"
    );
    assert!(html.contains(r#"points="0.0,23.0 60.0,1.0 120.0,12.0""#), "{html}");
    assert!(html.contains(r#"points="0.0,12.0 60.0,23.0 120.0,23.0""#), "{html}");
    assert!(html.contains("(per 30 s)"), "{html}");
    cost.by_persona = (0..12).map(|i| row(&format!("p{i}"), 1)).collect();
    cost.timeline = (0..12).map(|i| series(&format!("p{i}"), vec![1])).collect();
    assert_eq!(fleet_view(&d, &cost).cost.len(), COST_PERSONAS, "the top ones only");
    d.personas.clear();
    let quiet = render_fleet(&fleet_view(&d, &CostReport::default()));
    assert!(quiet.contains("no model calls in the last 15 min"), "{quiet}");
}

#[test]
fn a_fleet_across_nodes_shows_its_nodes_and_where_each_persona_runs() {
    let mut d = dump(vec![PersonaDump { node: Some("b".into()), ..persona("ada") }]);
    assert!(!render_fleet(&fleet_view(&d, &CostReport::default())).contains("nodes"), "one node: no list");
    d.nodes = vec![
        NodeDump { name: "a".into(), status: "self".into(), personas: 0, links: vec![], ..Default::default() },
        NodeDump {
            name: "b".into(),
            status: "unreachable".into(),
            personas: 1,
            error: Some("link closed".into()),
            ..Default::default()
        },
    ];
    let html = render_fleet(&fleet_view(&d, &CostReport::default()));
    assert!(
        html.contains(
            r#"<li data-node="b" data-status="unreachable">b <small>unreachable, 1 personas: link closed</small></li>"#
        ),
        "{html}"
    );
    assert!(card(&d.personas[0]).html.contains(r#"<p class="role">assistant <small class="node">on b</small></p>"#));
}

#[test]
fn the_fleet_view_shows_each_webhook_with_its_dead_letters() {
    use mindfleet_core::webhook::{HookDeadLetter, HookKind, WebhookDump};
    let mut d = dump(vec![persona("ada")]);
    assert!(!render_fleet(&fleet_view(&d, &CostReport::default())).contains("webhooks"), "none: no list");
    d.webhooks = vec![WebhookDump {
        name: "chat".into(),
        url: "https://chat.example/in".into(),
        kinds: vec!["reply".into()],
        pending: 3,
        delivered: 40,
        failures: 7,
        dead: 1,
        dead_letters: vec![HookDeadLetter {
            webhook: "chat".into(),
            id: "ev-1".into(),
            kind: HookKind::Reply,
            attempts: 5,
            error: "5 attempts failed (max_attempts); last: HTTP <500>".into(),
            created_us: 0,
        }],
    }];
    let html = render_fleet(&fleet_view(&d, &CostReport::default()));
    assert!(
        html.contains(concat!(
            r#"<li data-webhook="chat" data-dead="1">chat <small>https://chat.example/in: 3 pending, 40 delivered, "#,
            r#"7 failed attempts, 1 dead</small><ul><li data-delivery="ev-1">ev-1 <small>reply, 5 attempts: "#,
            r#"5 attempts failed (max_attempts); last: HTTP &lt;500&gt;</small></li></ul></li>"#
        )),
        "{html}"
    );
}

#[test]
fn the_panel_shows_the_memory_a_plan_used_and_what_it_changed() {
    use mindfleet_core::record::{MemoryKind, MemoryUse, Plan, PlanRecord};
    let mut p = persona("ada");
    let record = |memory_used| PlanRecord {
        event_id: "e1".into(),
        domain: "chat".into(),
        plan: Plan {
            goal: "answer alice".into(),
            steps: vec![],
            contingencies: vec![],
            criteria: vec![],
            source: "template:chat".into(),
            attempt: 0,
        },
        replaced: vec![],
        adjustments: vec![],
        evaluation: None,
        started_us: 0,
        finished_us: Some(1),
        memory_used,
        draft_check: None,
    };
    p.plan = Some(record(vec![]));
    let none = render_panel(&p, &Answers::default());
    assert!(none.contains("no long-term memory recalled"), "{none}");
    p.plan = Some(record(vec![
        MemoryUse { kind: MemoryKind::UserProfile, id: "alice".into(), effect: "reply for <an> expert user".into() },
        MemoryUse { kind: MemoryKind::Procedure, id: "chat: post_reply".into(), effect: "no effect: why".into() },
    ]));
    let adapters = serde_json::json!({"adapters": [
        {"id": "r1", "topic": "routing", "kept": true, "reason": null, "train": 210, "steps": 106,
         "ppl_before": 9.5, "ppl_after": 6.25, "grade_before": 0.4, "grade_after": 0.45},
        {"id": "r2", "topic": null, "kept": false, "reason": "held-out grade 0.3 with it, 0.4 without: lower",
         "train": 12, "steps": 6, "ppl_before": 9.5, "ppl_after": 9.0, "grade_before": 0.4, "grade_after": 0.3},
    ]});
    let html = render_panel(&p, &Answers { adapters, ..Answers::default() });
    assert!(none.contains("none trained"), "{none}");
    assert!(
        html.contains(r#"<span data-kept="true">r1</span> <small>(routing) kept; held-out perplexity 9.50 &rarr; 6.25, grade 0.40 &rarr; 0.45; 210 chats, 106 steps</small>"#),
        "{html}"
    );
    assert!(html.contains(r#"<span data-kept="false">r2</span> <small>(all topics) discarded: held-out grade 0.3 with it, 0.4 without: lower;"#), "{html}");
    assert!(
        html.contains(
            r#"<li data-kind="user_profile" data-effect="yes"><b>user_profile</b> alice: reply for &lt;an&gt; expert user</li>"#
        ),
        "{html}"
    );
    assert!(html.contains(r#"<li data-kind="procedure" data-effect="no">"#), "{html}");
}
