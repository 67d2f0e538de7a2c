use std::time::{Duration, Instant};

use super::*;
use crate::histogram::LogHistogram;
use crate::legacy::DELIVERIES_V3;
use crate::schema::*;
use mindfleet_core::record::{Decision, EntryKind, Verdict};
use redb::ReadableDatabase;

mod migrations;
mod record;

fn state(energy: f64) -> SelfStateData {
    SelfStateData { energy, ..SelfStateData::default() }
}

fn entry(id: u64) -> WmEntry {
    WmEntry {
        id,
        domain: "chat".into(),
        kind: EntryKind::Observation,
        text: format!("entry {id}"),
        importance: 0.5,
        event_id: None,
        relevance: 0.5,
        created_us: 0,
        last_access_us: 0,
        access_count: 0,
        expires_us: i64::MAX,
    }
}

/// The self-state row as committed, bypassing the writer.
fn stored_energy(s: &Storage, persona: &str) -> Option<f64> {
    s.read(|txn| {
        let t = txn.open_table(SELF_STATE)?;
        Ok(match t.get(persona)? {
            Some(b) => Some(dec::<SelfStateData>(b.value())?.energy),
            None => None,
        })
    })
    .unwrap()
}

#[tokio::test]
async fn held_writes_are_read_through_and_committed_by_a_flush_or_a_close() {
    let dir = tempfile::tempdir().unwrap();
    let held = StorageConfig { write_behind: Duration::from_secs(3600), ..cfg(dir.path()) };
    let s = Storage::open(&held).unwrap();
    let p: Arc<str> = "p".into();
    s.put_self_state(p.clone(), state(0.1));
    s.put_self_state(p.clone(), state(0.2));
    s.put_memory(p.clone(), entry(1));
    s.put_memory(p.clone(), entry(2));
    let ev = Eviction {
        entry_id: 1,
        domain: "chat".into(),
        text: "entry 1".into(),
        reason: "capacity".into(),
        retention: 0.1,
        at_us: 0,
    };
    s.delete_memory(p.clone(), 1, Some(ev));

    // Loads see every write sent before them; the table has none of them yet.
    assert_eq!(s.load_self_state(p.clone()).await.unwrap().map(|s| s.energy), Some(0.2));
    let ids: Vec<u64> = s.load_memory(p.clone()).await.unwrap().iter().map(|e| e.id).collect();
    assert_eq!(ids, [2]);
    assert_eq!(s.stats().await.unwrap().held_writes, 4, "one state, two memory rows, one eviction");
    assert_eq!(stored_energy(&s, "p"), None);
    assert!(s.recent_evictions("p", 10).unwrap().is_empty());

    s.flush().await.unwrap();
    assert_eq!(stored_energy(&s, "p"), Some(0.2));
    assert_eq!(s.recent_evictions("p", 10).unwrap().len(), 1);
    assert_eq!(s.stats().await.unwrap().held_writes, 0);

    s.put_self_state(p.clone(), state(0.3));
    s.close().await.unwrap();
    let s = Storage::open(&held).unwrap();
    assert_eq!(s.load_self_state(p.clone()).await.unwrap().map(|s| s.energy), Some(0.3), "a close commits");
    let ids: Vec<u64> = s.load_memory(p).await.unwrap().iter().map(|e| e.id).collect();
    assert_eq!(ids, [2]);
}

