//! Validation of the `[[webhook]]` tables.

use super::*;

impl Ctx<'_> {
    /// `[[webhook]]` tables: each URL http(s), its secret's variable set, its rooms, personas
    /// (of the fleet) and kinds known, names unique.
    pub(in crate::config) fn webhooks(
        &self,
        raw: &[Spanned<RawWebhook>],
        personas: &BTreeSet<String>,
    ) -> Result<Vec<WebhookConfig>, ConfigError> {
        let mut names = BTreeSet::new();
        raw.iter().map(|w| self.webhook(w.get_ref(), personas, &mut names)).collect()
    }

    fn webhook(
        &self,
        w: &RawWebhook,
        personas: &BTreeSet<String>,
        names: &mut BTreeSet<String>,
    ) -> Result<WebhookConfig, ConfigError> {
        let url = w.url.get_ref();
        let valid_url = ["http://", "https://"]
            .iter()
            .any(|s| url.strip_prefix(s).is_some_and(|rest| !rest.is_empty() && !rest.starts_with('/')));
        if !valid_url || url.chars().any(char::is_whitespace) {
            return Err(
                self.err_at(w.url.span(), format!("webhook `url` = {url:?} must be an http:// or https:// URL"))
            );
        }
        let name = w.name.as_ref().map_or_else(|| url.clone(), |n| n.get_ref().clone());
        if let Some(n) = &w.name
            && (n.get_ref().is_empty() || n.get_ref().len() > 128)
        {
            return Err(self.err_at(n.span(), "webhook `name` must be 1-128 characters"));
        }
        if !names.insert(name.clone()) {
            let at = w.name.as_ref().map_or(w.url.span(), Spanned::span);
            return Err(self.err_at(at, format!("duplicate webhook {name:?} (give each a `name`)")));
        }
        let var = w.secret_env.get_ref();
        let secret = std::env::var(var).ok().filter(|s| !s.is_empty()).ok_or_else(|| {
            self.err_at(
                w.secret_env.span(),
                format!("webhook {name:?}: `secret_env`: the variable {var} that holds its signing secret is not set"),
            )
        })?;
        for room in &w.rooms {
            if !valid_name(room.get_ref()) {
                return Err(self.err_at(
                    room.span(),
                    format!(
                        "webhook {name:?}: room {:?} must be 1-64 characters of a-z, 0-9, '-' or '_'",
                        room.get_ref()
                    ),
                ));
            }
        }
        for p in &w.personas {
            if !personas.contains(p.get_ref()) {
                return Err(self.err_at(
                    p.span(),
                    format!("webhook {name:?}: `personas`: {:?} is not a persona of the fleet", p.get_ref()),
                ));
            }
        }
        let kinds = match &w.kinds {
            None => vec![HookKind::Reply],
            Some(ks) => {
                let mut kinds = Vec::new();
                for k in ks {
                    let kind = HookKind::parse(k.get_ref()).ok_or_else(|| {
                        self.err_at(
                            k.span(),
                            format!(
                                "webhook {name:?}: unknown kind {:?} (known: reply, decision, dead_letter)",
                                k.get_ref()
                            ),
                        )
                    })?;
                    if !kinds.contains(&kind) {
                        kinds.push(kind);
                    }
                }
                if kinds.is_empty() {
                    return Err(self.err_at(0..0, format!("webhook {name:?}: `kinds` is empty: nothing would be sent")));
                }
                kinds
            }
        };
        let secs = |v: &Option<Spanned<f64>>, key, range, default: Duration| {
            self.float(v, key, range, default.as_secs_f64()).map(Duration::from_secs_f64)
        };
        let backoff_initial = secs(
            &w.backoff_initial_secs,
            "backoff_initial_secs",
            0.001..=3600.0,
            WebhookConfig::DEFAULT_BACKOFF_INITIAL,
        )?;
        let backoff_max =
            secs(&w.backoff_max_secs, "backoff_max_secs", 0.001..=3600.0, WebhookConfig::DEFAULT_BACKOFF_MAX)?;
        if backoff_max < backoff_initial {
            let at = w.backoff_max_secs.as_ref().map_or(0..0, Spanned::span);
            return Err(
                self.err_at(at, format!("webhook {name:?}: `backoff_max_secs` is below `backoff_initial_secs`"))
            );
        }
        Ok(WebhookConfig {
            route: HookRoute {
                name: name.as_str().into(),
                rooms: w.rooms.iter().map(|r| r.get_ref().clone()).collect(),
                personas: w.personas.iter().map(|p| p.get_ref().clone()).collect(),
                kinds,
            },
            name,
            url: url.clone(),
            secret,
            secret_env: var.clone(),
            max_attempts: self.int(
                &w.max_attempts,
                "max_attempts",
                1..=1_000_000,
                WebhookConfig::DEFAULT_MAX_ATTEMPTS as i64,
            )? as u32,
            max_age: secs(&w.max_age_secs, "max_age_secs", 1.0..=365.0 * 86_400.0, WebhookConfig::DEFAULT_MAX_AGE)?,
            backoff_initial,
            backoff_max,
            timeout: secs(&w.timeout_secs, "timeout_secs", 0.01..=600.0, WebhookConfig::DEFAULT_TIMEOUT)?,
        })
    }
}
