use super::*;

fn parse(text: &str) -> Result<ToolServerSpec, toml::de::Error> {
    toml::from_str(text)
}

#[test]
fn the_issue_example_parses_with_its_values() {
    let spec = parse(
        r#"
        name = "git"
        command = "python3"
        args = ["-m", "mcp_server_git", "--repository", "."]
        env = ["HOME"]
        timeout_secs = 30
        max_output_kb = 64
        approval = "never"
        "#,
    )
    .unwrap();
    assert_eq!(spec.approval, Approval::Never);
    assert_eq!(spec.timeout(), Duration::from_secs(30));
    assert_eq!(spec.max_output_bytes(), 64 * 1024);
    assert_eq!(
        spec.endpoint().unwrap(),
        Endpoint::Stdio {
            command: "python3".into(),
            args: vec!["-m".into(), "mcp_server_git".into(), "--repository".into(), ".".into()],
            env: vec!["HOME".into()],
        }
    );
}

#[test]
fn defaults_apply_and_approval_defaults_to_writes() {
    let spec = parse("name = \"fs\"\nurl = \"http://127.0.0.1:3001/mcp\"").unwrap();
    assert_eq!(spec.timeout_secs, DEFAULT_TIMEOUT_SECS);
    assert_eq!(spec.max_output_kb, DEFAULT_MAX_OUTPUT_KB);
    assert_eq!(spec.approval, Approval::Writes);
    assert_eq!(spec.endpoint().unwrap(), Endpoint::Http { url: "http://127.0.0.1:3001/mcp".into() });
}

#[test]
fn unknown_keys_and_approvals_are_refused_by_name() {
    let err = parse("name = \"x\"\ncommand = \"a\"\ntimeout = 3").unwrap_err().to_string();
    assert!(err.contains("unknown field `timeout`"), "{err}");
    let err = parse("name = \"x\"\ncommand = \"a\"\napproval = \"sometimes\"").unwrap_err().to_string();
    assert!(err.contains("sometimes"), "{err}");
}

#[test]
fn bad_tables_name_the_server_and_what_is_wrong() {
    let base = ToolServerSpec::stdio("git", "python3", &[]);
    let cases = [
        (ToolServerSpec { name: "Git.x".into(), ..base.clone() }, "bad name"),
        (ToolServerSpec { url: Some("http://h/mcp".into()), ..base.clone() }, "not both"),
        (ToolServerSpec { command: None, ..base.clone() }, "give `command`"),
        (ToolServerSpec { command: Some(" ".into()), ..base.clone() }, "`command` is empty"),
        (ToolServerSpec { env: vec!["HOME".into(), "A=B".into()], ..base.clone() }, "\"A=B\""),
        (ToolServerSpec::http("web", "ftp://h/mcp"), "must start with http"),
        (ToolServerSpec::http("web", "http:///mcp"), "must start with http"),
        (ToolServerSpec { args: vec!["-v".into()], ..ToolServerSpec::http("web", "http://h/mcp") }, "not a `url`"),
        (ToolServerSpec { timeout_secs: 0, ..base.clone() }, "`timeout_secs` must be at least 1"),
        (ToolServerSpec { max_output_kb: 0, ..base }, "`max_output_kb` must be at least 1"),
    ];
    for (spec, wanted) in cases {
        let err = spec.endpoint().unwrap_err().to_string();
        assert!(err.starts_with(&format!("tool server `{}`", spec.name)), "{err}");
        assert!(err.contains(wanted), "{err} lacks {wanted}");
    }
}