#[tokio::test]
async fn held_writes_are_committed_when_due_without_another_request() {
    let dir = tempfile::tempdir().unwrap();
    let s = Storage::open(&StorageConfig { write_behind: Duration::from_millis(20), ..cfg(dir.path()) }).unwrap();
    s.put_self_state("p".into(), state(0.4));
    let deadline = Instant::now() + Duration::from_secs(10);
    while stored_energy(&s, "p").is_none() {
        assert!(Instant::now() < deadline, "the held self-state was never committed");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(stored_energy(&s, "p"), Some(0.4));
}

#[test]
fn the_log_histogram_is_within_five_percent() {
    let mut h = LogHistogram { counts: Vec::new(), total: 0, max: 0.0 };
    for i in 1..=1000 {
        h.push(i as f64 / 10.0); // 0.1 .. 100 ms
    }
    for (p, exact) in [(0.5, 50.0), (0.99, 99.0)] {
        let got = h.percentile(p);
        assert!(got >= exact && got <= exact * 1.05, "p{p}: {got} vs {exact}");
    }
    assert_eq!(h.percentile(1.0), 100.0, "never above the maximum");
    h.push(1e9);
    assert_eq!(h.max, 1e9);
}
use mindfleet_core::config::FleetConfig;
use mindfleet_core::event::EventInput;

fn cfg(dir: &Path) -> StorageConfig {
    StorageConfig {
        data_dir: dir.to_path_buf(),
        ..FleetConfig::from_toml(Path::new("fleet.toml"), "[[persona]]\nname = \"a\"\nrole = \"r\"\n").unwrap().storage
    }
}

fn event(id: &str) -> Event {
    EventInput {
        id: Some(id.into()),
        domain: "chat".into(),
        room: "r".into(),
        from: "a".into(),
        text: "t".into(),
        ..Default::default()
    }
    .validate()
    .unwrap()
}

async fn inject(s: &Storage, id: &str, persona: &str) -> Result<InjectAck, InjectError> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    s.inject(Box::new(event(id)), vec![(Arc::from(persona), None)], tx.into());
    rx.await.unwrap()
}

fn decision(id: &str) -> Decision {
    Decision {
        event_id: id.into(),
        verdict: Verdict::Ignore,
        reason: "test".into(),
        by: "test".into(),
        priority: 0.0,
        numbers: Vec::new(),
        at_us: 0,
        references: Vec::new(),
        room: "general".into(),
    }
}

/// Persona p's commit of delivery `seq` with `decision` and nothing else.
fn decided(seq: u64, decision: Decision) -> PersonaCommit {
    PersonaCommit {
        persona: "p".into(),
        seq,
        accepted_us: 0,
        decision,
        reply: None,
        plan: None,
        said: None,
        defer: None,
        recorded: None,
    }
}

fn log_len(s: &Storage) -> u64 {
    s.read(|txn| Ok(redb::ReadableTableMetadata::len(&txn.open_table(DECISION_LOG)?)?)).unwrap()
}

#[tokio::test]
async fn decisions_are_read_from_the_log_until_copied_then_kept_up_to_the_limit_newest_first() {
    let dir = tempfile::tempdir().unwrap();
    let held = StorageConfig { decisions_per_persona: 2, write_behind: Duration::from_secs(3600), ..cfg(dir.path()) };
    let s = Storage::open(&held).unwrap();
    for i in 1..=3u64 {
        let id = format!("e{i}");
        inject(&s, &id, "p").await.unwrap();
        let commit = decided(i, decision(&id));
        s.commit(Box::new(commit), Vec::new(), 0, Vec::new());
    }
    // Acknowledged after the commit of every request sent before it.
    inject(&s, "e4", "q").await.unwrap();
    let ids =
        |s: &Storage| -> Vec<String> { s.recent_decisions("p", 10).unwrap().into_iter().map(|d| d.event_id).collect() };
    assert_eq!(log_len(&s), 3);
    assert_eq!(ids(&s), ["e3", "e2", "e1"]);
    assert_eq!(s.stats().await.unwrap().pending, 1);

    s.flush().await.unwrap();
    assert_eq!(log_len(&s), 0);
    assert_eq!(ids(&s), ["e3", "e2"]);
    assert_eq!(s.all_decisions().unwrap().len(), 2);
}

#[tokio::test]
async fn decisions_are_newest_first_by_when_they_were_made_not_by_when_they_were_journaled() {
    let dir = tempfile::tempdir().unwrap();
    let s = Storage::open(&cfg(dir.path())).unwrap();
    // An engaged event's decision (made first) is journaled after its work, behind one made later.
    for (seq, id, at_us) in [(1u64, "later", 200), (2, "engaged", 100)] {
        inject(&s, id, "p").await.unwrap();
        let commit = decided(seq, Decision { at_us, ..decision(id) });
        s.commit(Box::new(commit), Vec::new(), 0, Vec::new());
    }
    inject(&s, "sync", "q").await.unwrap();
    let ids =
        |s: &Storage| -> Vec<String> { s.recent_decisions("p", 10).unwrap().into_iter().map(|d| d.event_id).collect() };
    assert_eq!(ids(&s), ["later", "engaged"], "from the log");
    s.flush().await.unwrap();
    assert_eq!(ids(&s), ["later", "engaged"], "from the table");
}

