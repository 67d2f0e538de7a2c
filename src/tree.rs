//! `--format tree`: a fleet's dump ([`FleetDump`]) as its supervision tree, with each persona's
//! state, for people.

use std::fmt::Write as _;

use mindfleet_core::dump::{ChildDump, FleetDump, PersonaDump, status_str};

/// A dump as a tree for people.
pub trait RenderTree {
    /// The supervision tree with each persona's state.
    fn render_tree(&self) -> String;
}

impl RenderTree for FleetDump {
    fn render_tree(&self) -> String {
        let mut out = String::new();
        render_nodes(self, &mut out);
        let _ = writeln!(out, "FleetSupervisor({}) [{}]", self.fleet, self.supervisor.status);
        render_shared(self, &mut out);
        let n = self.personas.len();
        for (i, p) in self.personas.iter().enumerate() {
            render_persona(&mut out, p, i + 1 == n);
        }
        render_journals(self, &mut out);
        out
    }
}

/// A line per node of the cluster.
fn render_nodes(dump: &FleetDump, out: &mut String) {
    for n in &dump.nodes {
        let _ = write!(out, "Node({}) [{}]  {} personas", n.name, n.status, n.personas);
        if !n.links.is_empty() {
            let _ = write!(out, ", linked to {}", n.links.join(", "));
        }
        let _ = writeln!(out, "{}", n.error.as_deref().map(|e| format!(": {e}")).unwrap_or_default());
    }
}

/// The shared actors and the storage writer.
fn render_shared(dump: &FleetDump, out: &mut String) {
    let s = &dump.scheduler;
    let _ = writeln!(
        out,
        "├─ Admin [running]  {}  accepted {}, duplicates {}, rejected {}",
        dump.admin.addr, dump.admin.accepted, dump.admin.duplicates, dump.admin.rejected
    );
    let _ = writeln!(
        out,
        "├─ Scheduler [running]  queued u/i/w/b {}/{}/{}/{}, running {}+{}, done {}",
        s.urgent.queued,
        s.interactive.queued,
        s.work.queued,
        s.background.queued,
        s.running_inference,
        s.running_cheap,
        s.done
    );
    let e = &dump.embedding;
    let _ = write!(out, "├─ EmbeddingWorker [{}]  {}", e.status, e.model.model);
    match &e.error {
        Some(error) => {
            let _ = writeln!(out, ": {error}");
        }
        None => {
            let _ = writeln!(
                out,
                ", requests {}, mean batch {:.1}, cache hits {}, p99 {:.1} ms",
                e.requests, e.mean_batch, e.cache_hits, e.p99_ms
            );
        }
    }
    let l = &dump.llm;
    if l.status != "off" {
        let _ = write!(out, "├─ LlmWorker [{}]  {}", l.status, l.model.model);
        match &l.error {
            Some(error) => {
                let _ = writeln!(out, ": {error}");
            }
            None => {
                let _ = writeln!(
                    out,
                    ", {} slots, requests {}, tokens {} in / {} out, {:.1} tok/s",
                    l.slots, l.requests, l.tokens_in, l.tokens_out, l.gen_tok_s
                );
            }
        }
    }
    let x = &dump.index;
    match &x.error {
        Some(error) => {
            let _ = writeln!(out, "├─ Index [{}]: {error}", x.status);
        }
        None => {
            let _ = writeln!(
                out,
                "├─ Index [{}]  {} files, {} chunks, requests {}, open cursors {}",
                x.status, x.files, x.chunks, x.requests, x.open_cursors
            );
        }
    }
    let _ = writeln!(
        out,
        "├─ StorageWriter [thread]  pending {}, commits {}, mean batch {:.1}, p99 commit {:.2} ms",
        dump.storage.pending, dump.storage.commits, dump.storage.mean_batch, dump.storage.commit_p99_ms
    );
}

/// The newest outbox entries and the dead letters.
fn render_journals(dump: &FleetDump, out: &mut String) {
    if !dump.outbox.is_empty() {
        let _ = writeln!(out, "outbox (newest first):");
        for o in dump.outbox.iter().take(10) {
            let _ = writeln!(out, "  #{} {} -> {}: {}", o.room, o.persona, o.in_reply_to, o.text);
        }
    }
    if !dump.dead_letters.is_empty() {
        let _ = writeln!(out, "dead letters:");
        for d in &dump.dead_letters {
            let _ = writeln!(out, "  {} for {} after {} crashes: {}", d.event_id, d.persona, d.crashes, d.reason);
        }
    }
}

/// A persona and its children; `last` closes the tree.
fn render_persona(out: &mut String, p: &PersonaDump, last: bool) {
    let (branch, prefix) = if last { ("└─", "   ") } else { ("├─", "│  ") };
    let _ = write!(out, "{branch} Persona({}) [{}", p.name, status_str(p.status));
    if let Some(node) = &p.node {
        let _ = write!(out, ", on {node}");
    }
    if p.actors.persona.restarts > 0 {
        let _ = write!(out, ", {} restarts", p.actors.persona.restarts);
    }
    let _ = write!(out, "]");
    if !p.role.is_empty() {
        let _ = write!(out, "  {} · brain {}", p.role, p.brain);
        if p.brain_degraded.is_some() {
            let _ = write!(out, " (degraded: rules)");
        }
    }
    if let Some(e) = &p.actors.persona.last_error {
        let _ = write!(out, "  last error: {e}");
    }
    out.push('\n');
    if let Some(st) = &p.self_state {
        let _ = writeln!(
            out,
            "{prefix}│  mood {}{}, load {:.2}, capacity {:.2}, energy {:.2}, focus {} ({:.2}) {}",
            st.mood.as_str(),
            if st.dormant { " (dormant)" } else { "" },
            st.cognitive_load,
            st.available_capacity,
            st.energy,
            st.focus.activity,
            st.focus.intensity,
            st.focus.objective
        );
    }
    let inbox = format!(
        "{} of {} queued, {} shed, {} duplicates",
        p.inbox.len, p.inbox.capacity, p.inbox.shed, p.inbox.duplicates
    );
    let wm = format!(
        "{} entries {:?}, {} evictions",
        p.working_memory.len,
        p.working_memory.per_domain,
        p.working_memory.evictions.len()
    );
    child_line(out, prefix, false, "Inbox", &p.actors.inbox, &inbox);
    child_line(out, prefix, false, "SelfState", &p.actors.self_state, "");
    child_line(out, prefix, true, "WorkingMemory", &p.actors.working_memory, &wm);
    for d in p.decisions.iter().take(5) {
        let _ = writeln!(out, "{prefix}   · {} {}: {}", d.verdict.as_str(), d.event_id, d.reason);
    }
}

fn child_line(out: &mut String, prefix: &str, last: bool, label: &str, c: &ChildDump, extra: &str) {
    let branch = if last { "└─" } else { "├─" };
    let _ = write!(out, "{prefix}{branch} {label} [{}", c.status);
    if c.restarts > 0 {
        let _ = write!(out, ", {} restarts", c.restarts);
    }
    let _ = write!(out, "]");
    if !extra.is_empty() {
        let _ = write!(out, "  {extra}");
    }
    if let Some(e) = &c.last_error {
        let _ = write!(out, "  last error: {e}");
    }
    out.push('\n');
}
