//! Pure decision functions: inbox priority and the fast-path engagement gate.
//!
//! Both are deterministic and allocation-free on the hot path, so the gate can decide
//! millions of events per second on one core (`mindfleet bench gate`).

use mindfleet_core::event::{Event, SenderKind};
use mindfleet_core::record::{Mood, Verdict};
use mindfleet_core::words::in_compound;

/// How long a persona message counts as "recent" for the echo-storm guard.
pub const ECHO_WINDOW_US: i64 = 30_000_000;
/// How long after posting a persona counts as having "spoken recently" in a room.
pub const SPOKE_WINDOW_US: i64 = 300_000_000;

/// What the priority of an event is computed from.
pub struct PriorityInput<'a> {
    pub event: &'a Event,
    pub persona: &'a str,
    pub expertise: &'a [String],
    pub now_us: i64,
    /// The persona posted in the event's room within [`SPOKE_WINDOW_US`].
    pub spoke_recently: bool,
}

/// Whether `event` is addressed to `persona` (a mention, or sent to it alone).
pub fn addressed(event: &Event, persona: &str) -> bool {
    event.persona.as_deref() == Some(persona) || event.mentions.iter().any(|m| m == persona)
}

/// Whether `event` names someone (a mention, or sent to one persona) and not `persona`: the
/// message is somebody else's to answer, and the room's coordinator gives its turn to whom it
/// names (RUNTIME-SEMANTICS.md, "Turn-taking").
pub fn named_elsewhere(event: &Event, persona: &str) -> bool {
    !addressed(event, persona) && (event.persona.is_some() || !event.mentions.is_empty())
}

/// Inbox priority: base 0.2, +0.4 addressed, +0.2 under 1 min old (+0.1 under 5 min),
/// +0.1 spoke recently in the room, +0.1 per expertise keyword hit (at most +0.3),
/// capped at 1.0. An explicit priority in the event overrides.
pub fn priority(i: &PriorityInput) -> f64 {
    if let Some(p) = i.event.priority {
        return p;
    }
    let mut p = 0.2;
    if addressed(i.event, i.persona) {
        p += 0.4;
    }
    let age = i.now_us - i.event.ts_us;
    if age < 60_000_000 {
        p += 0.2;
    } else if age < 300_000_000 {
        p += 0.1;
    }
    if i.spoke_recently {
        p += 0.1;
    }
    let hits = keyword_hits(&i.event.text, i.expertise);
    p += (0.1 * hits as f64).min(0.3);
    p.min(1.0)
}

/// Expertise keywords found in `text` as whole words, case-insensitively (each counted
/// once; the text is split once, whatever the number of keywords).
pub fn keyword_hits(text: &str, expertise: &[String]) -> usize {
    if expertise.is_empty() {
        return 0;
    }
    let mut seen: u64 = 0;
    for w in text.split(|c: char| !in_compound(c)) {
        if w.is_empty() {
            continue;
        }
        for (i, kw) in expertise.iter().enumerate().take(64) {
            if w.len() == kw.len() && w.eq_ignore_ascii_case(kw) {
                seen |= 1 << i;
            }
        }
    }
    seen.count_ones() as usize
}

/// The persona's side of the gate's inputs.
#[derive(Debug, Clone, Copy)]
pub struct GateState {
    pub mood: Mood,
    pub dormant: bool,
    pub load: f64,
    pub capacity: f64,
    /// Intensity of the current focus, and whether the event is in the focused domain.
    pub focus_intensity: f64,
    pub same_domain: bool,
    /// Persona messages seen in the event's room within [`ECHO_WINDOW_US`], own posts included.
    pub recent_persona_msgs: usize,
    /// Expertise keywords in the event's text.
    pub keyword_hits: usize,
}

