//! Arguments checked against a tool's input schema before they are sent.
//!
//! A model's mistake (a missing field, a string for a number) is caught here and named, so the
//! model can correct it without a round trip, and a server never sees arguments its own schema
//! forbids. The server still validates: this is the subset of JSON Schema MCP servers write
//! (zod, pydantic and schemars output): `type` (one or several, `integer` included), `nullable`,
//! `enum`, `const`, `required`, `properties`, `additionalProperties`, `items` (one schema or a
//! tuple), `minItems`/`maxItems`, `minimum`/`maximum`/`exclusiveMinimum`/`exclusiveMaximum`
//! (numbers or draft-4 booleans), `minLength`/`maxLength`, `anyOf`/`oneOf`/`allOf`.
//!
//! What it does not check passes, and the server decides: `$ref` (followed nowhere), `pattern`
//! (no regex engine for one keyword) and `format`. `oneOf` is checked as `anyOf`: a value
//! matching two branches is the server's to refuse. A crate (`jsonschema`) would check all of
//! it but brings a regex engine and an HTTP client for remote `$ref`s; this is 200 lines.

use serde_json::{Map, Value};

/// Why arguments were refused: the field (`a`, `items[2].name`; `(arguments)` for the whole) and
/// what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaRefusal {
    pub field: String,
    pub reason: String,
}

impl std::fmt::Display for SchemaRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.field, self.reason)
    }
}

/// Deeper schemas or values than this are refused rather than followed: both come from outside
/// (a server, a model), and recursion must not be theirs to exhaust.
const MAX_DEPTH: usize = 64;

/// Checks `value` against `schema`.
pub fn validate(schema: &Value, value: &Value) -> Result<(), SchemaRefusal> {
    check(schema, value, &mut Path(Vec::new()))
}

/// Where in the arguments the check is, for the refusal to name.
struct Path(Vec<Seg>);

enum Seg {
    Key(String),
    Index(usize),
}

impl Path {
    fn refuse(&self, reason: impl Into<String>) -> SchemaRefusal {
        let mut field = String::new();
        for seg in &self.0 {
            match seg {
                Seg::Key(k) if field.is_empty() => field.push_str(k),
                Seg::Key(k) => {
                    field.push('.');
                    field.push_str(k);
                }
                Seg::Index(i) => field.push_str(&format!("[{i}]")),
            }
        }
        if field.is_empty() {
            field.push_str("(arguments)");
        }
        SchemaRefusal { field, reason: reason.into() }
    }

    fn within<T>(&mut self, seg: Seg, f: impl FnOnce(&mut Self) -> T) -> T {
        self.0.push(seg);
        let out = f(self);
        self.0.pop();
        out
    }
}

fn check(schema: &Value, value: &Value, path: &mut Path) -> Result<(), SchemaRefusal> {
    if path.0.len() > MAX_DEPTH {
        return Err(path.refuse(format!("nested deeper than {MAX_DEPTH} levels")));
    }
    let schema = match schema {
        Value::Bool(true) => return Ok(()),
        Value::Bool(false) => return Err(path.refuse("no value is allowed here")),
        Value::Object(schema) => schema,
        // Not a schema at all: the server's problem, not the caller's.
        _ => return Ok(()),
    };
    if value.is_null() && schema.get("nullable") == Some(&Value::Bool(true)) {
        return Ok(());
    }
    if let Some(types) = schema.get("type") {
        check_type(types, value, path)?;
    }
    if let Some(Value::Array(allowed)) = schema.get("enum")
        && !allowed.contains(value)
    {
        let list: Vec<String> = allowed.iter().map(Value::to_string).collect();
        return Err(path.refuse(format!("must be one of {}, not {value}", list.join(", "))));
    }
    if let Some(wanted) = schema.get("const")
        && wanted != value
    {
        return Err(path.refuse(format!("must be {wanted}, not {value}")));
    }
    match value {
        Value::Object(map) => check_object(schema, map, path)?,
        Value::Array(items) => check_array(schema, items, path)?,
        Value::Number(_) => check_number(schema, value, path)?,
        Value::String(s) => check_string(schema, s, path)?,
        Value::Bool(_) | Value::Null => {}
    }
    check_combinators(schema, value, path)
}

fn check_type(types: &Value, value: &Value, path: &Path) -> Result<(), SchemaRefusal> {
    let fits = |t: &Value| match t.as_str() {
        Some("object") => value.is_object(),
        Some("array") => value.is_array(),
        Some("string") => value.is_string(),
        Some("number") => value.is_number(),
        Some("integer") => is_integer(value),
        Some("boolean") => value.is_boolean(),
        Some("null") => value.is_null(),
        // An unknown type name: let the server judge.
        _ => true,
    };
    let ok = match types {
        Value::Array(list) => list.is_empty() || list.iter().any(fits),
        one => fits(one),
    };
    if ok {
        return Ok(());
    }
    let wanted = match types {
        Value::Array(list) => list.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(" or "),
        one => one.as_str().unwrap_or("?").to_owned(),
    };
    Err(path.refuse(format!("must be {} {wanted}, not {}", article(&wanted), kind(value))))
}

