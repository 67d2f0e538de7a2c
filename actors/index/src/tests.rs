//! The index's logic with a stand-in embedding model (words hashed into a vector); the real
//! model is used by the integration tests.

use std::cell::Cell;

use super::*;

/// Words hashed into 64 dimensions, normalised: texts that share words are similar. Counts how
/// many texts it embedded.
struct Hashed {
    name: &'static str,
    embedded: Cell<usize>,
}

impl Hashed {
    fn new(name: &'static str) -> Hashed {
        Hashed { name, embedded: Cell::new(0) }
    }
}

impl Embed for Hashed {
    fn model(&self) -> String {
        self.name.into()
    }

    fn window(&self) -> usize {
        200
    }

    fn count_tokens(&self, text: &str) -> usize {
        text.split_whitespace().count() + 2
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, String> {
        self.embedded.set(self.embedded.get() + texts.len());
        Ok(texts
            .iter()
            .map(|t| {
                let mut v = vec![0.0f32; 64];
                for w in t.split(|c: char| !c.is_alphanumeric()).filter(|w| w.len() > 2) {
                    let h = w.to_lowercase().bytes().fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(b as u32));
                    v[h as usize % 64] += 1.0;
                }
                let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(1e-6);
                v.iter().map(|x| x / n).collect()
            })
            .collect())
    }
}

fn write(dir: &Path, rel: &str, text: &[u8]) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

fn project() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(d, "src/config.rs", b"/// Reads the settings file.\npub fn parse_config(path: &str) -> Config {\n    load(path)\n}\n\npub struct Config {\n    pub port: u16,\n}\n");
    write(d, "src/server.rs", b"pub fn start_server(port: u16) {\n    listen(port);\n}\n");
    write(d, "docs/guide.md", b"# Guide\n\n## Deploying\n\nCopy the binary to the host and start the server.\n");
    write(d, "assets/logo.png", b"\x89PNG\r\n\x1a\n\x00\x00binary");
    write(d, "notes.txt", b"caf\xe9 latin-1\n");
    write(d, "target/debug/out.rs", b"fn generated() {}\n");
    write(d, ".gitignore", b"target/\n");
    dir
}

fn paths(r: &SearchResults) -> Vec<&str> {
    r.hits.iter().map(|h| h.path.as_str()).collect()
}

#[test]
fn an_indexed_tree_is_searchable_by_words_and_identifiers_and_reports_what_it_skipped() {
    let src = project();
    let data = tempfile::tempdir().unwrap();
    let mut index = Index::open(data.path()).unwrap();
    let model = Hashed::new("hashed");
    let r = index.update(src.path(), &model, &UpdateOptions::default()).unwrap();
    assert_eq!((r.files_indexed, r.skipped_binary, r.errors.len()), (3, 1, 1), "{r:?}");
    assert!(r.errors[0].starts_with("notes.txt: not UTF-8"), "{:?}", r.errors);
    let opts = SearchOptions::default();
    let found = index.search("parse config", Some(&model), &opts).unwrap();
    assert_eq!(found.mode, Mode::Hybrid);
    let top = &found.hits[0];
    assert_eq!(
        (top.path.as_str(), top.kind.as_str(), top.symbol.as_deref()),
        ("src/config.rs", "mixed", Some("parse_config, Config"))
    );
    // The function and the struct after it, merged (both fit the window together).
    assert_eq!((top.start_line, top.end_line), (1, 8));
    assert!(top.text.contains("Reads the settings file"));
    assert!(top.score > 0.0 && top.score <= 1.0, "{}", top.score);
    // Identifier parts match words (`start_server` for "start" and "server"); the ignored
    // build output is not there.
    let k = SearchOptions { mode: Mode::Keyword, ..SearchOptions::default() };
    assert!(paths(&index.search("start server", None, &k).unwrap()).contains(&"src/server.rs"));
    assert_eq!(paths(&index.search("listen on a port", Some(&model), &opts).unwrap())[0], "src/server.rs");
    assert!(index.search("generated", None, &opts).unwrap().hits.is_empty());
    // Filters.
    let md = SearchOptions { lang: Some("markdown".into()), ..SearchOptions::default() };
    let found = index.search("server", Some(&model), &md).unwrap();
    assert!(found.hits.iter().all(|h| h.lang == "markdown") && !found.hits.is_empty());
    assert_eq!(found.hits[0].symbol.as_deref(), Some("Guide > Deploying"));
    let prefix = SearchOptions { path_prefix: Some("src/".into()), ..SearchOptions::default() };
    assert!(paths(&index.search("server", Some(&model), &prefix).unwrap()).iter().all(|p| p.starts_with("src/")));
    // Without a model, keywords answer and say why.
    let k = index.search("parse config", None, &opts).unwrap();
    assert_eq!((k.mode, k.hits[0].path.as_str()), (Mode::Keyword, "src/config.rs"));
    assert!(k.note.unwrap().contains("no embedding model"));
}

