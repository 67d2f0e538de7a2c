//! The codebase index with the real embedding model: chunks within its window, and the `rag`
//! commands from indexing to search, through the binary.

use std::path::Path;
use std::process::Command;

use mindfleet_actors::embed::IndexModel;
use mindfleet_index::Embed;
use mindfleet_index::chunk::{Chunker, Lang};
use mindfleet_runtime::models::MINILM;
use serde_json::Value;

use crate::util::pulled;

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
    for file in ["actors/src/llm.rs", "index/src/chunk.rs", "docs/ARCHITECTURE.md", "README.md"] {
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
