//! Self-state as plain data: how one activity changes focus, load, energy and mood. The
//! `SelfState` actor owns the state and applies updates.

use serde::{Deserialize, Serialize};
use std::time::Duration;

use mindfleet_core::record::{Focus, Mood, Preoccupation, RecentDecision, SelfStateData, Thought};

const KEEP_THOUGHTS: usize = 20;
const KEEP_DECISIONS: usize = 20;
const KEEP_ROOMS: usize = 64;

/// What one handled event did to the persona.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Activity {
    pub event_id: String,
    pub verdict: String,
    pub reason: String,
    /// Set when the persona engaged: (domain, objective, intensity).
    pub engaged: Option<(String, String, f64)>,
    /// The engaged work is over (its plan ended).
    pub completed: bool,
    pub thought: Option<String>,
    /// The room the persona posted in.
    pub spoke_in: Option<String>,
    /// Events still waiting in the inbox.
    pub backlog: usize,
    pub failed: bool,
}

/// An update the `SelfState` actor applies.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Update {
    /// Work starts: the focus becomes its objective.
    Focus(Box<Activity>),
    /// An event was handled (decided, and if engaged, its plan ended).
    Activity(Box<Activity>),
    SetDormant(bool),
    /// A person sets the focus by hand.
    SetFocus {
        objective: String,
        intensity: f64,
    },
    /// The focus ends (a person cleared it, or it held past `focus_max_secs`), for this reason.
    ClearFocus(String),
    /// What the persona keeps in mind: its deferred events, in the order it takes them up.
    Preoccupations(Vec<Preoccupation>),
    /// Nothing happened: time passed (mood settles, energy comes back).
    Tick,
}

/// How long a persona reads `active` after its focus last changed, while it has done anything.
pub const ACTIVE_FOR_US: i64 = 60_000_000;

/// When `s`'s focus ends by time alone: `focus_max` after it began, unless it is idle.
pub fn focus_ends_in(s: &SelfStateData, focus_max: Duration, now_us: i64) -> Option<Duration> {
    (s.focus.activity != "idle").then(|| {
        let left = (s.focus.since_us + focus_max.as_micros() as i64 - now_us).max(0);
        Duration::from_micros(left as u64)
    })
}

/// When `s`'s mood will settle by time alone (an `active` persona turns `idle`, unless
/// something happens meanwhile): how long from `now_us`, or `None` when it will not.
pub fn settles_in(s: &SelfStateData, now_us: i64) -> Option<Duration> {
    (s.mood == Mood::Active).then(|| {
        let left = (s.focus.since_us + ACTIVE_FOR_US - now_us).max(0);
        Duration::from_micros(left as u64)
    })
}

fn unit(x: f64) -> f64 {
    if x.is_nan() { 0.0 } else { x.clamp(0.0, 1.0) }
}

/// How often a persona may start a new piece of self-paced work (see `Task::paced`): 3 s when
/// idle, 5 s active, 7 s tired, 10 s overwhelmed, doubled when less than half of its model
/// budget is left.
pub fn cadence(mood: Mood, budget_left: f64) -> Duration {
    let base = Duration::from_secs(match mood {
        Mood::Idle => 3,
        Mood::Active => 5,
        Mood::Tired => 7,
        Mood::Overwhelmed => 10,
    });
    if budget_left < 0.5 { base * 2 } else { base }
}

