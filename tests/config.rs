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
