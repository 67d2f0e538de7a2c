//! Fleet files that are wrong in one place name that place; no input panics the parser. Unit
//! tests of the key naming and the size cap, and property tests over arbitrary text and over
//! near-valid fleets (valid structure, random values of random types for random known keys,
//! unknown keys, repeated tables).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use proptest::prelude::*;

use super::*;

fn parse(text: &str) -> Result<FleetConfig, ConfigError> {
    FleetConfig::from_toml(Path::new("fleet.toml"), text)
}

const ONE: &str = "[[persona]]\nname = \"a\"\nrole = \"helper\"\n";
const TWO: &str = "[[persona]]\nname = \"a\"\nrole = \"helper\"\n[[persona]]\nname = \"b\"\nrole = \"r\"\n";

#[test]
fn a_float_where_an_integer_belongs_names_the_key_of_the_second_persona() {
    let err = parse(&format!("{TWO}inbox_capacity = 0.0\n")).unwrap_err();
    assert_eq!(err.line, Some((7, 18)), "{err}");
    assert_eq!(err.message, "`persona[1].inbox_capacity`: invalid type: floating point `0.0`, expected i64");
}

#[test]
fn type_errors_name_the_key_at_every_depth() {
    let cases = [
        // A key of a top-level section.
        (format!("[storage]\nmax_pending = 0.0\n{ONE}"), (2, 15), "`storage.max_pending`: invalid type"),
        (format!("[admin]\nfaults = \"yes\"\n{ONE}"), (2, 10), "`admin.faults`: invalid type"),
        // A key of the first persona, and an item of a list in it.
        (format!("{ONE}dormant = 1\n"), (4, 11), "`persona[0].dormant`: invalid type"),
        (format!("{TWO}rooms = [\"general\", 7]\n"), (7, 21), "`persona[1].rooms[1]`: invalid type"),
        // A nested table: a reference's `contents`, inline and as a dotted key.
        (
            format!("[[reference]]\nid = \"x\"\nname = \"n\"\npath = \".\"\ncontents = {{ templates = 3 }}\n{ONE}"),
            (5, 26),
            "`reference[0].contents.templates`: invalid type",
        ),
        (
            format!("[[reference]]\nid = \"x\"\nname = \"n\"\npath = \".\"\ncontents.scripts = [1]\n{ONE}"),
            (5, 21),
            "`reference[0].contents.scripts[0]`: invalid type",
        ),
        // Dotted keys at the top level, and a key that needs quotes.
        (format!("storage.cache_mb = \"big\"\n{ONE}"), (1, 20), "`storage.cache_mb`: invalid type"),
        (format!("{ONE}\"my key\" = 1\n"), (4, 1), "`persona[0].\"my key\"`: unknown field `my key`"),
    ];
    for (text, at, want) in cases {
        let err = parse(&text).unwrap_err();
        assert_eq!(err.line, Some(at), "{text}\n{err}");
        assert!(err.message.starts_with(want), "{text}\n{err}");
    }
}

#[test]
fn unknown_and_missing_keys_name_their_table() {
    let err = parse(&format!("[scheduler]\nslots = 3\n{ONE}")).unwrap_err();
    assert!(err.message.starts_with("`scheduler.slots`: unknown field `slots`"), "{err}");
    let err = parse(&format!("{ONE}[[persona]]\nname = \"b\"\n")).unwrap_err();
    assert!(err.message.starts_with("`persona[1]`: missing field `role`"), "{err}");
}

#[test]
fn a_repeated_key_or_table_is_named_with_its_path() {
    let cases = [
        (format!("[storage]\nmax_pending = 1\nmax_pending = 2\n{ONE}"), (3, 1), "`storage.max_pending`: duplicate key"),
        (format!("{TWO}rooms = [\"x\"]\nrooms = [\"y\"]\n"), (8, 1), "`persona[1].rooms`: duplicate key"),
        (format!("[storage]\ncache_mb = 1\n[storage]\n{ONE}"), (3, 2), "`storage`: duplicate key"),
        (
            format!("[embedding]\nmax_batch = 1\n[storage]\nmax_batch = 1\n\"max_batch\" = 2\n{ONE}"),
            (5, 1),
            "`storage.max_batch`: duplicate key",
        ),
    ];
    for (text, at, want) in cases {
        let err = parse(&text).unwrap_err();
        assert_eq!((err.line, err.message.as_str()), (Some(at), want), "{text}");
    }
}