#[tokio::test]
async fn decisions_left_in_the_log_by_a_crash_are_copied_after_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    Storage::open(&cfg(dir.path())).unwrap().close().await.unwrap();
    {
        // What a kill -9 leaves: logged decisions that were never copied.
        let db = Database::create(dir.path().join("fleet.redb")).unwrap();
        let txn = db.begin_write().unwrap();
        let mut log = txn.open_table(DECISION_LOG).unwrap();
        log.insert(0, enc(&("p", &decision("e1"))).as_slice()).unwrap();
        log.insert(1, enc(&("q", &decision("e2"))).as_slice()).unwrap();
        drop(log);
        let mut meta = txn.open_table(META).unwrap();
        meta.insert("next_decision", 2).unwrap();
        drop(meta);
        txn.commit().unwrap();
    }
    let s = Storage::open(&StorageConfig { write_behind: Duration::from_secs(3600), ..cfg(dir.path()) }).unwrap();
    assert_eq!(s.recent_decisions("q", 10).unwrap()[0].event_id, "e2");
    s.flush().await.unwrap();
    assert_eq!(log_len(&s), 0);
    let mut all: Vec<(String, String)> = s.all_decisions().unwrap().into_iter().map(|(p, d)| (p, d.event_id)).collect();
    all.sort();
    assert_eq!(all, [("p".to_string(), "e1".to_string()), ("q".into(), "e2".into())]);
}

#[tokio::test]
async fn a_finish_of_a_finished_delivery_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = Storage::open(&cfg(dir.path())).unwrap();
    inject(&s, "e1", "p").await.unwrap();
    for _ in 0..2 {
        let commit = decided(1, decision("e1"));
        s.commit(Box::new(commit), Vec::new(), 0, Vec::new());
    }
    s.flush().await.unwrap();
    assert_eq!(s.recent_decisions("p", 10).unwrap().len(), 1);
    assert_eq!(s.stats().await.unwrap().stale_finishes, 1);
}

