//! Validation of the `[[tool_server]]` tables and of the personas' `tools` allowlists.

use super::*;
use crate::tools::{
    Approval, DEFAULT_APPROVAL_TIMEOUT_SECS, DEFAULT_MAX_OUTPUT_KB, DEFAULT_TIMEOUT_SECS, PLACEHOLDERS, ProcedureCall,
    SpecError, ToolProcedure, ToolServerSpec, allowed, resolve_command,
};

impl Ctx<'_> {
    /// `[[tool_server]]` tables: names unique, `command` (found on `PATH`) or `url`, the rest in
    /// range; each error at the key it is about.
    pub(in crate::config) fn tool_servers(
        &self,
        raw: &[Spanned<RawToolServer>],
    ) -> Result<Vec<ToolServerSpec>, ConfigError> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for t in raw {
            let t = t.get_ref();
            let name = t.name.get_ref();
            if !seen.insert(name.clone()) {
                return Err(self.err_at(t.name.span(), format!("duplicate tool server {name:?}")));
            }
            let approval = match t.approval.as_ref().map(|a| (a.get_ref().as_str(), a.span())) {
                None => Approval::default(),
                Some(("never", _)) => Approval::Never,
                Some(("always", _)) => Approval::Always,
                Some(("writes", _)) => Approval::Writes,
                Some((other, span)) => {
                    return Err(self.err_at(
                        span,
                        format!(
                            "tool server {name:?}: `approval` = {other:?} is not \"never\", \"always\" or \"writes\""
                        ),
                    ));
                }
            };
            let spec = ToolServerSpec {
                name: name.clone(),
                command: t.command.as_ref().map(|c| c.get_ref().clone()),
                args: t.args.clone(),
                env: t.env.iter().map(|e| e.get_ref().clone()).collect(),
                url: t.url.as_ref().map(|u| u.get_ref().clone()),
                timeout_secs: self.int(&t.timeout_secs, "timeout_secs", 1..=86_400, DEFAULT_TIMEOUT_SECS as i64)?
                    as u64,
                max_output_kb: self.int(&t.max_output_kb, "max_output_kb", 1..=65_536, DEFAULT_MAX_OUTPUT_KB as i64)?
                    as usize,
                approval,
                approval_timeout_secs: self.int(
                    &t.approval_timeout_secs,
                    "approval_timeout_secs",
                    1..=7 * 86_400,
                    DEFAULT_APPROVAL_TIMEOUT_SECS as i64,
                )? as u64,
            };
            if let Err(e) = spec.endpoint() {
                let at = match &e {
                    SpecError::BadName { .. } => Some(t.name.span()),
                    SpecError::BadUrl { .. } | SpecError::BothEndpoints { .. } | SpecError::ArgsWithUrl { .. } => {
                        t.url.as_ref().map(Spanned::span)
                    }
                    SpecError::EmptyCommand { .. } => t.command.as_ref().map(Spanned::span),
                    SpecError::BadEnvName { var, .. } => t.env.iter().find(|e| e.get_ref() == var).map(Spanned::span),
                    _ => None,
                };
                return Err(self.err_at(at.unwrap_or(t.name.span()), e.to_string()));
            }
            if let Some(command) = &t.command
                && resolve_command(command.get_ref()).is_none()
            {
                return Err(self.err_at(
                    command.span(),
                    format!(
                        "tool server {name:?}: `command` = {:?} is not found on PATH (nor among the servers scripts/install-tool-servers.sh installs)",
                        command.get_ref()
                    ),
                ));
            }
            out.push(spec);
        }
        Ok(out)
    }

    /// A persona's `tools`: each `server.tool` or `server.*`, of a declared server.
    pub(in crate::config) fn tool_allowlist(
        &self,
        persona: &str,
        raw: &[Spanned<String>],
        servers: &BTreeSet<String>,
    ) -> Result<Vec<String>, ConfigError> {
        let mut out = Vec::new();
        for p in raw {
            let pattern = p.get_ref();
            let Some((server, tool)) = pattern.split_once('.').filter(|(s, t)| !s.is_empty() && !t.is_empty()) else {
                return Err(self.err_at(
                    p.span(),
                    format!("persona {persona:?}: `tools`: {pattern:?} is not `server.tool` or `server.*`"),
                ));
            };
            if !servers.contains(server) {
                let known: Vec<&str> = servers.iter().map(String::as_str).collect();
                let known = if known.is_empty() { "none is declared".to_string() } else { known.join(", ") };
                return Err(self.err_at(
                    p.span(),
                    format!(
                        "persona {persona:?}: `tools`: {pattern:?} names no `[[tool_server]]` {server:?} ({known})"
                    ),
                ));
            }
            if tool.contains('*') && tool != "*" {
                return Err(self.err_at(
                    p.span(),
                    format!("persona {persona:?}: `tools`: {pattern:?}: `*` stands for a whole tool name only"),
                ));
            }
            if !out.contains(pattern) {
                out.push(pattern.clone());
            }
        }
        Ok(out)
    }
}

