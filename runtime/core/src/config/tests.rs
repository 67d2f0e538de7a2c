use super::error::line_col;
use super::*;

fn parse(text: &str) -> Result<FleetConfig, ConfigError> {
    FleetConfig::from_toml(Path::new("fleet.toml"), text)
}

const ONE: &str = "[[persona]]\nname = \"a\"\nrole = \"helper\"\n";

/// A fleet with every common section and two personas (the shape of `config/fleet.toml`).
pub(super) const SAMPLE: &str = r#"[fleet]
name = "sample"
brain = "local"

[admin]
addr = "127.0.0.1:7878"
max_body_bytes = 65536

[storage]
data_dir = "./data"

[supervision]
max_restarts = 3
within_secs = 5.0

[defaults]
inbox_capacity = 1000
wm_capacity = 100
wm_ttl_secs = 604800.0

[[persona]]
name = "helper"
role = "generalist assistant"
domains = ["chat", "tasks"]
expertise = ["onboarding", "docs", "howto", "question"]
rooms = ["general", "standup"]

[[persona]]
name = "reviewer"
role = "code reviewer"
domains = ["code"]
expertise = ["review", "rust", "tests"]
rooms = ["general"]
"#;

#[test]
fn the_sample_fleet_is_valid() {
    let cfg = parse(SAMPLE).unwrap();
    assert_eq!(cfg.personas.len(), 2);
}

#[test]
fn admin_connection_limits_and_allowed_hosts_have_defaults_and_are_checked() {
    let a = parse(ONE).unwrap().admin;
    assert_eq!(
        (a.header_timeout, a.idle_timeout, a.max_connections, a.allowed_hosts.len()),
        (Duration::from_secs(10), Duration::from_secs(60), 512, 0)
    );
    let a = parse(&format!(
        "[admin]\nallowed_hosts = [\"Fleet.Internal\"]\nheader_timeout_secs = 2.5\nidle_timeout_secs = 30\n\
         max_connections = 64\n{ONE}"
    ))
    .unwrap()
    .admin;
    assert_eq!(
        (a.header_timeout, a.idle_timeout, a.max_connections, a.allowed_hosts),
        (Duration::from_millis(2500), Duration::from_secs(30), 64, vec!["fleet.internal".to_string()])
    );
    for (bad, key) in [
        ("allowed_hosts = [\"http://x\"]", "allowed_hosts"),
        ("allowed_hosts = [\"x:80\"]", "allowed_hosts"),
        ("header_timeout_secs = 0.0", "header_timeout_secs"),
        ("idle_timeout_secs = -1.0", "idle_timeout_secs"),
        ("max_connections = 0", "max_connections"),
        ("max_streams = -1", "max_streams"),
    ] {
        let e = parse(&format!("[admin]\n{bad}\n{ONE}")).unwrap_err();
        assert!(e.message.contains(key) && e.line.is_some(), "{bad}: {e}");
    }
}

#[test]
fn max_streams_defaults_below_max_connections_and_must_stay_below_it() {
    let streams = |admin: &str| parse(&format!("[admin]\n{admin}\n{ONE}")).map(|c| c.admin.max_streams);
    assert_eq!(streams("").unwrap(), 64);
    assert_eq!(streams("max_connections = 8").unwrap(), 4, "half the connections of a small fleet");
    assert_eq!(streams("max_connections = 8\nmax_streams = 7").unwrap(), 7);
    assert_eq!(streams("max_streams = 0").unwrap(), 0);
    let e = streams("max_connections = 8\nmax_streams = 8").unwrap_err();
    let s = e.to_string();
    assert!(s.starts_with("fleet.toml:3:15: `max_streams` = 8 must be less than `max_connections` (8)"), "{s}");
    let e = streams("max_streams = 512").unwrap_err().to_string();
    assert!(e.starts_with("fleet.toml:2:15:") && e.contains("(512)"), "{e}");
}

