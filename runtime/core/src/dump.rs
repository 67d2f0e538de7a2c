//! The shape of `mindfleet dump`: the supervision tree and every persona's state, as JSON (the
//! binary renders it as a tree for people: `--format tree`, `mindfleet::tree`).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::embedding::EmbedStats;
use crate::knowledge::IndexStats;
use crate::llm::LlmStats;
use crate::record::{DeadLetter, Decision, Eviction, OutboxEntry, PlanRecord, SelfStateData, WmEntry};
use crate::sched::stats::SchedulerStats;
use crate::stored::StorageStats;

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FleetDump {
    pub fleet: String,
    pub generated_at: String,
    /// The fleet's root supervisor. Nothing restarts it (its `restarts` stay 0): it restarts
    /// personas, and stops the fleet when a shared actor fails.
    pub supervisor: ChildDump,
    pub admin: AdminDump,
    pub scheduler: SchedulerStats,
    #[serde(default)]
    pub coordination: CoordinationStats,
    /// The shared embedding worker; its `status` is `degraded` when the model is unavailable.
    #[serde(default)]
    pub embedding: EmbedStats,
    /// The LLM worker and the fleet's model cost report; `status` is `off` when no persona's
    /// brain and no consolidation (`[conversation] observations = "model"`) uses a model.
    #[serde(default)]
    pub llm: LlmStats,
    /// The shared codebase index.
    #[serde(default)]
    pub index: IndexStats,
    pub storage: StorageStats,
    pub personas: Vec<PersonaDump>,
    pub outbox: Vec<OutboxEntry>,
    /// The 100 events accepted last, newest first: what was said in the rooms, by people and
    /// by personas (whose replies come back as events).
    #[serde(default)]
    pub recent_events: Vec<crate::event::Event>,
    pub dead_letters: Vec<DeadLetter>,
    /// The `[[webhook]]`s: their deliveries and dead letters.
    #[serde(default)]
    pub webhooks: Vec<crate::webhook::WebhookDump>,
    /// The nodes of a fleet that spans several (`mindfleet run --node`), this one first, with
    /// their links; empty on a single node.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<NodeDump>,
    /// The `[[tool_server]]`s, their tools and their states.
    #[serde(default)]
    pub tools: crate::tools::ToolsDump,
}

/// One node of a fleet that spans several, as the node that answers the dump sees it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct NodeDump {
    pub name: String,
    /// `self` (the node that answered), `up` (linked) or `unreachable` (its link dropped, or
    /// it never joined).
    pub status: String,
    /// Its cluster address, as its link reports it.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub addr: String,
    /// Personas placed on it.
    pub personas: usize,
    /// The nodes it is linked to (for the answering node: its links; for another node: as
    /// that node reported them in this dump).
    #[serde(default)]
    pub links: Vec<String>,
    /// When its link last changed (RFC 3339), if it ever did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// Why it is unreachable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct AdminDump {
    pub addr: String,
    pub accepted: u64,
    pub duplicates: u64,
    pub rejected: u64,
    pub rooms: BTreeMap<String, Vec<String>>,
}

/// One actor of the tree.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChildDump {
    /// `running`, `restarting`, `failed`, `stopped`, ...
    pub status: String,
    pub restarts: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
}

