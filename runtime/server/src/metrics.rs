//! `GET /metrics`: the fleet's figures in the Prometheus text format, every metric named
//! `mindfleet_...`, encoded by `prometheus-client` from a dump taken at each scrape (the dump is
//! what the fleet knows of itself; a scrape costs one, as `GET /dump` does).

use std::sync::atomic::AtomicU64;

use mindfleet_core::dump::FleetDump;
use mindfleet_core::stored::LatencyBuckets;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

type Labels = Vec<(String, String)>;
type FloatGauge = Gauge<f64, AtomicU64>;

fn label(key: &str, value: &str) -> Labels {
    vec![(key.to_string(), value.to_string())]
}

/// A counter at `value` (a total the fleet keeps since it started).
fn counter(r: &mut Registry, name: &str, help: &str, value: u64) {
    let c = Counter::<u64>::default();
    c.inc_by(value);
    r.register(name, help, c);
}

fn gauge(r: &mut Registry, name: &str, help: &str, value: f64) {
    let g = FloatGauge::default();
    g.set(value);
    r.register(name, help, g);
}

/// A gauge per label value.
fn gauges(r: &mut Registry, name: &str, help: &str, values: impl IntoIterator<Item = (Labels, f64)>) {
    let f = Family::<Labels, FloatGauge>::default();
    for (labels, v) in values {
        f.get_or_create(&labels).set(v);
    }
    r.register(name, help, f);
}

/// A counter per label value.
fn counters(r: &mut Registry, name: &str, help: &str, values: impl IntoIterator<Item = (Labels, u64)>) {
    let f = Family::<Labels, Counter<u64>>::default();
    for (labels, v) in values {
        f.get_or_create(&labels).inc_by(v);
    }
    r.register(name, help, f);
}

/// A histogram whose buckets were counted elsewhere (the storage writer's, since it opened), in
/// seconds.
#[derive(Debug)]
struct Counted {
    sum_s: f64,
    count: u64,
    buckets: Vec<(f64, u64)>,
}

