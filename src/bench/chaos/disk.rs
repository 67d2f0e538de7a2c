//! The disk-full round of `bench chaos`: a tmpfs that fills up, and a fleet that must refuse
//! with 507, say why on `/health`, heal once space returns and decide every event it acknowledged.

use super::*;

/// A tmpfs mounted on a directory; unmounted when dropped (lazily if it is still busy).
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(dir: &Path, size: &str) -> anyhow::Result<Tmpfs> {
        let out =
            Command::new("mount").args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"]).arg(dir).output()?;
        anyhow::ensure!(
            out.status.success(),
            "mount -t tmpfs on {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(Tmpfs { dir: dir.to_path_buf() })
    }

    fn resize(&self, size: &str) -> anyhow::Result<()> {
        let out = Command::new("mount").args(["-o", &format!("remount,size={size}")]).arg(&self.dir).output()?;
        anyhow::ensure!(
            out.status.success(),
            "remount of {} to {size}: {}",
            self.dir.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        Ok(())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let ok = Command::new("umount").arg(&self.dir).status().is_ok_and(|s| s.success());
        if !ok {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}

/// Polls `f` every 50 ms until it gives `Some`, for at most `within`; the last answer either way.
async fn probe<F, Fut>(within: Duration, mut f: F) -> (bool, Value)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = (bool, Value)>,
{
    let deadline = Instant::now() + within;
    loop {
        let (ok, v) = f().await;
        if ok || Instant::now() > deadline {
            return (ok, v);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The acknowledged event of a probe's answer (`status`, `body`, `id`), if it was one.
fn acknowledged(a: &Value) -> Option<(String, Vec<String>)> {
    let accepted = a["status"] == 200 && a["body"]["accepted"] == true && a["body"]["duplicate"] != true;
    accepted.then(|| {
        let personas = a["body"]["personas"].as_array().map(|p| personas_of(p)).unwrap_or_default();
        (a["id"].as_str().unwrap_or_default().to_string(), personas)
    })
}

/// The disk-full round: a fleet on a `TMPFS_SIZE` tmpfs, filled by events of
/// `BIG_EVENT_BYTES` until it refuses them; while full, `POST /events` must answer 507 and
/// `/health` 503 with a reason; then the tmpfs grows to `TMPFS_FREED` and the fleet must heal
/// by itself (no restart) within `HEAL_DEADLINE` and decide every event it acknowledged.
pub(super) async fn disk_full(ctx: &Ctx, root: &Path) -> anyhow::Result<Value> {
    let mount = root.join("tmpfs");
    std::fs::create_dir_all(&mount)?;
    let tmpfs = Tmpfs::mount(&mount, TMPFS_SIZE)?;
    // On Ctrl-C or SIGTERM too, the fleet is killed (dropped with the round) and the tmpfs
    // unmounted.
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let result = tokio::select! {
        r = disk_full_on(ctx, &tmpfs) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
        _ = term.recv() => Err(anyhow::anyhow!("terminated")),
    };
    drop(tmpfs);
    result
}

async fn disk_full_on(ctx: &Ctx, tmpfs: &Tmpfs) -> anyhow::Result<Value> {
    let data = tmpfs.dir.join("data");
    let http = &ctx.http;
    let mut fleet = Fleet::start(&ctx.fleet, &data).await?;
    fleet.healthy(http, DEADLINE).await?;

    let prefix = format!("chaos-{:x}-disk", ctx.seed);
    let (state, fill_s) = fill(ctx, fleet.url("/events"), &prefix).await?;
    let full_at_bytes = fleet.stderr_bytes();
    let mut acked = std::mem::take(&mut *lock(&state.acked));

    // While full: an event is refused with 507, and /health is 503 with a reason. A probe the
    // fleet acknowledges after all counts as acknowledged.
    let big = "x".repeat(BIG_EVENT_BYTES);
    let (events_url, health_url) = (fleet.url("/events"), fleet.url("/health"));
    let mut n = 0;
    let (refused_507, event_answer) = probe(Duration::from_secs(15), || {
        n += 1;
        let id = format!("{prefix}-probe-{n}");
        let body =
            json!({"id": id, "domain": "chat", "room": "general", "from": "probe", "text": format!("{id} {big}")});
        let (http, url) = (http.clone(), events_url.clone());
        async move {
            let (status, body) = answer(http.post(url).json(&body).send().await).await;
            (status == 507, json!({"status": status, "body": body, "id": id}))
        }
    })
    .await;
    acked.extend(acknowledged(&event_answer));
    let (health_503, health_answer) = probe(Duration::from_secs(15), || {
        let (http, url) = (http.clone(), health_url.clone());
        async move {
            let (status, body) = answer(http.get(url).send().await).await;
            (status == 503, json!({"status": status, "body": body}))
        }
    })
    .await;
    let stderr_while_full = fleet.stderr_bytes() - full_at_bytes;

    // Space comes back: the fleet heals without a restart.
    tmpfs.resize(TMPFS_FREED)?;
    let freed = Instant::now();
    let (healed, heal_answer) = probe(HEAL_DEADLINE, || {
        let (http, events_url, health_url) = (http.clone(), events_url.clone(), health_url.clone());
        let id = format!("{prefix}-healed-{}", freed.elapsed().as_millis());
        async move {
            let (h, hb) = answer(http.get(health_url).send().await).await;
            if h != 200 {
                return (false, json!({"health": h, "body": hb}));
            }
            let body = json!({"id": id, "domain": "chat", "room": "general", "from": "probe", "text": "space is back"});
            let (status, body) = answer(http.post(events_url).json(&body).send().await).await;
            (status == 200, json!({"health": h, "status": status, "body": body, "id": id}))
        }
    })
    .await;
    acked.extend(acknowledged(&heal_answer));
    let healed_s = healed.then(|| round(freed.elapsed().as_secs_f64(), 3));
    let idle = match healed {
        true => fleet.idle(http, HEAL_DEADLINE).await.map_err(|e| format!("{e:#}")),
        false => Err("not healed".to_string()),
    };
    let exit = fleet.stop()?;
    let log_tail = lock(&fleet.log).tail();
    drop(fleet);
    let t = tally(&acked, &stored_decisions(&data).await?);
    // The refusal names the data dir, and /health says why.
    let data_dir = data.display().to_string();
    let names_data_dir = event_answer["body"]["error"].as_str().is_some_and(|e| e.contains(&data_dir));
    let health_reason = health_answer["body"]["error"].as_str().is_some_and(|e| !e.trim().is_empty());
    let ok = refused_507
        && names_data_dir
        && health_503
        && health_reason
        && healed
        && idle.is_ok()
        && t.lost.is_empty()
        && t.twice.is_empty();
    // Whatever it did not decide without a restart: is it decided after one?
    let after_restart = match t.lost.is_empty() {
        true => Value::Null,
        false => decided_after_restart(ctx, &data, &acked).await?,
    };
    Ok(json!({
        "ok": ok,
        "tmpfs": TMPFS_SIZE,
        "freed_to": TMPFS_FREED,
        "event_bytes": BIG_EVENT_BYTES,
        "fill_s": round(fill_s, 2),
        "acknowledged": acked.len(),
        "deliveries": t.deliveries,
        "decided": t.decided,
        // Acknowledged deliveries the fleet did not decide without a restart.
        "undecided": t.lost.len(),
        "decided_twice": t.twice.len(),
        "first_refusal": state.first_refusal.get(),
        "event_refused_507": refused_507,
        "refusal_names_data_dir": names_data_dir,
        "event_while_full": event_answer,
        "health_503": health_503,
        "health_gives_reason": health_reason,
        "health_while_full": health_answer,
        "stderr_bytes_while_full": stderr_while_full,
        "healed": healed,
        "healed_s": healed_s,
        "heal_answer": heal_answer,
        "idle_s": idle.as_ref().ok().map(|s| round(*s, 3)),
        "idle_error": idle.err(),
        "sigterm_exit": exit,
        "undecided_ids": sample(&t.lost),
        "decided_twice_ids": sample(&t.twice),
        // When some were undecided: the same check after a restart (lost: not even then).
        "after_restart": after_restart,
        "log_tail": if ok { Value::Null } else { json!(log_tail) },
    }))
}

/// Injects large events from the bench's clients until the disk refuses one; what they
/// acknowledged, and how long filling took.
async fn fill(ctx: &Ctx, url: String, prefix: &str) -> anyhow::Result<(Arc<Injection>, f64)> {
    let state = Arc::new(Injection::default());
    let stop = Arc::new(AtomicBool::new(false));
    let clients = inject(&ctx.http, url, ctx.clients, prefix.to_string(), BIG_EVENT_BYTES, state.clone(), stop.clone());
    let started = Instant::now();
    while !clients.iter().any(|c| c.is_finished()) {
        if started.elapsed() > DEADLINE {
            stop.store(true, Ordering::Relaxed);
            anyhow::bail!("the disk did not fill within {DEADLINE:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.await?;
    }
    let fill_s = started.elapsed().as_secs_f64();
    Ok((state, fill_s))
}

/// Whether the acknowledged events are all decided once the fleet restarts on `data`.
async fn decided_after_restart(ctx: &Ctx, data: &Path, acked: &Acked) -> anyhow::Result<Value> {
    let mut fleet = Fleet::start(&ctx.fleet, data).await?;
    fleet.healthy(&ctx.http, DEADLINE).await?;
    let idle = fleet.idle(&ctx.http, DEADLINE).await;
    fleet.stop()?;
    drop(fleet);
    let t = tally(acked, &stored_decisions(data).await?);
    Ok(json!({"idle": idle.is_ok(), "decided": t.decided, "lost": t.lost.len(), "decided_twice": t.twice.len()}))
}
