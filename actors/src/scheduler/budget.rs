//! Model use over a sliding hour, for the fleet and per persona.
//!
//! Each granted model call is one entry: its grant time, its persona and its tokens (the
//! full `max_tokens` reservation until `done` settles it to the tokens used). Entries leave
//! the window an hour after their grant, in grant order, so expiry is a pop from the front
//! and the sums are kept exact without scans. Entries are addressed by a sequence number,
//! so a settlement after the entry expired is recognized and ignored.
//!
//! The same entries are the cost ledger: each keeps its purpose (the task's label), its room
//! and, once settled, how long the call ran, so [`Window::cost`] can break the last hour down.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mindfleet_core::sched::{CostReport, CostRow, CostSeries, MAX_COST_BUCKETS, PersonaBudget, SkipReason};

pub(super) const WINDOW: Duration = Duration::from_secs(3600);

/// Use within the window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Usage {
    pub inferences: u64,
    pub tokens: u64,
}

#[derive(Debug)]
struct Entry {
    at: Instant,
    persona: u32,
    inferences: u64,
    tokens: u64,
    /// Still held by a running task (the reservation is not settled).
    reserved: bool,
    purpose: &'static str,
    room: Option<Arc<str>>,
    /// The tool a tool call calls.
    tool: Option<Arc<str>>,
    /// Grant to settlement, once settled.
    ran: Option<Duration>,
}

/// What the budget allows for one model call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    Run,
    RulesOnly(SkipReason),
    Skip(SkipReason),
}

/// The limits a call is judged against.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub fleet: PersonaBudget,
    pub persona: Option<PersonaBudget>,
    /// Share of a budget above which low-priority calls are skipped.
    pub soft: f64,
}

#[derive(Debug, Default)]
pub(super) struct Window {
    entries: VecDeque<Entry>,
    /// Sequence number of `entries[0]`.
    head: u64,
    fleet: Usage,
    /// Tokens of unsettled reservations.
    reserved: u64,
    /// By persona index.
    personas: Vec<Usage>,
}

impl Window {
    /// Drops what was granted an hour or more before `now`.
    pub fn expire(&mut self, now: Instant) {
        while let Some(e) = self.entries.front() {
            if now.saturating_duration_since(e.at) < WINDOW {
                break;
            }
            let e = self.entries.pop_front().expect("a front entry");
            self.head += 1;
            self.fleet.inferences -= e.inferences;
            self.fleet.tokens -= e.tokens;
            if e.reserved {
                self.reserved -= e.tokens;
            }
            let p = &mut self.personas[e.persona as usize];
            p.inferences -= e.inferences;
            p.tokens -= e.tokens;
        }
    }

    /// Grant time of the oldest call in the window: it leaves the window an hour after.
    pub fn oldest(&self) -> Option<Instant> {
        self.entries.front().map(|e| e.at)
    }

    pub fn fleet(&self) -> Usage {
        self.fleet
    }

    pub fn reserved(&self) -> u64 {
        self.reserved
    }

    pub fn persona(&self, persona: u32) -> Usage {
        self.personas.get(persona as usize).copied().unwrap_or_default()
    }

