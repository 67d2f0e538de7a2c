//! `mindfleet bench dashboard`: the same load on the same fleet twice, without a page and with
//! open dashboard pages (each streaming the live cards and refreshing a persona's panel every
//! second), so what the pages cost the fleet is read as ratios of one run to the other.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{SoakLoad, percentile, round, soak};

/// What the open pages saw.
#[derive(Default)]
struct Seen {
    frames: u64,
    frame_bytes: Vec<f64>,
    page_ms: Vec<f64>,
    panel_ms: Vec<f64>,
    failures: u64,
}

/// Open dashboard pages on a running fleet, until [`Pages::finish`].
pub(crate) struct Pages {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<Seen>>,
}

impl Pages {
    /// `n` pages on the fleet at `addr`: each loads `/`, streams `/dashboard/events`, and
    /// fetches `persona`'s panel once a second (a panel kept open on a busy persona).
    pub(crate) fn open(addr: SocketAddr, n: usize, persona: &str) -> Pages {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = (0..n)
            .flat_map(|_| {
                let http = reqwest::Client::new();
                let (base, stop) = (format!("http://{addr}"), stop.clone());
                let stream = tokio::spawn(stream(http.clone(), base.clone(), stop.clone()));
                let panel = tokio::spawn(panel(http, format!("{base}/dashboard/persona/{persona}"), stop));
                [stream, panel]
            })
            .collect();
        Pages { stop, tasks }
    }

    pub(crate) async fn finish(self) -> Value {
        self.stop.store(true, Ordering::Relaxed);
        let mut all = Seen::default();
        for t in self.tasks {
            let s = t.await.unwrap_or_default();
            all.frames += s.frames;
            all.failures += s.failures;
            all.frame_bytes.extend(s.frame_bytes);
            all.page_ms.extend(s.page_ms);
            all.panel_ms.extend(s.panel_ms);
        }
        for v in [&mut all.frame_bytes, &mut all.page_ms, &mut all.panel_ms] {
            v.sort_by(f64::total_cmp);
        }
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len().max(1) as f64;
        json!({
            "frames": all.frames,
            "frame_kib_mean": round(mean(&all.frame_bytes) / 1024.0, 1),
            "frame_kib_max": round(all.frame_bytes.last().copied().unwrap_or(0.0) / 1024.0, 1),
            "page_ms_p50": round(percentile(&mut all.page_ms, 0.5), 1),
            "panels": all.panel_ms.len(),
            "panel_ms_p50": round(percentile(&mut all.panel_ms, 0.5), 1),
            "panel_ms_p99": round(percentile(&mut all.panel_ms, 0.99), 1),
            "failures": all.failures,
        })
    }
}

/// One page: loads `/`, then reads the stream's frames until told to stop.
async fn stream(http: reqwest::Client, base: String, stop: Arc<AtomicBool>) -> Seen {
    let mut seen = Seen::default();
    match get_ms(&http, &format!("{base}/")).await {
        Some(ms) => seen.page_ms.push(ms),
        None => seen.failures += 1,
    }
    let Ok(mut r) = http.get(format!("{base}/dashboard/events")).send().await else {
        seen.failures += 1;
        return seen;
    };
    let mut frame = 0usize;
    while !stop.load(Ordering::Relaxed) {
        // Checked for `stop` at least once a second (the stream may be quiet).
        let chunk = match tokio::time::timeout(Duration::from_secs(1), r.chunk()).await {
            Err(_) => continue,
            Ok(Ok(Some(c))) => c,
            Ok(_) => {
                seen.failures += 1;
                break;
            }
        };
        // Frames are `event: cards\ndata: {...}\n\n`; their size is what a page downloads.
        for piece in chunk.split_inclusive(|&b| b == b'\n') {
            frame += piece.len();
            if piece == b"\n" {
                if frame > 1 {
                    seen.frames += 1;
                    seen.frame_bytes.push(frame as f64);
                }
                frame = 0;
            }
        }
    }
    seen
}

/// Milliseconds to GET `url` and read all of it; `None` if that failed.
async fn get_ms(http: &reqwest::Client, url: &str) -> Option<f64> {
    let t = Instant::now();
    let r = http.get(url).send().await.ok()?;
    if !r.status().is_success() {
        return None;
    }
    r.bytes().await.ok()?;
    Some(t.elapsed().as_secs_f64() * 1e3)
}

/// A panel kept open: fetched once a second.
async fn panel(http: reqwest::Client, url: String, stop: Arc<AtomicBool>) -> Seen {
    let mut seen = Seen::default();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        match get_ms(&http, &url).await {
            Some(ms) => seen.panel_ms.push(ms),
            None => seen.failures += 1,
        }
    }
    seen
}

/// The load without pages, then with `pages` open; figures of both and their ratios.
pub async fn dashboard(load: SoakLoad, pages: usize) -> anyhow::Result<Value> {
    let without = soak(load, 0).await?;
    let with = soak(load, pages).await?;
    let ratio = |k: &str| round(with[k].as_f64().unwrap_or(0.0) / without[k].as_f64().unwrap_or(0.0).max(1e-9), 2);
    let pick = |v: &Value| {
        let mut out = json!({});
        for k in [
            "achieved_per_s",
            "behind",
            "errors",
            "decision_p50_ms",
            "decision_p99_ms",
            "decision_p99_max_ms",
            "decision_p99_all_ms",
            "cpu_s",
            "rss_max_mb",
            "writer_busy_mean",
            "drained",
        ] {
            out[k] = v[k].clone();
        }
        out
    };
    Ok(json!({
        "bench": "dashboard",
        "personas": load.personas,
        "rate_per_s": load.rate,
        "seconds": load.seconds,
        "pages": pages,
        "without": pick(&without),
        "with": pick(&with),
        "pages_seen": with["pages"].clone(),
        "decision_p50_with_over_without": ratio("decision_p50_ms"),
        "decision_p99_with_over_without": ratio("decision_p99_ms"),
        "decision_p99_all_with_over_without": ratio("decision_p99_all_ms"),
        "achieved_with_over_without": ratio("achieved_per_s"),
        "cpu_with_over_without": ratio("cpu_s"),
    }))
}