impl Ctx<'_> {
    /// A persona's `[[persona.procedure]]` tables: a name, phrases, known domains, and calls of
    /// tools its allowlist has, with arguments whose placeholders are known.
    pub(in crate::config) fn procedures(
        &self,
        persona: &str,
        raw: &[Spanned<RawProcedure>],
        allowlist: &[String],
    ) -> Result<Vec<ToolProcedure>, ConfigError> {
        let mut out: Vec<ToolProcedure> = Vec::new();
        for p in raw {
            let p = p.get_ref();
            let name = p.name.get_ref();
            let at = |what: &str| format!("persona {persona:?}: procedure {name:?}: {what}");
            if name.trim().is_empty() || out.iter().any(|o| o.name == *name) {
                return Err(self.err_at(p.name.span(), at("needs a name of its own")));
            }
            let mut domains = Vec::new();
            for d in &p.domains {
                if !DOMAINS.contains(&d.get_ref().as_str()) {
                    let msg = format!("domain {:?} is not one of {}", d.get_ref(), DOMAINS.join(", "));
                    return Err(self.err_at(d.span(), at(&msg)));
                }
                domains.push(d.get_ref().clone());
            }
            if p.when.is_empty() {
                return Err(self.err_at(p.name.span(), at("`when` needs at least one phrase")));
            }
            let mut when = Vec::new();
            for w in &p.when {
                let phrase = w.get_ref().trim().to_lowercase();
                if phrase.is_empty() {
                    return Err(self.err_at(w.span(), at("`when` has an empty phrase")));
                }
                when.push(phrase);
            }
            if p.calls.is_empty() {
                return Err(self.err_at(p.name.span(), at("`calls` needs at least one call")));
            }
            let mut calls = Vec::new();
            for c in &p.calls {
                let c = c.get_ref();
                let tool = c.tool.get_ref();
                if !allowed(allowlist, tool) {
                    let msg = format!("calls {tool:?}, which the persona's `tools` do not allow");
                    return Err(self.err_at(c.tool.span(), at(&msg)));
                }
                let arguments = match &c.arguments {
                    None => serde_json::Value::Object(Default::default()),
                    Some(t) => {
                        let v =
                            serde_json::to_value(t.get_ref()).map_err(|e| self.err_at(t.span(), at(&e.to_string())))?;
                        if let Some(bad) = unknown_placeholder(&v) {
                            let msg =
                                format!("arguments: unknown placeholder {bad} (known: {})", PLACEHOLDERS.join(", "));
                            return Err(self.err_at(t.span(), at(&msg)));
                        }
                        v
                    }
                };
                calls.push(ProcedureCall { tool: tool.clone(), arguments: arguments.to_string() });
            }
            out.push(ToolProcedure { name: name.clone(), domains, when, calls });
        }
        Ok(out)
    }
}

