//! The `mindfleet` command lines of README.md's code blocks, as the README tests read them: the
//! binary's test that every one parses (`src/main.rs`) and the integration test that runs them
//! against live fleets (`tests/readme.rs`) share this file.

/// A command line of a code block.
pub struct CommandLine {
    pub line: String,
    /// `KEY=value` words before `mindfleet`.
    pub env: Vec<(String, String)>,
    /// Its words from `mindfleet` on, each marked whether it is inside `[...]`.
    pub words: Vec<(String, bool)>,
}

/// The `mindfleet` lines of the code blocks of `text`, in order.
pub fn command_lines(text: &str) -> Vec<CommandLine> {
    let mut in_block = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if !in_block {
            continue;
        }
        let mut words = words(line);
        let skip = words.iter().take_while(|(w, _)| w.contains('=') && !w.starts_with('-')).count();
        let env = words
            .drain(..skip)
            .filter_map(|(w, _)| w.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
            .collect();
        if words.first().is_some_and(|(w, _)| w == "mindfleet") {
            out.push(CommandLine { line: line.to_string(), env, words });
        }
    }
    out
}

/// A command line split as a shell would (quotes, a `#` comment), with `[` and `]` outside
/// quotes marking optional words.
pub fn words(line: &str) -> Vec<(String, bool)> {
    let (mut words, mut word, mut quoted) = (Vec::new(), None::<String>, None::<char>);
    let mut optional = false;
    for c in line.chars() {
        match (quoted, c) {
            (Some(q), c) if c == q => quoted = None,
            (Some(_), c) => word.get_or_insert_default().push(c),
            (None, '\'' | '"') => {
                quoted = Some(c);
                word.get_or_insert_default();
            }
            (None, '#') if word.is_none() => break,
            (None, '[') if word.is_none() => optional = true,
            (None, ']' | ' ') => {
                words.extend(word.take().map(|w| (w, optional)));
                optional &= c != ']';
            }
            (None, c) => word.get_or_insert_default().push(c),
        }
    }
    words.extend(word.map(|w| (w, optional)));
    words
}