#[test]
fn a_datetime_or_a_table_in_the_wrong_place_is_called_so() {
    let err = parse(&format!("[storage]\nmax_pending = 1979-05-27\n{ONE}")).unwrap_err();
    assert_eq!(err.message, "`storage.max_pending`: invalid type: datetime, expected i64");
    let err = parse("persona = [1]\n").unwrap_err();
    assert_eq!(err.message, "`persona[0]`: invalid type: integer `1`, expected a table");
    let err = parse(&format!("{ONE}brain = {{ kind = \"rules\" }}\n")).unwrap_err();
    assert_eq!(err.message, "`persona[0].brain`: invalid type: map, expected a string");
}

#[test]
fn an_included_reference_file_names_its_keys_too() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("refs.toml"), "[[reference]]\nid = \"r\"\nname = 5\npath = \".\"\n").unwrap();
    let fleet = dir.path().join("fleet.toml");
    let err = FleetConfig::from_toml(&fleet, &format!("[references]\ninclude = [\"refs.toml\"]\n{ONE}")).unwrap_err();
    assert_eq!(err.path, dir.path().join("refs.toml"));
    assert_eq!(err.line, Some((3, 8)), "{err}");
    assert!(err.message.starts_with("`reference[0].name`: invalid type"), "{err}");
}

#[test]
fn check_of_dev_zero_is_refused_at_the_size_limit() {
    let started = std::time::Instant::now();
    let err = FleetConfig::load(Path::new("/dev/zero")).unwrap_err();
    assert_eq!(err.to_string(), "/dev/zero: the fleet file is larger than the limit of 4 MiB (4194304 bytes)");
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", started.elapsed());
}

#[test]
fn files_over_the_size_limit_are_refused_from_their_size_and_includes_too() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.toml");
    let f = std::fs::File::create(&big).unwrap();
    f.set_len(MAX_FLEET_FILE_BYTES + 1).unwrap();
    let err = FleetConfig::load(&big).unwrap_err();
    assert!(err.message.contains("larger than the limit of 4 MiB"), "{err}");
    // At the limit exactly, the file is read (and then parsed: NUL bytes are no TOML).
    f.set_len(MAX_FLEET_FILE_BYTES).unwrap();
    let err = FleetConfig::load(&big).unwrap_err();
    assert!(!err.message.contains("limit"), "{err}");
    f.set_len(MAX_FLEET_FILE_BYTES + 1).unwrap();
    let fleet = dir.path().join("fleet.toml");
    let err = FleetConfig::from_toml(&fleet, &format!("[references]\ninclude = [\"big.toml\"]\n{ONE}")).unwrap_err();
    assert_eq!(err.line, Some((2, 12)), "{err}");
    assert!(err.message.contains("big.toml is larger than the limit of 4 MiB"), "{err}");
}

/// A clear error: a message, a place when the input has one, no full stop.
fn assert_clear(err: &ConfigError) {
    let s = err.to_string();
    assert!(!err.message.trim().is_empty(), "empty message: {s}");
    assert!(!err.message.ends_with('.'), "full stop: {s}");
    assert!(!err.message.contains("Raw"), "our own type names: {s}");
}

