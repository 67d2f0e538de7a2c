//! The `local` brain: the fleet's LLM judges undecided events, chooses the plan among
//! candidates of the registry, drafts replies and writes lessons; the questions it asks and how
//! their answers are read (the plan question and its cases, the gate question, its labels and
//! calibration).

use mindfleet_core::llm::{ChatMessage, ClassifyJob, GenerateRequest, LabelScore};
use mindfleet_core::record::{Action, Plan};

use super::*;

/// What kind of plan fits a message: answer from memory, look things up first, or ask back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlanKind {
    Answer,
    Search,
    Ask,
}

impl PlanKind {
    pub fn of(plan: &Plan) -> PlanKind {
        let has = |a: Action| plan.steps.iter().any(|s| s.action == a);
        if has(Action::AskClarifyingQuestion) {
            PlanKind::Ask
        } else if has(Action::SearchKnowledge) {
            PlanKind::Search
        } else {
            PlanKind::Answer
        }
    }
}

/// Labelled cases for the plan choice: the domain, the message, and the kind of plan that fits.
pub const PLAN_CASES: &[(&str, &str, PlanKind)] = &[
    ("chat", "thanks, that fixed it!", PlanKind::Answer),
    ("chat", "good morning team, how was the weekend?", PlanKind::Answer),
    ("chat", "can you say hello to the new intern?", PlanKind::Answer),
    ("chat", "what did we decide about the release yesterday?", PlanKind::Answer),
    ("code", "which function in the storage writer handles group commit?", PlanKind::Search),
    ("code", "where is the admin token checked in the HTTP API code?", PlanKind::Search),
    ("docs", "what does the CONFIG doc say about max_batch?", PlanKind::Search),
    ("code", "find every place we call the embedding worker", PlanKind::Search),
    ("chat", "it?", PlanKind::Ask),
    ("chat", "can you fix that thing?", PlanKind::Ask),
    ("chat", "why?", PlanKind::Ask),
    ("chat", "the other one, please", PlanKind::Ask),
];

/// What each action does, in the words the plan question uses.
fn describe(action: Action) -> &'static str {
    match action {
        Action::RecallMemory => "recall what I know",
        Action::SearchKnowledge => "search the team's knowledge",
        Action::DraftReply => "write an answer",
        Action::PostReply => "post it",
        Action::AskClarifyingQuestion => "ask what they mean",
        Action::NotePreoccupation => "note it for later",
        Action::StudyTopic => "study the topic",
        Action::SelectReference => "open the references it calls for",
        Action::CallTool => "use a tool",
    }
}

/// The plan question: the message and each candidate's steps, to be answered with a letter.
pub fn plan_question(
    persona: &str,
    role: &str,
    text: &str,
    candidates: &[Plan],
    labels: &[String],
) -> Vec<ChatMessage> {
    let mut system = format!(
        "You are {persona}, the team's {role}, in a group chat. Choose how to handle the next message. \
         Answer with one letter."
    );
    for (plan, label) in candidates.iter().zip(labels) {
        let steps: Vec<&str> = plan.steps.iter().map(|s| describe(s.action)).collect();
        system.push_str(&format!("\n{label}: {}", steps.join(", then ")));
    }
    vec![ChatMessage::system(system), ChatMessage::user(text.to_string())]
}

/// The labels the gate's model question is scored on: should the persona answer?
pub const GATE_LABELS: [&str; 2] = ["Yes", "No"];

/// How the gate reads SmolLM2-135M's label scores, measured on the labelled cases of
/// [`GATE_CASES`] by `mindfleet bench gate-model` (docs/BENCHMARKS.md): `margin` is
/// log P(Yes) - log P(No) minus `bias` (the model's lean towards one answer); the model decides
/// only when it is beyond `clear` either way, and the rules scorer decides the rest.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GateCalibration {
    pub bias: f32,
    pub clear: f32,
}

///
/// SmolLM2-135M does not tell the cases apart (its mean margin is -0.10 for messages it should
/// answer and -0.05 for those it should not; a few-shot prompt did worse), so no reading of its
/// margins reaches 90% agreement on more than a handful of cases. The band is set beyond every
/// margin it gave: the question is asked and counted, and the rules scorer decides, noting the
/// margin. A better model gets its own calibration from the same bench.
pub const GATE_CALIBRATION: GateCalibration = GateCalibration { bias: 0.0, clear: 2.0 };

