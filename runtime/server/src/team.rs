//! Self-state as a coordination signal, read from a dump: what each persona is doing
//! ([`condition`]), who is available for new work, who is doing what where, and how the fleet
//! is doing as a whole. Pure functions over persona dumps, behind the admin's answers
//! (`select-for-task`, `availability`, `activity-map`, `health`) and the dashboard's badges;
//! the thresholds, `suitability` and the answers' types are the fleet's vocabulary
//! ([`mindfleet_core::team`]).

use std::collections::{BTreeMap, BTreeSet};

use mindfleet_core::dump::{PersonaDump, PersonaStatus};
use mindfleet_core::record::{Mood, SelfStateData};
use mindfleet_core::team::{
    ActivityMap, Availability, Condition, DomainActivity, Health, Presence, Recommendation, RoomActivity, Unavailable,
    deeply_focused, low_capacity, overloaded,
};

/// The fleet's health from its personas' [`condition`]s: REDUCE_LOAD when a third or more of
/// the awake personas are overloaded, ASSIGN_WORK when more than half of them are idle,
/// NOBODY_AWAKE when none is awake, else HEALTHY.
pub fn health(personas: &[PersonaDump]) -> Health {
    let mut h = Health {
        personas: personas.len(),
        awake: 0,
        overloaded: 0,
        idle: 0,
        busy: 0,
        deeply_focused: 0,
        dormant: 0,
        down: 0,
        average_capacity: 0.0,
        recommendation: Recommendation::Healthy,
    };
    let mut known = 0;
    for p in personas {
        let c = condition(p);
        match c {
            Condition::Dormant => h.dormant += 1,
            Condition::Overloaded => h.overloaded += 1,
            Condition::Idle => h.idle += 1,
            c if c.down() => h.down += 1,
            c if c.busy() => h.busy += 1,
            _ => {}
        }
        if !c.down() && c != Condition::Dormant {
            h.awake += 1;
        }
        if let Some(s) = &p.self_state {
            known += 1;
            h.average_capacity += s.available_capacity;
            if !c.down() && c != Condition::Dormant && deeply_focused(&s.view()) {
                h.deeply_focused += 1;
            }
        }
    }
    h.average_capacity = if known == 0 { 0.0 } else { h.average_capacity / known as f64 };
    h.recommendation = if h.awake == 0 {
        Recommendation::NobodyAwake
    } else if h.overloaded * 3 >= h.awake {
        Recommendation::ReduceLoad
    } else if h.idle * 2 > h.awake {
        Recommendation::AssignWork
    } else {
        Recommendation::Healthy
    };
    h
}

/// Whether `p` is available for new work: running, awake, not deeply focused, not overloaded,
/// with capacity left and no event in flight (the thresholds of [`suitability`](mindfleet_core::team::suitability)).
pub fn availability(p: &PersonaDump) -> Availability {
    let mut reasons = Vec::new();
    match p.status {
        // Up, but its self-state not read yet.
        PersonaStatus::Running if p.self_state.is_none() => reasons.push(Unavailable::Starting),
        PersonaStatus::Running => {}
        PersonaStatus::Starting => reasons.push(Unavailable::Starting),
        PersonaStatus::Restarting => reasons.push(Unavailable::Restarting),
        PersonaStatus::Failed => reasons.push(Unavailable::Failed),
        PersonaStatus::Stopped => reasons.push(Unavailable::Stopped),
        PersonaStatus::Unreachable => reasons.push(Unavailable::Unreachable),
        PersonaStatus::Unresponsive => reasons.push(Unavailable::Unresponsive),
    }
    let s = p.self_state.as_ref();
    if let Some(v) = s.map(SelfStateData::view) {
        let checks = [
            (v.dormant, Unavailable::Dormant),
            (deeply_focused(&v), Unavailable::DeeplyFocused),
            (overloaded(&v), Unavailable::Overloaded),
            (low_capacity(&v), Unavailable::LowCapacity),
        ];
        reasons.extend(checks.into_iter().filter(|(hit, _)| *hit).map(|(_, r)| r));
    }
    let c = condition(p);
    if p.in_flight.is_some() || c == Condition::Working {
        reasons.push(Unavailable::Busy);
    }
    Availability {
        persona: p.name.clone(),
        available: reasons.is_empty(),
        condition: c,
        reasons,
        status: p.status,
        capacity: s.map(|s| s.available_capacity),
        load: s.map(|s| s.cognitive_load),
        mood: s.map(|s| s.mood),
        activity: s.map(|s| s.focus.activity.clone()),
        objective: s.map(|s| s.focus.objective.clone()),
        inbox: p.inbox.len,
        in_flight: p.in_flight.clone(),
    }
}