/// Keys the fleet file knows: (table, key, a valid value, values of the wrong type). Values of
/// a type the key accepts are in range, so one wrong value is the only error of a file.
const KEYS: &[(&str, &str, &str, &[&str])] = &[
    ("fleet", "name", "\"f\"", &["1", "true", "[1]", "{ a = 1 }"]),
    ("fleet", "brain", "\"rules\"", &["1", "2.5", "false"]),
    ("admin", "max_body_bytes", "4096", &["1.5", "\"4k\"", "true", "[1]"]),
    ("admin", "faults", "false", &["0", "\"no\"", "1979-05-27"]),
    ("storage", "max_pending", "1000", &["0.0", "\"many\"", "{ n = 1 }"]),
    ("storage", "data_dir", "\"./d\"", &["1", "[\"a\"]"]),
    ("storage", "write_behind_ms", "10", &["1e3", "true"]),
    ("supervision", "within_secs", "5.0", &["\"5s\"", "true", "[5]"]),
    ("supervision", "max_restarts", "3", &["3.5", "\"3\""]),
    ("scheduler", "budget_soft_limit", "0.5", &["\"half\"", "false"]),
    ("scheduler", "cheap_slots", "8", &["-inf", "nan", "\"8\""]),
    ("coordination", "window_ms", "300", &["300.0", "\"300\""]),
    ("coordination", "hold_secs", "300", &["1.5", "\"5m\""]),
    ("coordination", "redundancy_threshold", "0.9", &["\"high\"", "true"]),
    ("cluster", "rebalance", "true", &["1", "\"yes\""]),
    ("cluster", "nodes", "[\"n1\"]", &["\"n1\"", "[1]", "[[\"n1\"]]"]),
    ("embedding", "max_wait_ms", "2.0", &["\"2\"", "{}"]),
    ("llm", "max_batch", "8", &["8.5", "\"8\""]),
    ("llm", "prefix_reuse", "true", &["1", "\"yes\""]),
    ("llm", "repetition_penalty", "1.3", &["\"1.3\"", "true"]),
    ("llm", "no_copy_ngram", "5", &["5.5", "\"5\""]),
    ("llm", "stop_repeated_sentence", "true", &["1", "\"yes\""]),
    ("llm", "reply_max_tokens", "64", &["64.0", "[64]"]),
    ("index", "max_cursors", "5", &["5.5", "[]"]),
    ("index", "allowed_roots", "[\"/srv\"]", &["\"/srv\"", "[true]"]),
    ("conversation", "half_life_hours", "2.0", &["\"2h\"", "true"]),
    ("defaults", "wm_ttl_secs", "60.0", &["\"1m\"", "[60]"]),
    ("defaults", "inbox_capacity", "10", &["1e1", "\"ten\""]),
];

/// Keys of a `[[persona]]`, as [`KEYS`].
const PERSONA_KEYS: &[(&str, &str, &[&str])] = &[
    ("domains", "[\"chat\"]", &["\"chat\"", "[1]", "{ chat = true }"]),
    ("rooms", "[\"general\"]", &["[\"general\", 2]", "7"]),
    ("expertise", "[\"rust\"]", &["\"rust\"", "[[]]"]),
    ("dormant", "false", &["0", "\"no\""]),
    ("inbox_capacity", "100", &["0.0", "100.5", "\"100\"", "[100]"]),
    ("wm_capacity", "10", &["\"10\"", "true"]),
    ("consolidate_every_secs", "30.0", &["\"30s\"", "{ s = 30 }"]),
    ("tokens_per_hour", "5000", &["5e3", "true"]),
];

/// TOML values of every type, in and out of the ranges.
fn any_value() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|i| i.to_string()),
        any::<f64>().prop_map(|f| format!("{f:?}").replace("NaN", "nan")),
        Just("nan".to_string()),
        Just("-inf".to_string()),
        any::<bool>().prop_map(|b| b.to_string()),
        "[a-z0-9 _./-]{0,12}".prop_map(|s| format!("{s:?}")),
        Just("1979-05-27T07:32:00Z".to_string()),
        Just("[]".to_string()),
        Just("[1, \"two\"]".to_string()),
        Just("{ a = 1 }".to_string()),
        Just("[{ a = [] }]".to_string()),
    ]
}

#[derive(Debug, Clone)]
enum Line {
    /// `[table]` and one key of it with any value.
    Known(usize, String),
    /// A key of a `[[persona]]` with any value.
    PersonaKey(usize, String),
    /// An unknown key, at the top or in a known table.
    Unknown(Option<usize>, String),
    /// A table header repeated.
    Header(usize),
    /// Another `[[persona]]` with its required keys.
    Persona(u8),
}

fn any_line() -> impl Strategy<Value = Line> {
    prop_oneof![
        4 => (0..KEYS.len(), any_value()).prop_map(|(k, v)| Line::Known(k, v)),
        4 => (0..PERSONA_KEYS.len(), any_value()).prop_map(|(k, v)| Line::PersonaKey(k, v)),
        1 => (proptest::option::of(0..KEYS.len()), "[a-z_]{1,8}").prop_map(|(t, k)| Line::Unknown(t, k)),
        1 => (0..KEYS.len()).prop_map(Line::Header),
        1 => any::<u8>().prop_map(Line::Persona),
    ]
}