#[test]
fn unknown_key_names_line_and_key() {
    let err = parse(&format!("{ONE}colour = \"red\"\n")).unwrap_err();
    let s = err.to_string();
    assert!(s.starts_with("fleet.toml:4:1:"), "{s}");
    assert!(s.contains("colour"), "{s}");
}

#[test]
fn wrong_type_names_the_place() {
    let err = parse("[[persona]]\nname = \"a\"\nrole = \"r\"\ninbox_capacity = \"big\"\n").unwrap_err();
    assert_eq!(err.line.unwrap().0, 4, "{err}");
}

#[test]
fn out_of_range_names_key_and_range() {
    let err = parse("[[persona]]\nname = \"a\"\nrole = \"r\"\ninbox_capacity = 0\n").unwrap_err();
    let s = err.to_string();
    assert!(s.starts_with("fleet.toml:4:18:"), "{s}");
    assert!(s.contains("inbox_capacity"), "{s}");
}

#[test]
fn focus_max_and_preoccupation_ttl_default_come_from_defaults_and_are_checked() {
    let p = &parse(ONE).unwrap().personas[0];
    assert_eq!((p.focus_max, p.preoccupation_ttl), (Duration::from_secs(900), Duration::from_secs(3600)));
    let text = format!("[defaults]\nfocus_max_secs = 60\n{ONE}preoccupation_ttl_secs = 120\n");
    let p = &parse(&text).unwrap().personas[0];
    assert_eq!((p.focus_max, p.preoccupation_ttl), (Duration::from_secs(60), Duration::from_secs(120)));
    let err = parse(&format!("{ONE}focus_max_secs = 0\n")).unwrap_err().to_string();
    assert!(err.starts_with("fleet.toml:4:18:") && err.contains("focus_max_secs"), "{err}");
    let err = parse(&format!("[defaults]\npreoccupation_ttl_secs = -1\n{ONE}")).unwrap_err().to_string();
    assert!(err.starts_with("fleet.toml:2:26:") && err.contains("preoccupation_ttl_secs"), "{err}");
}

#[test]
fn duplicate_persona_is_refused_at_second_name() {
    let err = parse(&format!("{ONE}{ONE}")).unwrap_err();
    assert_eq!(err.line, Some((5, 8)), "{err}");
    assert!(err.message.contains("duplicate persona name \"a\""));
}

#[test]
fn a_persona_node_must_be_one_of_the_cluster_nodes() {
    let text = "[cluster]\nnodes = [\"a\", \"b\"]\n[[persona]]\nname = \"x\"\nrole = \"r\"\nnode = \"c\"\n";
    let err = parse(text).unwrap_err();
    assert_eq!(err.line, Some((6, 8)), "{err}");
    assert!(err.message.contains("persona \"x\": node \"c\" is not in `[cluster] nodes` (a, b)"), "{err}");
    let err = parse("[cluster]\nnodes = [\"a\", \"a\"]\n").unwrap_err();
    assert!(err.message.contains("[cluster] node \"a\" is listed twice"), "{err}");
    // Without `[cluster] nodes`, the nodes are those that personas name, in file order.
    let cfg = parse(&format!("{ONE}node = \"n2\"\n[[persona]]\nname = \"b\"\nrole = \"r\"\nnode = \"n1\"\n")).unwrap();
    assert_eq!(cfg.cluster_nodes(), ["n2", "n1"]);
    assert!(cfg.cluster.rebalance && cfg.cluster.drain_on_stop, "on by default");
    let cfg = parse(&format!("[cluster]\nnodes = [\"a\"]\nrebalance = false\ndrain_on_stop = false\n{ONE}")).unwrap();
    assert!(!cfg.cluster.rebalance && !cfg.cluster.drain_on_stop);
    let err = parse("[cluster]\nrebalance = \"yes\"\n").unwrap_err();
    assert_eq!(err.line.map(|l| l.0), Some(2), "{err}");
    let cfg = parse(&format!("[cluster]\nnodes = [\"a\", \"b\"]\nembedding = \"b\"\n{ONE}")).unwrap();
    assert_eq!((cfg.cluster.embedding.as_deref(), cfg.cluster.index.as_deref()), (Some("b"), None));
    let err = parse("[cluster]\nnodes = [\"a\"]\nindex = \"b\"\n").unwrap_err();
    assert!(err.message.contains("[cluster] index: node \"b\" is not in `[cluster] nodes` (a)"), "{err}");
    let err = parse("[cluster]\nnodes = [\"a\"]\nembedding = \"z\"\n").unwrap_err();
    assert_eq!(err.line, Some((3, 13)), "{err}");
    assert!(err.message.contains("[cluster] embedding: node \"z\" is not in `[cluster] nodes` (a)"), "{err}");
}