/// The first `{word}` in a string of `v` that is not a known placeholder.
fn unknown_placeholder(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => {
            let mut rest = s.as_str();
            while let Some(i) = rest.find('{') {
                let Some(j) = rest[i..].find('}') else { break };
                let p = &rest[i..i + j + 1];
                if !PLACEHOLDERS.contains(&p) {
                    return Some(p.to_string());
                }
                rest = &rest[i + j + 1..];
            }
            None
        }
        serde_json::Value::Array(a) => a.iter().find_map(unknown_placeholder),
        serde_json::Value::Object(o) => o.values().find_map(unknown_placeholder),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::{ConfigError, FleetConfig};
    use crate::tools::{Approval, Endpoint};

    fn parse(text: &str) -> Result<FleetConfig, ConfigError> {
        FleetConfig::from_toml(Path::new("fleet.toml"), text)
    }

    /// `sh` is on every PATH the tests run with; `cat` stands in for a server's program.
    const SERVERS: &str = r#"
[[tool_server]]
name = "git"
command = "sh"
args = ["-c", "exec cat"]
env = ["HOME"]
approval = "never"

[[tool_server]]
name = "fs"
url = "http://127.0.0.1:3001/mcp"
timeout_secs = 5
"#;

    fn with_persona(tools: &str) -> String {
        format!("{SERVERS}\n[[persona]]\nname = \"reviewer\"\nrole = \"code reviewer\"\ntools = {tools}\n")
    }

    fn error(text: &str) -> String {
        parse(text).unwrap_err().to_string()
    }

    #[test]
    fn tool_servers_and_an_allowlist_are_read_with_their_defaults() {
        let cfg = parse(&with_persona(r#"["git.*", "fs.read_text_file", "git.*"]"#)).unwrap();
        let [git, fs] = &cfg.tool_servers[..] else { panic!("two servers: {:?}", cfg.tool_servers) };
        assert_eq!(git.approval, Approval::Never);
        assert!(
            matches!(git.endpoint().unwrap(), Endpoint::Stdio { command, env, .. } if command == "sh" && env == ["HOME"])
        );
        assert_eq!((fs.approval, fs.timeout_secs, fs.max_output_kb), (Approval::Writes, 5, 64));
        assert_eq!(cfg.personas[0].tools, ["git.*", "fs.read_text_file"], "each pattern once");
        let none = parse("[[persona]]\nname = \"a\"\nrole = \"r\"\n").unwrap();
        assert!(none.tool_servers.is_empty() && none.personas[0].tools.is_empty(), "no tools by default");
    }

    #[test]
    fn a_bad_declaration_is_named_at_its_key() {
        // The line and column of the value at fault, and what is wrong with it.
        let unknown = error(&with_persona(r#"["gti.*"]"#));
        assert!(unknown.starts_with("fleet.toml:17:10: "), "{unknown}");
        assert!(unknown.contains(r#"names no `[[tool_server]]` "gti" (fs, git)"#), "{unknown}");
        let missing = error("[[tool_server]]\nname = \"x\"\ncommand = \"no-such-mcp-server-here\"\n");
        assert_eq!(
            missing,
            r#"fleet.toml:3:11: tool server "x": `command` = "no-such-mcp-server-here" is not found on PATH (nor among the servers scripts/install-tool-servers.sh installs)"#
        );
        let url = error("[[tool_server]]\nname = \"x\"\nurl = \"ftp://h/mcp\"\n");
        assert!(url.starts_with("fleet.toml:3:7: ") && url.contains("must start with http"), "{url}");
        let both = error("[[tool_server]]\nname = \"x\"\ncommand = \"sh\"\nurl = \"http://h/mcp\"\n");
        assert!(both.starts_with("fleet.toml:4:7: ") && both.contains("not both"), "{both}");
        let env = error("[[tool_server]]\nname = \"x\"\ncommand = \"sh\"\nenv = [\"OK\", \"A=B\"]\n");
        assert!(env.starts_with("fleet.toml:4:14: ") && env.contains("\"A=B\""), "{env}");
        let approval = error("[[tool_server]]\nname = \"x\"\ncommand = \"sh\"\napproval = \"sometimes\"\n");
        assert!(approval.starts_with("fleet.toml:4:12: ") && approval.contains("\"sometimes\""), "{approval}");
        let timeout = error("[[tool_server]]\nname = \"x\"\ncommand = \"sh\"\ntimeout_secs = 0\n");
        assert!(timeout.starts_with("fleet.toml:4:16: ") && timeout.contains("timeout_secs"), "{timeout}");
        let dup =
            error("[[tool_server]]\nname = \"x\"\ncommand = \"sh\"\n[[tool_server]]\nname = \"x\"\ncommand = \"sh\"\n");
        assert!(dup.starts_with("fleet.toml:5:8: ") && dup.contains("duplicate tool server"), "{dup}");
        let name = error("[[tool_server]]\nname = \"Git.x\"\ncommand = \"sh\"\n");
        assert!(name.starts_with("fleet.toml:2:8: ") && name.contains("bad name"), "{name}");
        let pattern = error(&with_persona(r#"["git"]"#));
        assert!(pattern.contains(r#""git" is not `server.tool` or `server.*`"#), "{pattern}");
        let star = error(&with_persona(r#"["git.log*"]"#));
        assert!(star.contains("whole tool name only"), "{star}");
        let key = error("[[tool_server]]\nname = \"x\"\ncommand = \"sh\"\ntimeout = 3\n");
        assert!(key.contains("timeout"), "an unknown key is named: {key}");
    }
}