    /// Judges one call of `tokens` tokens at `priority` for `persona` (after `expire`).
    ///
    /// The hard limits count this call's reservation: a call that would cross one is refused
    /// (rules only when `urgent`). Otherwise, unless `urgent`, a call that would take a
    /// budget's share above `soft` needs priority > 0.8 (tokens) or > 0.6 (calls).
    pub fn judge(&self, persona: u32, tokens: u64, priority: f64, urgent: bool, limits: &Limits) -> Verdict {
        let fleet = self.fleet;
        let mine = self.persona(persona);
        let over = |used: Usage, limit: &PersonaBudget, share: f64| {
            let calls = (used.inferences + 1) as f64 > share * limit.inferences_per_hour as f64;
            let toks = (used.tokens + tokens) as f64 > share * limit.tokens_per_hour as f64;
            (calls, toks)
        };
        let both = |share: f64| {
            let (c, t) = over(fleet, &limits.fleet, share);
            let (pc, pt) = limits.persona.as_ref().map_or((false, false), |b| over(mine, b, share));
            (c || pc, t || pt)
        };
        let (hard_calls, hard_tokens) = both(1.0);
        if hard_calls || hard_tokens {
            let r = SkipReason::HardBudget;
            return if urgent { Verdict::RulesOnly(r) } else { Verdict::Skip(r) };
        }
        if urgent {
            return Verdict::Run;
        }
        let (soft_calls, soft_tokens) = both(limits.soft);
        if soft_tokens && priority <= 0.8 {
            Verdict::Skip(SkipReason::SoftTokenBudget)
        } else if soft_calls && priority <= 0.6 {
            Verdict::Skip(SkipReason::SoftCallBudget)
        } else {
            Verdict::Run
        }
    }

    /// Share (0..=1) of the tightest budget left to `persona`: its own or the fleet's, calls or
    /// tokens (after `expire`).
    pub fn share_left(&self, persona: u32, limits: &Limits) -> f64 {
        let left = |used: Usage, b: &PersonaBudget| {
            let share = |u: u64, l: u64| if l == 0 { 0.0 } else { 1.0 - (u as f64 / l as f64).min(1.0) };
            share(used.inferences, b.inferences_per_hour).min(share(used.tokens, b.tokens_per_hour))
        };
        let fleet = left(self.fleet, &limits.fleet);
        limits.persona.as_ref().map_or(fleet, |b| fleet.min(left(self.persona(persona), b)))
    }

    /// Charges one call and reserves `tokens`; returns the entry's sequence number.
    pub fn reserve(
        &mut self,
        now: Instant,
        persona: u32,
        tokens: u64,
        purpose: &'static str,
        room: Option<Arc<str>>,
        tool: Option<Arc<str>>,
    ) -> u64 {
        let p = persona as usize;
        if self.personas.len() <= p {
            self.personas.resize(p + 1, Usage::default());
        }
        self.entries.push_back(Entry {
            at: now,
            persona,
            inferences: 1,
            tokens,
            reserved: true,
            purpose,
            room,
            tool,
            ran: None,
        });
        self.fleet.inferences += 1;
        self.fleet.tokens += tokens;
        self.reserved += tokens;
        self.personas[p].inferences += 1;
        self.personas[p].tokens += tokens;
        self.head + self.entries.len() as u64 - 1
    }

    /// Settles a reservation to what was used (`None`: nothing ran, so the call is not
    /// counted either). A task that reports more than it reserved is charged what it reports.
    pub fn settle(&mut self, seq: u64, used: Option<u64>, now: Instant) {
        let Some(i) = seq.checked_sub(self.head) else { return };
        let Some(e) = self.entries.get_mut(i as usize) else { return };
        if !e.reserved {
            return;
        }
        e.reserved = false;
        e.ran = Some(now.saturating_duration_since(e.at));
        self.reserved -= e.tokens;
        let p = &mut self.personas[e.persona as usize];
        let (tokens, inferences) = match used {
            Some(t) => (t, e.inferences),
            None => (0, 0),
        };
        self.fleet.tokens = self.fleet.tokens - e.tokens + tokens;
        p.tokens = p.tokens - e.tokens + tokens;
        self.fleet.inferences = self.fleet.inferences - e.inferences + inferences;
        p.inferences = p.inferences - e.inferences + inferences;
        e.tokens = tokens;
        e.inferences = inferences;
    }

