//! A replayed commit against the journal rows the recorded one wrote, and the field-by-field
//! diff a reviewer reads.

use serde::Serialize;
use serde_json::Value;

use mindfleet_cognition::history;
use mindfleet_core::history::Committed;
use mindfleet_core::messages::PersonaCommit;
use mindfleet_store::StorageError;

use crate::HistoryReader;

/// Most lines of a diff shown.
const DIFF_LINES: usize = 24;
/// Longest value shown in a diff line, and longest input shown, in characters.
const SHOWN_CHARS: usize = 160;
const INPUT_CHARS: usize = 400;

/// Checks `replayed` against the commit `noted` records: the same digest, or else (a
/// difference) the field-by-field diff against the journal rows it wrote, those retention kept.
/// `None`: the same.
pub(crate) fn commit(
    reader: &HistoryReader,
    persona: &str,
    replayed: &PersonaCommit,
    noted: Committed,
) -> Result<Option<(String, Vec<String>)>, StorageError> {
    if replayed.seq != noted.seq {
        let what = format!("the replay finished delivery {} where the journal finished {}", replayed.seq, noted.seq);
        return Ok(Some((what, Vec::new())));
    }
    if history::digest(replayed) == noted.digest {
        return Ok(None);
    }
    let what = format!("the replay's commit of event {} differs from the recorded one", replayed.decision.event_id);
    let mut diff = Vec::new();
    match noted.decision.map(|key| reader.decision(persona, key)).transpose()?.flatten() {
        Some(decision) => diff.extend(prefixed("decision", &decision, &replayed.decision)),
        None => diff.push("decision: its journal row is gone (retention), so no diff".into()),
    }
    match (noted.plan, &replayed.plan) {
        (Some(key), Some(plan)) => match reader.plan(persona, key)? {
            Some(journal) => diff.extend(prefixed("plan", &journal, plan)),
            None => diff.push("plan: its journal row is gone (retention), so no diff".into()),
        },
        (None, None) => {}
        (Some(_), None) => diff.push("plan: recorded a plan, replayed none".into()),
        (None, Some(p)) => {
            diff.push(format!("plan: recorded none, replayed one for {}", shown(&Value::String(p.plan.goal.clone()))))
        }
    }
    match (noted.outbox, &replayed.reply) {
        (Some(key), Some((entry, _))) => match reader.reply(key)? {
            Some(journal) => {
                // The reply's id is given when it is committed, outside the lifecycle.
                let mut entry = entry.clone();
                entry.event_id = journal.event_id.clone();
                diff.extend(prefixed("reply", &journal, &entry));
            }
            None => diff.push("reply: its journal row is gone (retention), so no diff".into()),
        },
        (None, None) => {}
        (Some(_), None) => diff.push("reply: recorded a reply, replayed none".into()),
        (None, Some((e, _))) => {
            diff.push(format!("reply: recorded none, replayed {}", shown(&Value::String(e.text.clone()))))
        }
    }
    diff.truncate(DIFF_LINES);
    Ok(Some((what, diff)))
}

/// `recorded` against `replayed`, field by field: `path: recorded X, replayed Y`.
pub(crate) fn diff(recorded: &impl Serialize, replayed: &impl Serialize) -> Vec<String> {
    // Most are the same: their encodings say so without building either's JSON tree (and
    // the same values in other bits, as -0.0 and 0.0, show no field that differs).
    if mindfleet_core::stored::encode(recorded) == mindfleet_core::stored::encode(replayed) {
        return Vec::new();
    }
    prefixed("", recorded, replayed)
}

fn prefixed(root: &str, recorded: &impl Serialize, replayed: &impl Serialize) -> Vec<String> {
    let (a, b) = (to_value(recorded), to_value(replayed));
    let mut out = Vec::new();
    walk(root, &a, &b, &mut out);
    out
}

fn to_value(v: &impl Serialize) -> Value {
    serde_json::to_value(v).unwrap_or_else(|e| Value::String(format!("<unserialisable: {e}>")))
}

fn walk(path: &str, a: &Value, b: &Value, out: &mut Vec<String>) {
    if a == b || out.len() >= DIFF_LINES {
        return;
    }
    let join = |k: &str| if path.is_empty() { k.to_string() } else { format!("{path}.{k}") };
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for k in x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))) {
                walk(&join(k), x.get(k).unwrap_or(&Value::Null), y.get(k).unwrap_or(&Value::Null), out);
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                walk(&format!("{path}[{i}]"), p, q, out);
            }
        }
        _ => out.push(format!(
            "{}: recorded {}, replayed {}",
            if path.is_empty() { "value" } else { path },
            shown(a),
            shown(b)
        )),
    }
}

fn shown(v: &Value) -> String {
    cut(&v.to_string(), SHOWN_CHARS)
}

fn cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// An input in a line a person reads (formatted no further than the line shows).
pub(crate) fn short(input: &impl std::fmt::Debug) -> String {
    /// A string that takes `left` more characters, then refuses the rest.
    struct Upto {
        s: String,
        left: usize,
    }
    impl std::fmt::Write for Upto {
        fn write_str(&mut self, part: &str) -> std::fmt::Result {
            match part.char_indices().nth(self.left) {
                Some((i, _)) => {
                    self.s.push_str(&part[..i]);
                    self.left = 0;
                    Err(std::fmt::Error)
                }
                None => {
                    self.s.push_str(part);
                    self.left -= part.chars().count();
                    Ok(())
                }
            }
        }
    }
    let mut w = Upto { s: String::new(), left: INPUT_CHARS + 1 };
    let _ = std::fmt::Write::write_fmt(&mut w, format_args!("{input:?}"));
    cut(&w.s, INPUT_CHARS)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::{INPUT_CHARS, diff, short};

    #[test]
    fn an_input_is_shown_up_to_the_line_s_length() {
        assert_eq!(short(&("a", 1)), r#"("a", 1)"#);
        let long = vec!["é"; 1000];
        let s = short(&long);
        assert_eq!(s.chars().count(), INPUT_CHARS + 3);
        assert!(s.starts_with(r#"["é", "é""#) && s.ends_with("..."), "{s}");
        let exact = "x".repeat(INPUT_CHARS - 2);
        assert_eq!(short(&exact), format!("{exact:?}"));
    }

    #[test]
    fn a_diff_names_each_field_that_differs_and_nothing_else() {
        let a = json!({"verdict": "engage", "numbers": [1.0, 2.0], "reason": "same"});
        let b = json!({"verdict": "ignore", "numbers": [1.0, 2.5], "reason": "same"});
        // Fields in the order of their names.
        assert_eq!(
            diff(&a, &b),
            vec!["numbers[1]: recorded 2.0, replayed 2.5", "verdict: recorded \"engage\", replayed \"ignore\""]
        );
        assert!(diff(&a, &a).is_empty());
    }

    #[test]
    fn lists_of_other_lengths_differ_as_a_whole() {
        assert_eq!(diff(&json!({"p": [1]}), &json!({"p": [1, 2]})), vec!["p: recorded [1], replayed [1,2]"]);
    }
}
