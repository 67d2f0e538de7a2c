//! Study: knowledge gaps noted from events, and study sessions run in idle time.

use mindfleet_core::config::BrainKind;
use mindfleet_core::llm::LlmMsg;
use mindfleet_core::record::StudySession;
use mindfleet_core::sched::{Class, Grant, Outcome, Slot, TaskId};
use mindfleet_core::time::now_us;
use ractor::ActorRef;

use crate::study::{self, StudyStep};

use super::{Chore, Own, PersonaState, STUDY_RETRY};

impl PersonaState {
    /// A person asks for study: `topic`, else the gap noted first. Answers with the topic.
    pub(super) fn on_study(&mut self, topic: Option<String>) -> Result<String, String> {
        if self.args.index.is_none() {
            return Err("studying needs the knowledge index ([index] in the fleet config)".into());
        }
        let topic = match topic.as_deref().map(str::trim) {
            Some("") => return Err("the topic is empty".into()),
            Some(t) => t.to_string(),
            None => match self.study.gaps.front() {
                Some(g) => g.topic.clone(),
                None => return Err(format!("{} has noted no knowledge gap: name a topic", self.name)),
            },
        };
        self.study.note(&topic, "asked by a person", now_us(), true);
        self.study_next();
        Ok(topic)
    }

    /// Asks for a `background` slot for the next stage of study, when the persona is idle and
    /// has something to study (one stage at a time; busy, it asks again once it is done).
    pub(super) fn study_next(&mut self) {
        if self.args.index.is_none() || self.busy() {
            return;
        }
        let with_model = self.study_llm().is_some();
        let mut t = self.own_task(Class::Background, 0.2, "study").preemptible();
        let Some(run) = self.study.start(now_us()).filter(|r| r.task.is_none()) else { return };
        if run.stage.uses_model() && with_model {
            t.slot = Slot::Inference;
            t = t.with_max_tokens(study::STAGE_TOKENS_RESERVED);
        }
        run.task = Some(t.id);
        self.submit(t, Chore::Study);
    }

    /// The model study asks, when this persona's brain is the local one.
    pub(super) fn study_llm(&self) -> Option<ActorRef<LlmMsg>> {
        self.args.llm.clone().filter(|_| self.args.config.brain == BrainKind::Local)
    }

    /// The slot for a stage of study: run it off the persona's loop, unless work came first
    /// (then the slot goes back and the stage waits for the persona to be idle again).
    pub(super) fn run_study(&mut self, g: Grant) {
        let busy = self.busy();
        let rules_only = match g.outcome {
            Outcome::Run => false,
            Outcome::RulesOnly(_) => true,
            Outcome::Skipped(why) => {
                if let Some(run) = self.study.run.as_mut() {
                    run.end(&format!("stopped: {}", why.as_str()));
                }
                if let Some(session) = self.study.finish(now_us()) {
                    self.keep_study(session);
                }
                return;
            }
        };
        let Some(index) = self.args.index.clone() else {
            // Never: a session starts only with the index.
            self.args.scheduler.done(g.task);
            return;
        };
        let svc = study::Services {
            index,
            llm: if rules_only { None } else { self.study_llm() },
            persona: self.name.to_string(),
        };
        let Some(run) = self.study.run.as_mut() else { return };
        if busy {
            run.task = None;
            self.args.scheduler.done(g.task);
            return;
        }
        let (copy, me, task) = (run.clone(), self.myself.clone(), g.task);
        self.study.stage = Some(tokio::spawn(async move {
            let step = study::run_stage(copy, svc).await;
            let _ = me.cast(Own::Studied { task, step }.into());
        }));
    }

    /// Higher-class work waits for the slot of the study stage of `task`: the stage stops (its
    /// model call with it) and gives the slot back, to run again later.
    pub(super) fn on_preempt(&mut self, task: TaskId) {
        if self.preempt_observe(task) {
            return;
        }
        let Some(run) = self.study.run.as_mut().filter(|r| r.task == Some(task)) else { return };
        run.task = None;
        if let Some(stage) = self.study.stage.take() {
            stage.abort();
        }
        self.args.scheduler.done(task);
        tracing::debug!(persona = %self.name, topic = %run.session.topic, "study stage yielded its slot");
        self.myself.send_after(STUDY_RETRY, || Own::StudyDue.into());
    }

    /// A stage of study is done: the next one, or the end of the session.
    pub(super) fn on_studied(&mut self, task: TaskId, step: StudyStep) {
        let tokens = match &step {
            StudyStep::Asked { tokens, .. } | StudyStep::Answered { tokens, .. } => *tokens,
            StudyStep::Found(_) => 0,
        };
        self.args.scheduler.done_with_tokens(task, tokens);
        let Some(run) = self.study.run.as_mut().filter(|r| r.task == Some(task)) else { return };
        self.study.stage = None;
        if run.apply(step)
            && let Some(session) = self.study.finish(now_us())
        {
            self.keep_study(session);
        }
        self.study_next();
    }

    /// Keeps a finished session (storage, with its learning and knowledge) and appends its
    /// passed answers to the persona's training data.
    pub(super) fn keep_study(&self, session: StudySession) {
        tracing::info!(
            persona = %self.name, topic = %session.topic, outcome = %session.outcome, score = session.score,
            answers = session.answers.len(), tokens = session.tokens, "study session over"
        );
        let file = study::training_file(self.args.storage.data_dir(), &self.name);
        let (name, role, copy) = (self.name.clone(), self.args.config.role.clone(), session.clone());
        tokio::task::spawn_blocking(move || {
            if let Err(e) = study::append_training(&file, &name, &role, &copy) {
                tracing::warn!(persona = %name, file = %file.display(), error = %e, "study: training data not written");
            }
        });
        self.args.storage.study(self.name.clone(), session.clone(), study::knowledge_of(&session));
    }
}
