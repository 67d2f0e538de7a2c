//! The embedding worker's inference thread: it owns the model, coalesces the actor's jobs into
//! batches (see the worker's doc for the policy), and sends the results back to the actor as
//! [`Callback`]s, a type only this module and the worker see, wrapped in [`EmbedMsg::Own`].

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use mindfleet_core::embedding::{EmbedFailure, EmbedMsg, LongText, ModelInfo, Piece, Urgency};
use mindfleet_core::private::Private;
use mindfleet_models::embed::Embedder;
use ractor::ActorRef;

use super::{BULK_EVERY, QUERIES_RECENT, model_name};

/// Misses of one request, sent to the inference thread.
pub(super) struct Job {
    pub(super) id: u64,
    pub(super) texts: Vec<String>,
    pub(super) long: LongText,
    pub(super) urgency: Urgency,
}

impl Job {
    fn bulk(&self) -> bool {
        self.urgency == Urgency::Bulk
    }
}

/// A job's pieces per text, in order.
pub(super) type JobResult = Result<Vec<Vec<Piece>>, EmbedFailure>;

/// What the inference thread tells the actor. Only the worker makes and opens these, so no
/// holder of its ref can report a model loaded or a batch done.
pub(super) enum Callback {
    /// The model's files are sound (or what is wrong with them).
    Checked(Result<(), String>),
    /// The model is loaded (or failed to load), at the first request.
    Loaded(Result<ModelInfo, String>),
    /// A batch of jobs is done.
    Computed(Computed),
}

/// A batch of jobs done, in `model_calls` calls over `inputs` texts or pieces taking
/// `seconds`; each job's pieces per text, in order.
pub(super) struct Computed {
    pub(super) model_calls: u32,
    pub(super) inputs: u32,
    pub(super) seconds: f64,
    pub(super) jobs: Vec<(u64, JobResult)>,
}

fn own(callback: Callback) -> EmbedMsg {
    EmbedMsg::Own(Private::new(callback))
}

/// Loads the model, then serves batches until the actor drops its end of the channel.
pub(super) fn inference_thread(
    dir: &Path,
    max_batch: usize,
    max_wait: Duration,
    jobs: Receiver<Job>,
    actor: ActorRef<EmbedMsg>,
) {
    mindfleet_models::lower_model_thread_priority();
    // The files are checked now, so a broken model is reported at once; the weights load with
    // the first request, so a fleet that embeds nothing does not hold them.
    let checked = Embedder::check(dir).map_err(|e| e.to_string());
    let _ = actor.cast(own(Callback::Checked(checked.clone())));
    let mut model = checked.map(|()| None);
    let mut intake = Intake { jobs, max_batch, max_wait, deferred: VecDeque::new(), since_bulk: 0, last_other: None };
    while let Some(batch) = intake.next_batch() {
        // What is past its deadline is answered, not run.
        let now = Instant::now();
        let (late, batch): (Vec<Job>, Vec<Job>) =
            batch.into_iter().partition(|j| matches!(j.urgency, Urgency::Before(t) if t <= now));
        if !batch.is_empty() {
            load(dir, &actor, &mut model);
        }
        let mut done = match &model {
            Ok(Some(m)) => run_batch(m, batch, max_batch),
            Ok(None) if batch.is_empty() => Computed { model_calls: 0, inputs: 0, seconds: 0.0, jobs: Vec::new() },
            Ok(None) => unreachable!("loaded above"),
            Err(e) => Computed {
                model_calls: 0,
                inputs: 0,
                seconds: 0.0,
                jobs: batch.into_iter().map(|j| (j.id, Err(EmbedFailure::Degraded(e.clone())))).collect(),
            },
        };
        done.jobs.extend(late.into_iter().map(|j| (j.id, Err(EmbedFailure::Late))));
        if actor.cast(own(Callback::Computed(done))).is_err() {
            return;
        }
    }
}

/// Loads the weights into `model` if they are not loaded yet (and did not fail to), and tells
/// the actor how it went.
fn load(dir: &Path, actor: &ActorRef<EmbedMsg>, model: &mut Result<Option<Embedder>, String>) {
    if !matches!(model, Ok(None)) {
        return;
    }
    let started = Instant::now();
    *model = match Embedder::load(dir) {
        Ok(m) => {
            let info = ModelInfo {
                model: model_name(dir),
                path: dir.display().to_string(),
                dimensions: m.dimensions(),
                window: m.window(),
                load_s: started.elapsed().as_secs_f64(),
            };
            let _ = actor.cast(own(Callback::Loaded(Ok(info))));
            Ok(Some(m))
        }
        Err(e) => {
            let e = e.to_string();
            let _ = actor.cast(own(Callback::Loaded(Err(e.clone()))));
            Err(e)
        }
    };
}

/// The jobs the actor sent, made into batches by the policy of the worker's doc.
struct Intake {
    jobs: Receiver<Job>,
    max_batch: usize,
    max_wait: Duration,
    /// Bulk jobs wait here while other jobs are queued.
    deferred: VecDeque<Job>,
    /// Inputs of other work run since the backlog last had a batch, while it waited.
    since_bulk: usize,
    /// When other work last came.
    last_other: Option<Instant>,
}