#[test]
fn scheduler_defaults_when_the_table_is_absent() {
    let s = parse(ONE).unwrap().scheduler;
    assert_eq!(s.cheap_slots, 256);
    assert_eq!(s.aging_per_30s, 0.5);
    assert_eq!(s.promote_after, Duration::from_secs(60));
    assert_eq!(s.background_period, Duration::from_secs(10));
    assert_eq!(s.fleet_inferences_per_hour, 1_000_000);
    assert_eq!(s.fleet_tokens_per_hour, 1_000_000_000);
    assert_eq!(s.budget_soft_limit, 0.8);
}

#[test]
fn scheduler_policy_keys_are_read() {
    let s = parse(&format!(
        "[scheduler]\npromote_after_secs = 30.0\nbackground_period_secs = 2.5\n\
         fleet_inferences_per_hour = 100\nfleet_tokens_per_hour = 5000\nbudget_soft_limit = 0.5\n{ONE}"
    ))
    .unwrap()
    .scheduler;
    assert_eq!(s.promote_after, Duration::from_secs(30));
    assert_eq!(s.background_period, Duration::from_millis(2500));
    assert_eq!((s.fleet_inferences_per_hour, s.fleet_tokens_per_hour), (100, 5000));
    assert_eq!(s.budget_soft_limit, 0.5);
}

#[test]
fn the_budget_queue_deadline_defaults_to_30_s_and_is_checked() {
    assert_eq!(parse(ONE).unwrap().scheduler.queue_deadline, Duration::from_secs(30));
    let s = parse(&format!("[scheduler]\nqueue_deadline_secs = 2.5\n{ONE}")).unwrap().scheduler;
    assert_eq!(s.queue_deadline, Duration::from_millis(2500));
    let s = parse(&format!("[scheduler]\nqueue_deadline_secs = 0.0\n{ONE}")).unwrap().scheduler;
    assert_eq!(s.queue_deadline, Duration::ZERO, "0: the rules brain answers at once");
    let err = parse(&format!("[scheduler]\nqueue_deadline_secs = -1.0\n{ONE}")).unwrap_err();
    assert_eq!(err.line, Some((2, 23)), "{err}");
    assert!(err.message.contains("queue_deadline_secs"), "{err}");
    let err = parse(&format!("[scheduler]\nqueue_deadline_secs = \"30s\"\n{ONE}")).unwrap_err();
    assert!(err.message.contains("queue_deadline_secs"), "{err}");
}

#[test]
fn scheduler_soft_limit_out_of_range_names_the_key() {
    let err = parse(&format!("[scheduler]\nbudget_soft_limit = 1.5\n{ONE}")).unwrap_err();
    assert_eq!(err.line, Some((2, 21)), "{err}");
    assert!(err.message.contains("budget_soft_limit"), "{err}");
    let err = parse(&format!("[scheduler]\nfleet_tokens_per_hour = -1\n{ONE}")).unwrap_err();
    assert!(err.message.contains("fleet_tokens_per_hour"), "{err}");
    let err = parse(&format!("[scheduler]\npromote_after_secs = 0.0\n{ONE}")).unwrap_err();
    assert!(err.message.contains("promote_after_secs"), "{err}");
}

