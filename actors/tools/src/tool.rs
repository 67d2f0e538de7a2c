//! A server's tools as listed, what each needs before it runs, and their pins.
//!
//! A tool's description and input schema are what a model reads to decide to call it; a server
//! that changes them after an operator allowed it could steer the model (a "rug pull"). So each
//! listing is pinned: a digest of every tool's description, input schema and annotations, and a
//! later listing is compared with the pins to name the tools that changed. What to do with them
//! (disable until `mindfleet tools approve`) is the fleet's policy, not this crate's.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use mindfleet_core::tools::Approval;

/// One tool as its server lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolInfo {
    pub name: String,
    pub title: Option<String>,
    pub description: Option<String>,
    /// A JSON Schema object; arguments are checked against it before a call is sent.
    pub input_schema: Value,
    pub output_schema: Option<Value>,
    /// The annotations as the server sent them (`readOnlyHint`, `destructiveHint`,
    /// `idempotentHint`, `openWorldHint`, ...), `null` when it sent none. Kept raw so the pin
    /// covers exactly what the server said.
    pub annotations: Value,
}

impl ToolInfo {
    pub(crate) fn from_rmcp(tool: rmcp::model::Tool) -> Self {
        ToolInfo {
            name: tool.name.into_owned(),
            title: tool.title,
            description: tool.description.map(|d| d.into_owned()),
            input_schema: Value::Object((*tool.input_schema).clone()),
            output_schema: tool.output_schema.map(|s| Value::Object((*s).clone())),
            annotations: tool.annotations.map_or(Value::Null, |a| serde_json::to_value(a).unwrap_or(Value::Null)),
        }
    }

    fn hint(&self, key: &str) -> Option<bool> {
        self.annotations.get(key).and_then(Value::as_bool)
    }

    /// The server says the tool changes nothing. A hint: a server can lie, which is why the
    /// operator chooses the servers and pins what they said.
    pub fn read_only(&self) -> bool {
        self.hint("readOnlyHint") == Some(true)
    }

    /// The server says that calling the tool twice with the same arguments does no more than
    /// once (a call in flight at a crash may then be repeated).
    pub fn idempotent(&self) -> bool {
        self.hint("idempotentHint") == Some(true)
    }
}

/// Whether a call of `tool` waits for a person under `policy`: `Writes` holds back every tool
/// not annotated `readOnlyHint: true` (absent counts as a write, as the MCP spec's default).
pub fn needs_approval(tool: &ToolInfo, policy: Approval) -> bool {
    match policy {
        Approval::Never => false,
        Approval::Always => true,
        Approval::Writes => !tool.read_only(),
    }
}

/// Each tool's digest (sha256, hex) of its description, input schema and annotations.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pins(BTreeMap<String, String>);

/// How a later listing differs from the pins, each list sorted by tool name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinChanges {
    /// Listed both times with another description, schema or annotations.
    pub changed: Vec<String>,
    /// New in the later listing.
    pub added: Vec<String>,
    /// Gone from the later listing.
    pub removed: Vec<String>,
}

impl PinChanges {
    pub fn is_empty(&self) -> bool {
        self.changed.is_empty() && self.added.is_empty() && self.removed.is_empty()
    }
}

impl Pins {
    pub fn of(tools: &[ToolInfo]) -> Pins {
        Pins(tools.iter().map(|t| (t.name.clone(), Pins::digest(t))).collect())
    }

    /// The digest of what a model reads and what approval is decided on. Keys are sorted first
    /// (canonical JSON), so a server that sends the same schema in another key order keeps its
    /// pin.
    pub fn digest(tool: &ToolInfo) -> String {
        let pinned = serde_json::json!({
            "description": tool.description,
            "inputSchema": tool.input_schema,
            "annotations": tool.annotations,
        });
        let mut text = String::new();
        canonical(&pinned, &mut text);
        Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
    }

    pub fn get(&self, tool: &str) -> Option<&str> {
        self.0.get(tool).map(String::as_str)
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    /// What `later` changed, added or removed against these pins.
    pub fn compare(&self, later: &Pins) -> PinChanges {
        let mut changes = PinChanges::default();
        for (name, digest) in &later.0 {
            match self.0.get(name) {
                Some(pinned) if pinned == digest => {}
                Some(_) => changes.changed.push(name.clone()),
                None => changes.added.push(name.clone()),
            }
        }
        changes.removed = self.0.keys().filter(|k| !later.0.contains_key(*k)).cloned().collect();
        changes
    }
}

/// JSON with object keys sorted at every level and no spaces.
fn canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, key) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

#[cfg(test)]
mod tests;