#[tokio::test]
async fn a_released_persona_arrives_whole_on_another_database_and_leaves_nothing_behind() {
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let held = |d: &Path| StorageConfig { write_behind: Duration::from_secs(3600), ..cfg(d) };
    let (a, b) = (Storage::open(&held(da.path())).unwrap(), Storage::open(&held(db.path())).unwrap());
    let p: Arc<str> = "p".into();
    // On a: two decisions (held, not yet copied), a self-state, memory, a joined room and
    // an unfinished delivery; q's rows stay.
    for (i, id) in ["e1", "e2"].iter().enumerate() {
        inject(&a, id, "p").await.unwrap();
        let commit = decided(i as u64 + 1, decision(id));
        a.commit(Box::new(commit), Vec::new(), 0, Vec::new());
    }
    inject(&a, "e3", "p").await.unwrap();
    inject(&a, "e9", "q").await.unwrap();
    a.put_self_state(p.clone(), state(0.7));
    a.put_memory(p.clone(), entry(4));
    a.join_room("side".into(), p.clone());
    let observation = mindfleet_core::conversation::Observation {
        id: 8,
        kind: mindfleet_core::conversation::ObservationKind::Fact,
        about: "a".into(),
        room: "r".into(),
        text: "A said t".into(),
        at_us: 1,
        sources: vec![4],
        by: "rules".into(),
    };
    let marks = SaidMarks { observations: vec![observation.clone()], ..SaidMarks::default() };
    a.conversation_marks(p.clone(), marks);
    // A call waiting for a person's approval.
    let call = mindfleet_core::tools::CallJournal {
        call: mindfleet_core::tools::ApprovalView {
            id: "c1".into(),
            persona: "p".into(),
            tool: "fs.write_file".into(),
            arguments: "{}".into(),
            why: "w".into(),
            event_id: "e3".into(),
            room: "r".into(),
            requested_us: 1,
            deadline_us: 2,
            state: mindfleet_core::tools::ApprovalState::Pending,
        },
        needs_approval: true,
        run: mindfleet_core::tools::CallRun::NotRun,
    };
    a.journal_call(call.clone(), true).unwrap().await.unwrap().unwrap();
    // b already stored e3 for one of its own personas: it keeps its seq there.
    inject(&b, "e0", "r").await.unwrap();
    inject(&b, "e3", "r").await.unwrap();

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let out = a.release(p.clone(), 1, "b".into(), tx).await.unwrap();
    assert_eq!((out.pending, out.version), (1, 1));
    let (key, request) = rx.recv().await.unwrap();
    assert_eq!(request[0], FORWARD_ADOPT);
    assert_eq!(a.pending_forwards().unwrap(), [("b".to_string(), key, request.clone())], "kept until b has it");
    // Nothing of p is left on a, q is untouched, and a says where p went.
    assert!(a.recent_decisions("p", 10).unwrap().is_empty());
    assert!(a.load_self_state(p.clone()).await.unwrap().is_none());
    assert!(a.load_memory(p.clone()).await.unwrap().is_empty());
    assert!(a.observations("p", &[8]).unwrap().is_empty());
    assert!(a.tool_calls().unwrap().is_empty());
    assert!(a.load_inbox(p.clone()).await.unwrap().deliveries.is_empty());
    assert_eq!(a.load_inbox("q".into()).await.unwrap().deliveries.len(), 1);
    assert_eq!(a.stats().await.unwrap().pending, 1);
    assert_eq!(a.placements().unwrap(), [("p".to_string(), "b".to_string(), 1)]);
    a.flush().await.unwrap();
    assert_eq!(log_len(&a), 0, "p's held decisions leave the log with it");

    let snapshot = PersonaSnapshot::decode(&request[1..]).unwrap();
    let done = b.adopt(snapshot).await.unwrap();
    assert!(!done.duplicate);
    let ids: Vec<String> = b.recent_decisions("p", 10).unwrap().into_iter().map(|d| d.event_id).collect();
    assert_eq!(ids, ["e2", "e1"]);
    assert_eq!(b.load_self_state(p.clone()).await.unwrap().map(|s| s.energy), Some(0.7));
    assert_eq!(b.load_memory(p.clone()).await.unwrap().iter().map(|e| e.id).collect::<Vec<_>>(), [4]);
    assert_eq!(b.observations("p", &[8]).unwrap(), [observation], "what consolidation made goes along");
    assert_eq!(b.tool_calls().unwrap(), [call], "and the call waiting for approval");
    let inbox = b.load_inbox(p.clone()).await.unwrap();
    assert_eq!(inbox.deliveries.iter().map(|d| (d.event.id.as_str(), d.seq)).collect::<Vec<_>>(), [("e3", 2)]);
    assert_eq!(b.stats().await.unwrap().pending, 3);
    assert!(b.rooms().unwrap()["side"].contains(&"p".to_string()));
    assert_eq!(b.placements().unwrap(), [("p".to_string(), "b".to_string(), 1)]);
    // Its next decision is journaled after the ones it brought.
    let commit = decided(2, decision("e3"));
    b.commit(Box::new(commit), Vec::new(), 0, Vec::new());
    b.flush().await.unwrap();
    let ids: Vec<String> = b.recent_decisions("p", 10).unwrap().into_iter().map(|d| d.event_id).collect();
    assert_eq!(ids, ["e3", "e2", "e1"]);
    // The same snapshot sent again changes nothing.
    let again = PersonaSnapshot::decode(&request[1..]).unwrap();
    assert!(b.adopt(again).await.unwrap().duplicate);
    assert_eq!(b.load_inbox(p).await.unwrap().deliveries.len(), 0);
}