#[test]
fn index_keys_are_read_and_a_relative_root_is_refused_where_it_is() {
    assert_eq!(parse(ONE).unwrap().index, IndexConfig::default());
    let i = parse(&format!(
        "[index]\nallowed_roots = [\"/srv/code\"]\ncursor_ttl_secs = 30\nmax_cursors = 5\nvector_weight = 2.0\n{ONE}"
    ))
    .unwrap()
    .index;
    assert_eq!(i.allowed_roots, [PathBuf::from("/srv/code")]);
    assert_eq!(
        (i.cursor_ttl, i.max_cursors, i.keyword_weight, i.vector_weight),
        (Duration::from_secs(30), 5, 1.0, 2.0)
    );
    let err = parse(&format!("[index]\nallowed_roots = [\"/srv\", \"code\"]\n{ONE}")).unwrap_err();
    assert_eq!(err.line, Some((2, 26)), "{err}");
    assert!(err.message.contains("\"code\" is not an absolute path"), "{err}");
    let err = parse(&format!("[index]\nmax_cursors = 0\n{ONE}")).unwrap_err();
    assert!(err.message.contains("max_cursors"), "{err}");
    let err = parse(&format!("[index]\nkeyword_weight = 0.0\nvector_weight = 0.0\n{ONE}")).unwrap_err();
    assert!(err.message.contains("weights"), "{err}");
}

#[test]
fn references_are_read_from_the_fleet_file_and_its_includes_and_bad_ones_are_named() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("guides")).unwrap();
    std::fs::write(dir.path().join("guides/retry.md"), "# Retry\n").unwrap();
    std::fs::write(
        dir.path().join("refs.toml"),
        "[[reference]]\nid = \"retry\"\nname = \"Retry guide\"\ntags = [\"backoff\"]\npath = \"guides/retry.md\"\nmode = \"auto\"\n",
    )
    .unwrap();
    let fleet = dir.path().join("fleet.toml");
    let load = |text: &str| FleetConfig::from_toml(&fleet, text);
    let head = "[references]\ninclude = [\"refs.toml\"]\ndiscovery_depth = 3\n\n[[reference]]\nid = \"guides\"\nname = \"All guides\"\npath = \"guides\"\ncontents = { templates = [\"retry.md\"] }\n";
    let r = load(&format!("{head}{ONE}")).unwrap().references;
    let ids: Vec<(&str, crate::refs::RefMode)> = r.catalog.refs.iter().map(|r| (r.id.as_str(), r.mode)).collect();
    assert_eq!(ids, [("guides", crate::refs::RefMode::Selectable), ("retry", crate::refs::RefMode::Auto)]);
    assert_eq!(r.catalog.refs[0].path, dir.path().join("guides"));
    assert_eq!((r.discovery_depth, r.semantic_threshold), (3, 0.26));

    let dup = head.replace("id = \"guides\"", "id = \"retry\"");
    let err = load(&format!("{dup}{ONE}")).unwrap_err();
    assert!(err.to_string().contains("refs.toml:2:6: duplicate reference id \"retry\""), "{err}");
    let missing = head.replace("path = \"guides\"", "path = \"nowhere\"");
    let err = load(&format!("{missing}{ONE}")).unwrap_err();
    assert_eq!(err.line, Some((8, 8)), "{err}");
    assert!(err.message.contains("nowhere does not exist"), "{err}");
    let err = load(&format!("{}mode = \"sometimes\"\n{ONE}", head)).unwrap_err();
    assert!(err.message.contains("`mode` = \"sometimes\""), "{err}");
    let err = load(&format!("{}\n{ONE}", head.replace("templates", "recipes"))).unwrap_err();
    assert!(err.message.contains("\"recipes\""), "{err}");
    let err = load(&format!("{}{ONE}", head.replace("refs.toml", "gone.toml"))).unwrap_err();
    assert!(err.to_string().starts_with(&format!("{}:2:12: `include`: cannot read", fleet.display())), "{err}");
}