/// The activity map at `now_us`. A persona is in a room it is configured for, a room it was
/// joined to (`members`: room -> persona names, the admin's routing table) and a room it
/// spoke in (`spoke_in` of its self-state).
pub fn activity_map(personas: &[PersonaDump], members: &BTreeMap<String, Vec<String>>, now_us: i64) -> ActivityMap {
    let mut rooms: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (room, names) in members {
        rooms.entry(room).or_default().extend(names.iter().map(String::as_str));
    }
    for p in personas {
        let spoke = p.self_state.iter().flat_map(|s| s.spoke_in.keys());
        for room in p.rooms.iter().chain(spoke) {
            rooms.entry(room.as_str()).or_default().insert(&p.name);
        }
    }
    let by_name: BTreeMap<&str, &PersonaDump> = personas.iter().map(|p| (p.name.as_str(), p)).collect();
    let rooms = rooms
        .into_iter()
        .map(|(room, names)| RoomActivity {
            room: room.to_string(),
            personas: names.into_iter().filter_map(|n| by_name.get(n)).map(|p| presence(p, room, now_us)).collect(),
        })
        .filter(|r| !r.personas.is_empty())
        .collect();
    let mut domains: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let (mut idle, mut dormant, mut down) = (0, 0, 0);
    for p in personas {
        match (condition(p), &p.self_state) {
            (Condition::Idle, _) => idle += 1,
            (Condition::Dormant, _) => dormant += 1,
            (c, Some(s)) if c.occupied() => domains.entry(&s.focus.domain).or_default().push(p.name.clone()),
            _ => down += 1,
        }
    }
    let domains = domains
        .into_iter()
        .map(|(d, personas)| DomainActivity { domain: d.to_string(), focused: personas.len(), personas })
        .collect();
    ActivityMap { at_us: now_us, rooms, domains, idle, dormant, down }
}

fn presence(p: &PersonaDump, room: &str, now_us: i64) -> Presence {
    let s = p.self_state.as_ref();
    let last = s.and_then(|s| s.spoke_in.get(room).copied());
    Presence {
        persona: p.name.clone(),
        status: p.status,
        condition: condition(p),
        activity: s.map(|s| s.focus.activity.clone()),
        domain: s.map(|s| s.focus.domain.clone()),
        objective: s.map(|s| s.focus.objective.clone()),
        intensity: s.map(|s| s.focus.intensity),
        dormant: s.is_some_and(|s| s.dormant),
        in_flight: p.in_flight.clone(),
        last_spoke_us: last,
        last_spoke_secs_ago: last.map(|t| (now_us - t).max(0) as f64 / 1e6),
    }
}

