//! `mindfleet bench ...`: runs a benchmark and prints its figures (docs/BENCHMARKS.md). The
//! benchmarks themselves are the binary's `bench` module, not the library's; this module picks one, fetches
//! the models it needs, and runs it on a tokio runtime when it needs one (the ones that time
//! blocking work run without).

use std::path::Path;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::bench;
use clap::Subcommand;
use mindfleet_models::fetch;

use super::{Json, block_on, print_figures};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    which: Which,
}

#[derive(Subcommand)]
enum Which {
    /// Launch time and idle RSS of an N-persona fleet.
    Launch {
        #[arg(long, default_value_t = 1000)]
        personas: usize,
        #[command(flatten)]
        out: Json,
    },
    /// Fast-path gate decisions per second on one core.
    Gate {
        #[arg(long, default_value_t = 1.0)]
        seconds: f64,
        #[command(flatten)]
        out: Json,
    },
    /// Urgent dispatch latency behind a backlog of background tasks, and scheduler throughput.
    Scheduler {
        #[arg(long, default_value_t = 100_000)]
        backlog: usize,
        /// Timed urgent samples, each against a refilled backlog.
        #[arg(long, default_value_t = 1000)]
        samples: usize,
        #[command(flatten)]
        out: Json,
    },
    /// A steady load on a large fleet: RSS, queues and decision latency over time.
    Soak {
        #[arg(long, default_value_t = 1000)]
        personas: usize,
        #[arg(long, default_value_t = 1000)]
        rate: usize,
        #[arg(long, default_value_t = 600)]
        seconds: u64,
        /// Seconds between samples.
        #[arg(long, default_value_t = 10)]
        every: u64,
        /// Personas per room: each event goes to every persona of its room.
        #[arg(long, default_value_t = 4)]
        room_size: usize,
        /// With conversation memory on (and the embedding model).
        #[arg(long)]
        conversation: bool,
        /// Every persona on the local brain (the fleet's model, its keys and values within
        /// `[llm] kv_memory_mb`), instead of the rules brain.
        #[arg(long)]
        local: bool,
        #[command(flatten)]
        out: Json,
    },
    /// The same load on a fleet without a page and with open dashboard pages (each streaming
    /// the live cards and refreshing a panel every second): decision latency, throughput and
    /// CPU of both, and their ratios.
    Dashboard {
        #[arg(long, default_value_t = 1000)]
        personas: usize,
        #[arg(long, default_value_t = 300)]
        rate: usize,
        #[arg(long, default_value_t = 60)]
        seconds: u64,
        #[arg(long, default_value_t = 4)]
        pages: usize,
        #[command(flatten)]
        out: Json,
    },
    /// The same fleet and events on one node and across two (this process as node a, a child
    /// `mindfleet run --node b`), every event injected at a for a persona on b: acknowledgement
    /// and inject-to-decision latency, throughput, and their ratios.
    Cluster {
        #[arg(long, default_value_t = 16)]
        personas: usize,
        #[arg(long, default_value_t = 2000)]
        events: usize,
        #[command(flatten)]
        out: Json,
    },
    /// Conversation memory under a stream of chat messages (real MiniLM): embedding lag, its
    /// promotions, messages embedded per second, recall latency.
    Conversation {
        #[arg(long, default_value_t = 4)]
        personas: usize,
        /// Messages per second into their one room (each taken in by every persona).
        #[arg(long, default_value_t = 10.0)]
        rate: f64,
        #[arg(long, default_value_t = 30)]
        seconds: u64,
        #[arg(long, default_value_t = 60)]
        recalls: usize,
        #[command(flatten)]
        out: Json,
    },
    /// Conversation memory on long conversations (LoCoMo-format files, issue 26): one dormant
    /// persona per conversation, each turn an event, each answerable question as `ai recall
    /// --limit 10`; recall@5, recall@10 and hit@5 overall and per category, ingest and embedding
    /// time, recall latency.
    MemoryEval {
        /// The directory of conversation files (`*.json`), e.g. ../shared/memory-dev.
        #[arg(long)]
        dir: PathBuf,
        /// Also BM25, dense (MiniLM) and hybrid (reciprocal-rank fusion) baselines over the same
        /// turns, and the ratios of ours to each.
        #[arg(long)]
        baseline: bool,
        /// Writes ours per question to FILE, a `{"id", "ranked"}` line each (score.py's input).
        #[arg(long, value_name = "FILE")]
        results: Option<PathBuf>,
        /// A `[conversation]` key for the fleet, as in a fleet file (`context_messages = 0`);
        /// repeat for more. What each part of recall brings is measured so.
        #[arg(long, value_name = "KEY = VALUE")]
        conversation: Vec<String>,
        #[command(flatten)]
        out: Json,
    },
    /// A backlog of stored chat events replayed at start, with conversation memory off and on
    /// (real MiniLM): seconds until every delivery is decided, and until every message is
    /// embedded, against the bare model on the same texts.
    Replay {
        #[arg(long, default_value_t = 1000)]
        events: usize,
        #[arg(long, default_value_t = 3)]
        personas: usize,
        #[command(flatten)]
        out: Json,
    },
    /// Eight personas on the local brain answer 64 messages that name them, injected at once:
    /// batched (`[llm] max_batch`) and one request at a time, side by side (bench/cognition).
    Cognition {
        #[command(flatten)]
        out: Json,
    },
    /// Seven personas in one room on a model budget each, 30 undirected human messages and 6
    /// mentions, on the rules and on the local brain: replies per message, unanswered messages,
    /// mentions answered by the persona named, replies by the rules brain and by the model.
    Turns {
        /// Model calls each persona may make in an hour (`inferences_per_hour`).
        #[arg(long, default_value_t = 4)]
        budget: u64,
        /// Undirected messages (a mention follows every fifth).
        #[arg(long, default_value_t = 30)]
        messages: usize,
        #[command(flatten)]
        out: Json,
    },
    /// Self-directed study with the real local models over a small corpus (bench/study): session
    /// time and tokens, grades, training lines, and a person's reply while a session runs
    /// against the same reply to the idle persona.
    Study {
        /// The corpus indexed and studied.
        #[arg(long, default_value = "bench/study")]
        corpus: PathBuf,
        /// Questions asked idle and while studying, each.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        #[command(flatten)]
        out: Json,
    },
    /// LoRA on study data: a persona studies Werkzeug 3.0.6 (fetched as for rag-eval) until it
    /// has `train` chats to train on and `held_out` held out, then an adapter trains beside the
    /// fleet; held-out perplexity and grades before and after, training time, generation speed
    /// with and without the adapter, and a person's reply while it trains over the idle one.
    Lora {
        /// Chats to train on, at least.
        #[arg(long, default_value_t = 200)]
        train: usize,
        /// Held-out chats (about passages never trained on), at least.
        #[arg(long, default_value_t = 50)]
        held_out: usize,
        /// Questions asked idle and while training, each.
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        #[command(flatten)]
        out: Json,
    },
    /// Seconds a training step takes (`[training]` defaults: rank 8 on all projections, a step of
    /// `batch` chats of about `tokens` tokens each), the first step apart.
    LoraStep {
        #[arg(long, default_value_t = 8)]
        batch: usize,
        #[arg(long, default_value_t = 150)]
        tokens: usize,
        #[arg(long, default_value_t = 4)]
        steps: usize,
        /// Threads of the frozen products (default: as a fleet's runs, one).
        #[arg(long)]
        threads: Option<usize>,
        #[command(flatten)]
        out: Json,
    },
    /// The redundancy check's threshold: the labelled pairs of bench/redundancy embedded with the
    /// real MiniLM; the threshold with the best F1, its precision and recall.
    Redundancy {
        #[command(flatten)]
        out: Json,
    },
    /// Embeddings per second (batch 1, 8, 32; sentences and code), the shared worker under 100
    /// callers, and sentence-transformers on the same inputs as the peer.
    Embed {
        /// Python with sentence-transformers for the peer run (none: ours only).
        #[arg(long)]
        peer_python: Option<String>,
        /// Sentences to embed instead of the built-in ones: one a line.
        #[arg(long)]
        sentences: Option<PathBuf>,
        /// Code windows to embed instead of the built-in ones: one JSON string a line.
        #[arg(long)]
        code: Option<PathBuf>,
        #[command(flatten)]
        out: Json,
    },
    /// Prompt and generated tokens per second and time to first token of the local LLM, with
    /// llama.cpp as the peer (on the same file, or on `--peer-model`).
    Llm {
        /// Python with llama-cpp-python for the peer run (none: ours only).
        #[arg(long)]
        peer_python: Option<String>,
        /// The GGUF file llama.cpp runs (default: ours), e.g. the packaged Q4_1 file beside it.
        #[arg(long)]
        peer_model: Option<PathBuf>,
        #[command(flatten)]
        out: Json,
    },
    /// The codebase index: indexing a tree (files/s, chunks/s, re-index, bytes per chunk, query
    /// latency, int8's recall against f32), and search latency at 10k and 100k synthetic entries
    /// (at 100k the vector graph's build time and recall against the exact scan).
    Index {
        /// The tree to index (default: the current directory).
        #[arg(long, default_value = ".")]
        path: PathBuf,
        #[command(flatten)]
        out: Json,
    },
    /// Retrieval quality of the codebase index on a public codebase (Werkzeug 3.0.6, fetched
    /// from the Python package index and checked): Recall@5 and MRR@10 by file of keyword,
    /// vector and hybrid search, ours and a baseline of fixed 40-line windows.
    RagEval {
        /// Another question file (JSONL: id, query, answers, uses_identifiers); needs --tree.
        #[arg(long, requires = "tree")]
        questions: Option<PathBuf>,
        /// The tree the questions are about (default: the fetched Werkzeug).
        #[arg(long)]
        tree: Option<PathBuf>,
        /// Also each question's rank of its first answer and its first files, per index and mode.
        #[arg(long)]
        details: bool,
        #[command(flatten)]
        out: Json,
    },
    /// What the personas post, on the rules and on the local brain (bench/replies): questions
    /// about a conversation, summaries, code questions about Werkzeug 3.0.6, general questions;
    /// echo and loop rates, unanswered, answers carrying their facts or naming a file that
    /// answers them, median reply length and time.
    Replies {
        /// Also every question and its reply.
        #[arg(long)]
        details: bool,
        #[command(flatten)]
        out: Json,
    },
    /// Each local model available (SmolLM2-135M-Instruct, Gemma 3 270M; pulled when missing) on
    /// the fleet's own tasks: the gate's and the plan choice's agreement with their labelled
    /// cases, what the local brain posts (as `bench replies`), prompt and generated tokens per
    /// second, and what runs it.
    Models {
        /// Only these models (`smollm2-135m-instruct`, `gemma3-270m`; default: all).
        #[arg(long)]
        model: Vec<String>,
        /// Leave out the replies (the longest part): the gate, the plan choice and the speeds only.
        #[arg(long)]
        no_replies: bool,
        /// Also every question and the local brain's reply (as `bench replies --details`).
        #[arg(long, conflicts_with = "no_replies")]
        details: bool,
        #[command(flatten)]
        out: Json,
    },
    /// The semantic threshold of reference matching on labelled texts (bench/refs-eval):
    /// precision, recall and F1 of each threshold, the best one with its 2-fold held-out F1, and
    /// the default's figures.
    RefsEval {
        /// The set: a fleet file (fleet.toml) whose catalog is matched and labelled.jsonl.
        #[arg(long, default_value = bench::refs_eval::DEFAULT_DIR)]
        dir: PathBuf,
        /// Also each threshold's figures and each text's first three references.
        #[arg(long)]
        details: bool,
        #[command(flatten)]
        out: Json,
    },
    /// The local model's replies to 24 chat messages under each setting of the repetition
    /// guards (`[llm] repetition_penalty`, `no_repeat_ngram`, `no_copy_ngram`,
    /// `stop_repeated_sentence`): sentences said twice, the message copied, empty, on topic.
    Decoding {
        #[command(flatten)]
        out: Json,
    },
    /// The gate's model question on labelled cases: label margins, coverage and agreement of
    /// the calibration.
    GateModel {
        #[command(flatten)]
        out: Json,
    },
    /// Rounds of `kill -9` at a random moment of a `mindfleet run` child under concurrent
    /// injection (every other round while it indexes a generated tree), each checked after a
    /// restart: acknowledged, decided, lost, decided twice, restart time. `"ok": false` when
    /// anything acknowledged was lost or decided twice.
    Chaos {
        #[arg(long, default_value_t = 20)]
        rounds: usize,
        /// Seeds the moments of the kills (default: from the clock); printed in the figures.
        #[arg(long)]
        seed: Option<u64>,
        /// Concurrent injecting clients.
        #[arg(long, default_value_t = 8)]
        clients: usize,
        /// Also a round on a small tmpfs (root only: it mounts one) filled until events are
        /// refused, then given space: 507 and a 503 `/health` while full, healed without a
        /// restart, nothing acknowledged lost.
        #[arg(long)]
        disk_full: bool,
        #[command(flatten)]
        out: Json,
    },
    /// Webhooks under the soak's load (a reply per event or more): a local receiver's deliveries
    /// per second and delivery latency, and the decision latency with a live and with a stalled
    /// receiver against none (ratios); then how fast a sender drains the backlog the stalled
    /// receiver left.
    Webhook {
        #[arg(long, default_value_t = 1000)]
        personas: usize,
        #[arg(long, default_value_t = 1000)]
        rate: usize,
        #[arg(long, default_value_t = 30)]
        seconds: u64,
        /// Personas per room: each event goes to every persona of its room.
        #[arg(long, default_value_t = 1)]
        room_size: usize,
        #[command(flatten)]
        out: Json,
    },
    /// Tool calls as plan steps (issue 53), on server-everything's `echo`: calls per second
    /// through a persona; each call's overhead over a bare rmcp client (alternate rounds, as a
    /// ratio); an approval's round trip over HTTP; the persona's decision latency on other events
    /// while a plan of its waits for approval, as a ratio to none waiting.
    Tools {
        /// Echo mentions injected at once (and a quarter as many one at a time).
        #[arg(long, default_value_t = 1000)]
        events: usize,
        /// Echo calls on each path, the tool host's and the bare client's.
        #[arg(long, default_value_t = 2000)]
        calls: usize,
        /// Approval round trips.
        #[arg(long, default_value_t = 50)]
        approvals: usize,
        /// Rounds of ten mentions, alternately with a plan parked on its approval and without.
        #[arg(long, default_value_t = 40)]
        rounds: usize,
        #[command(flatten)]
        out: Json,
    },
    /// What recording the personas' histories costs: `bench inject` and the batched half of
    /// `bench cognition` with `[storage] record` on and off, taking turns; and a recorded
    /// history's replay against the time it took.
    Record {
        /// Rounds of `bench inject` on and off, taking turns: the machine's pace drifts from
        /// round to round by more than recording changes it, so the median needs many (odd, so
        /// it is one round's ratio).
        #[arg(long, default_value_t = 15)]
        rounds: usize,
        #[arg(long, default_value_t = 64)]
        clients: usize,
        #[arg(long, default_value_t = 10_000)]
        events: usize,
        /// Rounds of the cognition runs on and off (0: leave them out).
        #[arg(long, default_value_t = 2)]
        cognition_rounds: usize,
        #[command(flatten)]
        out: Json,
    },
    /// Durable injection throughput and latency over HTTP.
    Inject {
        #[arg(long, default_value_t = 64)]
        clients: usize,
        #[arg(long, default_value_t = 20_000)]
        events: usize,
        #[arg(long, default_value_t = 8)]
        personas: usize,
        #[command(flatten)]
        out: Json,
    },
}

