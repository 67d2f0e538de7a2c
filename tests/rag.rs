//! The codebase index with the real embedding model: chunks within its window, and the `rag`
//! commands from indexing to search, through the binary.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use mindfleet_actors::embed::IndexModel;
use mindfleet_core::config::IndexConfig;
use mindfleet_core::embedding::EmbedMsg;
use mindfleet_core::knowledge::{IndexMsg, IndexRequest, RagError, RagRequest, SearchRequest};
use mindfleet_index::Embed;
use mindfleet_index::chunk::{Chunker, Lang};
use mindfleet_models::fetch::MINILM;
use ractor::ActorRef;
use serde_json::Value;

use crate::util::{poll, pulled, two_files};

fn model() -> IndexModel {
    IndexModel::load(&pulled().join(MINILM.name)).unwrap()
}

#[test]
fn no_chunk_of_this_project_exceeds_the_models_window_by_its_own_tokenizer() {
    let model = model();
    let count = |t: &str| model.count_tokens(t);
    let chunker = Chunker::new(model.window(), &count);
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut total = 0;
    for file in ["actors/models/src/llama.rs", "actors/index/src/chunk.rs", "docs/ARCHITECTURE.md", "README.md"] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        let chunks = chunker.chunk(Lang::of(Path::new(file)), &text);
        assert!(chunks.len() > 3, "{file}: {} chunks", chunks.len());
        for c in &chunks {
            let n = model.count_tokens(&c.text);
            assert!(
                n <= model.window(),
                "{file}:{}-{}: {n} tokens, window {}",
                c.start_line,
                c.end_line,
                model.window()
            );
            assert!(c.start_line >= 1 && c.end_line >= c.start_line && c.end_line <= text.lines().count());
        }
        total += chunks.len();
    }
    assert!(total > 50, "{total}");
}