/// The condition of `p`, first match wins: its supervisor's word when it is not running
/// (starting while its self-state is not read yet); dormant; overloaded; waiting (nothing in
/// flight, a plan parked for a person's approval); working (a plan running, or the focus
/// reading `working`); thinking (an event in flight, no plan running); focused (a focus other
/// than `idle`, nothing in flight); idle.
pub fn condition(p: &PersonaDump) -> Condition {
    match p.status {
        PersonaStatus::Running => {}
        PersonaStatus::Starting => return Condition::Starting,
        PersonaStatus::Restarting => return Condition::Restarting,
        PersonaStatus::Failed => return Condition::Failed,
        PersonaStatus::Stopped => return Condition::Stopped,
        PersonaStatus::Unreachable => return Condition::Unreachable,
        PersonaStatus::Unresponsive => return Condition::Unresponsive,
    }
    let Some(s) = &p.self_state else { return Condition::Starting };
    let plan_running = p.in_flight.is_some() && p.plan.as_ref().is_some_and(|r| r.finished_us.is_none());
    if s.dormant {
        Condition::Dormant
    } else if overloaded(&s.view()) || s.mood == Mood::Overwhelmed {
        Condition::Overloaded
    } else if p.in_flight.is_none() && !p.waiting_approval.is_empty() {
        Condition::Waiting
    } else if plan_running || s.focus.activity == "working" {
        Condition::Working
    } else if p.in_flight.is_some() {
        Condition::Thinking
    } else if s.focus.activity != "idle" {
        Condition::Focused
    } else {
        Condition::Idle
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mindfleet_core::record::{Focus, SelfStateData};
    use mindfleet_core::team::{DEEP_FOCUS, LOW_CAPACITY, OVERLOAD};

    fn up(s: SelfStateData) -> PersonaDump {
        PersonaDump { self_state: Some(s), ..PersonaDump::placeholder("ada", PersonaStatus::Running, 0, None) }
    }

    fn focus(activity: &str) -> SelfStateData {
        SelfStateData { focus: Focus { activity: activity.into(), ..Focus::default() }, ..SelfStateData::default() }
    }

    #[test]
    fn a_persona_whose_focus_reads_working_is_never_idle() {
        // Its event handled, the next one still in its inbox: nothing in flight, the focus on
        // the work. The badge read `idle` beside a focus that read `working`.
        assert_eq!(condition(&up(focus("working"))), Condition::Working);
        let mut p = up(focus("idle"));
        p.in_flight = Some("e1".into());
        assert_eq!(condition(&p), Condition::Thinking, "an event in hand, no plan yet");
        assert_eq!(condition(&up(focus("focused"))), Condition::Focused);
        assert_eq!(condition(&up(focus("idle"))), Condition::Idle);
        // A plan parked for approval, nothing else in hand: waiting, free for other work.
        let mut p = up(focus("working"));
        p.waiting_approval = vec!["c1".into()];
        assert_eq!(condition(&p), Condition::Waiting);
        assert!(Condition::Waiting.occupied() && !Condition::Waiting.busy());
        p.in_flight = Some("e2".into());
        assert_eq!(condition(&p), Condition::Working, "another event in hand");
    }

    #[test]
    fn down_and_dormant_come_before_what_the_self_state_says() {
        let mut p = up(SelfStateData { dormant: true, cognitive_load: 0.95, ..focus("working") });
        p.in_flight = Some("e1".into());
        assert_eq!(condition(&p), Condition::Dormant);
        p.status = PersonaStatus::Failed;
        assert_eq!(condition(&p), Condition::Failed);
        assert!(Condition::Failed.down() && !Condition::Dormant.down());
        let up = PersonaDump::placeholder("ada", PersonaStatus::Running, 0, None);
        assert_eq!(condition(&up), Condition::Starting, "its self-state not read yet");
        for c in [Condition::Working, Condition::Idle, Condition::Unreachable] {
            assert_eq!(serde_json::to_value(c).unwrap(), c.as_str());
        }
    }

    fn running(name: &str, s: SelfStateData) -> PersonaDump {
        PersonaDump { self_state: Some(s), ..PersonaDump::placeholder(name, PersonaStatus::Running, 0, None) }
    }

    fn focused(activity: &str, domain: &str, intensity: f64) -> SelfStateData {
        SelfStateData {
            focus: Focus {
                activity: activity.into(),
                domain: domain.into(),
                objective: format!("{activity} on {domain}"),
                intensity,
                since_us: 0,
            },
            ..SelfStateData::default()
        }
    }

    #[test]
    fn health_recommends_by_the_counts() {
        let idle = SelfStateData::default();
        let over =
            SelfStateData { mood: Mood::Overwhelmed, cognitive_load: 0.9, available_capacity: 0.1, ..idle.clone() };
        let three_idle = [running("a", idle.clone()), running("b", idle.clone()), running("c", idle.clone())];
        assert_eq!(health(&three_idle).recommendation, Recommendation::AssignWork);
        let h = health(&[
            running("a", over),
            running("b", idle.clone()),
            running("c", SelfStateData { mood: Mood::Active, ..idle.clone() }),
        ]);
        assert_eq!((h.overloaded, h.recommendation), (1, Recommendation::ReduceLoad));
        assert!((h.average_capacity - (0.1 + 1.0 + 1.0) / 3.0).abs() < 1e-12);
    }

    #[test]
    fn an_all_idle_fleet_reads_assign_work_whatever_its_mood() {
        // The mood lags the work by a minute (it reads `active` after any work): idle is what
        // the persona does, not how it feels.
        let just_done = SelfStateData { mood: Mood::Active, activities: 3, ..SelfStateData::default() };
        let fleet = [running("a", just_done.clone()), running("b", just_done)];
        let h = health(&fleet);
        assert_eq!((h.idle, h.busy, h.recommendation), (2, 0, Recommendation::AssignWork), "{h:?}");
    }

    #[test]
    fn dormant_and_down_personas_count_apart_from_the_awake_ones() {
        let asleep = running("zz", SelfStateData { dormant: true, ..SelfStateData::default() });
        let down = PersonaDump::placeholder("dee", PersonaStatus::Failed, 5, None);
        let mut busy = running("ada", focused("working", "code", 0.5));
        busy.in_flight = Some("e1".into());
        let h = health(&[busy.clone(), running("bo", SelfStateData::default()), asleep.clone(), down.clone()]);
        assert_eq!((h.personas, h.awake, h.busy, h.idle, h.dormant, h.down), (4, 2, 1, 1, 1, 1), "{h:?}");
        // One idle of two awake is not more than half: the dormant and the down one are not
        // counted as idle.
        assert_eq!(h.recommendation, Recommendation::Healthy);
        assert_eq!(health(&[asleep, down]).recommendation, Recommendation::NobodyAwake);
    }

    #[test]
    fn a_fresh_running_persona_is_available() {
        let a = availability(&running("ada", SelfStateData::default()));
        assert!(a.available, "{a:?}");
        assert!(a.reasons.is_empty());
        assert_eq!((a.capacity, a.load, a.mood), (Some(1.0), Some(0.0), Some(Mood::Idle)));
    }

    #[test]
    fn availability_names_every_reason_in_order() {
        let mut p = running(
            "ada",
            SelfStateData {
                dormant: true,
                cognitive_load: 0.9,
                available_capacity: 0.1,
                ..focused("working", "code", 0.9)
            },
        );
        p.in_flight = Some("e1".into());
        p.inbox.len = 7;
        let a = availability(&p);
        assert!(!a.available);
        assert_eq!(
            a.reasons,
            [
                Unavailable::Dormant,
                Unavailable::DeeplyFocused,
                Unavailable::Overloaded,
                Unavailable::LowCapacity,
                Unavailable::Busy
            ]
        );
        assert_eq!((a.inbox, a.in_flight.as_deref(), a.objective.as_deref()), (7, Some("e1"), Some("working on code")));
    }

    #[test]
    fn availability_uses_the_suitability_thresholds() {
        // At the thresholds, not past them: still available (a focus set by a person; a focus
        // on work it engaged with is busy, as the badge says).
        let edge = SelfStateData {
            cognitive_load: OVERLOAD,
            available_capacity: LOW_CAPACITY,
            ..focused("focused", "code", DEEP_FOCUS)
        };
        assert!(availability(&running("ada", edge)).available);
        let still_working = availability(&running("ada", focused("working", "code", 0.3)));
        assert_eq!(
            (still_working.condition, still_working.reasons.as_slice()),
            (Condition::Working, [Unavailable::Busy].as_slice())
        );
        // A high intensity left over from finished work does not count once idle.
        assert!(availability(&running("ada", focused("idle", "code", 0.95))).available);
        let deep = availability(&running("ada", focused("focused", "code", 0.71)));
        assert_eq!(deep.reasons, [Unavailable::DeeplyFocused]);
    }

    #[test]
    fn a_persona_that_is_down_is_unavailable_with_its_status() {
        for (status, reason) in [
            (PersonaStatus::Failed, Unavailable::Failed),
            (PersonaStatus::Restarting, Unavailable::Restarting),
            (PersonaStatus::Starting, Unavailable::Starting),
        ] {
            let a = availability(&PersonaDump::placeholder("ada", status, 3, Some("boom".into())));
            assert_eq!((a.available, a.reasons.as_slice(), a.capacity), (false, [reason].as_slice(), None));
        }
    }

    #[test]
    fn the_activity_map_places_personas_in_configured_joined_and_spoken_in_rooms() {
        let now = 100_000_000;
        let mut ada = running("ada", focused("working", "code", 0.8));
        ada.rooms = vec!["dev".into()];
        ada.in_flight = Some("e7".into());
        let mut bo = running("bo", SelfStateData::default());
        bo.rooms = vec!["dev".into()];
        bo.self_state.as_mut().unwrap().spoke_in.insert("random".into(), now - 2_500_000);
        bo.self_state.as_mut().unwrap().spoke_in.insert("dev".into(), now - 1_000_000);
        let mut cy = running("cy", focused("responding", "code", 0.4));
        cy.rooms = vec!["ops".into()];
        let down = PersonaDump::placeholder("dee", PersonaStatus::Failed, 5, None);
        // The admin's routing table: dee is configured for ops, cy was joined to dev.
        let members = BTreeMap::from([
            ("ops".to_string(), vec!["cy".to_string(), "dee".to_string()]),
            ("dev".to_string(), vec!["ada".to_string(), "bo".to_string(), "cy".to_string()]),
        ]);
        let m = activity_map(&[ada, bo, cy, down], &members, now);
        let rooms: Vec<(&str, Vec<&str>)> = m
            .rooms
            .iter()
            .map(|r| (r.room.as_str(), r.personas.iter().map(|p| p.persona.as_str()).collect()))
            .collect();
        assert_eq!(rooms, [("dev", vec!["ada", "bo", "cy"]), ("ops", vec!["cy", "dee"]), ("random", vec!["bo"])]);
        let dev = &m.rooms[0].personas;
        assert_eq!(
            (dev[0].activity.as_deref(), dev[0].domain.as_deref(), dev[0].in_flight.as_deref()),
            (Some("working"), Some("code"), Some("e7"))
        );
        assert_eq!((dev[0].last_spoke_us, dev[1].last_spoke_us), (None, Some(now - 1_000_000)));
        assert_eq!(m.rooms[2].personas[0].last_spoke_secs_ago, Some(2.5));
        let dee = &m.rooms[1].personas[1];
        assert_eq!((dee.status, dee.activity.as_ref()), (PersonaStatus::Failed, None));
        // By domain: ada and cy work on code, bo is idle, dee is down (neither).
        assert_eq!(m.domains.len(), 1);
        assert_eq!((m.domains[0].domain.as_str(), m.domains[0].focused), ("code", 2));
        assert_eq!(m.domains[0].personas, ["ada", "cy"]);
        assert_eq!((m.idle, m.dormant, m.down), (1, 0, 1));
        assert_eq!(m.rooms[1].personas[1].condition, Condition::Failed);
    }

    #[test]
    fn members_unknown_to_the_dump_are_left_out() {
        let members = BTreeMap::from([("dev".to_string(), vec!["ghost".to_string()])]);
        let m = activity_map(&[running("ada", SelfStateData::default())], &members, 0);
        assert!(m.rooms.is_empty(), "{m:?}");
    }
}
