//! Fleet files: every kind of bad input is refused with `path:line:column` and exit code 2.

use std::process::Command;

fn check(toml: &str) -> (i32, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.toml");
    std::fs::write(&path, toml).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_mindfleet")).arg("check").arg(&path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr).replace(&*path.to_string_lossy(), "fleet.toml");
    (out.status.code().unwrap_or(-1), text + &String::from_utf8_lossy(&out.stdout))
}

const OK: &str = "[[persona]]\nname = \"a\"\nrole = \"r\"\nrooms = [\"general\"]\n";

#[test]
fn the_default_fleet_checks_out() {
    let out = Command::new(env!("CARGO_BIN_EXE_mindfleet")).args(["check", "config/fleet.toml"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn unknown_key() {
    let (code, msg) = check(&format!("{OK}colour = \"red\"\n"));
    assert_eq!(code, 2);
    assert!(msg.contains("fleet.toml:5:1:") && msg.contains("colour"), "{msg}");
}

#[test]
fn wrong_type() {
    let (code, msg) = check(&format!("{OK}inbox_capacity = \"lots\"\n"));
    assert_eq!(code, 2);
    assert!(msg.contains("fleet.toml:5:18:") && msg.contains("invalid type"), "{msg}");
}

#[test]
fn a_type_error_names_the_key_with_its_table() {
    let (code, msg) = check(&format!("{OK}[[persona]]\nname = \"b\"\nrole = \"r\"\ninbox_capacity = 0.0\n"));
    assert_eq!(code, 2);
    assert!(
        msg.contains("fleet.toml:8:18: `persona[1].inbox_capacity`: invalid type: floating point `0.0`, expected i64"),
        "{msg}"
    );
    let (code, msg) = check(&format!("[storage]\nmax_pending = \"all\"\n{OK}"));
    assert_eq!(code, 2);
    assert!(msg.contains("fleet.toml:2:15: `storage.max_pending`: invalid type"), "{msg}");
}

#[test]
fn check_of_dev_zero_stops_at_the_size_limit() {
    let started = std::time::Instant::now();
    let out = Command::new(env!("CARGO_BIN_EXE_mindfleet")).args(["check", "/dev/zero"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let msg = String::from_utf8_lossy(&out.stderr);
    assert!(msg.contains("/dev/zero: the fleet file is larger than the limit of 4 MiB"), "{msg}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10), "{:?}", started.elapsed());
}

#[test]
fn out_of_range() {
    let (code, msg) = check(&format!("[supervision]\nmax_restarts = -1\n{OK}"));
    assert_eq!(code, 2);
    assert!(msg.contains("fleet.toml:2:16:") && msg.contains("max_restarts"), "{msg}");
}

#[test]
fn duplicate_persona_name() {
    let (code, msg) = check(&format!("{OK}{OK}"));
    assert_eq!(code, 2);
    assert!(msg.contains("fleet.toml:6:8:") && msg.contains("duplicate persona name \"a\""), "{msg}");
}

#[test]
fn unknown_domain_and_bad_address() {
    let (code, msg) = check(&format!("{OK}domains = [\"cooking\"]\n"));
    assert_eq!(code, 2);
    assert!(msg.contains("fleet.toml:5:12:") && msg.contains("cooking"), "{msg}");
    let (code, msg) = check(&format!("[admin]\naddr = \"localhost\"\n{OK}"));
    assert_eq!(code, 2);
    assert!(msg.contains("fleet.toml:2:8:") && msg.contains("addr"), "{msg}");
}

#[test]
fn missing_file() {
    let out = Command::new(env!("CARGO_BIN_EXE_mindfleet")).args(["check", "no/such/fleet.toml"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let msg = String::from_utf8_lossy(&out.stderr);
    assert!(msg.contains("no/such/fleet.toml: cannot read fleet file"), "{msg}");
}

#[test]
fn run_refuses_a_bad_fleet_before_starting_anything() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fleet.toml");
    std::fs::write(&path, format!("{OK}{OK}")).unwrap();
    let data = dir.path().join("data");
    let out =
        Command::new(env!("CARGO_BIN_EXE_mindfleet")).arg("run").arg(&path).arg("--data").arg(&data).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(!data.exists(), "nothing may start on a bad fleet file");
}

#[test]
fn embedding_settings_out_of_range_are_named_where_they_are() {
    let (code, msg) = check(&format!("[embedding]\nmax_batch = 0\n{OK}"));
    assert_eq!(code, 2);
    assert!(msg.contains("fleet.toml:2:13:") && msg.contains("max_batch"), "{msg}");
    let (code, msg) = check(&format!("[models]\npul = true\n{OK}"));
    assert_eq!(code, 2);
    assert!(msg.contains("fleet.toml:2:1:") && msg.contains("pul"), "{msg}");
}

#[test]
fn an_openai_backend_needs_an_http_url_and_a_model_and_names_what_is_missing() {
    let cases = [
        ("[llm]\nbackend = \"openai\"\nmodel = \"m\"\n", "fleet.toml:2:11:", "needs `url`"),
        ("[llm]\nbackend = \"openai\"\nurl = \"http://127.0.0.1:8080/v1\"\n", "fleet.toml:2:11:", "needs `model`"),
        (
            "[llm]\nbackend = \"openai\"\nurl = \"https://api.example.com/v1\"\nmodel = \"m\"\n",
            "fleet.toml:3:7:",
            "only http://",
        ),
        ("[llm]\nbackend = \"vllm\"\n", "fleet.toml:2:11:", "known: \"local\", \"openai\""),
        ("[llm]\nurl = \"http://127.0.0.1:1/v1\"\n", "fleet.toml:2:7:", "`url` is for `backend = \"openai\"`"),
        (
            "[llm]\nbackend = \"openai\"\nurl = \"http://h:1/v1\"\nmodel = \"m\"\napi_key_env = \"MINDFLEET_TEST_NO_SUCH_VAR\"\n",
            "fleet.toml:5:15:",
            "MINDFLEET_TEST_NO_SUCH_VAR is not set",
        ),
    ];
    for (toml, at, what) in cases {
        let (code, msg) = check(&format!("{toml}{OK}"));
        assert_eq!(code, 2, "{toml}: {msg}");
        assert!(msg.contains(at) && msg.contains(what), "{toml}: {msg}");
    }
    let (code, msg) =
        check(&format!("[llm]\nbackend = \"openai\"\nurl = \"http://127.0.0.1:8080/v1\"\nmodel = \"m\"\n{OK}"));
    assert_eq!(code, 0, "{msg}");
}

#[test]
fn a_bad_tool_declaration_is_exit_2_at_its_line_and_column() {
    let server = "[[tool_server]]\nname = \"git\"\ncommand = \"sh\"\n";
    let (code, msg) = check(&format!("{server}[[persona]]\nname = \"a\"\nrole = \"r\"\ntools = [\"gti.*\"]\n"));
    assert_eq!(code, 2);
    assert!(
        msg.contains(r#"fleet.toml:7:10: persona "a": `tools`: "gti.*" names no `[[tool_server]]` "gti" (git)"#),
        "{msg}"
    );
    let (code, msg) = check(&format!("[[tool_server]]\nname = \"git\"\ncommand = \"no-such-mcp-server\"\n{OK}"));
    assert_eq!(code, 2);
    assert!(
        msg.contains(r#"fleet.toml:3:11: tool server "git": `command` = "no-such-mcp-server" is not found on PATH"#),
        "{msg}"
    );
    let (code, msg) = check(&format!("[[tool_server]]\nname = \"web\"\nurl = \"localhost:3001/mcp\"\n{OK}"));
    assert_eq!(code, 2);
    assert!(msg.contains("fleet.toml:3:7:") && msg.contains("must start with http"), "{msg}");
}