#[test]
fn bad_requests_are_refused_by_name() {
    let data = tempfile::tempdir().unwrap();
    let mut index = Index::open(data.path()).unwrap();
    let model = Hashed::new("hashed");
    let e = |r: Result<SearchResults, IndexError>| r.unwrap_err().to_string();
    assert_eq!(e(index.search("  ", None, &SearchOptions::default())), "query: empty");
    let zero = SearchOptions { limit: 0, ..SearchOptions::default() };
    assert!(e(index.search("x", None, &zero)).starts_with("limit: 0"));
    let huge = SearchOptions { limit: MAX_LIMIT + 1, ..SearchOptions::default() };
    assert!(e(index.search("x", None, &huge)).starts_with("limit: 1001"));
    let lang = SearchOptions { lang: Some("cobol".into()), ..SearchOptions::default() };
    assert!(e(index.search("x", None, &lang)).contains("lang: unknown \"cobol\""));
    let missing = data.path().join("nope");
    let err = index.update(&missing, &model, &UpdateOptions::default()).unwrap_err().to_string();
    assert!(err.starts_with(&missing.display().to_string()), "{err}");
    let types = UpdateOptions { types: Some(vec!["klingon".into()]), ..UpdateOptions::default() };
    assert!(index.update(data.path(), &model, &types).unwrap_err().to_string().contains("types: unknown \"klingon\""));
}

#[test]
fn re_indexing_touches_only_what_changed_and_deleted_files_vanish_at_once() {
    let src = project();
    let data = tempfile::tempdir().unwrap();
    let mut index = Index::open(data.path()).unwrap();
    let model = Hashed::new("hashed");
    index.update(src.path(), &model, &UpdateOptions::default()).unwrap();
    let embedded = model.embedded.get();
    let again = index.update(src.path(), &model, &UpdateOptions::default()).unwrap();
    assert_eq!((again.files_indexed, again.files_unchanged, again.texts_embedded), (0, 3, 0), "{again:?}");
    assert_eq!(model.embedded.get(), embedded);

    write(
        src.path(),
        "src/server.rs",
        b"pub fn start_server(port: u16) {\n    listen(port);\n}\n\npub fn stop_server() {}\n",
    );
    std::fs::remove_file(src.path().join("docs/guide.md")).unwrap();
    let r = index.update(src.path(), &model, &UpdateOptions::default()).unwrap();
    assert_eq!((r.files_indexed, r.files_unchanged, r.files_removed), (1, 1, 1), "{r:?}");
    // The changed file's one chunk (its two functions merged) is embedded, nothing else.
    assert_eq!(r.texts_embedded, 1, "{r:?}");
    let opts = SearchOptions::default();
    assert!(
        paths(&index.search("deploying binary host", Some(&model), &opts).unwrap())
            .iter()
            .all(|p| *p != "docs/guide.md")
    );
    let stop = index.search("stop server", Some(&model), &opts).unwrap();
    assert_eq!(stop.hits[0].symbol.as_deref(), Some("start_server, stop_server"));
}