impl Intake {
    /// Bulk work aside, the rest into `batch`.
    fn sort(&mut self, job: Job, batch: &mut Vec<Job>) {
        match job.bulk() {
            true => self.deferred.push_back(job),
            false => batch.push(job),
        }
    }

    /// The next batch: it waits for a job when none is deferred; `None` once the actor has
    /// dropped its end of the channel.
    fn next_batch(&mut self) -> Option<Vec<Job>> {
        let mut batch = Vec::new();
        // Block only when nothing is deferred.
        if self.deferred.is_empty() {
            let job = self.jobs.recv().ok()?;
            self.sort(job, &mut batch);
        }
        while let Ok(job) = self.jobs.try_recv() {
            self.sort(job, &mut batch);
        }
        // A batch of the backlog: when there is no other work, and (beside it) once other work
        // has kept the backlog waiting for `BULK_EVERY` batches' worth. While other work keeps
        // coming, the backlog's batches are a quarter of the size, so a query that comes
        // while one runs waits a quarter as long.
        if !batch.is_empty() {
            self.last_other = Some(Instant::now());
        }
        let busy = self.last_other.is_some_and(|t| t.elapsed() < QUERIES_RECENT);
        let bulk_batch = if busy { (self.max_batch / 4).max(1) } else { self.max_batch };
        if batch.is_empty() {
            self.backlog(&mut batch, bulk_batch);
            self.since_bulk = 0;
        } else {
            // Requests come in bursts: wait a little for more while the batch is short.
            let mut inputs: usize = batch.iter().map(|j| j.texts.len()).sum();
            let deadline = Instant::now() + self.max_wait;
            while inputs < self.max_batch {
                match self.jobs.recv_deadline(deadline) {
                    Ok(job) => {
                        inputs += if job.bulk() { 0 } else { job.texts.len() };
                        self.sort(job, &mut batch);
                    }
                    Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => break,
                }
            }
            if !self.deferred.is_empty() {
                self.since_bulk += inputs;
            }
            if self.since_bulk >= BULK_EVERY * bulk_batch {
                self.backlog(&mut batch, bulk_batch);
                self.since_bulk = 0;
            }
        }
        Some(batch)
    }

    /// Up to `inputs` inputs of the backlog, oldest first, into `batch`.
    fn backlog(&mut self, batch: &mut Vec<Job>, inputs: usize) {
        let mut taken = 0;
        while taken < inputs
            && let Some(job) = self.deferred.pop_front()
        {
            taken += job.texts.len();
            batch.push(job);
        }
    }
}

/// Runs the model over every input of `jobs`, shortest first in calls of at most `max_batch`.
fn run_batch(model: &Embedder, jobs: Vec<Job>, max_batch: usize) -> Computed {
    // Every input: (job, text, piece byte range).
    let mut inputs: Vec<(usize, usize, std::ops::Range<usize>)> = Vec::new();
    let mut failed: HashMap<usize, EmbedFailure> = HashMap::new();
    for (j, job) in jobs.iter().enumerate() {
        for (t, text) in job.texts.iter().enumerate() {
            match job.long {
                LongText::Truncate => inputs.push((j, t, 0..text.len())),
                LongText::Split => match model.pieces(text) {
                    Ok(ranges) => inputs.extend(ranges.into_iter().map(|r| (j, t, r))),
                    Err(e) => {
                        failed.insert(j, EmbedFailure::Failed(e.to_string()));
                    }
                },
            }
        }
    }
    let text_of = |&(j, t, ref r): &(usize, usize, std::ops::Range<usize>)| &jobs[j].texts[t][r.clone()];
    let mut order: Vec<usize> = (0..inputs.len()).collect();
    order.sort_by_key(|&i| text_of(&inputs[i]).len());
    let mut vectors: Vec<Option<Piece>> = vec![None; inputs.len()];
    let mut model_calls = 0u32;
    let started = Instant::now();
    for chunk in order.chunks(max_batch) {
        let texts: Vec<&str> = chunk.iter().map(|&i| text_of(&inputs[i])).collect();
        model_calls += 1;
        match model.embed(&texts) {
            Ok(out) => {
                for (&i, e) in chunk.iter().zip(out) {
                    let r = &inputs[i].2;
                    vectors[i] = Some(Piece {
                        vector: e.vector,
                        tokens: e.tokens as u32,
                        truncated_from: e.truncated_from.map(|n| n as u32),
                        start: r.start as u32,
                        end: r.end as u32,
                    });
                }
            }
            Err(e) => {
                let failure = EmbedFailure::Failed(e.to_string());
                for &i in chunk {
                    failed.entry(inputs[i].0).or_insert_with(|| failure.clone());
                }
            }
        }
    }
    // Regroup pieces by job and text, in order.
    let mut per_job: Vec<Vec<Vec<Piece>>> = jobs.iter().map(|j| vec![Vec::new(); j.texts.len()]).collect();
    for ((j, t, _), piece) in inputs.iter().zip(vectors) {
        if let Some(p) = piece {
            per_job[*j][*t].push(p);
        }
    }
    let results = jobs
        .iter()
        .zip(per_job)
        .enumerate()
        .map(|(j, (job, pieces))| (job.id, failed.remove(&j).map_or(Ok(pieces), Err)))
        .collect();
    Computed { model_calls, inputs: inputs.len() as u32, seconds: started.elapsed().as_secs_f64(), jobs: results }
}
