//! `mindfleet bench record`: what recording the personas' histories costs (`[storage] record`
//! on against off, side by side, rounds taking turns) on `bench inject` and on the batched half
//! of `bench cognition`, and how fast a recorded history replays against the time it took.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};

use super::{inject_with, median, replayed, round};

/// What one side of the comparison gave, each round.
#[derive(Default)]
struct Side {
    acked_per_s: Vec<f64>,
    decision_p50_ms: Vec<f64>,
    decision_p99_ms: Vec<f64>,
    cpu_us_per_event: Vec<f64>,
    /// Bytes written to the disk an event.
    written_bytes_per_event: Vec<f64>,
    /// The writer's commits and their fsyncs (the disk's share of an acknowledgement's wait).
    commit_p50_ms: Vec<f64>,
    fsync_p50_ms: Vec<f64>,
    /// Over the rounds: what the personas decided, and the writer's requests and commits.
    verdicts: BTreeMap<String, u64>,
    writer_requests: u64,
    writer_commits: u64,
}

impl Side {
    fn add(&mut self, v: &Value) {
        let f = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
        self.acked_per_s.push(f("acked_per_s"));
        self.decision_p50_ms.push(f("decision_p50_ms"));
        self.decision_p99_ms.push(f("decision_p99_ms"));
        self.cpu_us_per_event.push(f("cpu_us_per_event"));
        self.written_bytes_per_event.push(f("written_bytes_per_event"));
        self.commit_p50_ms.push(f("commit_p50_ms"));
        self.fsync_p50_ms.push(f("fsync_p50_ms"));
        for (verdict, n) in v["decisions_by_verdict"].as_object().into_iter().flatten() {
            *self.verdicts.entry(verdict.clone()).or_default() += n.as_u64().unwrap_or(0);
        }
        self.writer_requests += v["writer_requests"].as_u64().unwrap_or(0);
        self.writer_commits += v["writer_commits"].as_u64().unwrap_or(0);
    }

    fn figures(&self) -> Value {
        json!({
            "acked_per_s": round(median(self.acked_per_s.clone()), 0),
            "decision_p50_ms": round(median(self.decision_p50_ms.clone()), 2),
            "decision_p99_ms": round(median(self.decision_p99_ms.clone()), 2),
            "cpu_us_per_event": round(median(self.cpu_us_per_event.clone()), 1),
            "written_bytes_per_event": round(median(self.written_bytes_per_event.clone()), 0),
            "commit_p50_ms": round(median(self.commit_p50_ms.clone()), 3),
            "fsync_p50_ms": round(median(self.fsync_p50_ms.clone()), 3),
            "acked_per_s_rounds": self.acked_per_s,
            "decisions_by_verdict": self.verdicts,
            "writer_requests": self.writer_requests,
            "writer_commits": self.writer_commits,
        })
    }
}

/// What a recorded history holds, in bytes an event delivered: its entries by kind (an input by
/// its variant) as stored before packing (binary or JSON) and as exported (JSON), and its rows
/// as stored (packed, lz4).
fn sizes(data_dir: &Path) -> anyhow::Result<Value> {
    let reader = mindfleet_replay::HistoryReader::open(data_dir)?;
    let mut kinds = BTreeMap::<String, (u64, u64)>::new();
    let (mut stored, mut entry_bytes, mut json_bytes, mut events) = (0u64, 0u64, 0u64, 0u64);
    for (_, rows) in reader.histories(None)? {
        for row in rows {
            stored += row.stored.len() as u64;
            for entry in row.entries().map_err(anyhow::Error::msg)? {
                let json = mindfleet_replay::to_json(&entry).map_err(anyhow::Error::msg)?;
                entry_bytes += entry.len() as u64;
                json_bytes += json.len() as u64;
                let v: Value = serde_json::from_slice(&json)?;
                let kind = match variant(&v) {
                    "Fed" => variant(&v["Fed"]["input"]),
                    k => k,
                };
                events += u64::from(kind == "Deliver");
                let k = kinds.entry(kind.to_string()).or_default();
                k.0 += entry.len() as u64;
                k.1 += json.len() as u64;
            }
        }
    }
    let per = |b: u64| round(b as f64 / events.max(1) as f64, 0);
    let by_kind = |f: fn(&(u64, u64)) -> u64| {
        kinds.iter().map(|(k, b)| (k.clone(), json!(per(f(b))))).collect::<serde_json::Map<_, _>>()
    };
    Ok(json!({
        "events": events,
        "entry_per_event": per(entry_bytes),
        "json_per_event": per(json_bytes),
        "stored_per_event": per(stored),
        "entry_per_event_by_kind": by_kind(|b| b.0),
        "json_per_event_by_kind": by_kind(|b| b.1),
    }))
}

