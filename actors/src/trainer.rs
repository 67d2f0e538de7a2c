//! The trainer: one per fleet with a local model. It runs training runs ([`crate::train`]) one at
//! a time on a thread of its own, in the model's idle time ([`train::while_serving`]), and
//! takes up at start the runs a stop left unfinished (their checkpoints). Besides the runs asked
//! by hand, it looks every `check_every` for personas whose study sessions kept `new_chats` or
//! more chats since their last run, and starts one on all their chats.
//!
//! Where the chats come from is the fleet's to say ([`ChatsFn`]: a persona's study data, split
//! into those to train on and those held out); the runs' files are under the data dir
//! ([`AdapterDir`]).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use mindfleet_core::adapter::{AdapterDir, TrainerMsg, TrainerStatus, Verdict};
use mindfleet_core::llm::ChatMessage;
use mindfleet_core::private::Private;
use mindfleet_models::llm::Llm;
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, SpawnErr};

use crate::train::{self, Begun, TrainJob, TrainOptions};

/// A persona's chats about a topic (all, when `None`): those to train on and those held out.
pub type ChatsFn =
    Arc<dyn Fn(&str, Option<&str>) -> Result<(Vec<Vec<ChatMessage>>, Vec<Vec<ChatMessage>>), String> + Send + Sync>;

/// The personas that have study chats.
pub type StudiedFn = Arc<dyn Fn() -> Vec<String> + Send + Sync>;

#[derive(Clone)]
pub struct TrainerArgs {
    /// The fleet's local model (GGUF), which the adapters adapt.
    pub model: PathBuf,
    pub data_dir: PathBuf,
    pub options: TrainOptions,
    pub chats: ChatsFn,
    pub studied: StudiedFn,
    /// New chats since a persona's last run that start one by themselves (0: never).
    pub new_chats: usize,
    pub check_every: Duration,
}

/// Whether a persona with `chats` study chats, `last` of them known to its last run, is due a
/// run of its own.
pub fn due(chats: usize, last: usize, new_chats: usize) -> bool {
    new_chats > 0 && chats >= last + new_chats
}

pub struct Trainer;

pub async fn spawn(args: TrainerArgs, supervisor: Option<ActorCell>) -> Result<ActorRef<TrainerMsg>, SpawnErr> {
    let (actor, _) = match supervisor {
        Some(s) => Actor::spawn_linked(None, Trainer, args, s).await?,
        None => Actor::spawn(None, Trainer, args).await?,
    };
    Ok(actor)
}

/// A run to do: whose, which, about what.
#[derive(Debug, Clone)]
struct Queued {
    persona: String,
    id: String,
    topic: Option<String>,
}

impl Queued {
    fn key(&self) -> String {
        format!("{}/{}", self.persona, self.id)
    }
}

/// How a run ended, from its thread (inside [`TrainerMsg::Own`]).
struct Ended(Result<Verdict, String>);

/// Time to look for personas due a run (inside [`TrainerMsg::Own`]).
struct Check;

pub struct TrainerState {
    args: TrainerArgs,
    dir: AdapterDir,
    waiting: VecDeque<Queued>,
    running: Option<Queued>,
    finished: u64,
    last: Option<String>,
    /// When each persona's last run failed: it is not started by itself again for
    /// [`RETRY_AFTER`] (a run that fails on its data would fail every check).
    failed: std::collections::HashMap<String, Instant>,
}

/// How long a persona whose run failed waits before one starts by itself again.
const RETRY_AFTER: Duration = Duration::from_secs(3600);

/// The personas due a run of their own, with their chats' count (`skip`: those not to start
/// by themselves now). Reads every persona's training file and records: run off the actor's
/// thread.
fn due_personas(args: &TrainerArgs, dir: &AdapterDir, skip: &[String]) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    for persona in (args.studied)().into_iter().filter(|p| !skip.contains(p)) {
        let Ok((train, held)) = (args.chats)(&persona, None) else { continue };
        let last = dir.list(&persona).ok().and_then(|l| l.last().map(|r| r.train_examples + r.held_out));
        let chats = train.len() + held.len();
        if !train.is_empty() && !held.is_empty() && due(chats, last.unwrap_or(0), args.new_chats) {
            out.push((persona, chats));
        }
    }
    out
}