pub fn run(Args { which }: Args) -> ExitCode {
    match which {
        Which::Gate { seconds, out } => print_figures(Ok(bench::gate(seconds)), out.json),
        Which::Decoding { out } => {
            let r = mindfleet::llm_file(None).map_err(anyhow::Error::msg).and_then(|m| bench::decoding::decoding(&m));
            print_figures(r, out.json)
        }
        Which::GateModel { out } => {
            let r = mindfleet::llm_file(None).map_err(anyhow::Error::msg).and_then(|m| bench::llm::gate_model(&m));
            print_figures(r, out.json)
        }
        Which::Llm { peer_python, peer_model, out } => {
            let r = mindfleet::llm_file(None)
                .map_err(anyhow::Error::msg)
                .and_then(|m| bench::llm::llm(&m, peer_python.as_deref(), peer_model.as_deref()));
            print_figures(r, out.json)
        }
        Which::Index { path, out } => {
            let r = fetch::ensure(&fetch::default_dir(), &fetch::MINILM, |l| eprintln!("mindfleet: {l}"))
                .map_err(anyhow::Error::from)
                .and_then(|dir| bench::index::index(&path, &dir));
            print_figures(r, out.json)
        }
        Which::RagEval { questions, tree, details, out } => {
            print_figures(rag_eval(questions.as_deref(), tree.as_deref(), details), out.json)
        }
        Which::Replies { details, out } => block_on(async move {
            use bench::rag_eval::WERKZEUG;
            let dir = fetch::default_dir();
            let r = async {
                fetch::pull(&dir, &fetch::PACKAGES, |l| eprintln!("mindfleet: {l}"))?;
                let tree = fetch::ensure_source(&dir, &WERKZEUG, |l| eprintln!("mindfleet: {l}"))?;
                let source = format!("{} (sha256 {})", WERKZEUG.wheel, WERKZEUG.wheel_sha256);
                bench::replies::replies(&tree, &source, &dir, None, details).await
            }
            .await;
            print_figures(r, out.json)
        }),
        Which::Models { model, no_replies, details, out } => block_on(async move {
            use bench::rag_eval::WERKZEUG;
            let dir = fetch::default_dir();
            let r = async {
                fetch::pull(&dir, &fetch::PACKAGES, |l| eprintln!("mindfleet: {l}"))?;
                let tree = fetch::ensure_source(&dir, &WERKZEUG, |l| eprintln!("mindfleet: {l}"))?;
                let source = format!("{} (sha256 {})", WERKZEUG.wheel, WERKZEUG.wheel_sha256);
                let replies = match (no_replies, details) {
                    (true, _) => bench::models::Replies::None,
                    (false, false) => bench::models::Replies::Figures,
                    (false, true) => bench::models::Replies::Details,
                };
                bench::models::models(&tree, &source, &dir, &model, replies).await
            }
            .await;
            print_figures(r, out.json)
        }),
        Which::RefsEval { dir, details, out } => {
            let r = fetch::ensure(&fetch::default_dir(), &fetch::MINILM, |l| eprintln!("mindfleet: {l}"))
                .map_err(anyhow::Error::from)
                .and_then(|model| bench::refs_eval::refs_eval(&dir, &model, details));
            match r {
                Ok(v) if !out.json => {
                    print!("{}", bench::refs_eval::render(&v));
                    ExitCode::SUCCESS
                }
                r => print_figures(r, true),
            }
        }
        Which::Launch { personas, out } => {
            block_on(async move { print_figures(bench::launch(personas).await, out.json) })
        }
        Which::Scheduler { backlog, samples, out } => block_on(async move {
            let mut v = mindfleet_actors::scheduler::bench::bench(backlog.max(1), samples.max(1)).await;
            v["bench"] = "scheduler".into();
            print_figures(Ok(v), out.json)
        }),
        Which::Conversation { personas, rate, seconds, recalls, out } => block_on(async move {
            let r = match fetch::ensure(&fetch::default_dir(), &fetch::MINILM, |l| eprintln!("{l}")) {
                Ok(_) => bench::conversation::conversation(personas.max(1), rate.max(0.1), seconds, recalls).await,
                Err(e) => Err(e.into()),
            };
            print_figures(r, out.json)
        }),
        Which::MemoryEval { dir, baseline, results, conversation, out } => block_on(async move {
            let r = match fetch::ensure(&fetch::default_dir(), &fetch::MINILM, |l| eprintln!("mindfleet: {l}")) {
                Ok(_) => {
                    let opts = bench::memory_eval::Options { dir, baseline, results, conversation };
                    bench::memory_eval::memory_eval(&opts).await
                }
                Err(e) => Err(e.into()),
            };
            print_figures(r, out.json)
        }),
        Which::Replay { events, personas, out } => block_on(async move {
            let r = match fetch::ensure(&fetch::default_dir(), &fetch::MINILM, |l| eprintln!("{l}")) {
                Ok(dir) => bench::replay::replay(&dir, events.max(1), personas.max(1)).await,
                Err(e) => Err(e.into()),
            };
            print_figures(r, out.json)
        }),
        Which::Study { corpus, rounds, out } => block_on(async move {
            let dir = fetch::default_dir();
            let r = match fetch::pull(&dir, &fetch::PACKAGES, |l| eprintln!("mindfleet: {l}")) {
                Ok(_) => bench::study::study(&corpus, rounds.max(1)).await,
                Err(e) => Err(e.into()),
            };
            print_figures(r, out.json)
        }),
        Which::Lora { train, held_out, rounds, out } => block_on(async move {
            use bench::rag_eval::WERKZEUG;
            let dir = fetch::default_dir();
            let r = async {
                fetch::pull(&dir, &fetch::PACKAGES, |l| eprintln!("mindfleet: {l}"))?;
                let tree = fetch::ensure_source(&dir, &WERKZEUG, |l| eprintln!("mindfleet: {l}"))?;
                let model = mindfleet_models::llama::runnable(
                    &dir.join(fetch::SMOLLM2.name).join(fetch::SMOLLM2.files[0].name),
                )?;
                let source = format!("{} (sha256 {})", WERKZEUG.wheel, WERKZEUG.wheel_sha256);
                bench::lora::lora(&tree, &source, &model, train.max(1), held_out.max(1), rounds.max(1)).await
            }
            .await;
            print_figures(r, out.json)
        }),
        Which::LoraStep { batch, tokens, steps, threads, out } => {
            let dir = fetch::default_dir();
            let r = fetch::pull(&dir, &fetch::PACKAGES, |l| eprintln!("mindfleet: {l}"))
                .map_err(anyhow::Error::from)
                .and_then(|_| {
                    let model = dir.join(fetch::SMOLLM2.name).join(fetch::SMOLLM2.files[0].name);
                    Ok(mindfleet_models::llama::runnable(&model)?)
                })
                .and_then(|model| bench::lora::steps(&model, batch.max(1), tokens.max(16), steps.max(1), threads));
            print_figures(r, out.json)
        }
        Which::Cognition { out } => block_on(async move {
            let dir = fetch::default_dir();
            let r = match fetch::pull(&dir, &fetch::PACKAGES, |l| eprintln!("mindfleet: {l}")) {
                Ok(_) => bench::cognition::cognition(&dir).await,
                Err(e) => Err(e.into()),
            };
            print_figures(r, out.json)
        }),
        Which::Turns { budget, messages, out } => block_on(async move {
            let dir = fetch::default_dir();
            let r = match fetch::pull(&dir, &fetch::PACKAGES, |l| eprintln!("mindfleet: {l}")) {
                Ok(_) => bench::turns::turns(budget, messages.max(1), &dir).await,
                Err(e) => Err(e.into()),
            };
            print_figures(r, out.json)
        }),
        Which::Soak { personas, rate, seconds, every, room_size, conversation, local, out } => block_on(async move {
            let load = bench::SoakLoad {
                personas,
                rate,
                seconds,
                every: every.max(1),
                room_size: room_size.max(1),
                conversation,
                local,
            };
            print_figures(soak(load).await, out.json)
        }),
        Which::Webhook { personas, rate, seconds, room_size, out } => block_on(async move {
            let load = bench::SoakLoad {
                personas: personas.max(1),
                rate: rate.max(1),
                seconds: seconds.max(1),
                every: seconds.max(1),
                room_size: room_size.max(1),
                conversation: false,
                local: false,
            };
            print_figures(bench::webhook::webhook(load).await, out.json)
        }),
        Which::Cluster { personas, events, out } => {
            block_on(async move { print_figures(bench::cluster::cluster(personas, events.max(1)).await, out.json) })
        }
        Which::Dashboard { personas, rate, seconds, pages, out } => block_on(async move {
            let load =
                bench::SoakLoad { personas, rate, seconds, every: 5, room_size: 4, conversation: false, local: false };
            print_figures(bench::dashboard::dashboard(load, pages.max(1)).await, out.json)
        }),
        Which::Embed { peer_python, sentences, code, out } => block_on(async move {
            let texts = bench::embed::inputs(sentences.as_deref(), code.as_deref());
            let r = match (texts, fetch::ensure(&fetch::default_dir(), &fetch::MINILM, |l| eprintln!("{l}"))) {
                (Ok((short, code)), Ok(dir)) => bench::embed::embed(&dir, peer_python.as_deref(), short, code).await,
                (Err(e), _) => Err(e),
                (_, Err(e)) => Err(e.into()),
            };
            print_figures(r, out.json)
        }),
        Which::Redundancy { out } => {
            let r = fetch::ensure(&fetch::default_dir(), &fetch::MINILM, |l| eprintln!("mindfleet: {l}"))
                .map_err(anyhow::Error::from)
                .and_then(|dir| bench::redundancy::redundancy(&dir));
            print_figures(r, out.json)
        }
        Which::Chaos { rounds, seed, clients, disk_full, out } => block_on(async move {
            let seed = seed.unwrap_or_else(bench::chaos::clock_seed);
            let options = bench::chaos::Options { rounds, seed, clients, disk_full };
            print_figures(bench::chaos::chaos(options).await, out.json)
        }),
        Which::Tools { events, calls, approvals, rounds, out } => block_on(async move {
            let options = bench::tools::Options { events, calls, approvals, rounds };
            print_figures(bench::tools::tools(options).await, out.json)
        }),
        Which::Record { rounds, clients, events, cognition_rounds, out } => block_on(async move {
            let dir = fetch::default_dir();
            let pulled = if cognition_rounds > 0 {
                fetch::pull(&dir, &fetch::PACKAGES, |l| eprintln!("mindfleet: {l}")).map(drop)
            } else {
                Ok(())
            };
            let r = match pulled {
                Ok(()) => {
                    bench::record::record(rounds.max(1), clients.max(1), events.max(1), cognition_rounds, &dir).await
                }
                Err(e) => Err(e.into()),
            };
            print_figures(r, out.json)
        }),
        Which::Inject { clients, events, personas, out } => {
            block_on(async move { print_figures(bench::inject(clients, events, personas).await, out.json) })
        }
    }
}