#[test]
fn line_col_counts_characters() {
    assert_eq!(line_col("ab\ncé\nx", 7), (3, 1));
    assert_eq!(line_col("ab\ncé", 3), (2, 1));
}

#[test]
fn the_turn_hold_defaults_to_five_minutes_and_zero_is_refused_where_it_is() {
    assert_eq!(parse(ONE).unwrap().coordination.hold, Duration::from_secs(300));
    let c = parse(&format!("[coordination]\nhold_secs = 20\n{ONE}")).unwrap().coordination;
    assert_eq!(c.hold, Duration::from_secs(20));
    let err = parse(&format!("[coordination]\nhold_secs = 0\n{ONE}")).unwrap_err();
    assert_eq!(err.line, Some((2, 13)), "{err}");
    assert!(err.message.contains("hold_secs"), "{err}");
}

#[test]
fn the_redundancy_threshold_defaults_to_its_calibration_and_is_a_cosine() {
    assert_eq!(parse(ONE).unwrap().coordination.redundancy_threshold, REDUNDANCY_THRESHOLD);
    let c = parse(&format!("[coordination]\nredundancy_threshold = 0.75\n{ONE}")).unwrap().coordination;
    assert_eq!(c.redundancy_threshold, 0.75);
    let err = parse(&format!("[coordination]\nredundancy_threshold = 1.5\n{ONE}")).unwrap_err();
    assert_eq!(err.line, Some((2, 24)), "{err}");
    assert!(err.message.contains("redundancy_threshold") && err.message.contains("0..=1"), "{err}");
}

#[test]
fn observations_name_who_consolidates_and_an_unknown_one_is_named_where_it_is() {
    for (value, want) in [
        ("\"model\"", Observer::Model),
        ("\"rules\"", Observer::Rules),
        ("\"off\"", Observer::Off),
        ("true", Observer::Rules),
        ("false", Observer::Off),
    ] {
        let c = parse(&format!("[conversation]\nobservations = {value}\n{ONE}")).unwrap();
        assert_eq!(c.conversation.observations, want, "{value}");
    }
    assert_eq!(parse(ONE).unwrap().conversation.observations, Observer::Rules, "the default");
    let e = parse(&format!("[conversation]\nobservations = \"gpt\"\n{ONE}")).unwrap_err().to_string();
    assert!(
        e.contains("fleet.toml:2:16:")
            && e.contains("`observations` = \"gpt\"")
            && e.contains("known: \"rules\", \"model\""),
        "{e}"
    );
}

