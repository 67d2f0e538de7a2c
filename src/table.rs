//! `--format table`: JSON answers as aligned text for people.

use serde_json::Value;

fn cell(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => format!("{f:.3}"),
            _ => n.to_string(),
        },
        Value::Array(a) => format!("[{}]", a.iter().map(cell).collect::<Vec<_>>().join(", ")),
        other => other.to_string(),
    }
}

fn rows(items: &[Value], out: &mut String) {
    let mut cols: Vec<String> = Vec::new();
    for it in items {
        if let Value::Object(m) = it {
            for k in m.keys() {
                if !cols.contains(k) {
                    cols.push(k.clone());
                }
            }
        }
    }
    if cols.is_empty() {
        for it in items {
            out.push_str(&cell(it));
            out.push('\n');
        }
        return;
    }
    let table: Vec<Vec<String>> = items.iter().map(|it| cols.iter().map(|c| cell(&it[c.as_str()])).collect()).collect();
    let widths: Vec<usize> = cols
        .iter()
        .enumerate()
        .map(|(i, c)| table.iter().map(|r| r[i].chars().count().min(60)).chain([c.len()]).max().unwrap_or(0))
        .collect();
    let line = |vals: &[String], out: &mut String| {
        let parts: Vec<String> = vals
            .iter()
            .zip(&widths)
            .map(|(v, w)| {
                let v: String = v.chars().take(60).collect();
                format!("{v:<w$}")
            })
            .collect();
        out.push_str(parts.join("  ").trim_end());
        out.push('\n');
    };
    line(&cols, out);
    for r in &table {
        line(r, out);
    }
}

/// Lists of objects become tables; scalars become `key: value` lines.
pub fn render(v: &Value) -> String {
    let mut out = String::new();
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match x {
                    Value::Array(items) => {
                        out.push_str(&format!("{k}:\n"));
                        rows(items, &mut out);
                    }
                    Value::Object(_) => out.push_str(&format!("{k}: {x}\n")),
                    _ => out.push_str(&format!("{k}: {}\n", cell(x))),
                }
            }
        }
        Value::Array(items) => rows(items, &mut out),
        other => out.push_str(&cell(other)),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn lists_become_aligned_tables() {
        let v = json!({"best": "ada", "ranking": [{"persona": "ada", "suitability": 2.0}, {"persona": "bo", "suitability": 0.5}]});
        let t = render(&v);
        assert_eq!(t, "best: ada\nranking:\npersona  suitability\nada      2.000\nbo       0.500\n");
    }
}