/// Labelled cases for the gate of a persona that is the team's assistant: the message, and
/// whether it should answer.
pub const GATE_CASES: &[(&str, bool)] = &[
    ("can someone review my pull request for the auth module?", true),
    ("the deploy is failing again and latency is up", true),
    ("how do I configure the admin token?", true),
    ("what does the scheduler do when the budget runs out?", true),
    ("could you summarise yesterday's incident for me?", true),
    ("please write the release notes for version 2.3", true),
    ("is there a way to run the tests faster?", true),
    ("the build is broken on main, can anyone help?", true),
    ("which config file does the fleet read by default?", true),
    ("can you explain why this query is slow?", true),
    ("I need help debugging a panic in the storage writer", true),
    ("where are the docs for the HTTP API?", true),
    ("happy birthday Sam!", false),
    ("lunch?", false),
    ("lol", false),
    ("thanks everyone, have a nice weekend", false),
    ("brb", false),
    ("good morning!", false),
    ("nice", false),
    ("see you tomorrow", false),
    ("haha that meme", false),
    ("ok", false),
    ("coffee anyone?", false),
    ("congrats on the new baby!", false),
];

/// The gate's model question for `event`.
pub fn gate_question(persona: &str, role: &str, text: &str) -> Vec<ChatMessage> {
    vec![
        ChatMessage::system(format!(
            "You are {persona}, the team's {role}, in a group chat. Should you reply to the next message? \
             Answer Yes or No."
        )),
        ChatMessage::user(text.to_string()),
    ]
}

/// log P(Yes) - log P(No) less the calibration's bias.
pub fn gate_margin(scores: &[LabelScore], calibration: GateCalibration) -> Option<f32> {
    let lp = |label: &str| scores.iter().find(|s| s.label == label).map(|s| s.logprob);
    Some(lp(GATE_LABELS[0])? - lp(GATE_LABELS[1])? - calibration.bias)
}

/// The brain that thinks with the fleet's LLM (the persona asks the `LlmWorker`): it judges
/// undecided events, chooses the plan among candidates of the registry, and writes replies. When
/// the model is unsure, fails or answers nothing, the rules brain decides that step and the
/// decision says why. Adjustments are the rules brain's.
#[derive(Debug, Default, Clone, Copy)]
pub struct LocalBrain;

/// Tokens a drafted reply may have.
pub const REPLY_MAX_TOKENS: usize = 64;
/// Stop strings of a reply: a blank line, and the lines of the room's speakers (the sender and
/// the latest others).
const REPLY_STOPS: usize = 6;
/// Tokens a plan's lesson may have.
pub const LESSON_MAX_TOKENS: usize = 40;