#[test]
fn a_webhook_needs_its_secret_s_variable_an_http_url_and_known_personas_and_kinds() {
    use crate::webhook::HookKind;
    // PATH is set wherever tests run: it stands for a variable holding the secret.
    let hook =
        |keys: &str| format!("{ONE}[[webhook]]\nurl = \"https://hooks.example/in\"\nsecret_env = \"PATH\"\n{keys}");
    let cfg = parse(&hook("")).unwrap();
    let w = &cfg.webhooks[0];
    assert_eq!((w.name.as_str(), w.route.kinds.as_slice()), ("https://hooks.example/in", [HookKind::Reply].as_slice()));
    assert_eq!(w.secret, std::env::var("PATH").unwrap());
    assert_eq!((w.max_attempts, w.backoff_max), (100, Duration::from_secs(10)));
    assert!(!format!("{w:?}").contains(&w.secret), "the secret stays out of debug output");
    let cfg = parse(&hook(
        "name = \"ops\"\nrooms = [\"ops\"]\npersonas = [\"a\"]\nkinds = [\"decision\", \"dead_letter\"]\n",
    ))
    .unwrap();
    let r = &cfg.webhooks[0].route;
    assert!(r.wants(HookKind::Decision, "a", "ops") && !r.wants(HookKind::Reply, "a", "ops"));

    let text =
        format!("{ONE}[[webhook]]\nurl = \"http://127.0.0.1:9/\"\nsecret_env = \"MINDFLEET_TEST_NO_SUCH_SECRET\"\n");
    let err = parse(&text).unwrap_err().to_string();
    assert!(err.starts_with("fleet.toml:6:14:"), "{err}");
    assert!(
        err.contains(
            "`secret_env`: the variable MINDFLEET_TEST_NO_SUCH_SECRET that holds its signing secret is not set"
        )
    );
    let err = parse(&format!("{ONE}[[webhook]]\nurl = \"ftp://x/\"\nsecret_env = \"PATH\"\n")).unwrap_err().to_string();
    assert!(err.starts_with("fleet.toml:5:7:") && err.contains("must be an http:// or https:// URL"), "{err}");
    let err = parse(&hook("personas = [\"zed\"]\n")).unwrap_err().to_string();
    assert!(err.starts_with("fleet.toml:7:13:") && err.contains("\"zed\" is not a persona of the fleet"), "{err}");
    let err = parse(&hook("kinds = [\"replies\"]\n")).unwrap_err().to_string();
    assert!(err.starts_with("fleet.toml:7:10:") && err.contains("unknown kind \"replies\""), "{err}");
    let err = parse(&hook("backoff_max_secs = 0.1\n")).unwrap_err().to_string();
    assert!(err.contains("`backoff_max_secs` is below `backoff_initial_secs`"), "{err}");
    let twice = format!("{}[[webhook]]\nurl = \"https://hooks.example/in\"\nsecret_env = \"PATH\"\n", hook(""));
    let err = parse(&twice).unwrap_err().to_string();
    assert!(err.starts_with("fleet.toml:8:7:") && err.contains("duplicate webhook"), "{err}");
}

#[test]
fn a_local_model_batches_max_batch_requests_and_the_scheduler_grants_as_many_unless_told() {
    let cfg = parse(&format!("[llm]\nmax_batch = 4\nkv_memory_mb = 256\nprefix_reuse = false\n{ONE}")).unwrap();
    assert_eq!(cfg.llm, LlmBackend::Local(LocalLlm { max_batch: 4, kv_memory_mb: 256, prefix_reuse: false }));
    assert_eq!(cfg.scheduler.inference_slots, 4);
    let cfg = parse(&format!("[scheduler]\ninference_slots = 2\n{ONE}")).unwrap();
    assert_eq!((cfg.llm, cfg.scheduler.inference_slots), (LlmBackend::default(), 2));
    let cfg = parse(ONE).unwrap();
    assert_eq!(cfg.scheduler.inference_slots, LocalLlm::DEFAULT_MAX_BATCH);
    // Below one full context, and keys an endpoint does not take.
    let e = parse(&format!("[llm]\nkv_memory_mb = 64\n{ONE}")).unwrap_err();
    assert!(e.to_string().contains("kv_memory_mb") && e.line == Some((2, 16)), "{e}");
    let openai = "[llm]\nbackend = \"openai\"\nurl = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\n";
    let e = parse(&format!("{openai}max_batch = 4\n{ONE}")).unwrap_err();
    assert!(e.to_string().contains("`max_batch` and `kv_memory_mb` are for `backend = \"local\"`"), "{e}");
    assert_eq!(e.line.map(|l| l.0), Some(5));
}

