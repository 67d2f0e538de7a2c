//! A persona's introspection panel: thoughts, working memory, plan, decisions, learnings and
//! recoveries, with the long lists paged through a cursor ([`List`]).

use mindfleet_core::cursor::Page;
use mindfleet_core::dump::PersonaDump;
use mindfleet_core::record::{Decision, SelfStateData, StepState, WmEntry};

use super::cards::status_of;
use super::html::{escape, named};

/// A list section of the panel: `items` (already HTML), or what an empty one means.
pub(super) fn section(title: &str, empty: &str, items: Vec<String>) -> String {
    let body = if items.is_empty() {
        format!(r#"<p class="empty">{empty}</p>"#)
    } else {
        format!("<ol>{}</ol>", items.into_iter().map(|i| format!("<li>{i}</li>")).collect::<String>())
    };
    format!("<section><h3>{title}</h3>{body}</section>")
}

/// Entries per page of the panel's long lists.
pub const PAGE: usize = 10;

/// A long list of the panel, paged through the same cursor as `ai thoughts --page-size` and
/// `ai decisions --page-size`: its first page comes with the panel, the next ones from a cursor
/// opened when the first page is left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum List {
    /// The decision journal, newest first.
    Decisions,
    /// Working memory's entries (the `thoughts` of `ai thoughts`).
    Memory,
}

impl List {
    /// The list named by the panel's path, `decisions` or `memory`.
    pub fn parse(name: &str) -> Option<List> {
        match name {
            "decisions" => Some(List::Decisions),
            "memory" => Some(List::Memory),
            _ => None,
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            List::Decisions => "decisions",
            List::Memory => "memory",
        }
    }

    pub(super) fn items(self, p: &PersonaDump) -> Vec<serde_json::Value> {
        let json = |v: Result<serde_json::Value, _>| v.unwrap_or_default();
        match self {
            List::Decisions => p.decisions.iter().map(|d| json(serde_json::to_value(d))).collect(),
            List::Memory => p.working_memory.recent.iter().map(|m| json(serde_json::to_value(m))).collect(),
        }
    }

    /// The page the panel opens with, before any cursor.
    pub(super) fn first_page(self, p: &PersonaDump) -> Page<serde_json::Value> {
        let mut entries = self.items(p);
        let total_count = entries.len();
        entries.truncate(PAGE);
        Page { offset: 0, entries, total_count, has_more: total_count > PAGE, has_previous: false }
    }

    /// One entry as the panel shows it.
    pub(super) fn entry(self, v: &serde_json::Value) -> String {
        let e = escape;
        let at = |us: i64| mindfleet_core::time::rfc3339(us).get(11..19).unwrap_or_default().to_string();
        match self {
            List::Decisions => match serde_json::from_value::<Decision>(v.clone()) {
                Ok(d) => format!(
                    "<time>{}</time> <b>{}</b> {}: {}",
                    at(d.at_us),
                    named(&d.verdict),
                    e(&d.event_id),
                    e(&d.reason)
                ),
                Err(_) => e(&v.to_string()),
            },
            List::Memory => match serde_json::from_value::<WmEntry>(v.clone()) {
                Ok(m) => format!(
                    "<small>{}</small> {}: {} <small>({:.2})</small>",
                    e(&m.domain),
                    named(&m.kind),
                    e(&m.text),
                    m.importance
                ),
                Err(_) => e(&v.to_string()),
            },
        }
    }
}

