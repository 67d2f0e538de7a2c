//! The journal of tool calls in the writer: a call that waits for approval is queued for the
//! `approval` webhooks in the transaction that journals it; the oldest answered calls are
//! forgotten past [`TOOL_CALLS_KEPT`].

use redb::ReadableTable;

use mindfleet_core::tools::{CallJournal, CallRun};
use mindfleet_core::webhook::{HookDelivery, HookKind};

use super::Writer;
use crate::schema::{TOOL_CALLS_KEPT, Tables};

/// How many journaled calls past the limit a persona may have before the oldest are forgotten.
const TRIM_SLACK: usize = 100;

impl Writer {
    /// Journals `j` (replacing what was journaled of the call); a call newly waiting for approval
    /// goes to the `approval` webhooks too.
    pub(crate) fn journal_call(&mut self, t: &mut Tables<'_>, j: &CallJournal) -> Result<(), redb::Error> {
        let (persona, id) = (j.call.persona.as_str(), j.call.id.as_str());
        let row = serde_json::to_vec(j).map_err(|e| redb::Error::Corrupted(format!("tool call {id}: {e}")))?;
        let new = t.tool_calls.insert((persona, id), row.as_slice())?.is_none();
        if new && j.call.state.is_pending() {
            self.queue_hooks(t, HookKind::Approval, persona, &j.call.room, || HookDelivery::approval(&j.call))?;
        }
        if new {
            trim_calls(t, persona)?;
        }
        Ok(())
    }
}

/// Forgets the oldest answered calls of `persona` once it has [`TRIM_SLACK`] more than it keeps.
fn trim_calls(t: &mut Tables<'_>, persona: &str) -> Result<(), redb::Error> {
    let range = (persona, "")..=(persona, "\u{10ffff}");
    if t.tool_calls.range(range.clone())?.count() <= TOOL_CALLS_KEPT + TRIM_SLACK {
        return Ok(());
    }
    let mut answered: Vec<(i64, String)> = Vec::new();
    for r in t.tool_calls.range(range)? {
        let (k, v) = r?;
        let Ok(j) = serde_json::from_slice::<CallJournal>(v.value()) else { continue };
        if !j.call.state.is_pending() && !matches!(j.run, CallRun::InFlight { .. }) {
            answered.push((j.call.requested_us, k.value().1.to_string()));
        }
    }
    answered.sort();
    let excess = answered.len().saturating_sub(TOOL_CALLS_KEPT);
    for (_, id) in answered.into_iter().take(excess) {
        t.tool_calls.remove((persona, id.as_str()))?;
    }
    Ok(())
}