/// `bench soak`: with conversation memory, the embedding model fetched first when missing.
async fn soak(load: bench::SoakLoad) -> anyhow::Result<serde_json::Value> {
    if load.conversation {
        fetch::ensure(&fetch::default_dir(), &fetch::MINILM, |l| eprintln!("{l}"))?;
    }
    bench::soak(load, 0).await
}

/// `bench rag-eval`: the model and (unless `tree` is given) the codebase fetched when missing.
fn rag_eval(questions: Option<&Path>, tree: Option<&Path>, details: bool) -> anyhow::Result<serde_json::Value> {
    use bench::rag_eval::{QUESTIONS, WERKZEUG};
    let dir = fetch::default_dir();
    let model = fetch::ensure(&dir, &fetch::MINILM, |l| eprintln!("mindfleet: {l}"))?;
    let questions = match questions {
        Some(p) => std::fs::read_to_string(p).map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?,
        None => QUESTIONS.to_string(),
    };
    let (tree, source) = match tree {
        Some(t) => (t.to_path_buf(), t.display().to_string()),
        None => {
            let t = fetch::ensure_source(&dir, &WERKZEUG, |l| eprintln!("mindfleet: {l}"))?;
            (t, format!("{} (sha256 {})", WERKZEUG.wheel, WERKZEUG.wheel_sha256))
        }
    };
    bench::rag_eval::rag_eval(&tree, &source, &model, &questions, details)
}