/// Applies an update at `now_us` and recomputes load, capacity and mood.
pub fn apply(s: &mut SelfStateData, u: Update, now_us: i64) {
    // Energy comes back while nothing happens: +0.05 a minute.
    if s.updated_us > 0 {
        let idle_min = (now_us - s.updated_us).max(0) as f64 / 60e6;
        s.energy = unit(s.energy + 0.05 * idle_min);
    }
    let mut backlog = None;
    match u {
        Update::SetDormant(d) => s.dormant = d,
        Update::Tick => {}
        Update::ClearFocus(why) => {
            if s.focus.activity != "idle" {
                push_capped(&mut s.recent_thoughts, Thought { text: why, at_us: now_us }, KEEP_THOUGHTS);
            }
            // Its domain and start stay: they say what the persona last worked on, and when.
            s.focus.activity = "idle".into();
            s.focus.objective.clear();
            s.focus.intensity = 0.0;
        }
        Update::Preoccupations(p) => s.preoccupations = p,
        Update::SetFocus { objective, intensity } => {
            s.focus = Focus {
                activity: "focused".into(),
                domain: s.focus.domain.clone(),
                objective,
                intensity: unit(intensity),
                since_us: now_us,
            };
        }
        Update::Focus(a) => {
            backlog = Some(a.backlog);
            if let Some((domain, objective, intensity)) = a.engaged {
                s.focus = Focus {
                    activity: "working".into(),
                    domain,
                    objective,
                    intensity: unit(intensity),
                    since_us: now_us,
                };
            }
        }
        Update::Activity(a) => {
            let a = *a;
            backlog = Some(a.backlog);
            if a.completed {
                s.energy = unit(s.energy - 0.02);
                s.activities += 1;
                // The work is done: the focus relaxes.
                s.focus.intensity = unit(s.focus.intensity * 0.5);
            }
            // Nothing in hand and nothing waiting: the work is over (a focus set by a person
            // holds until it is cleared or expires).
            if a.backlog == 0 && s.focus.activity == "working" {
                s.focus.activity = "idle".into();
            }
            if a.failed {
                s.cognitive_load = unit(s.cognitive_load + 0.1);
            }
            push_capped(
                &mut s.recent_decisions,
                RecentDecision { decision: a.verdict, reason: a.reason, at_us: now_us },
                KEEP_DECISIONS,
            );
            if let Some(t) = a.thought {
                push_capped(&mut s.recent_thoughts, Thought { text: t, at_us: now_us }, KEEP_THOUGHTS);
            }
            if let Some(room) = a.spoke_in {
                s.spoke_in.insert(room, now_us);
                while s.spoke_in.len() > KEEP_ROOMS {
                    let oldest = s.spoke_in.iter().min_by_key(|(_, t)| **t).map(|(r, _)| r.clone()).expect("not empty");
                    s.spoke_in.remove(&oldest);
                }
            }
        }
    }
    let backlog_part = backlog.map_or(s.cognitive_load, |b| (b as f64 / 50.0).min(1.0));
    s.cognitive_load = unit(0.5 * backlog_part + 0.3 * s.focus.intensity + 0.2 * (1.0 - s.energy));
    s.available_capacity = unit(1.0 - s.cognitive_load);
    s.mood = if s.cognitive_load > 0.8 {
        Mood::Overwhelmed
    } else if s.energy < 0.3 {
        Mood::Tired
    } else if s.activities > 0 && now_us - s.focus.since_us < ACTIVE_FOR_US {
        Mood::Active
    } else {
        Mood::Idle
    };
    s.focus.intensity = unit(s.focus.intensity);
    s.energy = unit(s.energy);
    s.updated_us = now_us;
}

fn push_capped<T>(v: &mut Vec<T>, x: T, cap: usize) {
    v.push(x);
    if v.len() > cap {
        v.drain(..v.len() - cap);
    }
}

/// The kind of a `Source` (`mindfleet_core::knowledge`) read from a reference (not found in the index).
pub const REFERENCE_KIND: &str = "reference";
/// The kind of a `Source` a tool call returned (cited `tool:server.tool`).
pub const TOOL_KIND: &str = "tool";
/// The kind of a `Source` that says why a tool call failed.
pub const TOOL_FAILED_KIND: &str = "tool-failed";

#[cfg(test)]
mod tests {
    use super::*;

    /// An engaged event from start to end.
    fn engaged(s: &mut SelfStateData, backlog: usize, now: i64) {
        let a = Activity {
            verdict: "engage".into(),
            engaged: Some(("chat".into(), "reply".into(), 0.8)),
            backlog,
            ..Default::default()
        };
        apply(s, Update::Focus(Box::new(a.clone())), now);
        assert_eq!(s.focus.activity, "working");
        apply(s, Update::Activity(Box::new(Activity { completed: true, ..a })), now);
    }