#[test]
fn a_file_has_the_same_path_from_the_repository_s_root_whichever_part_of_the_tree_is_indexed() {
    let src = project();
    std::fs::create_dir(src.path().join(".git")).unwrap();
    let data = tempfile::tempdir().unwrap();
    let mut index = Index::open(data.path()).unwrap();
    let model = Hashed::new("hashed");
    let part = index.update(&src.path().join("src"), &model, &UpdateOptions::default()).unwrap();
    assert_eq!(part.root, src.path().canonicalize().unwrap().to_string_lossy(), "named from the repository's root");
    let prefix = SearchOptions { path_prefix: Some("src/".into()), ..SearchOptions::default() };
    assert_eq!(paths(&index.search("start server", Some(&model), &prefix).unwrap())[0], "src/server.rs");
    // The whole tree: the files of src/ are the same files, unchanged.
    let all = index.update(src.path(), &model, &UpdateOptions::default()).unwrap();
    assert_eq!((all.files_indexed, all.files_unchanged, all.files_removed), (1, 2, 0), "{all:?}");
    // Not recursive: only the top directory's files are its own; src/ keeps its files.
    let top = UpdateOptions { recursive: false, ..UpdateOptions::default() };
    let r = index.update(src.path(), &model, &top).unwrap();
    assert_eq!(r.files_removed, 0, "{r:?}");
    // A file deleted under src/ goes when src/ is indexed again, and only it.
    std::fs::remove_file(src.path().join("src/config.rs")).unwrap();
    let r = index.update(&src.path().join("src"), &model, &UpdateOptions::default()).unwrap();
    assert_eq!((r.files_removed, r.files_unchanged), (1, 1), "{r:?}");
    let left = index.search("deploying binary host", Some(&model), &SearchOptions::default()).unwrap();
    assert_eq!(paths(&left)[0], "docs/guide.md");
}

#[test]
fn windows_of_lines_replace_the_structure_and_a_change_of_chunking_starts_again() {
    let src = project();
    let data = tempfile::tempdir().unwrap();
    let mut index = Index::open(data.path()).unwrap();
    let model = Hashed::new("hashed");
    let ours = index.update(src.path(), &model, &UpdateOptions::default()).unwrap();
    let windows = UpdateOptions { windows: Some(2), ..UpdateOptions::default() };
    let r = index.update(src.path(), &model, &windows).unwrap();
    // Every file is cut again (none kept as unchanged), into windows of two lines.
    assert_eq!((r.files_indexed, r.files_unchanged), (ours.files_indexed, 0), "{r:?}");
    assert!(index.repairs().iter().any(|m| m.contains("windows of 2 lines")), "{:?}", index.repairs());
    let hits = index.search("parse config", Some(&model), &SearchOptions::default()).unwrap().hits;
    assert!(hits.iter().all(|h| h.kind == "lines" && h.end_line - h.start_line < 2), "{hits:?}");
    assert_eq!(hits[0].path, "src/config.rs");
    let again = index.update(src.path(), &model, &windows).unwrap();
    assert_eq!(again.files_unchanged, ours.files_indexed, "{again:?}");
    let zero = UpdateOptions { windows: Some(0), ..UpdateOptions::default() };
    assert!(index.update(src.path(), &model, &zero).unwrap_err().to_string().contains("windows: 0"));
}

#[test]
fn entries_stored_before_the_first_indexing_are_kept_by_it() {
    let src = project();
    let data = tempfile::tempdir().unwrap();
    let mut index = Index::open(data.path()).unwrap();
    let model = Hashed::new("hashed");
    // No chunking is recorded yet: the entries were not cut, so indexing keeps them.
    let id = index.create("notes/0/a", "first words", None, Some(&model)).unwrap();
    index.update(src.path(), &model, &UpdateOptions::default()).unwrap();
    assert!(index.repairs().is_empty(), "{:?}", index.repairs());
    let opts = SearchOptions { path_prefix: Some("notes/".into()), mode: Mode::Keyword, ..SearchOptions::default() };
    let hits = index.search("first", Some(&model), &opts).unwrap().hits;
    assert_eq!(hits.iter().map(|h| h.chunk_id).collect::<Vec<_>>(), [id]);
}

#[test]
fn identical_chunks_are_stored_and_embedded_once() {
    let src = tempfile::tempdir().unwrap();
    let same = b"pub fn shared_helper() -> u32 {\n    42\n}\n";
    write(src.path(), "a.rs", same);
    write(src.path(), "b.rs", same);
    let data = tempfile::tempdir().unwrap();
    let mut index = Index::open(data.path()).unwrap();
    let model = Hashed::new("hashed");
    let r = index.update(src.path(), &model, &UpdateOptions::default()).unwrap();
    assert_eq!((r.chunks_added, r.texts_embedded), (2, 1));
    assert_eq!(index.counts().unwrap(), (2, 2, 1));
    let hits = index.search("shared helper", Some(&model), &SearchOptions::default()).unwrap().hits;
    assert_eq!(paths(&SearchResults { hits, mode: Mode::Hybrid, note: None }), ["a.rs", "b.rs"]);
}