#[tokio::test]
async fn a_finished_delivery_reopened_for_a_passed_turn_is_pending_again_and_its_second_finish_counts() {
    let dir = tempfile::tempdir().unwrap();
    let s = Storage::open(&cfg(dir.path())).unwrap();
    inject(&s, "e1", "p").await.unwrap();
    let finish = || PersonaCommit {
        persona: "p".into(),
        seq: 1,
        accepted_us: 0,
        decision: decision("e1"),
        reply: None,
        plan: None,
        said: None,
        defer: None,
        recorded: None,
    };
    // Not finished yet: nothing to reopen.
    assert!(matches!(s.reopen("p".into(), 1).await.unwrap(), Reopened::StillPending));
    s.commit(Box::new(finish()), Vec::new(), 0, Vec::new());
    let Reopened::Delivery(d) = s.reopen("p".into(), 1).await.unwrap() else { panic!("reopened") };
    assert_eq!((d.seq, d.event.id.as_str()), (1, "e1"));
    // Durably: a restore finds it.
    assert_eq!(s.load_inbox("p".into()).await.unwrap().deliveries.len(), 1);
    s.commit(Box::new(finish()), Vec::new(), 0, Vec::new());
    s.flush().await.unwrap();
    assert_eq!(s.recent_decisions("p", 10).unwrap().len(), 2, "the second handling is journaled");
    assert_eq!(s.stats().await.unwrap().stale_finishes, 0);
    assert!(s.load_inbox("p".into()).await.unwrap().deliveries.is_empty());
    assert!(matches!(s.reopen("p".into(), 99).await.unwrap(), Reopened::Gone));
}

#[tokio::test]
async fn pending_deliveries_survive_a_reopen_and_ids_stay_known() {
    let dir = tempfile::tempdir().unwrap();
    {
        let s = Storage::open(&cfg(dir.path())).unwrap();
        assert!(!inject(&s, "e1", "p").await.unwrap().duplicate);
        s.close().await.unwrap();
    }
    let s = Storage::open(&cfg(dir.path())).unwrap();
    let restored = s.load_inbox("p".into()).await.unwrap();
    assert_eq!(restored.deliveries.len(), 1);
    assert_eq!(restored.deliveries[0].event.id, "e1");
    assert!(inject(&s, "e1", "p").await.unwrap().duplicate);
}

#[tokio::test]
async fn a_restored_delivery_knows_how_many_personas_still_decide_its_event() {
    let dir = tempfile::tempdir().unwrap();
    let s = Storage::open(&cfg(dir.path())).unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let targets = ["a", "b", "c"].map(|p| (Arc::from(p), None)).to_vec();
    s.inject(Box::new(event("e1")), targets, tx.into());
    rx.await.unwrap().unwrap();
    inject(&s, "e2", "a").await.unwrap();
    let restored = s.load_inbox("a".into()).await.unwrap().deliveries;
    let audience: Vec<(&str, u32)> = restored.iter().map(|d| (d.event.id.as_str(), d.audience)).collect();
    // Shared: its turn-taking waits for all three; alone: no turn to take.
    assert_eq!(audience, [("e1", 3), ("e2", 1)]);
}

#[tokio::test]
async fn a_deferred_delivery_stays_pending_aside_from_the_inbox_across_a_reopen_until_taken_up() {
    let dir = tempfile::tempdir().unwrap();
    let p: Arc<str> = "p".into();
    let concern = mindfleet_core::record::Preoccupation {
        concern: "alice in #general: e1".into(),
        priority: 0.4,
        domain: "chat".into(),
        event_id: "e1".into(),
        created_us: 7,
    };
    let commit = |defer: Option<mindfleet_core::messages::Deferral>| PersonaCommit {
        persona: "p".into(),
        seq: 1,
        accepted_us: 0,
        decision: decision("e1"),
        reply: None,
        plan: None,
        said: None,
        defer,
        recorded: None,
    };
    {
        let s = Storage::open(&cfg(dir.path())).unwrap();
        inject(&s, "e1", "p").await.unwrap();
        let deferral = mindfleet_core::messages::Deferral { preoccupation: concern.clone(), audience: 3 };
        s.commit(Box::new(commit(Some(deferral))), Vec::new(), 0, Vec::new());
        s.close().await.unwrap();
    }
    let s = Storage::open(&cfg(dir.path())).unwrap();
    assert!(s.load_inbox(p.clone()).await.unwrap().deliveries.is_empty(), "not back in the inbox");
    let deferred = s.load_deferred(p.clone()).await.unwrap();
    assert_eq!(deferred.len(), 1);
    assert_eq!((deferred[0].0.seq, deferred[0].0.event.id.as_str(), deferred[0].0.audience), (1, "e1", 3));
    assert_eq!(deferred[0].1.preoccupation, concern);
    assert_eq!(s.stats().await.unwrap().pending, 1, "the event is kept while deferred");
    // Taken up: the next decision on the same delivery finishes it.
    s.commit(Box::new(commit(None)), Vec::new(), 0, Vec::new());
    s.flush().await.unwrap();
    assert!(s.load_deferred(p.clone()).await.unwrap().is_empty());
    assert_eq!(s.stats().await.unwrap().pending, 0);
    assert_eq!(s.recent_decisions("p", 10).unwrap().len(), 2, "the deferral and the decision on taking it up");
}

