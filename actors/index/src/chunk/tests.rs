//! The chunker on hand-made files, with words as tokens (the real tokenizer's bound is tested
//! with the model in the integration tests).

use super::*;

fn words(text: &str) -> usize {
    text.split_whitespace().count()
}

/// Without merging, to see the structure; merging has tests of its own.
fn chunks(lang: Lang, max: usize, text: &str) -> Vec<Chunk> {
    Chunker::new(max, &words).unmerged().chunk(lang, text)
}

fn summary(cs: &[Chunk]) -> Vec<(&'static str, Option<&str>, usize, usize)> {
    cs.iter().map(|c| (c.kind, c.symbol.as_deref(), c.start_line, c.end_line)).collect()
}

const RUST: &str = r#"use std::fmt;

/// A point.
#[derive(Debug)]
pub struct Point {
    x: i32,
}

impl Point {
    /// Makes one.
    pub fn new(x: i32) -> Point {
        Point { x }
    }

    pub fn x(&self) -> i32 {
        self.x
    }
}

fn main() {
    println!("{:?}", Point::new(1));
}
"#;

#[test]
fn rust_definitions_are_chunks_with_their_doc_comments_and_attributes() {
    let cs = chunks(Lang::Rust, 1000, RUST);
    assert_eq!(
        summary(&cs),
        [
            ("code", None, 1, 1),
            ("struct", Some("Point"), 3, 7),
            ("impl", Some("Point"), 9, 18),
            ("function", Some("main"), 20, 22),
        ]
    );
    assert!(cs[1].text.starts_with("/// A point.\n#[derive(Debug)]\npub struct Point {"), "{}", cs[1].text);
}

#[test]
fn a_container_too_long_gives_a_chunk_per_member_under_its_header() {
    let cs = chunks(Lang::Rust, 20, RUST);
    let methods: Vec<_> = cs.iter().filter(|c| c.kind == "function" && c.symbol.as_deref() != Some("main")).collect();
    assert_eq!(summary(&cs[2..4]), [("function", Some("Point::new"), 10, 13), ("function", Some("Point::x"), 15, 17)]);
    for m in methods {
        assert!(m.text.starts_with("impl Point {\n"), "{}", m.text);
        assert!(words(&m.text) <= 20);
    }
}

#[test]
fn no_chunk_exceeds_the_window_and_together_they_cover_every_line() {
    let body: String = (0..60).map(|i| format!("    let v{i} = compute({i}) + other({i});\n")).collect();
    let text = format!("fn long_one(a: u32) -> u32 {{\n{body}    a\n}}\n");
    let cs = chunks(Lang::Rust, 40, &text);
    assert!(cs.len() > 3, "{}", cs.len());
    let mut next = 1;
    for c in &cs {
        assert!(words(&c.text) <= 40, "{} words:\n{}", words(&c.text), c.text);
        assert_eq!(c.symbol.as_deref(), Some("long_one"));
        assert_eq!(c.start_line, next, "{:?}", summary(&cs));
        next = c.end_line + 1;
        if c.start_line > 1 {
            assert!(
                c.text.starts_with("fn long_one(a: u32) -> u32 {\n"),
                "the signature above each piece:\n{}",
                c.text
            );
        }
    }
    assert_eq!(next, text.lines().count() + 1);
    // A line longer than the window is cut, never kept whole.
    let line = "word ".repeat(100);
    let cs = chunks(Lang::Text, 30, &line);
    assert!(cs.iter().all(|c| words(&c.text) <= 30));
}

#[test]
fn typescript_python_and_go_definitions_are_found() {
    let ts = "import x from 'y';\n\nexport class Shop {\n  buy(item: string): void {\n    console.log(item);\n  }\n}\n\nexport const total = (xs: number[]) => xs.reduce((a, b) => a + b, 0);\n\ninterface Item { name: string }\n";
    assert_eq!(
        summary(&chunks(Lang::TypeScript, 1000, ts)),
        [
            ("code", None, 1, 1),
            ("class", Some("Shop"), 3, 7),
            ("function", Some("total"), 9, 9),
            ("interface", Some("Item"), 11, 11)
        ]
    );
    let py = "import os\n\n@cached\ndef load(path):\n    return open(path).read()\n\nclass Repo:\n    def __init__(self):\n        self.items = []\n\n    def add(self, x):\n        self.items.append(x)\n";
    assert_eq!(
        summary(&chunks(Lang::Python, 1000, py)),
        [("code", None, 1, 1), ("function", Some("load"), 3, 5), ("class", Some("Repo"), 7, 12)]
    );
    let cs = chunks(Lang::Python, 10, py);
    let add = cs.iter().find(|c| c.symbol.as_deref() == Some("Repo::add")).expect("a chunk per method");
    assert_eq!((add.kind, add.start_line, add.end_line), ("method", 11, 12));
    assert!(add.text.starts_with("class Repo:\n"), "{}", add.text);
    let go = "package main\n\ntype Server struct {\n\tport int\n}\n\nfunc (s *Server) Run() error {\n\treturn nil\n}\n\nfunc main() {}\n";
    assert_eq!(
        summary(&chunks(Lang::Go, 1000, go)),
        [
            ("code", None, 1, 1),
            ("type", Some("Server"), 3, 5),
            ("method", Some("Run"), 7, 9),
            ("function", Some("main"), 11, 11)
        ]
    );
}

