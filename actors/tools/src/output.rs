//! A tool's result as the caller gets it: text, structured content when the server gave some,
//! and the cap of `max_output_kb`.
//!
//! A server decides how much it returns; a persona's prompt and journal cannot take whatever it
//! decides. Text is cut at a character boundary and ends with a line that says so, so a model
//! reading it knows it did not see everything.

use serde::Serialize;
use serde_json::Value;

/// What a call returned.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolOutput {
    /// The content blocks as text: text blocks as written, the others described in a line
    /// (`[image: image/png, 68 bytes]`), blocks separated by a newline.
    pub text: String,
    /// The result's `structuredContent`, when it gave one that fits the cap.
    pub structured: Option<Value>,
    /// Something was cut or left out to fit the cap.
    pub cut: bool,
    /// Bytes the server returned (text and structured content) before the cap.
    pub bytes: usize,
}

impl ToolOutput {
    pub(crate) fn from_result(content: &[rmcp::model::ContentBlock], structured: Option<Value>, max: usize) -> Self {
        let full = render(content);
        let structured_len = structured.as_ref().map_or(0, |s| s.to_string().len());
        let bytes = full.len() + structured_len;
        let (text, mut cut) = cap(&full, max);
        // Structured content is data for a program: half of an object is no object, so it is
        // kept whole or left out (the text blocks usually carry the same, cut).
        let structured = match structured {
            Some(_) if structured_len > max => {
                cut = true;
                tracing::debug!(structured_len, max, "structured content over the cap, left out");
                None
            }
            other => other,
        };
        ToolOutput { text, structured, cut, bytes }
    }
}

/// The content blocks as text. Non-text blocks are described, not decoded: a model reads text.
pub(crate) fn render(content: &[rmcp::model::ContentBlock]) -> String {
    let mut out = String::new();
    for block in content {
        if !out.is_empty() {
            out.push('\n');
        }
        // Through JSON rather than rmcp's enums: the wire shape is the spec's and stays put,
        // the SDK's types are `non_exhaustive` and grow.
        let v = serde_json::to_value(block).unwrap_or(Value::Null);
        let s = |key: &str| v.get(key).and_then(Value::as_str);
        match s("type") {
            Some("text") => out.push_str(s("text").unwrap_or_default()),
            Some(kind @ ("image" | "audio")) => {
                let bytes = s("data").map_or(0, |d| d.len() / 4 * 3);
                out.push_str(&format!("[{kind}: {}, {bytes} bytes]", s("mimeType").unwrap_or("?")));
            }
            Some("resource") => {
                let r = v.get("resource").cloned().unwrap_or(Value::Null);
                match r.get("text").and_then(Value::as_str) {
                    Some(text) => out.push_str(text),
                    None => out.push_str(&format!(
                        "[resource {}: {}]",
                        r.get("uri").and_then(Value::as_str).unwrap_or("?"),
                        r.get("mimeType").and_then(Value::as_str).unwrap_or("binary")
                    )),
                }
            }
            Some("resource_link") => {
                out.push_str(&format!("[resource link: {} {}]", s("name").unwrap_or(""), s("uri").unwrap_or("?")));
            }
            other => out.push_str(&format!("[{} content]", other.unwrap_or("unknown"))),
        }
    }
    out
}

/// `text` in at most `max` bytes, cut at a character boundary and marked, and whether it was cut.
pub fn cap(text: &str, max: usize) -> (String, bool) {
    if text.len() <= max {
        return (text.to_owned(), false);
    }
    // The mark counts against the cap; `kept` has no more digits than the total.
    let mark = |kept: usize| format!("\n[cut: {kept} of {} bytes shown]", text.len());
    let budget = max.saturating_sub(mark(text.len()).len());
    let mut end = budget.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = String::with_capacity(max);
    out.push_str(&text[..end]);
    out.push_str(&mark(end));
    (out, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_untouched() {
        assert_eq!(cap("hello", 5), ("hello".to_owned(), false));
    }

    #[test]
    fn long_text_is_cut_at_a_char_boundary_within_the_cap_and_marked() {
        let text = "é".repeat(2000); // 4000 bytes, two per character
        for max in [1024, 1025, 1026, 1027] {
            let (out, cut) = cap(&text, max);
            assert!(cut);
            assert!(out.len() <= max, "{} > {max}", out.len());
            let (kept, mark) = out.split_once('\n').unwrap();
            assert!(kept.chars().all(|c| c == 'é'));
            assert_eq!(mark, format!("[cut: {} of 4000 bytes shown]", kept.len()));
        }
    }
}