#[test]
fn a_lost_keyword_index_is_rebuilt_from_redb_and_said_so() {
    let src = project();
    let data = tempfile::tempdir().unwrap();
    let model = Hashed::new("hashed");
    {
        let mut index = Index::open(data.path()).unwrap();
        index.update(src.path(), &model, &UpdateOptions::default()).unwrap();
        assert!(index.repairs().is_empty());
    }
    std::fs::remove_dir_all(data.path().join("keyword")).unwrap();
    let index = Index::open(data.path()).unwrap();
    assert!(index.repairs()[0].contains("rebuilt from index.redb"), "{:?}", index.repairs());
    let k = index.search("parse config", None, &SearchOptions::default()).unwrap();
    assert_eq!(k.hits[0].path, "src/config.rs");
    // Garbage in place of the keyword index: the same.
    drop(index);
    for entry in std::fs::read_dir(data.path().join("keyword")).unwrap() {
        std::fs::write(entry.unwrap().path(), b"garbage").unwrap();
    }
    let index = Index::open(data.path()).unwrap();
    assert!(!index.repairs().is_empty());
    assert_eq!(index.search("parse config", None, &SearchOptions::default()).unwrap().hits[0].path, "src/config.rs");
}

#[test]
fn vectors_of_another_model_are_never_compared_with_its_queries() {
    let src = project();
    let data = tempfile::tempdir().unwrap();
    let mut index = Index::open(data.path()).unwrap();
    index.update(src.path(), &Hashed::new("one"), &UpdateOptions::default()).unwrap();
    let other = Hashed::new("two");
    let r = index.search("parse config", Some(&other), &SearchOptions::default()).unwrap();
    assert_eq!(r.mode, Mode::Keyword);
    assert!(r.note.unwrap().contains("come from one"));
    // Indexing with the other model re-embeds everything.
    let r = index.update(src.path(), &other, &UpdateOptions::default()).unwrap();
    assert_eq!(r.files_indexed, 3, "{r:?}");
    assert_eq!(index.search("parse config", Some(&other), &SearchOptions::default()).unwrap().mode, Mode::Hybrid);
}

#[test]
fn entries_of_their_own_are_stored_found_replaced_and_checked() {
    let data = tempfile::tempdir().unwrap();
    let mut index = Index::open(data.path()).unwrap();
    let model = Hashed::new("hashed");
    let id = index.create("notes/deploy.md", "Deploy with the blue green switch", None, Some(&model)).unwrap();
    let found = index.search("blue green deploy", Some(&model), &SearchOptions::default()).unwrap();
    let hit = &found.hits[0];
    assert_eq!(
        (hit.chunk_id, hit.path.as_str(), hit.kind.as_str(), hit.lang.as_str()),
        (id, "notes/deploy.md", "entry", "markdown")
    );
    // The same path again replaces it.
    let again = index.create("notes/deploy.md", "Deploy by rolling restart", None, Some(&model)).unwrap();
    let found = index.search("deploy", Some(&model), &SearchOptions::default()).unwrap();
    assert_eq!(found.hits.iter().map(|h| h.chunk_id).collect::<Vec<_>>(), [again]);
    // A vector given is used as it is (made unit); one of another length is refused.
    let mut v = model.embed(&["kubernetes pods"]).unwrap().remove(0);
    v.iter_mut().for_each(|x| *x *= 3.0);
    let k8s = index.create("k8s", "unrelated words", Some(v), None).unwrap();
    let found = index
        .search("kubernetes pods", Some(&model), &SearchOptions { mode: Mode::Vector, ..SearchOptions::default() })
        .unwrap();
    assert_eq!(found.hits[0].chunk_id, k8s);
    assert!(found.hits[0].similarity.unwrap() > 0.99);
    let e = |r: Result<u64, IndexError>| r.unwrap_err().to_string();
    assert_eq!(
        e(index.create("x", "text", Some(vec![1.0; 3]), None)),
        "x: embedding: 3 values where the index's vectors have 64"
    );
    assert_eq!(e(index.create("x", " ", None, Some(&model))), "x: content: empty");
    assert_eq!(e(index.create("", "text", None, Some(&model))), "file_path: empty");
    assert!(
        e(index.create("x", &"word ".repeat(300), None, Some(&model)))
            .starts_with("x: content: 302 tokens, more than the model's window of 200")
    );
}