#[tokio::test]
async fn long_term_limits_drop_the_oldest_and_least_proven_with_reasons() {
    use mindfleet_core::record::{Action, Consolidation, Experience, Procedure};
    let dir = tempfile::tempdir().unwrap();
    let s = Storage::open(&cfg(dir.path())).unwrap();
    let exp = |i: usize| Experience {
        domain: "chat".into(),
        task: format!("task {i}"),
        trajectory: vec![],
        success: true,
        learnings: vec![],
        event_id: None,
        at_us: i as i64,
    };
    let proc_ = |i: usize| Procedure {
        name: format!("chat: p{i:03}"),
        domain: "chat".into(),
        steps: vec![Action::DraftReply],
        success_rate: 1.0,
        times_used: i as u32 + 1,
        updated_us: 0,
    };
    let n = EXPERIENCES_KEPT as usize + 5;
    let c = Consolidation {
        experiences: (0..n).map(exp).collect(),
        procedures: (0..PROCEDURES_PER_DOMAIN + 2).map(proc_).collect(),
        watermark: 7,
        ..Default::default()
    };
    s.consolidate("p".into(), c);
    s.flush().await.unwrap();
    let lt = s.long_term("p", 5).unwrap();
    assert_eq!(lt.experience_count, EXPERIENCES_KEPT);
    assert_eq!(lt.experiences[0].task, format!("task {}", n - 1), "newest first");
    assert_eq!(lt.procedures.len(), PROCEDURES_PER_DOMAIN);
    assert!(lt.procedures.iter().all(|p| p.name != "chat: p000" && p.name != "chat: p001"), "least used go");
    let dropped = &lt.reports[0].dropped;
    assert_eq!(dropped.iter().filter(|d| d.contains("oldest experience: limit 1000")).count(), 5, "{dropped:?}");
    assert_eq!(dropped.iter().filter(|d| d.contains("limit 50 per domain")).count(), 2, "{dropped:?}");
    assert_eq!(lt.watermark, 7);
}

#[test]
fn a_locked_data_dir_names_the_holder() {
    let dir = tempfile::tempdir().unwrap();
    let _held = lock_data_dir(dir.path()).unwrap();
    let err = lock_data_dir(dir.path()).unwrap_err().to_string();
    assert!(err.ends_with(&format!("in use by pid {}", std::process::id())), "{err}");
}