fn render(lines: &[Line]) -> String {
    let mut out = String::from(ONE);
    for l in lines {
        match l {
            Line::Known(k, v) => {
                let (table, key, ..) = KEYS[*k];
                let _ = write!(out, "[{table}]\n{key} = {v}\n");
            }
            Line::PersonaKey(k, v) => {
                let _ = writeln!(out, "{} = {v}", PERSONA_KEYS[*k].0);
            }
            Line::Unknown(None, key) => out = format!("{key} = 1\n{out}"),
            Line::Unknown(Some(t), key) => {
                let _ = write!(out, "[{}]\n{key} = 1\n", KEYS[*t].0);
            }
            Line::Header(t) => {
                let _ = writeln!(out, "[{}]", KEYS[*t].0);
            }
            Line::Persona(n) => {
                let _ = write!(out, "[[persona]]\nname = \"p{n}\"\nrole = \"r\"\n");
            }
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_is_an_error_or_a_fleet_never_a_panic(text in "\\PC{0,200}") {
        if let Err(e) = parse(&text) {
            assert_clear(&e);
        }
    }

    #[test]
    fn near_valid_fleets_are_an_error_or_a_fleet_never_a_panic(lines in proptest::collection::vec(any_line(), 0..12)) {
        let text = render(&lines);
        match parse(&text) {
            Ok(cfg) => prop_assert!(!cfg.personas.is_empty()),
            Err(e) => {
                assert_clear(&e);
                prop_assert!(e.line.is_some(), "{text}\n{e}");
            }
        }
    }

    /// A valid fleet with one value of the wrong type: the error is at that value and names its
    /// key with the table (and the persona) it is in.
    #[test]
    fn one_wrong_value_is_named_with_its_key_path(
        chosen in proptest::sample::subsequence((0..KEYS.len()).collect::<Vec<_>>(), 0..KEYS.len()),
        persona_keys in proptest::sample::subsequence((0..PERSONA_KEYS.len()).collect::<Vec<_>>(), 0..PERSONA_KEYS.len()),
        personas in 1usize..4,
        wrong in any::<proptest::sample::Index>(),
        wrong_value in any::<proptest::sample::Index>(),
    ) {
        // Every line that can be wrong, with its key path and its valid value.
        let mut slots: Vec<(String, &str, &[&str])> = Vec::new();
        let mut tables: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for &k in &chosen {
            tables.entry(KEYS[k].0).or_default().push(k);
        }
        for (table, keys) in &tables {
            for &k in keys {
                slots.push((format!("{table}.{}", KEYS[k].1), KEYS[k].2, KEYS[k].3));
            }
        }
        for p in 0..personas {
            for &k in &persona_keys {
                slots.push((format!("persona[{p}].{}", PERSONA_KEYS[k].0), PERSONA_KEYS[k].1, PERSONA_KEYS[k].2));
            }
        }
        prop_assume!(!slots.is_empty());
        let bad = wrong.index(slots.len());
        let bad_value = wrong_value.get(slots[bad].2);
        let value = |i: usize| if i == bad { *bad_value } else { slots[i].1 };

        let mut text = String::new();
        let mut i = 0;
        let mut bad_line = 0;
        for (table, keys) in &tables {
            let _ = writeln!(text, "[{table}]");
            for &k in keys {
                if i == bad {
                    bad_line = text.lines().count() + 1;
                }
                let _ = writeln!(text, "{} = {}", KEYS[k].1, value(i));
                i += 1;
            }
        }
        for p in 0..personas {
            let _ = write!(text, "[[persona]]\nname = \"p{p}\"\nrole = \"r\"\n");
            for &k in &persona_keys {
                if i == bad {
                    bad_line = text.lines().count() + 1;
                }
                let _ = writeln!(text, "{} = {}", PERSONA_KEYS[k].0, value(i));
                i += 1;
            }
        }
        let err = parse(&text).expect_err("one value has the wrong type");
        assert_clear(&err);
        let path = &slots[bad].0;
        prop_assert!(err.message.starts_with(&format!("`{path}")), "{text}\nwant `{path}`: {err}");
        prop_assert_eq!(err.line.map(|l| l.0), Some(bad_line), "{}\n{}", text, err);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

    /// A valid fleet with one key written twice: the error is at the second and names its path.
    #[test]
    fn one_repeated_key_is_named_with_its_key_path(
        chosen in proptest::sample::subsequence((0..KEYS.len()).collect::<Vec<_>>(), 1..KEYS.len()),
        personas in 1usize..4,
        repeat in any::<proptest::sample::Index>(),
        in_persona in any::<bool>(),
        persona_key in 0..PERSONA_KEYS.len(),
    ) {
        let mut tables: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for &k in &chosen {
            tables.entry(KEYS[k].0).or_default().push(k);
        }
        let repeated = *repeat.get(&chosen);
        let mut text = String::new();
        let mut want = (String::new(), 0);
        for (table, keys) in &tables {
            let _ = writeln!(text, "[{table}]");
            for &k in keys {
                let _ = writeln!(text, "{} = {}", KEYS[k].1, KEYS[k].2);
                if k == repeated && !in_persona {
                    want = (format!("{table}.{}", KEYS[k].1), text.lines().count() + 1);
                    let _ = writeln!(text, "{} = {}", KEYS[k].1, KEYS[k].2);
                }
            }
        }
        let (key, value, _) = PERSONA_KEYS[persona_key];
        for p in 0..personas {
            let _ = write!(text, "[[persona]]\nname = \"p{p}\"\nrole = \"r\"\n{key} = {value}\n");
            if in_persona && p == personas - 1 {
                want = (format!("persona[{p}].{key}"), text.lines().count() + 1);
                let _ = writeln!(text, "{key} = {value}");
            }
        }
        let err = parse(&text).expect_err("a key is repeated");
        assert_clear(&err);
        prop_assert_eq!(&err.message, &format!("`{}`: duplicate key", want.0), "{}", text);
        prop_assert_eq!(err.line.map(|l| l.0), Some(want.1), "{}\n{}", text, err);
    }
}

/// An edit of a text: a range cut, a snippet put in, or a line written twice.
#[derive(Debug, Clone)]
enum Edit {
    Cut(proptest::sample::Index, usize),
    Put(proptest::sample::Index, String),
    Twice(proptest::sample::Index),
}

fn edit() -> impl Strategy<Value = Edit> {
    let snippet = prop_oneof![
        Just("[".to_string()),
        Just("]]".to_string()),
        Just("\"".to_string()),
        Just(" = ".to_string()),
        Just("\n[[persona]]\n".to_string()),
        Just("\n[storage]\n".to_string()),
        Just("{ a = ".to_string()),
        Just("\u{0}".to_string()),
        Just("é".to_string()),
        "\\PC{1,8}",
    ];
    prop_oneof![
        (any::<proptest::sample::Index>(), 1usize..40).prop_map(|(at, n)| Edit::Cut(at, n)),
        (any::<proptest::sample::Index>(), snippet).prop_map(|(at, s)| Edit::Put(at, s)),
        any::<proptest::sample::Index>().prop_map(Edit::Twice),
    ]
}

/// `at` moved back to a character boundary of `s`.
fn boundary(s: &str, at: usize) -> usize {
    (0..=at.min(s.len())).rev().find(|i| s.is_char_boundary(*i)).unwrap_or(0)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// A fleet file with every common section, edited at random: a fleet or a clear error, never a panic.
    #[test]
    fn a_full_fleet_edited_at_random_is_an_error_or_a_fleet(edits in proptest::collection::vec(edit(), 1..5)) {
        let mut text = tests::SAMPLE.to_string();
        for e in edits {
            match e {
                Edit::Cut(at, n) => {
                    let start = boundary(&text, at.index(text.len() + 1));
                    let end = boundary(&text, start + n);
                    text.replace_range(start..end, "");
                }
                Edit::Put(at, s) => {
                    let at = boundary(&text, at.index(text.len() + 1));
                    text.insert_str(at, &s);
                }
                Edit::Twice(at) => {
                    let lines: Vec<&str> = text.lines().collect();
                    if lines.is_empty() {
                        continue;
                    }
                    let i = at.index(lines.len());
                    let mut out = lines[..=i].join("\n");
                    out.push('\n');
                    out.push_str(&lines[i..].join("\n"));
                    text = out;
                }
            }
        }
        if let Err(e) = parse(&text) {
            assert_clear(&e);
        }
    }
}