fn rag(args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_mindfleet")).arg("rag").args(args).arg("--json").output().unwrap();
    assert!(out.status.success(), "rag {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("rag {args:?}: {e}: {}", String::from_utf8_lossy(&out.stdout)))
}

#[test]
fn rag_index_then_search_finds_code_by_what_it_does() {
    let src = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let write = |rel: &str, text: &str| {
        let p = src.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    write(
        "src/retry.rs",
        "/// Calls `f` again after a failure, waiting twice as long each time.\npub fn with_backoff<T>(mut f: impl FnMut() -> Option<T>, tries: u32) -> Option<T> {\n    let mut wait = 10;\n    for _ in 0..tries {\n        if let Some(v) = f() {\n            return Some(v);\n        }\n        std::thread::sleep(std::time::Duration::from_millis(wait));\n        wait *= 2;\n    }\n    None\n}\n",
    );
    write(
        "src/money.py",
        "def add_tax(price, rate):\n    \"\"\"The price with the sales tax added.\"\"\"\n    return price * (1 + rate)\n",
    );
    write(
        "web/cart.ts",
        "export function cartTotal(items: { price: number }[]): number {\n  return items.reduce((sum, i) => sum + i.price, 0);\n}\n",
    );
    write(
        "docs/setup.md",
        "# Setup\n\n## Installing\n\nDownload the package and unpack it into your home directory.\n",
    );
    let data_dir = data.path().to_str().unwrap();
    let src_dir = src.path().to_str().unwrap();
    let report = rag(&["index", src_dir, "--data", data_dir]);
    assert_eq!(report["indexed"][0]["files_indexed"], 4, "{report}");
    assert_eq!(report["files"], 4);

    let search = |q: &str, extra: &[&str]| {
        let mut args = vec!["search", q, "--data", data_dir, "--limit", "3"];
        args.extend_from_slice(extra);
        rag(&args)
    };
    // Questions in words, none of the code's identifiers.
    let found = search("retry an operation with exponential delay", &[]);
    assert_eq!(found["mode"], "hybrid", "{found}");
    let top = &found["hits"][0];
    assert_eq!(top["path"], "src/retry.rs", "{found}");
    assert_eq!((top["start_line"].as_u64(), top["end_line"].as_u64()), (Some(1), Some(12)));
    assert_eq!((top["kind"].as_str(), top["symbol"].as_str()), (Some("function"), Some("with_backoff")));
    assert_eq!(search("sum of the prices in a shopping basket", &[])["hits"][0]["path"], "web/cart.ts");
    assert_eq!(search("how do I install it", &["--lang", "markdown"])["hits"][0]["symbol"], "Setup > Installing");
    let py = search("compute price including sales tax", &["--path-prefix", "src/"]);
    assert_eq!(py["hits"][0]["path"], "src/money.py", "{py}");
    // Unchanged files are not embedded again.
    let again = rag(&["index", src_dir, "--data", data_dir]);
    assert_eq!(
        (again["indexed"][0]["files_unchanged"].as_u64(), again["indexed"][0]["texts_embedded"].as_u64()),
        (Some(4), Some(0))
    );
    // Bad input is named.
    let out = Command::new(env!("CARGO_BIN_EXE_mindfleet"))
        .args(["rag", "search", "x", "--data", data_dir, "--limit", "0"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("limit: 0 is not within 1..=1000"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn entries_created_by_hand_are_queried_and_results_page_by_handle_across_invocations() {
    let data = tempfile::tempdir().unwrap();
    let d = data.path().to_str().unwrap();
    let topics = [
        ("notes/cache.md", "Invalidate the cache entry when the record it holds is written."),
        ("notes/deploy.md", "Deploy by switching traffic from the blue servers to the green ones."),
        ("notes/tests.md", "Integration tests start a real fleet on a temporary directory."),
        ("notes/auth.md", "Requests carry a bearer token that the admin API checks."),
        ("notes/logs.md", "Logs go to standard error with the tracing crate."),
    ];
    for (path, content) in topics {
        let v = rag(&["create", "--file-path", path, "--content", content, "--data", d]);
        assert_eq!(v["indexed"], true, "{v}");
        assert!(v["entry_id"].as_str().is_some_and(|id| !id.is_empty()), "{v}");
    }
    let q = rag(&["query", "switching production traffic between server pools", "--limit", "2", "--data", d]);
    assert_eq!(q["entries"][0]["path"], "notes/deploy.md", "{q}");
    let scores = q["relevance_scores"].as_array().unwrap();
    assert_eq!(scores.len(), 2);
    assert!(scores[0].as_f64() >= scores[1].as_f64(), "{q}");
    // As text, each line starts with the cosine the JSON reports, not a rank score.
    let out = Command::new(env!("CARGO_BIN_EXE_mindfleet"))
        .args(["rag", "query", "switching production traffic between server pools", "--limit", "2", "--data", d])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let first: Vec<&str> = text.lines().map(|l| l.split_whitespace().next().unwrap_or("")).collect();
    let want: Vec<String> = scores.iter().map(|s| format!("{:.3}", s.as_f64().unwrap())).collect();
    assert_eq!(first, want, "{text}");

    // All five, two per page: forward to the end, back, and straight to an offset.
    let first = rag(&["open", "notes", "--page-size", "2", "--data", d]);
    let handle = first["handle"].as_str().unwrap().to_string();
    let page = |v: &Value| {
        (
            v["offset"].as_u64().unwrap(),
            v["entries"].as_array().unwrap().len(),
            v["has_previous"] == true,
            v["has_more"] == true,
        )
    };
    assert_eq!((page(&first), first["total_count"].as_u64()), ((0, 2, false, true), Some(5)));
    let second = rag(&["fetch", &handle, "--data", d]);
    assert_eq!(page(&second), (2, 2, true, true));
    assert_eq!(page(&rag(&["fetch", &handle, "--data", d])), (4, 1, true, false));
    let back = rag(&["fetch", &handle, "--direction", "backward", "--data", d]);
    assert_eq!(page(&back), (2, 2, true, true));
    assert_eq!(back["entries"], second["entries"], "the snapshot does not move");
    assert_eq!(page(&rag(&["fetch", &handle, "--offset", "1", "--limit", "3", "--data", d])), (1, 3, true, true));
    assert_eq!(rag(&["close", &handle, "--data", d])["closed"], true);
    let out =
        Command::new(env!("CARGO_BIN_EXE_mindfleet")).args(["rag", "fetch", &handle, "--data", d]).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("handle {handle}: expired or closed")), "{err}");
}

#[test]
fn rag_ask_answers_from_the_chunks_found_with_citations_or_says_there_is_nothing() {
    let src = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(src.path().join("src")).unwrap();
    std::fs::write(
        src.path().join("src/retry.rs"),
        "/// Calls `f` again after a failure, waiting twice as long each time.\npub fn with_backoff<T>(mut f: impl FnMut() -> Option<T>, tries: u32) -> Option<T> {\n    let mut wait = 10;\n    for _ in 0..tries {\n        if let Some(v) = f() {\n            return Some(v);\n        }\n        std::thread::sleep(std::time::Duration::from_millis(wait));\n        wait *= 2;\n    }\n    None\n}\n",
    )
    .unwrap();
    let (s, d) = (src.path().to_str().unwrap(), data.path().to_str().unwrap());
    rag(&["index", s, "--data", d]);
    let a = rag(&["ask", "how does the retry wait between tries", "--data", d]);
    assert_eq!(a["relevant"], true, "{a}");
    assert_eq!(a["sources"][0]["cite"], "src/retry.rs:1-12", "{a}");
    let answer = a["answer"].as_str().unwrap();
    assert!(!answer.trim().is_empty());
    let citations = a["citations"].as_array().unwrap();
    assert!(!citations.is_empty(), "{a}");
    for c in citations {
        assert_eq!(c["cite"], "src/retry.rs:1-12");
        assert!(answer.contains("[src/retry.rs:1-12]"), "{answer}");
    }
    let none = rag(&["ask", "what is the capital of France", "--data", d]);
    assert_eq!(none["relevant"], false, "{none}");
    assert!(none["answer"].as_str().unwrap().starts_with("The index has nothing relevant"), "{none}");
}

/// `mindfleet ARGS --json` on a blocking thread (the fleet runs on this test's runtime).
async fn cli(args: Vec<String>) -> (bool, Value, String) {
    tokio::task::spawn_blocking(move || {
        let out = Command::new(env!("CARGO_BIN_EXE_mindfleet")).args(&args).arg("--json").output().unwrap();
        let v = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
        (out.status.success(), v, String::from_utf8_lossy(&out.stderr).into_owned())
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_fleet_serves_the_index_and_its_cursors_through_the_admin_api_and_rag_admin() {
    use mindfleet::client::{Client, ClientError};
    use serde_json::json;

    let dir = tempfile::tempdir().unwrap();
    let src = two_files();
    pulled();
    let fleet = crate::util::start(dir.path(), &crate::util::fleet_toml(crate::util::TRIO)).await;
    let addr = fleet.addr.to_string();
    let api = Client::new(&addr, None);

    let r = api.rag("index", &json!({ "paths": [src.path()] })).await.unwrap();
    assert_eq!((r["files"].as_u64(), r["indexed"][0]["files_indexed"].as_u64()), (Some(2), Some(2)), "{r}");

    // The CLI through the admin API: search, and a cursor opened, paged and closed.
    let a = |args: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = ["rag"].iter().chain(args).map(|s| s.to_string()).collect();
        v.extend(["--admin".to_string(), addr.clone()]);
        v
    };
    let (ok, found, err) = cli(a(&["search", "retry with a growing delay", "--limit", "1"])).await;
    assert!(ok, "{err}");
    assert_eq!(found["hits"][0]["path"], "retry.rs", "{found}");
    let (ok, first, err) = cli(a(&["open", "price", "--page-size", "1", "--mode", "keyword"])).await;
    assert!(ok, "{err}");
    let handle = first["handle"].as_str().unwrap().to_string();
    assert_eq!(first["entries"][0]["path"], "tax.py", "{first}");
    let (ok, closed, _) = cli(a(&["close", &handle])).await;
    assert!(ok && closed["closed"] == true, "{closed}");
    let (ok, _, err) = cli(a(&["fetch", &handle])).await;
    assert!(!ok && err.contains("expired or closed"), "{err}");

    // While the fleet holds the data dir, the in-process CLI refuses and says where to ask.
    let (ok, _, err) =
        cli(vec!["rag".into(), "search".into(), "x".into(), "--data".into(), dir.path().display().to_string()]).await;
    assert!(!ok && err.contains("--admin"), "{err}");

    // Bad requests are named, with their status.
    let status = |e: ClientError| match e {
        ClientError::Status { status, message, .. } => (status, message),
        other => panic!("{other}"),
    };
    let (s, m) = status(api.rag("index", &json!({ "paths": ["/no/such/dir"] })).await.unwrap_err());
    assert!(s == 400 && m.contains("/no/such/dir"), "{s} {m}");
    let (s, m) = status(api.rag("search", &json!({ "query": "x", "limit": 0 })).await.unwrap_err());
    assert!(s == 400 && m.contains("limit"), "{s} {m}");
    let (s, m) = status(api.rag("search", &json!({ "query": "x", "colour": "red" })).await.unwrap_err());
    assert!(s == 400 && m.contains("colour"), "{s} {m}");
    assert_eq!(status(api.rag("reindex", &json!({})).await.unwrap_err()).0, 404);
    assert_eq!(status(api.rag("fetch", &json!({ "handle": "c0-0" })).await.unwrap_err()).0, 404);

    // A persona's thoughts page through the same cursors.
    fleet.inject(crate::util::chat("general", "alice", "@reviewer please review the rust auth module")).await.unwrap();
    fleet.inject(crate::util::chat("general", "alice", "@reviewer and the retry loop too")).await.unwrap();
    assert!(fleet.wait_idle(crate::util::DEADLINE).await);
    let page = api.ai("thoughts", &[("persona", "reviewer".into()), ("page_size", "1".into())]).await.unwrap();
    let total = page["total_count"].as_u64().unwrap();
    assert!(total >= 2 && page["has_more"] == true && page["persona"] == "reviewer", "{page}");
    let handle = page["handle"].as_str().unwrap();
    let next = api.rag("fetch", &json!({ "handle": handle })).await.unwrap();
    assert_eq!((next["offset"].as_u64(), next["has_previous"].as_bool()), (Some(1), Some(true)), "{next}");
    assert_ne!(next["entries"][0], page["entries"][0]);

    let d = fleet.dump(None).await.unwrap();
    assert_eq!((d.index.status.as_str(), d.index.files, d.index.open_cursors), ("ready", 2, 1), "{:?}", d.index);
    fleet.shutdown(std::time::Duration::from_secs(5)).await;
}

/// An index actor in `dir` on its own embedding worker (MiniLM), and the worker.
async fn index_actor(
    dir: &Path,
    config: IndexConfig,
    restrict_paths: bool,
) -> (ActorRef<IndexMsg>, ActorRef<EmbedMsg>) {
    use mindfleet_actors::embed::worker::{EmbedArgs, spawn as embedder};
    use mindfleet_actors::index::{IndexArgs, spawn};
    let model_dir = pulled().join(MINILM.name);
    let args =
        EmbedArgs { model_dir: model_dir.clone(), cache: None, max_batch: 32, max_wait: Duration::from_millis(2) };
    let embedding = embedder(args, None).await.unwrap();
    let args = IndexArgs {
        dir: dir.to_path_buf(),
        embedding: embedding.clone(),
        model_dir,
        llm: None,
        config,
        restrict_paths,
        cursor_file: None,
        progress: None,
    };
    (spawn(args, None).await.unwrap(), embedding)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_searches_embed_their_queries_together_and_a_query_late_for_its_wait_is_searched_by_words() {
    let docs = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    std::fs::write(docs.path().join("ops.md"), "# Deploys\n\nThe canary ran out of memory during the deploy.\n")
        .unwrap();
    std::fs::write(docs.path().join("food.md"), "# Lunch\n\nPizza on Friday at noon.\n").unwrap();
    let (index, embedding) = index_actor(&data.path().join("index"), IndexConfig::default(), false).await;
    let ask = |req: RagRequest| {
        let index = index.clone();
        async move { ractor::call!(index, IndexMsg::Request, Box::new(req)).unwrap() }
    };
    let paths = vec![docs.path().display().to_string()];
    let req = RagRequest::Index(IndexRequest { paths, types: None, recursive: true, expect: None });
    assert_eq!(ask(req).await.unwrap()["files"], 2);
    let batches = || async { ractor::call!(embedding, EmbedMsg::Stats).unwrap().batches };
    let before = batches().await;

    // Eight searches at once: their queries are embedded beside each other, not one by one on
    // the index's thread.
    let searches: Vec<_> = (0..8)
        .map(|i| tokio::spawn(ask(RagRequest::Search(SearchRequest::new(format!("what broke in deploy {i}?"), 2)))))
        .collect();
    for s in searches {
        let v = s.await.unwrap().unwrap();
        assert_eq!(v["mode"], "hybrid", "searched by meaning: {v}");
        assert!(v["hits"][0]["path"].as_str().unwrap().ends_with("ops.md"), "{v}");
    }
    let model_calls = batches().await - before;
    assert!(model_calls < 8, "eight queries took {model_calls} model calls");

    // A query the model cannot take up within its wait (none) is searched by its words.
    let mut late = SearchRequest::new("canary memory", 2);
    late.embed_wait_ms = Some(0);
    let v = ask(RagRequest::Search(late)).await.unwrap();
    assert_eq!(v["mode"], "keyword", "{v}");
    assert!(v["note"].as_str().unwrap().contains("busy past the query's wait"), "{v}");
    assert!(v["hits"][0]["path"].as_str().unwrap().ends_with("ops.md"), "{v}");
    index.stop(None);
    embedding.stop(None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_queued_together_are_stored_in_one_commit_and_a_bad_one_fails_only_its_own_request() {
    use mindfleet_core::knowledge::{CreateManyRequest, CreateRequest};
    let data = tempfile::tempdir().unwrap();
    let (index, embedding) = index_actor(&data.path().join("index"), IndexConfig::default(), false).await;
    let send = |req: RagRequest| {
        let index = index.clone();
        tokio::spawn(async move { ractor::call!(index, IndexMsg::Request, Box::new(req)).unwrap() })
    };
    let stats = || async { ractor::call!(index, IndexMsg::Stats).unwrap() };
    // Requests sent while a directory of this project is indexed: they queue behind it.
    let behind_indexing = |dir: &str, requests: Vec<Vec<CreateRequest>>| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir).display().to_string();
        let indexing =
            send(RagRequest::Index(IndexRequest { paths: vec![dir], types: None, recursive: true, expect: None }));
        async move {
            poll("the thread to be indexing", || async { (stats().await.in_flight == 1).then_some(()) }).await;
            let sent: Vec<_> = requests
                .into_iter()
                .map(|entries| send(RagRequest::CreateMany(CreateManyRequest { entries })))
                .collect();
            let mut answers = Vec::new();
            for s in sent {
                answers.push(s.await.unwrap());
            }
            assert!(indexing.await.unwrap().is_ok());
            answers
        }
    };
    let entry = |path: String, content: &str| CreateRequest {
        file_path: path,
        content: content.into(),
        embedding: Some(vec![1.0; 384]),
    };
    let two = |i: usize| vec![entry(format!("notes/{i}/a"), "first"), entry(format!("notes/{i}/b"), "second")];

    // Enough chunks to embed that the three requests are sure to queue behind them, however busy
    // the machine (the study fixtures' few were once indexed before the third request came).
    let answers = behind_indexing("bench/refs-eval", (0..3).map(two).collect()).await;
    let mut ids: Vec<String> = answers
        .iter()
        .flat_map(|a| a.as_ref().unwrap()["entry_ids"].as_array().unwrap().clone())
        .map(|v| v.to_string())
        .collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 6, "each entry stored once, with an id of its own: {answers:?}");
    assert_eq!(stats().await.grouped_writes, 3, "stored in one commit");

    // A bad entry refuses its group's commit: each request is then stored alone.
    let mut bad = two(3);
    bad[1].content = " ".into();
    let answers = behind_indexing("bench/study", vec![two(4), bad]).await;
    assert!(answers[0].is_ok(), "{answers:?}");
    match &answers[1] {
        Err(RagError::Invalid(m)) => assert!(m.contains("notes/3/b: content: empty"), "{m}"),
        r => panic!("the bad entry's request: {r:?}"),
    }
    assert_eq!(stats().await.grouped_writes, 3);
    assert_eq!(ask_search(&index, "notes/").await, 8, "the bad request stored nothing");
    index.stop(None);
    embedding.stop(None);
}

/// How many entries are under `prefix` (a keyword search for what every test entry says).
async fn ask_search(index: &ActorRef<IndexMsg>, prefix: &str) -> usize {
    let mut s = SearchRequest::new("first second", 50);
    s.path_prefix = Some(prefix.into());
    s.mode = mindfleet_core::knowledge::SearchMode::Keyword;
    let v = ractor::call!(index, IndexMsg::Request, Box::new(RagRequest::Search(s))).unwrap().unwrap();
    v["hits"].as_array().unwrap().len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_index_behind_a_non_loopback_admin_api_indexes_only_under_its_allowed_roots() {
    let allowed = tempfile::tempdir().unwrap();
    let other = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    std::fs::write(allowed.path().join("a.md"), "# Notes\n\nThe blue servers take the traffic.\n").unwrap();
    std::fs::write(other.path().join("secret.md"), "# Keys\n\nnot for the index\n").unwrap();
    let config = IndexConfig { allowed_roots: vec![allowed.path().to_path_buf()], ..IndexConfig::default() };
    let (index, _) = index_actor(&data.path().join("index"), config, true).await;
    let ask = |path: &Path| {
        let req = RagRequest::Index(IndexRequest {
            paths: vec![path.display().to_string()],
            types: None,
            recursive: true,
            expect: None,
        });
        let index = index.clone();
        async move { ractor::call!(index, IndexMsg::Request, Box::new(req)).unwrap() }
    };
    assert_eq!(ask(allowed.path()).await.unwrap()["files"], 1);
    match ask(other.path()).await {
        Err(RagError::Forbidden(m)) => assert!(m.contains("outside the allowed roots"), "{m}"),
        r => panic!("{r:?}"),
    }
    // `..` does not lead out of a root.
    match ask(&allowed.path().join("..").join(other.path().file_name().unwrap())).await {
        Err(RagError::Forbidden(_)) => {}
        r => panic!("{r:?}"),
    }
    index.stop(None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_persona_searches_the_index_and_its_reply_and_memory_cite_what_it_found() {
    use mindfleet_core::record::{Action, EntryKind, StepState};

    const CODER: &str =
        "[[persona]]\nname = \"coder\"\nrole = \"code reviewer\"\ndomains = [\"code\"]\nrooms = [\"dev\"]\n";
    pulled();
    let dir = tempfile::tempdir().unwrap();
    let src = two_files();
    let fleet = crate::util::start(dir.path(), &crate::util::fleet_toml(CODER)).await;
    let api = mindfleet::client::Client::new(&fleet.addr.to_string(), None);
    api.rag("index", &serde_json::json!({ "paths": [src.path()] })).await.unwrap();

    let mut e = crate::util::chat("dev", "alice", "@coder how long does the retry wait between failed attempts?");
    e.domain = "code".into();
    let ack = fleet.inject(e).await.unwrap();
    let reply = crate::util::reply_to(&fleet, &ack.event_id).await;
    assert!(reply.text.contains("[retry.rs:1-7]"), "{}", reply.text);
    assert!(!reply.text.contains("tax.py"), "only what is relevant: {}", reply.text);

    let storage = fleet.storage.clone();
    let plan = tokio::task::spawn_blocking(move || storage.recent_plans("coder", 1)).await.unwrap().unwrap().remove(0);
    let search = plan.plan.steps.iter().find(|s| s.action == Action::SearchKnowledge).unwrap();
    assert_eq!(search.state, StepState::Done, "{plan:?}");
    let d = fleet.dump(None).await.unwrap();
    let observed = crate::util::persona(&d, "coder")
        .working_memory
        .recent
        .iter()
        .any(|m| m.kind == EntryKind::Observation && m.text.starts_with("[retry.rs:1-7] function with_backoff"));
    assert!(observed, "{:?}", crate::util::persona(&d, "coder").working_memory.recent);
    fleet.shutdown(std::time::Duration::from_secs(5)).await;
}

#[test]
fn rag_search_batch_answers_each_query_on_its_own_line_and_names_a_bad_line() {
    let src = two_files();
    let data = tempfile::tempdir().unwrap();
    let d = data.path().to_str().unwrap();
    rag(&["index", src.path().to_str().unwrap(), "--data", d]);
    let queries = data.path().join("queries.jsonl");
    std::fs::write(
        &queries,
        "{\"id\": \"q1\", \"query\": \"retry with a growing delay\"}\nnot json\n\n{\"id\": 7, \"query\": \"sales tax on a price\"}\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mindfleet"))
        .args(["rag", "search", "--batch", queries.to_str().unwrap(), "--limit", "1", "--data", d])
        .output()
        .unwrap();
    assert!(!out.status.success(), "one line failed");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("queries.jsonl:2:") && stderr.contains("1 queries of the batch failed"), "{stderr}");
    let lines: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!((&lines[0]["id"], &lines[0]["results"][0]["path"]), (&Value::from("q1"), &Value::from("retry.rs")));
    assert_eq!(lines[1]["line"], 2);
    assert!(lines[1]["error"].as_str().unwrap().contains("queries.jsonl:2:"), "{}", lines[1]);
    assert_eq!((&lines[2]["id"], &lines[2]["results"][0]["path"]), (&Value::from(7), &Value::from("tax.py")));
}

#[test]
fn rag_failures_exit_with_the_readme_s_codes_and_one_shot_commands_are_quiet_unless_asked() {
    crate::util::pulled();
    let (tmp, store) = (two_files(), tempfile::tempdir().unwrap());
    let data = store.path().join("data");
    let d = data.to_str().unwrap();
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_mindfleet"))
            .args(args)
            .env_remove("RUST_LOG")
            .env_remove("MINDFLEET_LOG")
            .output()
            .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let dir = tmp.path().to_str().unwrap();
    let file = tmp.path().join("retry.rs");
    // Success: nothing on stderr but what went wrong; `-v` logs what the command does.
    let (code, err) = run(&["rag", "index", dir, "--data", d, "--json"]);
    assert_eq!((code, err.as_str()), (Some(0), ""), "quiet by default");
    let (code, err) = run(&["rag", "search", "backoff", "--data", d, "-v"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("INFO") && err.contains("embedding model loaded"), "-v: {err}");
    let (code, err) = run(&["embed", "hello", "--json"]);
    assert_eq!((code, err.as_str()), (Some(0), ""), "embed is quiet too");
    let out = Command::new(env!("CARGO_BIN_EXE_mindfleet"))
        .args(["embed", "hello", "--json"])
        .env("RUST_LOG", "info")
        .env_remove("MINDFLEET_LOG")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("embedding model loaded"), "RUST_LOG is read too");
    // Bad input: 2, named.
    for (args, says) in [
        (vec!["rag", "index-file", dir, "--data", d], "not a file"),
        (vec!["rag", "index", file.to_str().unwrap(), "--types", "cobol", "--data", d], "cobol"),
        (vec!["rag", "search", "x", "--limit", "0", "--data", d], "limit: 0 is not within"),
        (vec!["rag", "fetch", "c9-9", "--data", d], "c9-9"),
    ] {
        let (code, err) = run(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    // A data dir another process holds: 4, and what to do instead.
    let _held = mindfleet_store::lock_data_dir(&data).unwrap();
    let (code, err) = run(&["rag", "search", "backoff", "--data", d]);
    assert_eq!(code, Some(4), "{err}");
    assert!(err.contains("in use") && err.contains("--admin"), "{err}");
}