#[tokio::test]
async fn a_reply_a_webhook_wants_is_queued_with_it_and_leaves_the_queue_acknowledged_or_dead() {
    use mindfleet_core::record::OutboxEntry;
    use mindfleet_core::webhook::{HookKind, HookRoute};
    let dir = tempfile::tempdir().unwrap();
    let s = Storage::open(&cfg(dir.path())).unwrap();
    let route = |name: &str, rooms: &[&str]| HookRoute {
        name: name.into(),
        rooms: rooms.iter().map(|r| r.to_string()).collect(),
        personas: Vec::new(),
        kinds: vec![HookKind::Reply],
    };
    let (all, ops) = (Arc::new(tokio::sync::Notify::new()), Arc::new(tokio::sync::Notify::new()));
    let decisions = HookRoute { kinds: vec![HookKind::Decision], ..route("decisions", &["general"]) };
    s.route_webhooks(vec![
        (route("all", &[]), all.clone()),
        (route("ops", &["ops"]), ops.clone()),
        (decisions, Arc::new(tokio::sync::Notify::new())),
    ]);
    // Both events first (sequence numbers 1 and 2), then the replies (which are events too).
    inject(&s, "e1", "p").await.unwrap();
    inject(&s, "e2", "p").await.unwrap();
    for i in 1..=2u64 {
        let id = format!("e{i}");
        let entry = OutboxEntry {
            persona: "p".into(),
            room: "r".into(),
            in_reply_to: id.clone(),
            event_id: format!("reply-{i}"),
            text: "hi".into(),
            brain: "rules".into(),
            at_us: 0,
        };
        let mut reply = event(&format!("reply-{i}"));
        reply.from = "p".into();
        let commit = PersonaCommit {
            persona: "p".into(),
            seq: i,
            accepted_us: 0,
            decision: decision(&id),
            reply: Some((entry, reply)),
            plan: None,
            said: None,
            defer: None,
            recorded: None,
        };
        s.commit(Box::new(commit), Vec::new(), 0, Vec::new());
    }
    s.flush().await.unwrap();
    // Woken once committed; only the webhook whose rooms take the reply's.
    tokio::time::timeout(Duration::from_secs(5), all.notified()).await.unwrap();
    let queued = s.hook_queue("all", 0, 10).unwrap();
    let ids: Vec<&str> = queued.iter().map(|(_, d)| d.id.as_str()).collect();
    assert_eq!(ids, ["reply-1", "reply-2"], "in the order stored, keys from 1");
    assert!(queued[0].0 >= 1 && queued[0].0 < queued[1].0);
    assert!(s.hook_queue("ops", 0, 10).unwrap().is_empty());
    // Decisions, of their event's room: each its own delivery, its body the decision.
    let decided = s.hook_queue("decisions", 0, 10).unwrap();
    assert_eq!(decided.len(), 2);
    assert!(decided.iter().all(|(_, d)| d.kind == HookKind::Decision && d.id.starts_with("decision-")));
    let body: serde_json::Value = serde_json::from_str(&decided[0].1.body).unwrap();
    assert_eq!((body["event_id"].as_str(), body["verdict"].as_str()), (Some("e1"), Some("ignore")), "{body}");
    assert_eq!((body["persona"].as_str(), body["room"].as_str()), (Some("p"), Some("general")), "{body}");
    assert_eq!(s.hook_queue("all", queued[0].0, 10).unwrap().len(), 1, "after a key");

    let (k1, k2) = (queued[0].0, queued[1].0);
    s.hook_failed("all".into(), k1, "HTTP 500".into());
    s.hook_acked("all".into(), k1);
    s.hook_failed("all".into(), k2, "HTTP 503".into());
    s.hook_dead("all".into(), k2, "gave up".into());
    // No flush: the figures are answered once what they count is committed, so the tables
    // read after them hold every dead letter counted.
    let stats = s.stats().await.unwrap().webhooks["all"].clone();
    assert_eq!((stats.pending, stats.delivered, stats.failures, stats.dead), (0, 1, 2, 1));
    assert!(s.hook_queue("all", 0, 10).unwrap().is_empty());
    let dead = s.hook_dead_letters("all", 10).unwrap();
    assert_eq!((dead.len(), dead[0].id.as_str(), dead[0].attempts), (1, "reply-2", 1));
    assert_eq!(dead[0].error, "gave up");

    // Sent again: queued behind everything, with no attempt made.
    assert_eq!(s.hook_retry(Some("all".into())).await.unwrap(), 1);
    let again = s.hook_queue("all", k2, 10).unwrap();
    assert_eq!((again.len(), again[0].1.id.as_str(), again[0].1.attempts), (1, "reply-2", 0));
    assert!(s.hook_dead_letters("all", 10).unwrap().is_empty());
    s.close().await.unwrap();

    // Kept across a reopen, and counted again.
    let s = Storage::open(&cfg(dir.path())).unwrap();
    s.route_webhooks(vec![(route("all", &[]), all)]);
    assert_eq!(s.stats().await.unwrap().webhooks["all"].pending, 1);
    s.close().await.unwrap();
}