impl Default for GateState {
    fn default() -> Self {
        GateState {
            mood: Mood::Idle,
            dormant: false,
            load: 0.0,
            capacity: 1.0,
            focus_intensity: 0.0,
            same_domain: false,
            recent_persona_msgs: 0,
            keyword_hits: 0,
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct GateDecision {
    pub verdict: Verdict,
    /// Which stage of the chain decided: `fast_path`, `thermal` or `model`.
    pub stage: &'static str,
    /// Which of its rules (`own_message`, `mention`, `stay_focused`, `score`, ...).
    pub rule: &'static str,
    pub threshold: f64,
    /// The model stage's score (0 when another stage decided).
    pub score: f64,
    /// Said by whoever decided, added to the reason (the coordinator's verdict).
    pub note: String,
}

impl GateDecision {
    fn new(stage: &'static str, verdict: Verdict, rule: &'static str, threshold: f64) -> Self {
        GateDecision { verdict, stage, rule, threshold, score: 0.0, note: String::new() }
    }

    /// `stage/rule`, as journaled in `Decision::by`.
    pub fn by(&self) -> String {
        format!("{}/{}", self.stage, self.rule)
    }
}

/// Threshold an event's priority must exceed, by mood.
pub fn mood_threshold(mood: Mood) -> f64 {
    match mood {
        Mood::Overwhelmed => 0.9,
        Mood::Tired => 0.5,
        Mood::Active => 0.3,
        Mood::Idle => 0.1,
    }
}

/// First stage: the deterministic rules that need no judgement. `None` passes the event on.
pub fn fast_path(event: &Event, persona: &str, priority: f64, s: &GateState) -> Option<GateDecision> {
    let threshold = mood_threshold(s.mood);
    let d = |verdict, rule| Some(GateDecision::new("fast_path", verdict, rule, threshold));
    if event.sender_kind == SenderKind::Persona && event.from == persona {
        return d(Verdict::Ignore, "own_message");
    }
    if event.mentions.iter().any(|m| m == persona) || event.persona.as_deref() == Some(persona) {
        return d(Verdict::Engage, "mention");
    }
    if priority > 0.8 {
        return d(Verdict::Engage, "high_priority");
    }
    if s.dormant {
        return d(Verdict::Ignore, "dormant");
    }
    if event.sender_kind == SenderKind::Persona && s.recent_persona_msgs >= 2 {
        return d(Verdict::Ignore, "echo_storm");
    }
    if priority <= threshold {
        // Under the bar; close to it a human message is kept in mind rather than dropped.
        let keep = priority > threshold * 0.5 && event.sender_kind == SenderKind::Human;
        return d(if keep { Verdict::Defer } else { Verdict::Ignore }, "threshold");
    }
    None
}

/// Second stage: the persona's state. `None` passes the event on.
pub fn thermal(priority: f64, s: &GateState) -> Option<GateDecision> {
    let d = |rule, threshold| Some(GateDecision::new("thermal", Verdict::Defer, rule, threshold));
    if s.focus_intensity > 0.8 && priority < 0.5 {
        return d("stay_focused", 0.5);
    }
    if s.load > 0.7 && priority < 2.0 / 3.0 {
        return d("overloaded", 2.0 / 3.0);
    }
    if s.capacity < 0.3 {
        return d("low_capacity", 0.3);
    }
    None
}

/// The deterministic scorer the `rules` brain uses as the model stage: priority, plus
/// expertise and domain fit, less load. Engages above 0.3, defers below.
pub fn score(priority: f64, s: &GateState) -> GateDecision {
    let v = priority + (0.1 * s.keyword_hits as f64).min(0.3) + if s.same_domain { 0.1 } else { 0.0 } - 0.2 * s.load;
    let verdict = if v > 0.3 { Verdict::Engage } else { Verdict::Defer };
    GateDecision { verdict, stage: "model", rule: "score", threshold: 0.3, score: v, note: String::new() }
}

/// The whole chain with the deterministic scorer: the first stage that decides wins.
pub fn gate_chain(event: &Event, persona: &str, priority: f64, s: &GateState) -> GateDecision {
    fast_path(event, persona, priority, s).or_else(|| thermal(priority, s)).unwrap_or_else(|| score(priority, s))
}

/// The reason a person reads in the decision journal.
pub fn explain(g: &GateDecision, priority: f64, s: &GateState) -> String {
    let deferred = if g.verdict == Verdict::Defer { "; deferred as a preoccupation" } else { "" };
    match g.rule {
        "redundant" => format!("wanted to answer, but {}", g.note),
        "assigned" => format!("{}: the coordinator gave it to me", g.note),
        "own_message" => "my own message".into(),
        "mention" => "I was mentioned or addressed: always engage".into(),
        "high_priority" => format!("priority {priority:.2} > 0.80: always engage"),
        "dormant" => "dormant: only mentions wake me".into(),
        "echo_storm" => format!(
            "echo-storm guard: {} persona messages in this room within 30 s, not adding to undirected persona chatter",
            s.recent_persona_msgs
        ),
        "threshold" => {
            format!("priority {priority:.2} <= threshold {:.2} for mood {}{deferred}", g.threshold, s.mood.as_str())
        }
        "stay_focused" => format!(
            "staying focused (intensity {:.2} > 0.80) and priority {priority:.2} < 0.50{deferred}",
            s.focus_intensity
        ),
        "overloaded" => {
            format!(
                "load {:.2} > 0.70: only the most important third (priority {priority:.2} < 0.67){deferred}",
                s.load
            )
        }
        "low_capacity" => format!("capacity {:.2} < 0.30{deferred}", s.capacity),
        _ => {
            let cmp = if g.verdict == Verdict::Engage { ">" } else { "<=" };
            let note = if g.note.is_empty() { String::new() } else { format!("; {}", g.note) };
            format!(
                "score {:.2} {cmp} {:.2} (priority {priority:.2}, {} expertise hits, load {:.2}){deferred}{note}",
                g.score, g.threshold, s.keyword_hits, s.load
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mindfleet_core::event::EventInput;

    fn ev(text: &str, kind: SenderKind, from: &str) -> Event {
        EventInput {
            domain: "chat".into(),
            room: "general".into(),
            from: from.into(),
            sender_kind: kind,
            text: text.into(),
            ..Default::default()
        }
        .validate()
        .unwrap()
    }

    fn state(mood: Mood) -> GateState {
        GateState { mood, ..GateState::default() }
    }

    #[test]
    fn priority_adds_up_and_caps() {
        let e = ev("@helper the deploy of auth broke latency", SenderKind::Human, "alice");
        let kw = vec!["deploy".to_string(), "auth".to_string(), "latency".to_string(), "broke".to_string()];
        let i = PriorityInput { event: &e, persona: "helper", expertise: &kw, now_us: e.ts_us, spoke_recently: true };
        // 0.2 + 0.4 + 0.2 + 0.1 + min(0.4, 0.3) = 1.2 -> 1.0
        assert_eq!(priority(&i), 1.0);
        let old = PriorityInput { now_us: e.ts_us + 120_000_000, spoke_recently: false, expertise: &[], ..i };
        assert!((priority(&old) - 0.7).abs() < 1e-9);
    }

    #[test]
    fn a_message_naming_someone_else_is_named_elsewhere_and_one_naming_nobody_or_me_is_not() {
        let named = |text: &str| named_elsewhere(&ev(text, SenderKind::Human, "alice"), "helper");
        assert!(named("@sam can you look at the deploy?"));
        assert!(!named("@sam @helper can you look at the deploy?"));
        assert!(!named("can anyone look at the deploy?"));
        let mut to_sam = ev("a word", SenderKind::Human, "alice");
        to_sam.persona = Some("sam".into());
        assert!(named_elsewhere(&to_sam, "helper") && !named_elsewhere(&to_sam, "sam"));
    }

    #[test]
    fn own_messages_are_ignored_even_when_mentioning_self() {
        let e = ev("@helper note to self", SenderKind::Persona, "helper");
        assert_eq!(gate_chain(&e, "helper", 1.0, &state(Mood::Idle)).rule, "own_message");
    }

    #[test]
    fn mention_beats_overwhelmed_and_dormant() {
        let e = ev("@helper help", SenderKind::Human, "alice");
        let s = GateState {
            mood: Mood::Overwhelmed,
            dormant: true,
            load: 1.0,
            capacity: 0.0,
            focus_intensity: 1.0,
            recent_persona_msgs: 9,
            ..GateState::default()
        };
        assert_eq!(gate_chain(&e, "helper", 0.1, &s).verdict, Verdict::Engage);
    }

    #[test]
    fn dormant_ignores_undirected() {
        let e = ev("anyone around?", SenderKind::Human, "alice");
        let s = GateState { dormant: true, ..state(Mood::Idle) };
        assert_eq!(gate_chain(&e, "scribe", 0.5, &s).rule, "dormant");
    }

    #[test]
    fn thresholds_follow_mood() {
        let e = ev("hello", SenderKind::Human, "alice");
        assert_eq!(gate_chain(&e, "p", 0.4, &state(Mood::Active)).verdict, Verdict::Engage);
        assert_eq!(gate_chain(&e, "p", 0.4, &state(Mood::Tired)).verdict, Verdict::Defer);
        assert_eq!(gate_chain(&e, "p", 0.4, &state(Mood::Overwhelmed)).verdict, Verdict::Ignore);
        assert_eq!(gate_chain(&e, "p", 0.35, &state(Mood::Idle)).verdict, Verdict::Engage);
    }

    #[test]
    fn echo_storm_blocks_undirected_persona_chatter_only() {
        let e = ev("I agree", SenderKind::Persona, "ops");
        let s = GateState { recent_persona_msgs: 2, ..state(Mood::Idle) };
        assert_eq!(gate_chain(&e, "helper", 0.5, &s).rule, "echo_storm");
        let human = ev("I agree", SenderKind::Human, "alice");
        assert_eq!(gate_chain(&human, "helper", 0.5, &s).verdict, Verdict::Engage);
        let one = GateState { recent_persona_msgs: 1, ..s };
        assert_eq!(gate_chain(&e, "helper", 0.5, &one).verdict, Verdict::Engage);
    }

    #[test]
    fn thermal_defers_by_state_and_names_itself() {
        let e = ev("a question about lunch", SenderKind::Human, "alice");
        let focused = GateState { focus_intensity: 0.9, ..state(Mood::Active) };
        let d = gate_chain(&e, "p", 0.45, &focused);
        assert_eq!((d.verdict, d.by().as_str()), (Verdict::Defer, "thermal/stay_focused"));
        let loaded = GateState { load: 0.75, ..state(Mood::Active) };
        assert_eq!(gate_chain(&e, "p", 0.6, &loaded).rule, "overloaded");
        assert_eq!(gate_chain(&e, "p", 0.7, &loaded).stage, "model", "the top third passes the thermal stage");
        let drained = GateState { capacity: 0.2, ..state(Mood::Active) };
        assert_eq!(gate_chain(&e, "p", 0.7, &drained).rule, "low_capacity");
    }

    #[test]
    fn the_model_scorer_decides_what_is_left() {
        let e = ev("deploy question", SenderKind::Human, "alice");
        let d = gate_chain(&e, "p", 0.35, &GateState { keyword_hits: 1, ..state(Mood::Active) });
        assert_eq!((d.verdict, d.stage), (Verdict::Engage, "model"));
        assert!((d.score - 0.45).abs() < 1e-9);
        let heavy = GateState { load: 0.6, ..state(Mood::Active) };
        assert_eq!(gate_chain(&e, "p", 0.35, &heavy).verdict, Verdict::Defer);
    }

    #[test]
    fn keywords_match_whole_words_only() {
        let kw = vec!["auth".to_string()];
        assert_eq!(keyword_hits("review AUTH.rs please", &kw), 1);
        assert_eq!(keyword_hits("the author wrote", &kw), 0);
        assert_eq!(keyword_hits("auth, auth and AUTH", &kw), 1, "a keyword counts once");
    }
}