impl Brain for LocalBrain {
    fn name(&self) -> &'static str {
        "local"
    }

    fn judge(&self, event: &Event, priority: f64, state: &GateState) -> GateDecision {
        RulesBrain.judge(event, priority, state)
    }

    fn formulate_plan(&self, ctx: &PlanContext) -> Plan {
        RulesBrain.formulate_plan(ctx)
    }

    fn adjust_plan(&self, record: &PlanRecord, failed: usize, class: ErrorClass) -> (Adjustment, String) {
        RulesBrain.adjust_plan(record, failed, class)
    }

    fn evaluate_outcome(&self, record: &PlanRecord) -> Evaluation {
        RulesBrain.evaluate_outcome(record)
    }

    fn respond(&self, ctx: &RespondContext) -> String {
        RulesBrain.respond(ctx)
    }

    fn plan_request(&self, ctx: &PlanContext) -> Option<PlanChoice> {
        let rules = RulesBrain.formulate_plan(ctx);
        let failed: Vec<Action> = ctx.memory.failed_steps().into_iter().map(|(a, _, _)| a).collect();
        let mut candidates = vec![rules.clone()];
        let alternatives = [
            vec![Action::RecallMemory, Action::DraftReply, Action::PostReply],
            vec![Action::RecallMemory, Action::SearchKnowledge, Action::DraftReply, Action::PostReply],
            vec![Action::AskClarifyingQuestion, Action::PostReply],
        ];
        for actions in alternatives {
            // A step that failed before for this event stays out, as in the rules plan.
            if actions.iter().any(|a| ctx.avoid.contains(a) && !matches!(a, Action::PostReply | Action::DraftReply)) {
                continue;
            }
            // So does one that failed in a similar task that failed.
            if actions.iter().any(|a| failed.contains(a) && recall::optional(*a)) {
                continue;
            }
            if candidates.iter().any(|c| c.steps.iter().map(|s| s.action).eq(actions.iter().copied())) {
                continue;
            }
            let criteria = if actions.contains(&Action::SearchKnowledge) {
                vec![Criterion::ContextGathered, Criterion::ReplyPosted]
            } else {
                vec![Criterion::ReplyPosted]
            };
            candidates.push(Plan {
                steps: actions.into_iter().map(step).collect(),
                criteria,
                source: "registry".into(),
                ..rules.clone()
            });
        }
        let labels: Vec<String> = (0..candidates.len()).map(|i| char::from(b'A' + i as u8).to_string()).collect();
        // As built, and with the rules plan moved last.
        let n = candidates.len();
        let orders = [(0..n).collect::<Vec<_>>(), (1..n).chain([0]).collect()];
        let orders = orders
            .into_iter()
            .take(if n > 1 { 2 } else { 1 })
            .map(|order| {
                let listed: Vec<Plan> = order.iter().map(|&i| candidates[i].clone()).collect();
                let messages = plan_question(ctx.persona, ctx.role, &ctx.event.text, &listed, &labels);
                let persona = Some(ctx.persona.to_string());
                (order, ClassifyJob { messages, labels: labels.clone(), purpose: "plan".into(), persona })
            })
            .collect();
        Some(PlanChoice { candidates, orders })
    }

    fn judge_request(&self, persona: &str, role: &str, event: &Event) -> Option<ClassifyJob> {
        Some(ClassifyJob {
            messages: gate_question(persona, role, &event.text),
            labels: GATE_LABELS.iter().map(|l| l.to_string()).collect(),
            purpose: "gate".into(),
            persona: Some(persona.to_string()),
        })
    }

    fn judge_answer(&self, scores: &[LabelScore], priority: f64, state: &GateState) -> GateDecision {
        let c = GATE_CALIBRATION;
        let rules = score(priority, state);
        let Some(m) = gate_margin(scores, c) else {
            return GateDecision { note: "model gave no label scores: rules".into(), ..rules };
        };
        if m.abs() <= c.clear {
            return GateDecision { note: format!("model unsure (margin {m:.2}): rules"), ..rules };
        }
        let verdict = if m > 0.0 { Verdict::Engage } else { Verdict::Ignore };
        GateDecision {
            verdict,
            stage: "model",
            rule: "llm",
            threshold: c.clear as f64,
            score: m as f64,
            note: format!("model margin {m:.2}"),
        }
    }

    /// The reply's conversation, continued: the reply as the model's turn, then the question.
    /// The model kept the keys and values of the reply's prompt (prefix reuse), so only the
    /// reply and the question are read.
    fn lesson_request(&self, ctx: &LessonContext) -> Option<GenerateRequest> {
        let mut req = self.reply_request(&ctx.respond)?;
        // A step is marked only when it did not simply run: the question is read in full for
        // every lesson, so it says what the model needs in as few tokens as it can.
        let steps: Vec<String> = ctx
            .record
            .plan
            .steps
            .iter()
            .map(|s| {
                let what = describe(s.action);
                match &s.state {
                    StepState::Done => what.to_string(),
                    StepState::Failed { class, .. } => format!("{what} (failed: {})", class.as_str()),
                    other => format!("{what} ({})", format!("{other:?}").to_lowercase()),
                }
            })
            .collect();
        match ctx.reply {
            Some(reply) => req.messages.push(ChatMessage::assistant(reply)),
            None => req.messages.push(ChatMessage::assistant("(no reply)")),
        }
        req.messages.push(ChatMessage::user(format!(
            "You did: {}. It {}.\nIn one short sentence, what will you do the same or differently next time?",
            steps.join(", "),
            if ctx.evaluation.success { "worked" } else { "failed" },
        )));
        req.max_tokens = LESSON_MAX_TOKENS;
        req.stop = vec!["\n".into()];
        Some(req)
    }

    /// The model is asked to phrase the material that bears on the question, and nothing else:
    /// a small model given every recalled line answers the latest one, or invents.
    fn reply_request(&self, ctx: &RespondContext) -> Option<GenerateRequest> {
        let pieces = reply::ground(&ctx.reply());
        let mut system = format!("You are {}, the team's {}, in a group chat.", ctx.persona, ctx.role);
        if pieces.is_empty() {
            system.push_str("\nYou found nothing on this. Say in one sentence what you would need to answer it.");
        } else {
            system.push_str("\nWhat you found:");
            for p in &pieces {
                system.push_str("\n- ");
                system.push_str(&p.prompt_line());
            }
            system.push_str(
                "\nAnswer the last message in one or two short sentences, using only what you found. \
                 Do not repeat the question.",
            );
        }
        if !ctx.hints.is_empty() {
            system.push('\n');
            system.push_str(ctx.hints);
        }
        system.push_str(&recall::prompt_lines(ctx.memory));
        // What changes with every message comes last, so prompts share a longer beginning.
        let st = ctx.state;
        system.push_str(&format!(
            "\nYour state: {}, cognitive load {:.0}%, capacity left {:.0}%{}.",
            st.mood.as_str(),
            100.0 * st.load,
            100.0 * st.capacity,
            if st.focus_intensity > 0.0 && !st.same_domain { ", focused on other work" } else { "" },
        ));
        let e = ctx.event;
        let messages = vec![ChatMessage::system(system), ChatMessage::user(format!("{}: {}", e.from, e.text))];
        let mut req = GenerateRequest::new(messages, REPLY_MAX_TOKENS);
        // The room's speakers, the sender first and then the latest: the model must not write
        // their next lines.
        req.stop = vec!["\n\n".into(), format!("\n{}:", e.from)];
        for s in ctx.room.iter().rev() {
            let stop = format!("\n{}:", s.from);
            if req.stop.len() >= REPLY_STOPS {
                break;
            }
            if !req.stop.contains(&stop) {
                req.stop.push(stop);
            }
        }
        Some(req)
    }
}