    /// The calls granted within `since` of `now` (after `expire`), by persona, room and purpose,
    /// with the latency of the finished ones, and with `buckets` > 0 each persona's tokens over
    /// `buckets` equal slices of `since`. `names` maps persona indices to names.
    pub fn cost(&self, now: Instant, since: Duration, buckets: u32, names: &[Arc<str>]) -> CostReport {
        let since = since.min(WINDOW);
        let buckets = buckets.min(MAX_COST_BUCKETS) as usize;
        let width = if buckets == 0 { Duration::ZERO } else { since / buckets as u32 };
        let (mut persona, mut room, mut purpose, mut tool) =
            (HashMap::new(), HashMap::new(), HashMap::new(), HashMap::new());
        let mut series: HashMap<&str, Vec<u64>> = HashMap::new();
        let mut r = CostReport { since_secs: since.as_secs_f64(), ..CostReport::default() };
        let mut ran = Vec::new();
        for e in self.entries.iter().rev().take_while(|e| now.saturating_duration_since(e.at) < since) {
            if e.inferences == 0 {
                continue; // granted, then released before it ran: not a call
            }
            if !width.is_zero() {
                let name = names.get(e.persona as usize).map_or("?", |n| &**n);
                let back = (now.saturating_duration_since(e.at).as_nanos() / width.as_nanos()) as usize;
                series.entry(name).or_insert_with(|| vec![0; buckets])[buckets - 1 - back.min(buckets - 1)] += e.tokens;
            }
            r.inferences += e.inferences;
            r.tokens += e.tokens;
            if e.reserved {
                r.tokens_reserved += e.tokens;
            }
            let name = names.get(e.persona as usize).map_or("?", |n| &**n);
            for (map, key) in
                [(&mut persona, name), (&mut room, e.room.as_deref().unwrap_or("-")), (&mut purpose, e.purpose)]
            {
                let row: &mut CostRow =
                    map.entry(key).or_insert_with(|| CostRow { key: key.into(), ..CostRow::default() });
                row.inferences += e.inferences;
                row.tokens += e.tokens;
            }
            if let Some(t) = e.tool.as_deref() {
                let row: &mut CostRow =
                    tool.entry(t).or_insert_with(|| CostRow { key: t.into(), ..CostRow::default() });
                row.inferences += e.inferences;
            }
            ran.extend(e.ran);
        }
        let rows = |m: HashMap<&str, CostRow>| {
            let mut v: Vec<CostRow> = m.into_values().collect();
            v.sort_by(|a, b| b.tokens.cmp(&a.tokens).then(b.inferences.cmp(&a.inferences)).then(a.key.cmp(&b.key)));
            v
        };
        r.by_persona = rows(persona);
        r.by_room = rows(room);
        r.by_purpose = rows(purpose);
        r.by_tool = rows(tool);
        if !width.is_zero() {
            r.bucket_secs = width.as_secs_f64();
            r.timeline = r
                .by_persona
                .iter()
                .map(|row| CostSeries {
                    tokens: series.remove(row.key.as_str()).unwrap_or_default(),
                    key: row.key.clone(),
                })
                .collect();
        }
        ran.sort_unstable();
        let pct = |p: f64| super::nearest_rank(&ran, p).map_or(0.0, |d| d.as_secs_f64() * 1e3);
        (r.latency_p50_ms, r.latency_p95_ms, r.latency_p99_ms) = (pct(0.50), pct(0.95), pct(0.99));
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(persona: Option<(u64, u64)>) -> Limits {
        Limits {
            fleet: PersonaBudget { inferences_per_hour: 100, tokens_per_hour: 10_000 },
            persona: persona.map(|(i, t)| PersonaBudget { inferences_per_hour: i, tokens_per_hour: t }),
            soft: 0.8,
        }
    }

    #[test]
    fn reservations_settle_and_expire_after_an_hour() {
        let t0 = Instant::now();
        let mut w = Window::default();
        let a = w.reserve(t0, 0, 500, "draft_reply", None, None);
        let b = w.reserve(t0 + Duration::from_secs(10), 1, 300, "gate", None, None);
        assert_eq!(w.fleet(), Usage { inferences: 2, tokens: 800 });
        assert_eq!(w.reserved(), 800);
        w.settle(a, Some(120), t0);
        assert_eq!(w.persona(0), Usage { inferences: 1, tokens: 120 });
        w.settle(a, Some(0), t0);
        assert_eq!(w.persona(0).tokens, 120, "a second settlement changes nothing");
        w.settle(b, None, t0);
        assert_eq!(w.persona(1), Usage::default());
        assert_eq!(w.fleet(), Usage { inferences: 1, tokens: 120 });
        assert_eq!(w.reserved(), 0);
        w.expire(t0 + WINDOW - Duration::from_nanos(1));
        assert_eq!(w.fleet().tokens, 120);
        w.expire(t0 + WINDOW);
        assert_eq!(w.fleet(), Usage::default());
        w.settle(a, Some(1), t0);
        assert_eq!(w.fleet(), Usage::default(), "an expired entry is not settled");
    }

    #[test]
    fn judge_follows_hard_then_soft_limits() {
        let t0 = Instant::now();
        let mut w = Window::default();
        let l = limits(Some((10, 1000)));
        w.reserve(t0, 0, 790, "x", None, None);
        assert_eq!(w.judge(0, 10, 0.5, false, &l), Verdict::Run, "exactly at the soft share");
        assert_eq!(w.judge(0, 11, 0.8, false, &l), Verdict::Skip(SkipReason::SoftTokenBudget));
        assert_eq!(w.judge(0, 11, 0.81, false, &l), Verdict::Run);
        assert_eq!(w.judge(0, 11, 0.1, true, &l), Verdict::Run, "urgent ignores the soft limit");
        assert_eq!(w.judge(0, 211, 0.9, false, &l), Verdict::Skip(SkipReason::HardBudget));
        assert_eq!(w.judge(0, 211, 0.9, true, &l), Verdict::RulesOnly(SkipReason::HardBudget));
        assert_eq!(w.judge(1, 211, 0.9, false, &l), Verdict::Run, "another persona has its own budget");
        for _ in 0..7 {
            w.reserve(t0, 0, 0, "x", None, None);
        }
        // 8 calls used: a 9th is above 0.8 of 10.
        assert_eq!(w.judge(0, 0, 0.6, false, &l), Verdict::Skip(SkipReason::SoftCallBudget));
        assert_eq!(w.judge(0, 0, 0.61, false, &l), Verdict::Run);
        w.reserve(t0, 0, 0, "x", None, None);
        w.reserve(t0, 0, 0, "x", None, None);
        assert_eq!(w.judge(0, 0, 1.0, false, &l), Verdict::Skip(SkipReason::HardBudget));
    }

    #[test]
    fn the_fleet_budget_binds_personas_without_one() {
        let t0 = Instant::now();
        let mut w = Window::default();
        let l = limits(None);
        w.reserve(t0, 3, 9_000, "x", None, None);
        assert_eq!(w.judge(4, 1_000, 1.0, false, &l), Verdict::Run);
        assert_eq!(w.judge(4, 1_001, 1.0, false, &l), Verdict::Skip(SkipReason::HardBudget));
    }

    #[test]
    fn a_tool_call_is_a_call_of_the_budget_without_tokens_counted_by_tool() {
        let t0 = Instant::now();
        let mut w = Window::default();
        let names: Vec<Arc<str>> = vec!["ada".into()];
        let git: Option<Arc<str>> = Some("git.git_log".into());
        let a = w.reserve(t0, 0, 1, "call_tool", None, git.clone());
        let b = w.reserve(t0, 0, 1, "call_tool", None, git);
        let c = w.reserve(t0, 0, 1, "call_tool", None, Some("fs.write_file".into()));
        w.settle(a, Some(0), t0 + Duration::from_millis(5));
        w.settle(b, Some(0), t0 + Duration::from_millis(7));
        w.settle(c, None, t0 + Duration::from_millis(9));
        let r = w.cost(t0 + Duration::from_secs(1), Duration::from_secs(3600), 0, &names);
        assert_eq!((r.inferences, r.tokens), (2, 0), "a call parked, never made, is not counted");
        let keys = |v: &[CostRow]| v.iter().map(|x| (x.key.clone(), x.inferences, x.tokens)).collect::<Vec<_>>();
        assert_eq!(keys(&r.by_tool), [("git.git_log".into(), 2, 0)]);
        assert_eq!(keys(&r.by_purpose), [("call_tool".into(), 2, 0)]);
    }

    #[test]
    fn the_ledger_breaks_cost_down_by_persona_room_and_purpose() {
        let t0 = Instant::now();
        let mut w = Window::default();
        let names: Vec<Arc<str>> = vec!["ada".into(), "bob".into()];
        let dev: Option<Arc<str>> = Some("dev".into());
        let a = w.reserve(t0, 0, 500, "draft_reply", dev.clone(), None);
        let b = w.reserve(t0 + Duration::from_secs(1), 1, 100, "gate", dev, None);
        let c = w.reserve(t0 + Duration::from_secs(2), 0, 50, "gate", None, None);
        w.settle(a, Some(200), t0 + Duration::from_millis(400));
        w.settle(b, Some(100), t0 + Duration::from_millis(1100));
        w.settle(c, None, t0 + Duration::from_secs(2));
        w.reserve(t0 + Duration::from_secs(3), 1, 70, "gate", None, None);
        let r = w.cost(t0 + Duration::from_secs(3), Duration::from_secs(3600), 0, &names);
        assert_eq!((r.inferences, r.tokens, r.tokens_reserved), (3, 370, 70), "a call that never ran is not counted");
        let keys = |v: &[CostRow]| v.iter().map(|x| (x.key.clone(), x.inferences, x.tokens)).collect::<Vec<_>>();
        assert_eq!(keys(&r.by_persona), [("ada".into(), 1, 200), ("bob".into(), 2, 170)]);
        assert_eq!(keys(&r.by_room), [("dev".into(), 2, 300), ("-".into(), 1, 70)]);
        assert_eq!(keys(&r.by_purpose), [("draft_reply".into(), 1, 200), ("gate".into(), 2, 170)]);
        assert!((r.latency_p50_ms - 100.0).abs() < 1e-6 && (r.latency_p99_ms - 400.0).abs() < 1e-6, "{r:?}");
        assert!(r.timeline.is_empty() && r.bucket_secs == 0.0, "no timeline unless asked for");
        let recent = w.cost(t0 + Duration::from_secs(3), Duration::from_millis(1500), 0, &names);
        assert_eq!((recent.inferences, recent.tokens), (1, 70), "only the last 1.5 s");
        // Over 4 s in buckets of 1 s, oldest first: ada's call 3 s ago, bob's 2 s ago and now.
        let t = w.cost(t0 + Duration::from_secs(3), Duration::from_secs(4), 4, &names);
        assert_eq!(t.bucket_secs, 1.0);
        let series = |k: &str| t.timeline.iter().find(|s| s.key == k).map(|s| s.tokens.clone());
        assert_eq!(series("ada"), Some(vec![200, 0, 0, 0]));
        assert_eq!(series("bob"), Some(vec![0, 100, 0, 70]));
        assert_eq!(t.timeline.len(), 2);
    }

    #[test]
    fn share_left_is_the_tightest_budget() {
        let t0 = Instant::now();
        let mut w = Window::default();
        let l = limits(Some((10, 1000)));
        assert_eq!(w.share_left(0, &l), 1.0);
        w.reserve(t0, 0, 600, "x", None, None);
        assert!((w.share_left(0, &l) - 0.4).abs() < 1e-9, "persona tokens: 600 of 1000");
        assert!((w.share_left(1, &l) - 0.94).abs() < 1e-9, "fleet tokens: 600 of 10,000");
    }
}