/// A page of a list: the cursor it came from (none for the first page), its entries, and
/// buttons for the pages before and after.
pub fn render_list(persona: &str, list: List, handle: Option<&str>, page: &Page<serde_json::Value>) -> String {
    let (title, empty) = match list {
        List::Decisions => ("Decisions", "none yet"),
        List::Memory => ("Working memory", "empty"),
    };
    let body = if page.entries.is_empty() {
        format!(r#"<p class="empty">{empty}</p>"#)
    } else {
        let items: String = page.entries.iter().map(|v| format!("<li>{}</li>", list.entry(v))).collect();
        format!(r#"<ol start="{}">{items}</ol>"#, page.offset + 1)
    };
    let nav = if page.has_more || page.has_previous {
        let button = |dir: &str, label: &str, on: bool| {
            let disabled = if on { "" } else { " disabled" };
            format!(r#"<button type="button" data-page="{dir}"{disabled}>{label}</button>"#)
        };
        let (newer, older) = match list {
            List::Decisions => ("newer", "older"),
            List::Memory => ("previous", "next"),
        };
        format!(
            "<nav>{} {}</nav>",
            button("backward", newer, page.has_previous),
            button("forward", older, page.has_more)
        )
    } else {
        String::new()
    };
    let range = if page.entries.is_empty() {
        String::new()
    } else {
        format!(" <small>{}–{} of {}</small>", page.offset + 1, page.offset + page.entries.len(), page.total_count)
    };
    format!(
        r#"<section class="paged" data-persona="{p}" data-list="{l}" data-handle="{h}" data-offset="{o}"><h3>{title}{range}</h3>{body}{nav}</section>"#,
        p = escape(persona),
        l = list.name(),
        h = escape(handle.unwrap_or("")),
        o = page.offset,
    )
}

/// What the admin answered about a persona for its panel, besides its dump.
#[derive(Debug, Default)]
pub struct Answers {
    pub learnings: serde_json::Value,
    pub recoveries: serde_json::Value,
    pub adapters: serde_json::Value,
}

/// The introspection panel of a persona: its thoughts, working memory by domain, plan with the
/// state of each step and the long-term memory it used (with what each piece changed), decision
/// journal, learnings, recoveries and adapters; working memory and the journal are paged
/// ([`List`]). `answers` are those of `ai learnings`, `ai recoveries` and `ai adapters` for it.
pub fn render_panel(p: &PersonaDump, answers: &Answers) -> String {
    let Answers { learnings, recoveries, adapters } = answers;
    let e = escape;
    let at = |us: i64| mindfleet_core::time::rfc3339(us).get(11..19).unwrap_or_default().to_string();
    let fallback = SelfStateData::default();
    let s = p.self_state.as_ref().unwrap_or(&fallback);
    let thoughts =
        s.recent_thoughts.iter().rev().map(|t| format!("<time>{}</time> {}", at(t.at_us), e(&t.text))).collect();
    let mut domains: Vec<(&String, &usize)> = p.working_memory.per_domain.iter().collect();
    domains.sort();
    let domains: Vec<String> = domains.into_iter().map(|(d, n)| format!("{} ({n})", e(d))).collect();
    let plan = match &p.plan {
        None => r#"<p class="empty">no plan yet</p>"#.to_string(),
        Some(r) => {
            let steps: String = r
                .plan
                .steps
                .iter()
                .map(|st| {
                    let (state, failed) = match &st.state {
                        StepState::Pending => ("pending", String::new()),
                        StepState::Running => ("running", String::new()),
                        StepState::Done => ("done", String::new()),
                        StepState::Skipped => ("skipped", String::new()),
                        StepState::Failed { class, message } => {
                            ("failed", format!(" <small>{}: {}</small>", named(class), e(message)))
                        }
                    };
                    format!(
                        r#"<li data-state="{state}">{action} <span class="state">{state}</span>{contingency}{failed}</li>"#,
                        action = e(&named(&st.action)),
                        contingency = if st.contingency { " <small>(contingency)</small>" } else { "" },
                    )
                })
                .collect();
            let outcome = match (&r.evaluation, r.finished_us) {
                (Some(ev), _) => format!("{}: {}", if ev.success { "succeeded" } else { "failed" }, e(&ev.pattern)),
                (None, Some(_)) => "finished".into(),
                (None, None) => "running".into(),
            };
            let memory: String = r
                .memory_used
                .iter()
                .map(|u| {
                    format!(
                        r#"<li data-kind="{kind}" data-effect="{had}"><b>{kind}</b> {id}: {effect}</li>"#,
                        kind = u.kind.as_str(),
                        had = if u.had_effect() { "yes" } else { "no" },
                        id = e(&u.id),
                        effect = e(&u.effect),
                    )
                })
                .collect();
            let memory = if memory.is_empty() {
                r#"<p class="empty">no long-term memory recalled</p>"#.to_string()
            } else {
                format!(r#"<ul class="memory-used">{memory}</ul>"#)
            };
            format!(
                r#"<p>{goal} <small>for {event}, {outcome}, {n} adjustments</small></p><ol class="steps">{steps}</ol><h4>Memory used</h4>{memory}"#,
                goal = e(&r.plan.goal),
                event = e(&r.event_id),
                n = r.adjustments.len(),
            )
        }
    };
    let list = |v: &serde_json::Value, key: &str| v[key].as_array().cloned().unwrap_or_default();
    let learnings = list(learnings, "learnings")
        .iter()
        .map(|l| {
            format!(
                "{} <small>({}) {} succeeded, {} failed</small>",
                e(l["pattern"].as_str().unwrap_or("")),
                e(l["domain"].as_str().unwrap_or("")),
                l["successes"],
                l["failures"]
            )
        })
        .collect();
    let recoveries = list(recoveries, "recoveries")
        .iter()
        .map(|r| {
            format!(
                "{} <small>{} adjustments, {}</small>",
                e(r["event_id"].as_str().unwrap_or("")),
                r["adjustments"].as_array().map_or(0, Vec::len),
                if r["recovered"] == true { "recovered" } else { "not recovered" }
            )
        })
        .collect();
    let adapters = list(adapters, "adapters")
        .iter()
        .map(|a| {
            let number = |k: &str| a[k].as_f64().map_or("?".to_string(), |v| format!("{v:.2}"));
            let verdict = match a["reason"].as_str() {
                None => "kept".to_string(),
                Some(why) => format!("discarded: {}", e(why)),
            };
            format!(
                r#"<span data-kept="{kept}">{id}</span> <small>({topic}) {verdict}; held-out perplexity {pb} &rarr; {pa}, grade {gb} &rarr; {ga}; {n} chats, {steps} steps</small>"#,
                kept = a["kept"] == true,
                id = e(a["id"].as_str().unwrap_or("")),
                topic = e(a["topic"].as_str().unwrap_or("all topics")),
                pb = number("ppl_before"),
                pa = number("ppl_after"),
                gb = number("grade_before"),
                ga = number("grade_after"),
                n = a["train"],
                steps = a["steps"],
            )
        })
        .collect();
    format!(
        concat!(
            r#"<div class="panel" id="panel-{id}" data-persona="{id}"><header><h2>{name}</h2> <span class="role">{role}</span> "#,
            r#"<span class="badge">{status}</span></header>{thoughts}<p class="domains">by domain: {domains}</p>{memory}"#,
            r#"<section><h3>Plan</h3>{plan}</section>{decisions}{learnings}{recoveries}{adapters}</div>"#
        ),
        id = e(&p.name),
        name = e(&p.name),
        role = e(&p.role),
        status = status_of(p),
        thoughts = section("Thoughts", "no thoughts yet", thoughts),
        domains = if domains.is_empty() { "none".to_string() } else { domains.join(", ") },
        memory = render_list(&p.name, List::Memory, None, &List::Memory.first_page(p)),
        plan = plan,
        decisions = render_list(&p.name, List::Decisions, None, &List::Decisions.first_page(p)),
        learnings = section("Learnings", "none yet", learnings),
        recoveries = section("Recoveries", "none yet", recoveries),
        adapters = section("Adapters", "none trained", adapters),
    )
}