impl EncodeMetric for Counted {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_histogram::<NoLabelSet>(self.sum_s, self.count, &self.buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

/// A latency histogram, in seconds (its name gets the unit).
fn histogram(r: &mut Registry, name: &str, help: &str, h: &LatencyBuckets) {
    let counted = Counted { sum_s: h.sum_ms / 1e3, count: h.count, buckets: h.buckets_s() };
    r.register_with_unit(name, help, Unit::Seconds, counted);
}

/// A gauge per quantile (`0.5`, `0.99`) of a latency.
fn quantiles(r: &mut Registry, name: &str, help: &str, p50: f64, p99: f64) {
    gauges(r, name, help, [(label("quantile", "0.5"), p50), (label("quantile", "0.99"), p99)]);
}

/// The exposition of `d`, and of the events the admin API refused (`refused`, since it started).
pub fn exposition(d: &FleetDump, refused: u64) -> String {
    let mut r = Registry::with_prefix("mindfleet");
    let s = &d.storage;
    counter(&mut r, "events_accepted", "Events accepted (acknowledged after the fsync).", s.accepted);
    counter(&mut r, "events_refused", "Events `POST /events` refused (bad input, a full disk, ...).", refused);
    counter(&mut r, "events_duplicate", "Events refused as a duplicate of an id already accepted.", s.duplicates);
    counter(&mut r, "storage_commits", "Storage transactions committed.", s.commits);
    counters(
        &mut r,
        "decisions",
        "Decisions journaled since the storage opened, by verdict.",
        s.decisions_by_verdict.iter().map(|(v, n)| (label("verdict", v), *n)),
    );
    counter(
        &mut r,
        "dead_letters",
        "Deliveries that crashed their persona too often, since the start.",
        s.dead_letters,
    );
    gauge(&mut r, "storage_pending_deliveries", "Deliveries not finished yet.", s.pending as f64);
    quantiles(
        &mut r,
        "storage_commit_latency_ms",
        "Storage commit latency of recent commits, by quantile (milliseconds).",
        s.commit_p50_ms,
        s.commit_p99_ms,
    );
    quantiles(
        &mut r,
        "decision_latency_ms",
        "From an event's acceptance to its decision being stored, by quantile (milliseconds).",
        s.decision_p50_ms,
        s.decision_p99_ms,
    );
    histogram(
        &mut r,
        "decision_latency",
        "From an event's acceptance to its decision being stored, every decision since the storage opened.",
        &s.decision_latency,
    );
    histogram(
        &mut r,
        "storage_commit_latency",
        "Storage commits (apply and fsync), every commit since the storage opened.",
        &s.commit_latency,
    );
    let persona = |name: &str| label("persona", name);
    gauges(
        &mut r,
        "inbox_depth",
        "Events waiting in each persona's inbox.",
        d.personas.iter().map(|p| (persona(&p.name), p.inbox.len as f64)),
    );
    counters(
        &mut r,
        "inbox_shed",
        "Events each persona's full inbox shed.",
        d.personas.iter().map(|p| (persona(&p.name), p.inbox.shed)),
    );
    gauges(
        &mut r,
        "conversation_lag_ms",
        "How long the oldest message waiting to be embedded into each persona's conversation memory has waited.",
        d.personas.iter().filter_map(|p| p.conversation.as_ref().map(|c| (persona(&p.name), c.lag_ms as f64))),
    );
    counters(
        &mut r,
        "drafts_replaced",
        "Model drafts the draft check replaced with the grounded reply, by persona and flaw.",
        d.personas.iter().flat_map(|p| {
            p.drafts_replaced.iter().map(|(flaw, n)| {
                let mut l = persona(&p.name);
                l.extend(label("flaw", flaw));
                (l, *n)
            })
        }),
    );
    let sc = &d.scheduler;
    let classes =
        [("urgent", &sc.urgent), ("interactive", &sc.interactive), ("work", &sc.work), ("background", &sc.background)];
    gauges(
        &mut r,
        "scheduler_queued",
        "Tasks waiting for a slot, by class.",
        classes.iter().map(|(c, s)| (label("class", c), s.queued as f64)),
    );
    gauges(
        &mut r,
        "scheduler_running",
        "Tasks holding a slot, by class.",
        classes.iter().map(|(c, s)| (label("class", c), s.running as f64)),
    );
    counters(
        &mut r,
        "scheduler_granted",
        "Tasks granted a slot, by class.",
        classes.iter().map(|(c, s)| (label("class", c), s.granted)),
    );
    let l = &d.llm;
    counter(&mut r, "model_calls", "Calls the LLM worker answered or failed.", l.requests);
    counter(&mut r, "model_call_failures", "Calls the LLM worker failed.", l.failures);
    counters(
        &mut r,
        "model_tokens",
        "Tokens the LLM read (prompt) and wrote (generated).",
        [(label("kind", "prompt"), l.tokens_in), (label("kind", "generated"), l.tokens_out)],
    );
    quantiles(
        &mut r,
        "model_time_to_first_token_ms",
        "The LLM's time to the first token, by quantile (milliseconds).",
        l.ttft_p50_ms,
        l.ttft_p99_ms,
    );
    let e = &d.embedding;
    counter(&mut r, "embedding_texts", "Texts the embedding worker embedded.", e.texts);
    counter(&mut r, "embedding_batches", "Model calls of the embedding worker.", e.batches);
    quantiles(
        &mut r,
        "embedding_latency_ms",
        "The embedding worker's request latency, by quantile (milliseconds).",
        e.p50_ms,
        e.p99_ms,
    );
    let hook = |name: &str| label("webhook", name);
    counters(
        &mut r,
        "webhook_deliveries",
        "Webhook deliveries their receiver acknowledged (2xx), since the start.",
        d.webhooks.iter().map(|w| (hook(&w.name), w.delivered)),
    );
    counters(
        &mut r,
        "webhook_failures",
        "Webhook delivery attempts that failed (each retried, or dead-lettered), since the start.",
        d.webhooks.iter().map(|w| (hook(&w.name), w.failures)),
    );
    gauges(
        &mut r,
        "webhook_pending",
        "Webhook deliveries stored and not acknowledged yet.",
        d.webhooks.iter().map(|w| (hook(&w.name), w.pending as f64)),
    );
    gauges(
        &mut r,
        "webhook_dead_letters",
        "Webhook deliveries that gave up, kept until `mindfleet webhooks retry`.",
        d.webhooks.iter().map(|w| (hook(&w.name), w.dead as f64)),
    );
    let tools = || d.tools.servers.iter().flat_map(|s| s.tools.iter());
    counters(
        &mut r,
        "tool_calls",
        "Calls of each tool admitted (allowed to the persona, enabled), since the start.",
        tools().map(|t| (label("tool", &t.name), t.calls)),
    );
    counters(
        &mut r,
        "tool_failures",
        "Calls of each tool that failed, by error class, since the start.",
        tools().flat_map(|t| {
            t.failures.iter().map(|(class, n)| {
                (vec![("tool".to_string(), t.name.clone()), ("class".to_string(), class.clone())], *n)
            })
        }),
    );
    gauges(
        &mut r,
        "tool_latency_ms",
        "Each tool's call latency over its last 1,024 calls, by quantile (milliseconds).",
        tools().filter(|t| t.calls > 0).flat_map(|t| {
            [("0.5", t.latency_p50_ms), ("0.99", t.latency_p99_ms)]
                .map(|(q, v)| (vec![("tool".to_string(), t.name.clone()), ("quantile".to_string(), q.to_string())], v))
        }),
    );
    gauges(
        &mut r,
        "tool_server_restarts",
        "Times each tool server's connection was lost and made again.",
        d.tools.servers.iter().map(|s| (label("server", &s.name), f64::from(s.restarts))),
    );
    if !d.tools.servers.is_empty() {
        gauges(
            &mut r,
            "tool_approvals_pending",
            "Tool calls that wait for a person's approval, by tool.",
            d.tools
                .approvals
                .iter()
                .fold(std::collections::BTreeMap::<&str, f64>::new(), |mut m, a| {
                    *m.entry(a.tool.as_str()).or_default() += 1.0;
                    m
                })
                .into_iter()
                .map(|(tool, n)| (label("tool", tool), n)),
        );
    }
    // A fleet across nodes: each node as the answering one sees it (1 up or itself, 0 not).
    gauges(
        &mut r,
        "cluster_node_up",
        "Each node of a fleet across nodes: 1 when it is this node or linked to it, 0 when unreachable.",
        d.nodes.iter().map(|n| (label("node", &n.name), f64::from(u8::from(n.status != "unreachable")))),
    );
    let mut out = String::new();
    // Writing into a String cannot fail.
    let _ = encode(&mut out, &r);
    out
}