/// The variant of an enum value as serde writes it (its name, or the one key of its object).
fn variant(v: &Value) -> &str {
    match v {
        Value::String(s) => s,
        Value::Object(o) => o.keys().next().map_or("", String::as_str),
        _ => "",
    }
}

/// `rounds` of `bench inject` (`clients`, `events`, 8 personas) with recording on and off,
/// taking turns (which goes first alternates), then `cognition_rounds` of the batched cognition
/// run on and off (none: that half is left out); `models` holds the real models.
pub async fn record(
    rounds: usize,
    clients: usize,
    events: usize,
    cognition_rounds: usize,
    models: &Path,
) -> anyhow::Result<Value> {
    let (mut on, mut off) = (Side::default(), Side::default());
    let mut replay = Value::Null;
    // A warm-up, not counted: the first fleet of the process pays for a cold heap and the
    // clients' first connections, which would fall on the first side measured.
    inject_with(clients, events, 8, false).await?;
    for r in 0..rounds {
        for record in if r % 2 == 0 { [true, false] } else { [false, true] } {
            let (v, dir) = inject_with(clients, events, 8, record).await?;
            if record {
                on.add(&v);
                if replay.is_null() {
                    replay = replayed(dir.path())?;
                    replay["bytes"] = sizes(dir.path())?;
                }
            } else {
                off.add(&v);
            }
        }
    }
    // Each round's two runs (back to back) as a ratio, and the median of those: the machine's
    // pace drifts over a process's many fleets by more than recording changes it, so a ratio of
    // the sides' medians would weigh rounds far apart against each other.
    let ratio = |a: &[f64], b: &[f64]| round(median(a.iter().zip(b).map(|(x, y)| x / y).collect()), 3);
    let inject = json!({
        "clients": clients,
        "events": events,
        "rounds": rounds,
        "recording": on.figures(),
        "not_recording": off.figures(),
        "acked_per_s_ratio": ratio(&on.acked_per_s, &off.acked_per_s),
        "decision_p50_ratio": ratio(&on.decision_p50_ms, &off.decision_p50_ms),
        "decision_p99_ratio": ratio(&on.decision_p99_ms, &off.decision_p99_ms),
        // The process's CPU time an event (less sensitive to what else the machine runs).
        "cpu_ratio": ratio(&on.cpu_us_per_event, &off.cpu_us_per_event),
        "written_ratio": ratio(&on.written_bytes_per_event, &off.written_bytes_per_event),
        // One recording round's history replayed: the rules brain at full load.
        "replay": replay,
    });
    let cognition = if cognition_rounds == 0 {
        Value::Null
    } else {
        let max_batch = mindfleet_core::config::LocalLlm::DEFAULT_MAX_BATCH;
        // A warm-up, as in `bench cognition`: the first run pays for a cold heap.
        super::cognition::run(max_batch, false, models).await?;
        let (mut on, mut off, mut replays) = (Vec::new(), Vec::new(), Vec::new());
        for r in 0..cognition_rounds {
            for record in if r % 2 == 0 { [true, false] } else { [false, true] } {
                let (v, _) = super::cognition::run(max_batch, record, models).await?;
                let seconds = v["seconds"].as_f64().unwrap_or(f64::NAN);
                if record {
                    on.push(seconds);
                    replays.push(v["replay"].clone());
                } else {
                    off.push(seconds);
                }
            }
        }
        json!({
            "rounds": cognition_rounds,
            "seconds_recording": on,
            "seconds_not_recording": off,
            "seconds_ratio": ratio(&on, &off),
            "replays": replays,
        })
    };
    Ok(json!({ "bench": "record", "inject": inject, "cognition": cognition }))
}