/// Why `persona` cannot train on its chats about `topic` now, if it cannot (reads its training
/// file: run off the actor's thread).
fn no_chats(chats: &ChatsFn, persona: &str, topic: Option<&str>) -> Option<String> {
    let about = topic.map_or(String::new(), |t| format!(" about {t:?}"));
    match chats(persona, topic) {
        Err(e) => Some(e),
        Ok((train, _)) if train.is_empty() => Some(format!("{persona} has no study chats{about} to train on")),
        Ok((_, held)) if held.is_empty() => {
            Some(format!("{persona} has no study chats{about} held out to judge an adapter on: study more"))
        }
        Ok(_) => None,
    }
}

impl TrainerState {
    /// Queues a run for each persona due one, when nothing runs or waits.
    async fn check(&mut self, me: &ActorRef<TrainerMsg>) {
        if self.running.is_some() || !self.waiting.is_empty() || self.args.new_chats == 0 {
            return;
        }
        let skip: Vec<String> =
            self.failed.iter().filter(|(_, t)| t.elapsed() < RETRY_AFTER).map(|(p, _)| p.clone()).collect();
        let (args, dir) = (self.args.clone(), self.dir.clone());
        let due = tokio::task::spawn_blocking(move || due_personas(&args, &dir, &skip)).await.unwrap_or_default();
        for (persona, chats) in due {
            let id = run_id(None, mindfleet_core::time::now_us());
            tracing::info!(%persona, run = %id, chats, "new study chats: training an adapter");
            self.waiting.push_back(Queued { persona, id, topic: None });
        }
        self.next(me);
    }

    /// Starts the next run when none is under way.
    fn next(&mut self, me: &ActorRef<TrainerMsg>) {
        if self.running.is_some() {
            return;
        }
        let Some(q) = self.waiting.pop_front() else { return };
        let (args, dir, me, run) = (self.args.clone(), self.dir.clone(), me.clone(), q.clone());
        let started = std::thread::Builder::new().name("trainer".into()).spawn(move || {
            let ended = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| one_run(&args, dir, &run)))
                .unwrap_or_else(|_| Err("the training thread panicked".into()));
            if let Err(e) = &ended {
                tracing::warn!(persona = %run.persona, run = %run.id, "training failed: {e}");
            }
            let _ = me.cast(TrainerMsg::Own(Private::new(Ended(ended))));
        });
        match started {
            Ok(_) => self.running = Some(q),
            Err(e) => self.last = Some(format!("{}: no thread: {e}", q.key())),
        }
    }
}

/// One run to its end: its chats read, the model loaded for grading, trained, judged, stored.
fn one_run(args: &TrainerArgs, dir: AdapterDir, q: &Queued) -> Result<Verdict, String> {
    let (train, held_out) = (args.chats)(&q.persona, q.topic.as_deref())?;
    // The file the LLM worker serves (a Q4_1 one is served as its Q8_0 rewrite).
    let model = mindfleet_models::llm::runnable(&args.model).map_err(|e| e.to_string())?;
    let llm = Llm::load(&model).map_err(|e| e.to_string())?;
    let job = TrainJob {
        id: q.id.clone(),
        persona: q.persona.clone(),
        topic: q.topic.clone(),
        model,
        dir,
        train,
        held_out,
        options: args.options.clone(),
        now_us: mindfleet_core::time::now_us,
    };
    let trained = train::run(&job, &llm, &train::reference_grade, Some(train::while_serving()))?;
    Ok(trained.record.verdict)
}

/// The id of a new run: its topic in words joined by `-` (`all` for none), and the time.
fn run_id(topic: Option<&str>, now_us: i64) -> String {
    let slug: Vec<String> = topic
        .unwrap_or("all")
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .take(6)
        .map(str::to_lowercase)
        .collect();
    format!("{}-{now_us}", if slug.is_empty() { "all".to_string() } else { slug.join("-") })
}

