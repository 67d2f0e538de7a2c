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

/// Columns that say what a row is about come first, in this order.
const LEADING: [&str; 3] = ["room", "persona", "name"];

/// An object with exactly one field that is a list of objects becomes one row per element of
/// that list, with the object's other fields repeated (`rooms: [{room, personas: [..]}]` ->
/// `room, persona, ...`).
fn flatten(items: &[Value]) -> Vec<Value> {
    let is_table = |v: &Value| v.as_array().is_some_and(|a| !a.is_empty() && a.iter().all(Value::is_object));
    let mut out = Vec::new();
    for it in items {
        let Value::Object(m) = it else {
            out.push(it.clone());
            continue;
        };
        let nested: Vec<&String> = m.iter().filter(|(_, v)| is_table(v)).map(|(k, _)| k).collect();
        let [key] = nested.as_slice() else {
            out.push(it.clone());
            continue;
        };
        let mut parent = m.clone();
        let Some(Value::Array(children)) = parent.remove(key.as_str()) else { unreachable!("checked by is_table") };
        for child in children {
            let mut row = parent.clone();
            row.extend(child.as_object().into_iter().flatten().map(|(k, v)| (k.clone(), v.clone())));
            out.push(Value::Object(row));
        }
    }
    out
}

fn rows(items: &[Value], out: &mut String) {
    let items = flatten(items);
    let mut cols: Vec<String> = Vec::new();
    for it in &items {
        if let Value::Object(m) = it {
            for k in m.keys() {
                if !cols.contains(k) {
                    cols.push(k.clone());
                }
            }
        }
    }
    cols.sort_by_key(|c| LEADING.iter().position(|l| l == c).unwrap_or(LEADING.len()));
    if cols.is_empty() {
        for it in &items {
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

    #[test]
    fn nested_lists_become_one_row_per_element_with_the_names_first() {
        let v = json!({"rooms": [
            {"room": "dev", "personas": [{"persona": "ada", "activity": "working"}, {"persona": "bo", "activity": "idle"}]},
            {"room": "ops", "personas": [{"persona": "cy", "activity": null}]},
        ]});
        let t = render(&v);
        assert_eq!(
            t,
            "rooms:\nroom  persona  activity\ndev   ada      working\ndev   bo       idle\nops   cy       -\n"
        );
    }

    #[test]
    fn lists_of_names_stay_cells() {
        let v = json!({"domains": [{"domain": "code", "focused": 2, "personas": ["ada", "cy"]}]});
        assert_eq!(render(&v), "domains:\ndomain  focused  personas\ncode    2        [ada, cy]\n");
    }
}
