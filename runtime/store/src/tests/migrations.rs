//! Databases of older schema versions, opened by this one: what each migration keeps.

use super::*;

#[tokio::test]
async fn a_version_1_database_is_migrated_and_keeps_directed_rooms() {
    let dir = tempfile::tempdir().unwrap();
    // What version 1 wrote: no `rooms` table, memberships only implied by directed events.
    {
        let db = Database::create(dir.path().join("fleet.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(META).unwrap().insert("schema_version", 1).unwrap();
        let mut directed = event("d1");
        directed.persona = Some("helper".into());
        directed.room = "war-room".into();
        let mut events = txn.open_table(EVENTS).unwrap();
        events.insert(1, enc(&directed).as_slice()).unwrap();
        events.insert(2, enc(&event("u1")).as_slice()).unwrap();
        drop(events);
        txn.commit().unwrap();
    }
    let s = Storage::open(&cfg(dir.path())).unwrap();
    let rooms = s.rooms().unwrap();
    assert_eq!(rooms.len(), 1);
    assert_eq!(rooms["war-room"], ["helper"]);
    s.close().await.unwrap();
    let db = Database::create(dir.path().join("fleet.redb")).unwrap();
    let v = db.begin_read().unwrap().open_table(META).unwrap().get("schema_version").unwrap().unwrap().value();
    assert_eq!(v, SCHEMA_VERSION);
}

#[tokio::test]
async fn a_version_3_database_keeps_its_pending_deliveries_and_their_crash_counts() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Database::create(dir.path().join("fleet.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        Tables::open(&txn).unwrap();
        txn.open_table(META).unwrap().insert("schema_version", 3).unwrap();
        txn.open_table(EVENTS).unwrap().insert(7, enc(&event("e7")).as_slice()).unwrap();
        let mut old = txn.open_table(DELIVERIES_V3).unwrap();
        old.insert(("helper", 7), 2).unwrap();
        old.insert(("scribe", 7), 0).unwrap();
        drop(old);
        txn.commit().unwrap();
    }
    let s = Storage::open(&cfg(dir.path())).unwrap();
    let restored = s.load_inbox("helper".into()).await.unwrap();
    let got: Vec<(u64, &str, u32)> =
        restored.deliveries.iter().map(|d| (d.seq, d.event.id.as_str(), d.crashes)).collect();
    assert_eq!(got, [(7, "e7", 2)]);
    let pending = s.pending_by_persona().unwrap();
    assert_eq!(pending.keys().collect::<Vec<_>>(), ["helper", "scribe"]);
    s.close().await.unwrap();
    let db = Database::create(dir.path().join("fleet.redb")).unwrap();
    let txn = db.begin_read().unwrap();
    assert!(txn.open_table(DELIVERIES_V3).is_err(), "the version 3 table is gone");
}

#[tokio::test]
async fn a_version_4_database_keeps_its_decisions_without_references() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Database::create(dir.path().join("fleet.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        Tables::open(&txn).unwrap();
        txn.delete_table(REFERENCES).unwrap();
        txn.open_table(META).unwrap().insert("schema_version", 4).unwrap();
        // Version 4 decisions: the fields of today's, in order, without the references.
        let numbers: Vec<(String, f64)> = vec![("priority".into(), 0.5)];
        let stored = enc(&("d0", Verdict::Ignore, "old reason", "test", 0.5, numbers, 42_i64));
        txn.open_table(DECISIONS).unwrap().insert(("helper", 0), stored.as_slice()).unwrap();
        let logged = ("d1", Verdict::Engage, "logged", "fast_path/mention", 0.9, Vec::<(String, f64)>::new(), 43_i64);
        txn.open_table(DECISION_LOG).unwrap().insert(1, enc(&("helper", logged)).as_slice()).unwrap();
        txn.commit().unwrap();
    }
    let s = Storage::open(&cfg(dir.path())).unwrap();
    let got = s.recent_decisions("helper", 10).unwrap();
    let ids: Vec<(&str, &str, usize)> =
        got.iter().map(|d| (d.event_id.as_str(), d.reason.as_str(), d.references.len())).collect();
    assert_eq!(ids, [("d1", "logged", 0), ("d0", "old reason", 0)]);
    assert_eq!(got[1].numbers, [("priority".to_string(), 0.5)]);
    assert!(s.selected_references("helper").unwrap().is_empty(), "the new table starts empty");
    s.close().await.unwrap();
}

#[tokio::test]
async fn a_version_5_database_keeps_its_plans_without_memory_used() {
    use mindfleet_core::record::{Plan, PlanRecord};
    let dir = tempfile::tempdir().unwrap();
    let plan = Plan {
        goal: "answer alice".into(),
        steps: vec![],
        contingencies: vec![],
        criteria: vec![],
        source: "template:chat".into(),
        attempt: 0,
    };
    {
        let db = Database::create(dir.path().join("fleet.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        Tables::open(&txn).unwrap();
        txn.open_table(META).unwrap().insert("schema_version", 5).unwrap();
        // A version 5 plan: the fields of today's, in order, without `memory_used`.
        let old = enc(&("old", "chat", &plan, Vec::<Plan>::new(), Vec::<()>::new(), None::<()>, 1_i64, Some(2_i64)));
        txn.open_table(PLANS).unwrap().insert(("helper", 0), old.as_slice()).unwrap();
        txn.commit().unwrap();
    }
    let s = Storage::open(&cfg(dir.path())).unwrap();
    let got = s.recent_plans("helper", 10).unwrap();
    let want = PlanRecord {
        event_id: "old".into(),
        domain: "chat".into(),
        plan,
        replaced: vec![],
        adjustments: vec![],
        evaluation: None,
        started_us: 1,
        finished_us: Some(2),
        memory_used: vec![],
        draft_check: None,
    };
    assert_eq!(got, [want]);
    s.close().await.unwrap();
}

#[tokio::test]
async fn a_version_8_database_keeps_its_plans_without_a_draft_check() {
    use mindfleet_core::record::{MemoryKind, MemoryUse, Plan};
    let dir = tempfile::tempdir().unwrap();
    let plan = Plan {
        goal: "answer alice".into(),
        steps: vec![],
        contingencies: vec![],
        criteria: vec![],
        source: "template:chat".into(),
        attempt: 0,
    };
    let used = MemoryUse { kind: MemoryKind::Knowledge, id: "k1".into(), effect: "cited".into() };
    {
        let db = Database::create(dir.path().join("fleet.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        Tables::open(&txn).unwrap();
        txn.open_table(META).unwrap().insert("schema_version", 8).unwrap();
        // A version 8 plan: the fields of today's, in order, without `draft_check`.
        let old = enc(&(
            "old",
            "chat",
            &plan,
            Vec::<Plan>::new(),
            Vec::<()>::new(),
            None::<()>,
            1_i64,
            Some(2_i64),
            vec![used.clone()],
        ));
        txn.open_table(PLANS).unwrap().insert(("helper", 0), old.as_slice()).unwrap();
        txn.commit().unwrap();
    }
    let s = Storage::open(&cfg(dir.path())).unwrap();
    let got = s.recent_plans("helper", 10).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].memory_used.as_slice(), &got[0].draft_check), (&[used][..], &None));
    s.close().await.unwrap();
}

#[tokio::test]
async fn a_version_9_database_keeps_its_plans_steps_without_a_tool_call() {
    use mindfleet_core::record::{Action, Step, StepState};
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Database::create(dir.path().join("fleet.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        Tables::open(&txn).unwrap();
        txn.open_table(META).unwrap().insert("schema_version", 9).unwrap();
        // A version 9 plan: steps of (action, state, contingency), without a call.
        let steps = vec![(Action::RecallMemory, StepState::Done, false), (Action::PostReply, StepState::Skipped, true)];
        let plan = ("answer alice", steps, Vec::<()>::new(), Vec::<()>::new(), "template:chat", 1_u32);
        let old = enc(&(
            "old",
            "chat",
            &plan,
            vec![&plan],
            Vec::<()>::new(),
            None::<()>,
            1_i64,
            Some(2_i64),
            Vec::<()>::new(),
            None::<()>,
        ));
        txn.open_table(PLANS).unwrap().insert(("helper", 0), old.as_slice()).unwrap();
        txn.commit().unwrap();
    }
    let s = Storage::open(&cfg(dir.path())).unwrap();
    let got = s.recent_plans("helper", 10).unwrap();
    let want = vec![
        Step { action: Action::RecallMemory, state: StepState::Done, contingency: false, call: None },
        Step { action: Action::PostReply, state: StepState::Skipped, contingency: true, call: None },
    ];
    assert_eq!(got.len(), 1);
    assert_eq!((&got[0].plan.steps, &got[0].replaced[0].steps, got[0].plan.attempt), (&want, &want, 1));
    assert_eq!(got[0].plan.goal, "answer alice");
    s.close().await.unwrap();
}

#[tokio::test]
async fn a_version_6_message_gets_its_events_time_and_keeps_its_arrival_as_taken_in() {
    use mindfleet_core::conversation::Said;
    let dir = tempfile::tempdir().unwrap();
    let said_at = event("e7").ts_us - 86_400_000_000;
    {
        let db = Database::create(dir.path().join("fleet.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        Tables::open(&txn).unwrap();
        txn.open_table(META).unwrap().insert("schema_version", 6).unwrap();
        // Event e7 was said a day before it was sent; e8 is no longer kept.
        let e7 = Event { ts_us: said_at, ..event("e7") };
        txn.open_table(EVENTS).unwrap().insert(7, enc(&e7).as_slice()).unwrap();
        txn.open_table(EVENT_IDS).unwrap().insert("e7", 7).unwrap();
        // Version 6 messages: today's fields, in order, without `taken_us`.
        let mut t = txn.open_table(CONVERSATION).unwrap();
        for (seq, id) in [(7_u64, "e7"), (8, "e8")] {
            let old = enc(&(seq, id, "r", "a", "t", 1_000_i64 + seq as i64, 0.5_f64, true, 0_u32, 0_i64));
            t.insert(("helper", seq), old.as_slice()).unwrap();
        }
        drop(t);
        txn.commit().unwrap();
    }
    let s = Storage::open(&cfg(dir.path())).unwrap();
    let got: Vec<Said> = s.conversation("helper", &[7, 8]).unwrap();
    let times: Vec<(u64, i64, i64)> = got.iter().map(|m| (m.seq, m.at_us, m.taken_us)).collect();
    assert_eq!(times, [(7, said_at, 1_007), (8, 1_008, 1_008)]);
    assert!(got.iter().all(|m| m.embedded && m.text == "t"));
    s.close().await.unwrap();
}

#[tokio::test]
async fn a_version_7_decision_gets_the_room_of_its_event_where_the_event_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Database::create(dir.path().join("fleet.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        Tables::open(&txn).unwrap();
        txn.open_table(META).unwrap().insert("schema_version", 7).unwrap();
        let mut kept = event("kept");
        kept.room = "ops".into();
        txn.open_table(EVENTS).unwrap().insert(1, enc(&kept).as_slice()).unwrap();
        txn.open_table(EVENT_IDS).unwrap().insert("kept", 1).unwrap();
        // Version 7 decisions: today's fields, in order, without the room.
        let v7 = |id: &'static str| {
            (id, Verdict::Ignore, "why", "test", 0.5, Vec::<(String, f64)>::new(), 42_i64, Vec::<RefMatch>::new())
        };
        txn.open_table(DECISIONS).unwrap().insert(("helper", 0), enc(&v7("kept")).as_slice()).unwrap();
        txn.open_table(DECISION_LOG).unwrap().insert(1, enc(&("helper", v7("gone"))).as_slice()).unwrap();
        txn.commit().unwrap();
    }
    let s = Storage::open(&cfg(dir.path())).unwrap();
    let got = s.recent_decisions("helper", 10).unwrap();
    let rooms: Vec<(&str, &str, &str)> =
        got.iter().map(|d| (d.event_id.as_str(), d.room.as_str(), d.reason.as_str())).collect();
    assert_eq!(rooms, [("gone", "", "why"), ("kept", "ops", "why")]);
    s.close().await.unwrap();
}

#[tokio::test]
async fn a_newer_schema_is_refused_with_both_versions() {
    let dir = tempfile::tempdir().unwrap();
    Storage::open(&cfg(dir.path())).unwrap().close().await.unwrap();
    {
        let db = Database::create(dir.path().join("fleet.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        txn.open_table(META).unwrap().insert("schema_version", SCHEMA_VERSION + 1).unwrap();
        txn.commit().unwrap();
    }
    let err = Storage::open(&cfg(dir.path())).err().expect("refused").to_string();
    assert!(err.contains(&format!("schema version {} is not one", SCHEMA_VERSION + 1)), "{err}");
}

#[tokio::test]
async fn a_version_11_or_12_database_refuses_a_replay_then_forgets_its_histories_and_keeps_its_journal() {
    // 11: chained with FNV-1a; 12: JSON lines, digests over JSON. This version reads neither.
    let row_12 = [&[0u8; 8][..], &[2], br#"{"Begin":{}}"#].concat();
    for (version, row) in [(11, vec![7u8; 12]), (12, row_12)] {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = Database::create(dir.path().join("fleet.redb")).unwrap();
            let txn = db.begin_write().unwrap();
            Tables::open(&txn).unwrap();
            txn.open_table(META).unwrap().insert("schema_version", version).unwrap();
            txn.open_table(RECORD_V13).unwrap().insert(("helper", 0), row.as_slice()).unwrap();
            txn.open_table(EVENTS).unwrap().insert(1, enc(&event("kept")).as_slice()).unwrap();
            txn.commit().unwrap();
        }
        // A replay of it is refused, with the reason.
        let err = crate::history::HistoryReader::open(dir.path()).err().expect("refused").to_string();
        assert!(
            err.contains(&format!("history is of schema version {version}, which this mindfleet cannot replay")),
            "{err}"
        );
        Storage::open(&cfg(dir.path())).unwrap().close().await.unwrap();
        let db = Database::create(dir.path().join("fleet.redb")).unwrap();
        let txn = db.begin_read().unwrap();
        assert_eq!(txn.open_table(META).unwrap().get("schema_version").unwrap().unwrap().value(), SCHEMA_VERSION);
        assert_eq!(txn.open_table(RECORDED).unwrap().iter().unwrap().count(), 0, "version {version}");
        assert!(txn.list_tables().unwrap().all(|t| redb::TableHandle::name(&t) != "record"), "version {version}");
        assert!(txn.open_table(EVENTS).unwrap().get(1).unwrap().is_some());
    }
}