impl Actor for Trainer {
    type Msg = TrainerMsg;
    type State = TrainerState;
    type Arguments = TrainerArgs;

    async fn pre_start(&self, me: ActorRef<TrainerMsg>, args: TrainerArgs) -> Result<TrainerState, ActorProcessingErr> {
        let dir = AdapterDir::new(&args.data_dir);
        // Runs a stop left unfinished go first, from their checkpoints.
        let mut waiting = VecDeque::new();
        for (persona, id) in dir.unfinished() {
            match Begun::read(&dir, &persona, &id) {
                Ok(b) => waiting.push_back(Queued { persona, id, topic: b.topic }),
                Err(e) => tracing::warn!("an unfinished training run is not taken up: {e}"),
            }
        }
        if args.new_chats > 0 {
            me.send_interval(args.check_every, || TrainerMsg::Own(Private::new(Check)));
        }
        let mut st =
            TrainerState { args, dir, waiting, running: None, finished: 0, last: None, failed: Default::default() };
        st.next(&me);
        Ok(st)
    }

    async fn handle(
        &self,
        me: ActorRef<TrainerMsg>,
        msg: TrainerMsg,
        st: &mut TrainerState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            TrainerMsg::Train { persona, topic, reply } => {
                let busy = st.running.iter().chain(&st.waiting).any(|q| q.persona == persona);
                let (chats, who, about) = (st.args.chats.clone(), persona.clone(), topic.clone());
                let refused = tokio::task::spawn_blocking(move || no_chats(&chats, &who, about.as_deref()))
                    .await
                    .unwrap_or_else(|e| Some(format!("reading the study chats failed: {e}")));
                let r = if let Some(why) = refused {
                    Err(why)
                } else if busy {
                    Err(format!("{persona} already has a training run under way or waiting"))
                } else {
                    let q = Queued { id: run_id(topic.as_deref(), mindfleet_core::time::now_us()), persona, topic };
                    let id = q.id.clone();
                    st.waiting.push_back(q);
                    st.next(&me);
                    Ok(id)
                };
                let _ = reply.send(r);
            }
            TrainerMsg::Status(reply) => {
                let _ = reply.send(TrainerStatus {
                    running: st.running.as_ref().map(Queued::key),
                    waiting: st.waiting.iter().map(Queued::key).collect(),
                    finished: st.finished,
                    last: st.last.clone(),
                });
            }
            TrainerMsg::Own(p) => match p.open::<Ended>().map_err(|p| p.open::<Check>()) {
                Err(Ok(Check)) => st.check(&me).await,
                Ok(Ended(result)) => {
                    let run = st.running.take();
                    if let (Some(q), Err(_)) = (&run, &result) {
                        st.failed.insert(q.persona.clone(), Instant::now());
                    }
                    let key = run.map(|q| q.key()).unwrap_or_default();
                    st.finished += 1;
                    st.last = Some(match result {
                        Ok(Verdict::Kept) => format!("{key}: kept"),
                        Ok(Verdict::Discarded(why)) => format!("{key}: discarded: {why}"),
                        Err(e) => format!("{key}: failed: {e}"),
                    });
                    st.next(&me);
                }
                Err(_) => tracing::warn!("the trainer dropped a message it did not send itself"),
            },
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{due, run_id};

    #[test]
    fn a_persona_is_due_a_run_once_its_new_study_chats_reach_the_bound() {
        assert!(!due(63, 0, 64));
        assert!(due(64, 0, 64));
        assert!(!due(100, 40, 64), "60 new since the last run");
        assert!(due(104, 40, 64));
        assert!(!due(1000, 0, 0), "0: by hand only");
    }

    #[test]
    fn a_run_is_named_by_its_topic_and_time() {
        assert_eq!(run_id(Some("Werkzeug URL routing!"), 17), "werkzeug-url-routing-17");
        assert_eq!(run_id(None, 5), "all-5");
        assert_eq!(run_id(Some("??"), 5), "all-5");
    }
}