#[test]
fn training_settings_are_read_and_a_bad_one_is_named_where_it_is() {
    let c = parse(ONE).unwrap();
    assert_eq!(c.training, TrainingConfig::default());
    let c = parse(&format!(
        "[training]\nrank = 4\nalpha = 8.0\ntargets = [\"q\", \"v\"]\nepochs = 3\nnew_chats = 0\n{ONE}"
    ))
    .unwrap();
    assert_eq!((c.training.rank, c.training.alpha, c.training.epochs, c.training.new_chats), (4, 8.0, 3, 0));
    assert_eq!(c.training.targets, ["q", "v"]);
    let e = parse(&format!("[training]\ntargets = [\"q\", \"mlp\"]\n{ONE}")).unwrap_err().to_string();
    assert!(
        e.starts_with("fleet.toml:2:") && e.contains("\"mlp\" is not a projection (q, k, v, o, gate, up, down)"),
        "{e}"
    );
    let e = parse(&format!("[training]\ntargets = []\n{ONE}")).unwrap_err().to_string();
    assert!(e.starts_with("fleet.toml:2:11:") && e.contains("`targets` is empty"), "{e}");
    let e = parse(&format!("[training]\nrank = 0\n{ONE}")).unwrap_err().to_string();
    assert!(e.starts_with("fleet.toml:2:") && e.contains("`rank` = 0 is out of range (1..=64)"), "{e}");
    let e = parse(&format!("[training]\nsteps = 3\n{ONE}")).unwrap_err().to_string();
    assert!(e.contains("steps"), "{e}");
}

#[test]
fn decoding_keys_are_read_for_either_backend_and_a_bad_one_is_named_where_it_is() {
    assert_eq!(parse(ONE).unwrap().decoding, Decoding::default());
    let keys = "repetition_penalty = 1.5\nno_repeat_ngram = 0\nno_copy_ngram = 6\nstop_repeated_sentence = false\n\
                reply_max_tokens = 96\nlesson_max_tokens = 24\n";
    let want = Decoding {
        repetition: Repetition { penalty: 1.5, no_repeat_ngram: 0, no_copy_ngram: 6, stop_repeated_sentence: false },
        reply_max_tokens: 96,
        lesson_max_tokens: 24,
    };
    assert_eq!(parse(&format!("[llm]\n{keys}{ONE}")).unwrap().decoding, want);
    let openai = "[llm]\nbackend = \"openai\"\nurl = \"http://127.0.0.1:1/v1\"\nmodel = \"m\"\n";
    assert_eq!(parse(&format!("{openai}{keys}{ONE}")).unwrap().decoding, want);
    // A whole number is a penalty too; off is 1.
    let c = parse(&format!("[llm]\nrepetition_penalty = 1\n{ONE}")).unwrap();
    assert_eq!(c.decoding.repetition.penalty, 1.0);
    for (bad, at, says) in [
        ("repetition_penalty = 0.9", "fleet.toml:2:22:", "`repetition_penalty` = 0.9 is out of range (1..=10)"),
        ("no_repeat_ngram = -1", "fleet.toml:2:19:", "`no_repeat_ngram` = -1 is out of range (0..=64)"),
        ("no_copy_ngram = 65", "fleet.toml:2:17:", "`no_copy_ngram` = 65 is out of range (0..=64)"),
        ("reply_max_tokens = 0", "fleet.toml:2:20:", "`reply_max_tokens` = 0 is out of range (1..=8192)"),
        ("lesson_max_tokens = 0", "fleet.toml:2:21:", "`lesson_max_tokens` = 0 is out of range (1..=8192)"),
        ("stop_repeated_sentence = \"yes\"", "fleet.toml:2:26:", "stop_repeated_sentence"),
    ] {
        let e = parse(&format!("[llm]\n{bad}\n{ONE}")).unwrap_err().to_string();
        assert!(e.starts_with(at) && e.contains(says), "{bad}: {e}");
    }
    // The backend's own errors come first.
    let e = parse(&format!("[llm]\nkv_memory_mb = 64\nreply_max_tokens = 0\n{ONE}")).unwrap_err();
    assert!(e.to_string().contains("kv_memory_mb"), "{e}");
}