    #[test]
    fn engaging_makes_active_and_backlog_loads() {
        let mut s = SelfStateData::default();
        engaged(&mut s, 0, 1_000_000);
        assert_eq!(s.mood, Mood::Active);
        assert_eq!(s.activities, 1);
        let light = s.cognitive_load;
        engaged(&mut s, 100, 2_000_000);
        assert!(s.cognitive_load > light);
        assert!((s.cognitive_load + s.available_capacity - 1.0).abs() < 1e-12);
    }

    #[test]
    fn an_active_persona_settles_to_idle_when_nothing_happens() {
        let mut s = SelfStateData::default();
        engaged(&mut s, 0, 1_000_000);
        assert_eq!(s.mood, Mood::Active);
        let settle = settles_in(&s, 1_000_000).expect("an active mood settles");
        assert_eq!(settle, Duration::from_micros(ACTIVE_FOR_US as u64));
        // Before the time is up, a tick changes nothing; after it, the persona is idle.
        apply(&mut s, Update::Tick, 1_000_000 + ACTIVE_FOR_US - 1);
        assert_eq!(s.mood, Mood::Active);
        apply(&mut s, Update::Tick, 1_000_000 + ACTIVE_FOR_US);
        assert_eq!(s.mood, Mood::Idle);
        assert_eq!(settles_in(&s, 1_000_000 + ACTIVE_FOR_US), None, "an idle mood stays");
    }

    #[test]
    fn a_focus_ends_after_focus_max_or_when_cleared_and_says_why() {
        let mut s = SelfStateData::default();
        let max = Duration::from_secs(900);
        assert_eq!(focus_ends_in(&s, max, 0), None, "an idle focus does not end");
        apply(&mut s, Update::SetFocus { objective: "the release".into(), intensity: 0.9 }, 1_000_000);
        assert_eq!(focus_ends_in(&s, max, 1_000_000), Some(max));
        assert_eq!(focus_ends_in(&s, max, 1_000_000 + 901_000_000), Some(Duration::ZERO), "overdue: now");
        apply(&mut s, Update::ClearFocus("focus expired after 900 s".into()), 901_000_000);
        assert_eq!((s.focus.activity.as_str(), s.focus.intensity), ("idle", 0.0));
        assert_eq!(s.recent_thoughts.last().map(|t| t.text.as_str()), Some("focus expired after 900 s"));
        assert_eq!(focus_ends_in(&s, max, 901_000_000), None);
        // Clearing an idle focus changes nothing and thinks nothing of it.
        apply(&mut s, Update::ClearFocus("cleared".into()), 902_000_000);
        assert_eq!(s.recent_thoughts.len(), 1);
    }

    #[test]
    fn a_large_backlog_overwhelms_and_values_stay_in_unit_range() {
        let mut s = SelfStateData { energy: 0.0, ..Default::default() };
        for i in 0..50 {
            engaged(&mut s, 10_000, i);
        }
        assert_eq!(s.mood, Mood::Overwhelmed);
        for v in [s.cognitive_load, s.available_capacity, s.energy, s.focus.intensity] {
            assert!((0.0..=1.0).contains(&v));
        }
        assert_eq!(s.recent_decisions.len(), KEEP_DECISIONS);
    }

    #[test]
    fn cadence_slows_with_mood_and_doubles_on_a_spent_budget() {
        assert_eq!(cadence(Mood::Idle, 1.0), Duration::from_secs(3));
        assert_eq!(cadence(Mood::Overwhelmed, 0.5), Duration::from_secs(10));
        assert_eq!(cadence(Mood::Overwhelmed, 0.49), Duration::from_secs(20));
        assert!(cadence(Mood::Active, 1.0) < cadence(Mood::Tired, 1.0));
    }

    #[test]
    fn idle_time_restores_energy() {
        let mut s = SelfStateData { energy: 0.2, updated_us: 1, ..Default::default() };
        apply(&mut s, Update::SetDormant(false), 1 + 10 * 60_000_000);
        assert!((s.energy - 0.7).abs() < 1e-9);
    }
}