#[tokio::test]
async fn the_outbox_since_a_time_is_read_newest_first_and_stops_at_the_first_older_entry() {
    use mindfleet_core::record::OutboxEntry;
    let dir = tempfile::tempdir().unwrap();
    let s = Storage::open(&cfg(dir.path())).unwrap();
    for i in 0..4 {
        inject(&s, &format!("e{i}"), "p").await.unwrap();
    }
    for (i, at_us) in [10_i64, 30, 20, 40].into_iter().enumerate() {
        let entry = OutboxEntry {
            persona: "p".into(),
            room: "r".into(),
            in_reply_to: format!("e{i}"),
            event_id: format!("reply-{i}"),
            text: "hi".into(),
            brain: "rules".into(),
            at_us,
        };
        let commit = PersonaCommit {
            persona: "p".into(),
            seq: i as u64 + 1,
            accepted_us: 0,
            decision: decision(&format!("e{i}")),
            reply: Some((entry, event(&format!("reply-{i}")))),
            plan: None,
            said: None,
            defer: None,
            recorded: None,
        };
        s.commit(Box::new(commit), Vec::new(), 0, Vec::new());
    }
    s.flush().await.unwrap();
    let ids =
        |since| -> Vec<String> { s.recent_outbox_since(10, since).unwrap().into_iter().map(|o| o.event_id).collect() };
    assert_eq!(ids(0), ["reply-3", "reply-2", "reply-1", "reply-0"]);
    // Newest first until the first older than the time: reply-2 (20) ends the read before reply-1 (30).
    assert_eq!(ids(25), ["reply-3"]);
    assert_eq!(ids(50), Vec::<String>::new());
    assert_eq!(s.recent_outbox_since(2, 0).unwrap().len(), 2, "at most n");
    s.close().await.unwrap();
}

#[test]
fn held_writes_a_hand_off_takes_out_go_back_under_newer_ones_when_its_transaction_fails() {
    use crate::behind::Behind;
    let wb = Duration::from_secs(1);
    let (ada, bob): (Arc<str>, Arc<str>) = ("ada".into(), "bob".into());
    let eviction = |id| Eviction {
        entry_id: id,
        domain: "chat".into(),
        text: format!("entry {id}"),
        reason: "capacity".into(),
        retention: 0.1,
        at_us: id as i64,
    };
    let mut behind = Behind::new();
    for p in [&ada, &bob] {
        let held = behind.of(p, wb);
        held.states.insert(p.clone(), Box::new(state(0.3)));
        held.memory.insert((p.clone(), 1), Some(Box::new(entry(1))));
        held.memory.insert((p.clone(), 2), None);
        held.evictions.push((p.clone(), eviction(7)));
    }
    let before = behind.len();
    let taken = behind.take_of(&ada);
    assert_eq!((taken.state.as_ref().map(|s| s.energy), taken.memory.len(), taken.evictions.len()), (Some(0.3), 2, 1));
    // Nothing of ada's is held any more; bob's is untouched.
    assert_eq!(behind.len(), before - 4);
    assert!(!behind.get("ada").states.contains_key("ada") && behind.get("bob").states.contains_key("bob"));
    // Written meanwhile (a retried request of the failed batch): newer than what comes back.
    let held = behind.of(&ada, wb);
    held.states.insert(ada.clone(), Box::new(state(0.9)));
    held.evictions.push((ada.clone(), eviction(8)));
    behind.put_back(taken, wb);
    let held = behind.get("ada");
    assert_eq!(held.states["ada"].energy, 0.9);
    assert_eq!(held.memory_of(&ada).map(|(id, e)| (*id, e.is_some())).collect::<Vec<_>>(), [(1, true), (2, false)]);
    let ids: Vec<_> = held.evictions.iter().filter(|(p, _)| *p == ada).map(|(_, e)| e.entry_id).collect();
    assert_eq!(ids, [7, 8], "the evictions in the order they came");
    assert_eq!(behind.len(), before + 1);
}
