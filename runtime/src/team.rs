//! Self-state as a coordination signal: who is best suited for a task, and how the fleet is
//! doing as a whole. Pure functions over self-states, used by the persona (for its claims),
//! the coordinator (to assign unclaimed messages) and the admin (`select-for-task`, health).

use serde::{Deserialize, Serialize};

use crate::model::{Mood, SelfStateData};

/// How suited a persona is for a task in `domain` with `priority`:
/// ×0.2 when deeply focused (> 0.7) on something else, ×0.3 when loaded (> 0.8), ×0.4 when
/// its capacity is low (< 0.3), ×2 for its own domain, ×(1 + priority) when the task matches
/// one of its preoccupations.
pub fn suitability(s: &SelfStateData, domains: &[String], domain: &str, priority: f64, text: &str) -> f64 {
    let mut x = 1.0;
    if s.focus.activity != "idle" && s.focus.intensity > 0.7 {
        x *= 0.2;
    }
    if s.cognitive_load > 0.8 {
        x *= 0.3;
    }
    if s.available_capacity < 0.3 {
        x *= 0.4;
    }
    if domains.iter().any(|d| d == domain) {
        x *= 2.0;
    }
    let words: Vec<String> =
        text.split(|c: char| !c.is_alphanumeric()).filter(|w| w.len() > 3).map(str::to_lowercase).collect();
    let matches = s.preoccupations.iter().any(|p| {
        p.domain == domain && {
            let concern = p.concern.to_lowercase();
            words.iter().any(|w| concern.contains(w.as_str()))
        }
    });
    if matches {
        x *= 1.0 + priority;
    }
    x
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Recommendation {
    /// Too many personas are overloaded: shed or defer work.
    ReduceLoad,
    /// Many personas are idle: there is room for more work.
    AssignWork,
    Healthy,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Health {
    pub personas: usize,
    pub overloaded: usize,
    pub idle: usize,
    pub deeply_focused: usize,
    pub dormant: usize,
    pub average_capacity: f64,
    pub recommendation: Recommendation,
}

/// The fleet's health from its personas' self-states.
pub fn health<'a>(states: impl IntoIterator<Item = &'a SelfStateData>) -> Health {
    let (mut n, mut overloaded, mut idle, mut focused, mut dormant, mut capacity) = (0, 0, 0, 0, 0, 0.0);
    for s in states {
        n += 1;
        capacity += s.available_capacity;
        if s.mood == Mood::Overwhelmed || s.cognitive_load > 0.8 {
            overloaded += 1;
        }
        if s.mood == Mood::Idle {
            idle += 1;
        }
        if s.focus.activity != "idle" && s.focus.intensity > 0.7 {
            focused += 1;
        }
        if s.dormant {
            dormant += 1;
        }
    }
    let average_capacity = if n == 0 { 0.0 } else { capacity / n as f64 };
    let recommendation = if n > 0 && overloaded * 3 >= n {
        Recommendation::ReduceLoad
    } else if n > 0 && idle * 2 > n {
        Recommendation::AssignWork
    } else {
        Recommendation::Healthy
    };
    Health { personas: n, overloaded, idle, deeply_focused: focused, dormant, average_capacity, recommendation }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Focus, Preoccupation};

    #[test]
    fn suitability_follows_the_factors() {
        let domains = vec!["code".to_string()];
        let fresh = SelfStateData::default();
        assert_eq!(suitability(&fresh, &domains, "code", 0.5, "x"), 2.0);
        assert_eq!(suitability(&fresh, &domains, "chat", 0.5, "x"), 1.0);
        let busy = SelfStateData {
            focus: Focus { activity: "working".into(), intensity: 0.9, ..Focus::default() },
            cognitive_load: 0.9,
            available_capacity: 0.1,
            ..SelfStateData::default()
        };
        assert!((suitability(&busy, &domains, "chat", 0.5, "x") - 0.2 * 0.3 * 0.4).abs() < 1e-12);
        let preoccupied = SelfStateData {
            preoccupations: vec![Preoccupation {
                concern: "alice in #dev: the flaky deploy pipeline".into(),
                priority: 0.4,
                domain: "code".into(),
                event_id: "e".into(),
                created_us: 0,
            }],
            ..SelfStateData::default()
        };
        assert!((suitability(&preoccupied, &domains, "code", 0.5, "is the deploy fixed?") - 3.0).abs() < 1e-12);
    }

    #[test]
    fn health_recommends_by_the_counts() {
        let idle = SelfStateData::default();
        let over =
            SelfStateData { mood: Mood::Overwhelmed, cognitive_load: 0.9, available_capacity: 0.1, ..idle.clone() };
        assert_eq!(health([&idle, &idle, &idle]).recommendation, Recommendation::AssignWork);
        let h = health([&over, &idle, &SelfStateData { mood: Mood::Active, ..idle.clone() }]);
        assert_eq!((h.overloaded, h.recommendation), (1, Recommendation::ReduceLoad));
        assert!((h.average_capacity - (0.1 + 1.0 + 1.0) / 3.0).abs() < 1e-12);
    }
}