fn is_integer(value: &Value) -> bool {
    match value {
        Value::Number(n) => n.is_i64() || n.is_u64() || n.as_f64().is_some_and(|f| f.fract() == 0.0),
        _ => false,
    }
}

fn kind(value: &Value) -> String {
    match value {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("the boolean {b}"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) if s.chars().count() <= 40 => format!("the string {value}"),
        Value::String(_) => "a string".into(),
        Value::Array(_) => "an array".into(),
        Value::Object(_) => "an object".into(),
    }
}

fn article(word: &str) -> &'static str {
    if word.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" }
}

fn check_object(schema: &Map<String, Value>, map: &Map<String, Value>, path: &mut Path) -> Result<(), SchemaRefusal> {
    if let Some(Value::Array(required)) = schema.get("required") {
        for name in required.iter().filter_map(Value::as_str) {
            if !map.contains_key(name) {
                return Err(path.within(Seg::Key(name.to_owned()), |p| p.refuse("missing required field")));
            }
        }
    }
    let properties = schema.get("properties").and_then(Value::as_object);
    for (key, item) in map {
        match properties.and_then(|p| p.get(key)) {
            Some(sub) => path.within(Seg::Key(key.clone()), |p| check(sub, item, p))?,
            None => match schema.get("additionalProperties") {
                Some(Value::Bool(false)) => {
                    return Err(path.within(Seg::Key(key.clone()), |p| p.refuse("unknown field")));
                }
                Some(extra @ Value::Object(_)) => path.within(Seg::Key(key.clone()), |p| check(extra, item, p))?,
                _ => {}
            },
        }
    }
    Ok(())
}

fn check_array(schema: &Map<String, Value>, items: &[Value], path: &mut Path) -> Result<(), SchemaRefusal> {
    if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
        && (items.len() as u64) < min
    {
        return Err(path.refuse(format!("needs at least {min} items, has {}", items.len())));
    }
    if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
        && (items.len() as u64) > max
    {
        return Err(path.refuse(format!("allows at most {max} items, has {}", items.len())));
    }
    match schema.get("items").or_else(|| schema.get("prefixItems")) {
        Some(Value::Array(tuple)) => {
            for (i, (sub, item)) in tuple.iter().zip(items).enumerate() {
                path.within(Seg::Index(i), |p| check(sub, item, p))?;
            }
        }
        Some(sub) => {
            for (i, item) in items.iter().enumerate() {
                path.within(Seg::Index(i), |p| check(sub, item, p))?;
            }
        }
        None => {}
    }
    Ok(())
}

fn check_number(schema: &Map<String, Value>, value: &Value, path: &Path) -> Result<(), SchemaRefusal> {
    let Some(x) = value.as_f64() else { return Ok(()) };
    let bound = |key: &str| schema.get(key).and_then(Value::as_f64);
    // Draft 4 writes `exclusiveMinimum: true` beside `minimum`; later drafts give the bound.
    let flag = |key: &str| schema.get(key) == Some(&Value::Bool(true));
    if let Some(min) = bound("minimum") {
        if flag("exclusiveMinimum") && x <= min {
            return Err(path.refuse(format!("must be greater than {min}, not {value}")));
        }
        if x < min {
            return Err(path.refuse(format!("must be at least {min}, not {value}")));
        }
    }
    if let Some(max) = bound("maximum") {
        if flag("exclusiveMaximum") && x >= max {
            return Err(path.refuse(format!("must be less than {max}, not {value}")));
        }
        if x > max {
            return Err(path.refuse(format!("must be at most {max}, not {value}")));
        }
    }
    if let Some(min) = bound("exclusiveMinimum")
        && x <= min
    {
        return Err(path.refuse(format!("must be greater than {min}, not {value}")));
    }
    if let Some(max) = bound("exclusiveMaximum")
        && x >= max
    {
        return Err(path.refuse(format!("must be less than {max}, not {value}")));
    }
    Ok(())
}

fn check_string(schema: &Map<String, Value>, s: &str, path: &Path) -> Result<(), SchemaRefusal> {
    let len = s.chars().count() as u64;
    if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
        && len < min
    {
        return Err(path.refuse(format!("needs at least {min} characters, has {len}")));
    }
    if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
        && len > max
    {
        return Err(path.refuse(format!("allows at most {max} characters, has {len}")));
    }
    Ok(())
}

fn check_combinators(schema: &Map<String, Value>, value: &Value, path: &mut Path) -> Result<(), SchemaRefusal> {
    if let Some(Value::Array(all)) = schema.get("allOf") {
        for sub in all {
            check(sub, value, path)?;
        }
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(Value::Array(any)) = schema.get(key)
            && !any.is_empty()
        {
            let mut first = None;
            for sub in any {
                match check(sub, value, path) {
                    Ok(()) => {
                        first = None;
                        break;
                    }
                    Err(e) => {
                        first.get_or_insert(e);
                    }
                }
            }
            if let Some(first) = first {
                return Err(SchemaRefusal {
                    reason: format!("matches none of the {} allowed forms (first: {})", any.len(), first.reason),
                    field: first.field,
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