#[test]
fn neighbours_are_merged_under_their_context_while_they_fit() {
    let py = "import os\n\ndef a():\n    return 1\n\ndef b():\n    return 2\n\nclass Repo:\n    \"\"\"Items.\"\"\"\n\n    def one(self):\n        return [1, 2, 3, 4, 5, 6]\n\n    def two(self):\n        return [1, 2, 3, 4, 5, 6]\n\n    def three(self):\n        return [1, 2, 3, 4, 5, 6]\n";
    let merged = Chunker::new(24, &words).chunk(Lang::Python, py);
    assert_eq!(
        summary(&merged),
        [
            ("mixed", Some("a, b"), 1, 7),
            ("mixed", Some("Repo::one, Repo::two"), 10, 16),
            ("method", Some("Repo::three"), 18, 19),
        ]
    );
    // The context once, then the lines from the first part's to the last's (blank ones too).
    let lines = |from: usize, to: usize| py.lines().skip(from - 1).take(to + 1 - from).map(|l| format!("{l}\n"));
    assert_eq!(merged[1].text, format!("class Repo:\n{}", lines(10, 16).collect::<String>()));
    assert!(merged.iter().all(|c| words(&c.text) <= 24));
    // Unmerged, the same file has a chunk per definition.
    assert_eq!(chunks(Lang::Python, 24, py).len(), 7);
    // The pieces of a definition cut to fit are full: merging leaves them as they are.
    let body: String = (0..60).map(|i| format!("    let v{i} = compute({i}) + other({i});\n")).collect();
    let long = format!("fn long_one(a: u32) -> u32 {{\n{body}    a\n}}\n");
    assert_eq!(summary(&Chunker::new(40, &words).chunk(Lang::Rust, &long)), summary(&chunks(Lang::Rust, 40, &long)));
}

#[test]
fn markdown_is_cut_by_headings_outside_code_fences() {
    let md = "Intro line.\n\n# Guide\n\nText.\n\n## Install\n\n```sh\n# not a heading\ncargo build\n```\n\n## Use\n\nRun it.\n";
    assert_eq!(
        summary(&chunks(Lang::Markdown, 1000, md)),
        [
            ("section", None, 1, 2),
            ("section", Some("Guide"), 3, 6),
            ("section", Some("Guide > Install"), 7, 13),
            ("section", Some("Guide > Use"), 14, 16),
        ]
    );
}

#[test]
fn plain_text_goes_in_overlapping_windows_of_lines() {
    let text: String = (1..=100).map(|i| format!("line {i}\n")).collect();
    let cs = chunks(Lang::Text, 1000, &text);
    assert_eq!(summary(&cs), [("lines", None, 1, 40), ("lines", None, 31, 70), ("lines", None, 61, 100)]);
}

#[test]
fn line_windows_are_fixed_whatever_the_language_and_length() {
    let text: String = (1..=95).map(|i| if i == 50 { "\n".to_string() } else { format!("fn f{i}() {{}}\n") }).collect();
    let cs = line_windows(&text, 40);
    assert_eq!(summary(&cs), [("lines", None, 1, 40), ("lines", None, 41, 80), ("lines", None, 81, 95)]);
    assert_eq!(cs[2].text, (81..=95).map(|i| format!("fn f{i}() {{}}\n")).collect::<String>());
    // Blank windows are left out; a window is not cut to any token budget.
    assert_eq!(summary(&line_windows("a\n\n\n\nb\n", 2)), [("lines", None, 1, 2), ("lines", None, 5, 5)]);
    let long = "word ".repeat(10_000);
    assert_eq!(line_windows(&long, 40).len(), 1);
}

#[test]
fn files_are_typed_by_extension() {
    assert_eq!(Lang::of(Path::new("a/b.rs")), Lang::Rust);
    assert_eq!(Lang::of(Path::new("x.TSX")).name(), "typescript");
    assert_eq!(Lang::of(Path::new("README")), Lang::Text);
}