impl ChildDump {
    pub fn running(restarts: u32) -> Self {
        ChildDump { status: "running".into(), restarts, last_error: None }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ActorsDump {
    pub persona: ChildDump,
    pub inbox: ChildDump,
    pub self_state: ChildDump,
    pub working_memory: ChildDump,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct InboxDump {
    pub len: usize,
    pub capacity: usize,
    pub shed: u64,
    pub duplicates: u64,
    /// Highest-priority pending events: (event id, priority).
    pub top: Vec<(String, f64)>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct WorkingMemoryDump {
    pub len: usize,
    pub capacity_per_domain: usize,
    pub per_domain: BTreeMap<String, usize>,
    pub recent: Vec<WmEntry>,
    pub evictions: Vec<Eviction>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PersonaDump {
    pub name: String,
    /// The node it runs on, when the fleet spans nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    pub role: String,
    pub status: PersonaStatus,
    pub brain: String,
    /// Set when the brain's model is unavailable and the rules brain decides in its place:
    /// why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub brain_degraded: Option<String>,
    pub rooms: Vec<String>,
    pub domains: Vec<String>,
    pub actors: ActorsDump,
    pub self_state: Option<SelfStateData>,
    pub inbox: InboxDump,
    pub working_memory: WorkingMemoryDump,
    /// Newest first.
    pub decisions: Vec<Decision>,
    /// Event being worked on, if any.
    pub in_flight: Option<String>,
    /// The plan being run, else the last finished one.
    #[serde(default)]
    pub plan: Option<PlanRecord>,
    /// The tools its model may choose among now (allowed, enabled, their server connected);
    /// empty for a brain without a model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools_now: Vec<String>,
    /// The calls its parked plans wait on a person's approval of (their ids, oldest first).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waiting_approval: Vec<String>,
    /// How often the persona may start new self-paced work, from its mood and budget (0: not
    /// set yet).
    #[serde(default)]
    pub cadence_ms: u64,
    /// Share of its model budget left over the last hour, as of its last grant.
    #[serde(default)]
    pub budget_left: f64,
    /// Its references, when the fleet has a catalog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub references: Option<ReferencesDump>,
    /// Its conversation memory, when the fleet keeps one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation: Option<ConversationDump>,
    /// Its self-directed study, when the fleet has a knowledge index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub study: Option<StudyDump>,
    /// The model's drafts the draft check replaced with the grounded reply since the persona
    /// started, by flaw (`echo`, `loop`, `empty`, `ungrounded`, `unsupported`).
    #[serde(default)]
    pub drafts_replaced: BTreeMap<String, u64>,
}

/// A persona's self-directed study (`study` of a persona in the dump).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct StudyDump {
    /// Gaps noted and waiting for idle time, next first.
    pub gaps: Vec<crate::record::StudyGap>,
    /// The session under way: its topic and stage (`search`, `ask 2/3`, `answer 2/3`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<(String, String)>,
    /// Sessions finished since the start.
    pub sessions: u64,
    /// The newest sessions kept, newest first, with their answers and scores.
    pub recent: Vec<crate::record::StudySession>,
}

/// A persona's conversation memory (`conversation` of a persona in the dump).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ConversationDump {
    /// Messages taken in and not embedded yet.
    pub pending: u64,
    /// How long the oldest of them has waited, and the longest any waited, ms.
    pub lag_ms: i64,
    pub max_lag_ms: i64,
    /// Messages in its namespace of the conversation index (messages only, not observations).
    pub stored: u64,
    /// Messages in the index not consolidated into observations yet (they are once the
    /// conversation is quiet for `observe_after_secs`).
    #[serde(default)]
    pub observations_pending: u64,
    /// Observations made since the persona started, and what made them (`rules`).
    #[serde(default)]
    pub observations: u64,
    #[serde(default)]
    pub observed_by: String,
    /// Times the embedding task was promoted from `background` to `work` by a long wait.
    pub promotions: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// `semantic`, or `degraded: why` when the last recall could not use the vectors.
    pub recall: String,
    /// Recalls answered, and those of them by words only (no model, or none had in time).
    #[serde(default)]
    pub recalls: u64,
    #[serde(default)]
    pub recalls_by_words: u64,
}

/// A persona's references (`references` of a persona in the dump).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct ReferencesDump {
    /// What it selected, each with how it was found.
    pub selected: Vec<crate::refs::RefMatch>,
    /// `on`, or `off: why` (tags and `@id` still match).
    pub semantic: String,
    /// Matches made so far (events and step results), and those offered to it as candidates.
    pub matches: u64,
    /// The matches of its last event that called for any, with its id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_event: Option<String>,
    pub last: Vec<crate::refs::RefMatch>,
}

impl PersonaDump {
    /// What is known of a persona whose actor is not running.
    pub fn placeholder(name: &str, status: PersonaStatus, restarts: u32, error: Option<String>) -> Self {
        let down = ChildDump { status: "stopped".into(), restarts: 0, last_error: None };
        PersonaDump {
            name: name.to_string(),
            node: None,
            role: String::new(),
            status,
            brain: String::new(),
            brain_degraded: None,
            rooms: Vec::new(),
            domains: Vec::new(),
            actors: ActorsDump {
                persona: ChildDump { status: status_str(status).into(), restarts, last_error: error },
                inbox: down.clone(),
                self_state: down.clone(),
                working_memory: down,
            },
            self_state: None,
            inbox: InboxDump::default(),
            working_memory: WorkingMemoryDump::default(),
            decisions: Vec::new(),
            in_flight: None,
            plan: None,
            tools_now: Vec::new(),
            waiting_approval: Vec::new(),
            cadence_ms: 0,
            budget_left: 0.0,
            references: None,
            conversation: None,
            study: None,
            drafts_replaced: Default::default(),
        }
    }
}

pub fn status_str(s: PersonaStatus) -> &'static str {
    match s {
        PersonaStatus::Starting => "starting",
        PersonaStatus::Running => "running",
        PersonaStatus::Restarting => "restarting",
        PersonaStatus::Failed => "failed",
        PersonaStatus::Stopped => "stopped",
        PersonaStatus::Unreachable => "unreachable",
        PersonaStatus::Unresponsive => "unresponsive",
    }
}

/// Turn-taking figures, shown in the dump.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CoordinationStats {
    pub responders: usize,
    pub window_ms: u64,
    /// Human messages decided.
    pub messages: u64,
    /// Each decided human message is counted by the replies posted to it once no holder of
    /// its turn is still out (a message whose reply is not posted yet is in none of them).
    pub answered_by_one: u64,
    pub answered_by_none: u64,
    pub answered_by_many: u64,
    /// Given to a persona that had passed, because nobody claimed them.
    pub assigned: u64,
    pub redundant: u64,
    /// Share of human messages answered by exactly one persona.
    pub efficiency: f64,
    /// Decided by the window rather than by every claim being in.
    pub by_window: u64,
    /// Turns passed on because their holder could not answer (it posted nothing, its actor
    /// stopped, or it did not report in time).
    #[serde(default)]
    pub passed: u64,
}

impl CoordinationStats {
    /// Adds another coordinator's counts (a fleet across nodes has one per node; each room is
    /// decided by one of them).
    pub fn add(&mut self, o: &CoordinationStats) {
        self.messages += o.messages;
        self.answered_by_one += o.answered_by_one;
        self.answered_by_none += o.answered_by_none;
        self.answered_by_many += o.answered_by_many;
        self.assigned += o.assigned;
        self.redundant += o.redundant;
        self.by_window += o.by_window;
        self.passed += o.passed;
        self.efficiency = if self.messages == 0 { 0.0 } else { self.answered_by_one as f64 / self.messages as f64 };
    }
}

/// What the fleet supervisor reports about a persona.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PersonaStatus {
    Starting,
    Running,
    Restarting,
    /// Failed more than the restart policy allows; stopped, the fleet runs on.
    Failed,
    Stopped,
    /// Placed on another node of the cluster whose link is down: events for it are refused
    /// (503) until the node is back.
    Unreachable,
    /// Running, but it did not answer the dump in time (busy in a long step, or stuck): a
    /// dump's word only, as what it is doing is not known.
    Unresponsive,
}
