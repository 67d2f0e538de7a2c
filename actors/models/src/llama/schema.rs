//! The JSON Schemas a model's answer can be decoded to ([`super::fill`]): the part of JSON
//! Schema that tools write their input in, read into a [`Shape`], and the check of a value
//! against it.
//!
//! Read:
//! - `type`: `object`, `array`, `string`, `integer`, `number`, `boolean` or `null`; a list of
//!   one of them, or of one and `null` (filled as the one);
//! - `enum` and `const`, with a type or without;
//! - objects: `properties` and `required`. The properties filled are the required ones and
//!   those with a `default` other than `null` (the required ones in the order of `required`, then
//!   the others by name); the others are left
//!   out, which the schema allows, and so are optional properties whose own schema is not read
//!   here. `additionalProperties` allows whatever it says (nothing else is written);
//!   `minProperties` and `maxProperties` are checked against the properties filled;
//! - arrays: `items` (one schema for all), `minItems`, `maxItems`;
//! - strings: `minLength`, `maxLength`, and `format` for `uri`, `email`, `date`, `date-time`
//!   and `uuid`, which the value is checked for once decoded;
//! - numbers: `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum` (numbers, as from
//!   draft 6), and `multipleOf: 1` for an integer;
//! - `anyOf` or `oneOf` of a schema and `{"type": "null"}` (pydantic's `Optional`): the schema.
//!
//! Annotations (`title`, `description`, `default`, `examples`, `$defs`, ...) and keywords JSON
//! Schema does not know are read past, as validators do. Every other keyword that constrains a
//! value (`pattern`, `$ref`, `allOf`, `patternProperties`, `uniqueItems`, ...) is refused with
//! the field it is on named: a value decoded without it might not validate.

use serde_json::{Map, Value};

/// The most digits of an integer part, so every number filled is exact in an f64 and an i64.
pub const MAX_DIGITS: u32 = 15;

/// The most items of an array whose `maxItems` is larger (or not given).
pub const MAX_ITEMS: usize = 16;

/// A schema as it is filled.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    /// The properties filled, in order.
    Object(Vec<(String, Shape)>),
    Array {
        items: Box<Shape>,
        min: usize,
        max: usize,
    },
    /// Lengths in characters.
    String {
        min: usize,
        max: Option<usize>,
        format: Option<Format>,
    },
    /// Inclusive bounds, within [`MAX_DIGITS`] digits.
    Integer {
        min: i64,
        max: i64,
    },
    Number {
        min: Bound,
        max: Bound,
    },
    Boolean,
    Null,
    /// One of these values (`enum`).
    OneOf(Vec<Value>),
    /// This value (`const`).
    Is(Value),
}

/// A bound of a number.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bound {
    pub value: f64,
    pub exclusive: bool,
}

/// The string formats checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Uri,
    Email,
    Date,
    DateTime,
    Uuid,
}

/// A schema that cannot be filled, and the field where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("field `{field}`: {message}")]
pub struct SchemaError {
    /// The field's path from the top (`options.depth`, `paths[]`); `.` is the top itself.
    pub field: String,
    pub message: String,
}

/// Keywords that name, describe or hold schemas for others to refer to; nothing is checked by
/// them.
const ANNOTATIONS: &[&str] = &[
    "$schema",
    "$id",
    "$comment",
    "$anchor",
    "$dynamicAnchor",
    "$defs",
    "definitions",
    "$vocabulary",
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
];

/// Keywords that constrain a value and are not read here.
const REFUSED: &[&str] = &[
    "pattern",
    "patternProperties",
    "propertyNames",
    "dependencies",
    "dependentRequired",
    "dependentSchemas",
    "allOf",
    "not",
    "if",
    "then",
    "else",
    "$ref",
    "$dynamicRef",
    "$recursiveRef",
    "prefixItems",
    "additionalItems",
    "contains",
    "minContains",
    "maxContains",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentMediaType",
    "contentEncoding",
    "contentSchema",
];

impl Shape {
    /// Reads a schema; the error names the first field that cannot be filled and why.
    pub fn compile(schema: &Value) -> Result<Shape, SchemaError> {
        read(schema, ".")
    }

    /// Whether `value` is one this shape fills: of its type, within its bounds, with exactly
    /// its properties. Every such value validates against the schema the shape was read from.
    pub fn check(&self, value: &Value) -> Result<(), SchemaError> {
        check(self, value, ".")
    }

    /// The schema of what this shape fills: every property filled required, no other allowed
    /// (as OpenAI's strict structured outputs want them).
    pub fn to_schema(&self) -> Value {
        let mut s = Map::new();
        let mut set = |k: &str, v: Value| drop(s.insert(k.to_string(), v));
        match self {
            Shape::Object(fields) => {
                set("type", "object".into());
                let props: Map<String, Value> = fields.iter().map(|(k, f)| (k.clone(), f.to_schema())).collect();
                set("properties", Value::Object(props));
                set("required", fields.iter().map(|(k, _)| Value::from(k.as_str())).collect());
                set("additionalProperties", false.into());
            }
            Shape::Array { items, min, max } => {
                set("type", "array".into());
                set("items", items.to_schema());
                set("minItems", (*min).into());
                set("maxItems", (*max).into());
            }
            Shape::String { min, max, format } => {
                set("type", "string".into());
                if *min > 0 {
                    set("minLength", (*min).into());
                }
                if let Some(max) = max {
                    set("maxLength", (*max).into());
                }
                if let Some(f) = format {
                    set("format", f.name().into());
                }
            }
            Shape::Integer { min, max } => {
                set("type", "integer".into());
                set("minimum", (*min).into());
                set("maximum", (*max).into());
            }
            Shape::Number { min, max } => {
                set("type", "number".into());
                let key = |b: &Bound, plain: &'static str, exclusive: &'static str| match b.exclusive {
                    true => exclusive,
                    false => plain,
                };
                set(key(min, "minimum", "exclusiveMinimum"), min.value.into());
                set(key(max, "maximum", "exclusiveMaximum"), max.value.into());
            }
            Shape::Boolean => set("type", "boolean".into()),
            Shape::Null => set("type", "null".into()),
            Shape::OneOf(values) => set("enum", Value::Array(values.clone())),
            Shape::Is(v) => set("const", v.clone()),
        }
        Value::Object(s)
    }
}

impl Format {
    fn read(name: &str) -> Option<Format> {
        Some(match name {
            "uri" => Format::Uri,
            "email" => Format::Email,
            "date" => Format::Date,
            "date-time" => Format::DateTime,
            "uuid" => Format::Uuid,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Format::Uri => "uri",
            Format::Email => "email",
            Format::Date => "date",
            Format::DateTime => "date-time",
            Format::Uuid => "uuid",
        }
    }

    /// Whether `s` is written in this format (RFC 3986's scheme and no whitespace for a URI;
    /// one `@` between non-empty parts for an email; RFC 3339 for dates and times).
    pub fn matches(self, s: &str) -> bool {
        let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        let date = |s: &str| {
            let p: Vec<&str> = s.split('-').collect();
            p.len() == 3
                && [4, 2, 2].iter().zip(&p).all(|(n, x)| x.len() == *n && digits(x))
                && (1..=12).contains(&p[1].parse::<u32>().unwrap_or(0))
                && (1..=31).contains(&p[2].parse::<u32>().unwrap_or(0))
        };
        match self {
            Format::Uri => {
                let Some((scheme, rest)) = s.split_once(':') else { return false };
                let mut chars = scheme.chars();
                chars.next().is_some_and(|c| c.is_ascii_alphabetic())
                    && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
                    && !rest.is_empty()
                    && !s.chars().any(|c| c.is_whitespace() || c.is_control() || "<>\"{}|\\^`".contains(c))
            }
            Format::Email => {
                let mut parts = s.split('@');
                let (Some(local), Some(domain), None) = (parts.next(), parts.next(), parts.next()) else {
                    return false;
                };
                !local.is_empty()
                    && domain.contains('.')
                    && !domain.starts_with('.')
                    && !domain.ends_with('.')
                    && !s.chars().any(char::is_whitespace)
            }
            Format::Date => date(s),
            Format::DateTime => {
                let Some((d, t)) = s.split_once(['T', 't']) else { return false };
                let (time, zone) = match t.strip_suffix(['Z', 'z']) {
                    Some(time) => (time, None),
                    None => match t.rfind(['+', '-']) {
                        Some(at) => (&t[..at], Some(&t[at + 1..])),
                        None => return false,
                    },
                };
                let (hms, frac) = time.split_once('.').map_or((time, None), |(a, b)| (a, Some(b)));
                let hms: Vec<&str> = hms.split(':').collect();
                let hm = |p: &[&str], most: [u32; 2]| {
                    p.iter().zip(most).all(|(x, m)| x.len() == 2 && digits(x) && x.parse::<u32>().unwrap_or(99) <= m)
                };
                date(d)
                    && hms.len() == 3
                    && hm(&hms[..2], [23, 59])
                    && hms[2].len() == 2
                    && digits(hms[2])
                    && hms[2].parse::<u32>().unwrap_or(99) <= 60
                    && frac.is_none_or(digits)
                    && zone.is_none_or(|z| {
                        let z: Vec<&str> = z.split(':').collect();
                        z.len() == 2 && hm(&z, [23, 59])
                    })
            }
            Format::Uuid => {
                let groups: Vec<&str> = s.split('-').collect();
                groups.len() == 5
                    && [8, 4, 4, 4, 12]
                        .iter()
                        .zip(&groups)
                        .all(|(n, g)| g.len() == *n && g.bytes().all(|b| b.is_ascii_hexdigit()))
            }
        }
    }
}

fn err(field: &str, message: impl Into<String>) -> SchemaError {
    SchemaError { field: field.to_string(), message: message.into() }
}

/// The path of a property of the field at `path`.
fn child(path: &str, name: &str) -> String {
    if path == "." { name.to_string() } else { format!("{path}.{name}") }
}

fn read(schema: &Value, path: &str) -> Result<Shape, SchemaError> {
    let s = match schema {
        Value::Object(s) => s,
        Value::Bool(true) => return Err(err(path, "`true` (any value) has no type to fill")),
        Value::Bool(false) => return Err(err(path, "`false` admits no value")),
        other => return Err(err(path, format!("{other} is not a schema"))),
    };
    for key in s.keys() {
        if REFUSED.contains(&key.as_str()) {
            return Err(err(path, format!("`{key}` is not supported")));
        }
    }
    if let Some(nullable) = s.get("anyOf").or_else(|| s.get("oneOf")) {
        return read_nullable(s, nullable, path);
    }
    if s.get("uniqueItems").is_some_and(|u| u != &Value::Bool(false)) {
        return Err(err(path, "`uniqueItems` is not supported"));
    }
    let ty = read_type(s, path)?;
    let typed = match ty {
        Some(ty) => Some(read_typed(s, ty, path)?),
        None => None,
    };
    let choices = match (s.get("enum"), s.get("const")) {
        (None, None) => None,
        (Some(Value::Array(values)), None) => Some(values.clone()),
        (Some(_), None) => return Err(err(path, "`enum` is not a list")),
        (None, Some(c)) => Some(vec![c.clone()]),
        (Some(Value::Array(values)), Some(c)) => Some(values.iter().filter(|v| *v == c).cloned().collect()),
        (Some(_), Some(_)) => return Err(err(path, "`enum` is not a list")),
    };
    match (typed, choices) {
        (Some(shape), None) => Ok(shape),
        (None, None) => Err(err(path, "no `type`, `enum` or `const`: nothing says what to fill")),
        (typed, Some(values)) => {
            // The values the rest of the schema allows too.
            let mut values: Vec<Value> = values
                .into_iter()
                .filter(|v| typed.as_ref().is_none_or(|t| t.check(v).is_ok()))
                .fold(Vec::new(), |mut kept, v| {
                    if !kept.contains(&v) {
                        kept.push(v);
                    }
                    kept
                });
            match values.len() {
                0 => Err(err(path, "no value of `enum` or `const` is allowed by the rest of the schema")),
                1 => Ok(Shape::Is(values.remove(0))),
                _ => Ok(Shape::OneOf(values)),
            }
        }
    }
}

/// `anyOf`/`oneOf` of a schema and `{"type": "null"}`, beside nothing but annotations.
fn read_nullable(s: &Map<String, Value>, of: &Value, path: &str) -> Result<Shape, SchemaError> {
    let unsupported = || err(path, "`anyOf` and `oneOf` are supported only as a schema or `null`");
    if s.keys().any(|k| !ANNOTATIONS.contains(&k.as_str()) && k != "anyOf" && k != "oneOf") {
        return Err(unsupported());
    }
    if s.contains_key("anyOf") && s.contains_key("oneOf") {
        return Err(unsupported());
    }
    let Some(branches) = of.as_array() else { return Err(unsupported()) };
    let is_null =
        |b: &Value| b.get("type") == Some(&Value::from("null")) && b.as_object().is_some_and(|o| o.len() == 1);
    let others: Vec<&Value> = branches.iter().filter(|b| !is_null(b)).collect();
    match (others.as_slice(), branches.len()) {
        ([one], 1 | 2) => match read(one, path)? {
            Shape::Null => Err(unsupported()),
            shape => Ok(shape),
        },
        _ => Err(unsupported()),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Type {
    Object,
    Array,
    String,
    Integer,
    Number,
    Boolean,
    Null,
}

fn read_type(s: &Map<String, Value>, path: &str) -> Result<Option<Type>, SchemaError> {
    let one = |name: &str| -> Result<Type, SchemaError> {
        Ok(match name {
            "object" => Type::Object,
            "array" => Type::Array,
            "string" => Type::String,
            "integer" => Type::Integer,
            "number" => Type::Number,
            "boolean" => Type::Boolean,
            "null" => Type::Null,
            other => return Err(err(path, format!("unknown type {other:?}"))),
        })
    };
    match s.get("type") {
        None => Ok(None),
        Some(Value::String(t)) => one(t).map(Some),
        Some(Value::Array(types)) => {
            let types: Vec<Type> = types
                .iter()
                .map(|t| t.as_str().ok_or_else(|| err(path, "`type` lists a non-string")).and_then(one))
                .collect::<Result<_, _>>()?;
            let not_null: Vec<Type> = types.iter().copied().filter(|t| *t != Type::Null).collect();
            match (not_null.as_slice(), types.len()) {
                ([t], _) => Ok(Some(*t)),
                ([], 1..) => Ok(Some(Type::Null)),
                _ => Err(err(path, "`type` lists more than one type besides null")),
            }
        }
        Some(_) => Err(err(path, "`type` is neither a string nor a list")),
    }
}

fn read_typed(s: &Map<String, Value>, ty: Type, path: &str) -> Result<Shape, SchemaError> {
    let count = |key: &str| -> Result<Option<usize>, SchemaError> {
        match s.get(key) {
            None => Ok(None),
            Some(v) => v.as_u64().map(|n| Some(n as usize)).ok_or_else(|| err(path, format!("`{key}` is not a count"))),
        }
    };
    let number = |key: &str| -> Result<Option<f64>, SchemaError> {
        match s.get(key) {
            None => Ok(None),
            Some(Value::Bool(_)) => Err(err(path, format!("`{key}` as a boolean (draft 4) is not supported"))),
            Some(v) => v.as_f64().map(Some).ok_or_else(|| err(path, format!("`{key}` is not a number"))),
        }
    };
    let (min, xmin, max, xmax) =
        (number("minimum")?, number("exclusiveMinimum")?, number("maximum")?, number("exclusiveMaximum")?);
    let multiple = number("multipleOf")?;
    if multiple.is_some() && !(ty == Type::Integer && multiple.is_some_and(|m| m == 1.0)) {
        return Err(err(path, "`multipleOf` is not supported (but 1, for an integer)"));
    }
    Ok(match ty {
        Type::Object => read_object(s, path)?,
        Type::Array => {
            let items = match s.get("items") {
                Some(Value::Array(_)) => return Err(err(path, "`items` as a list (tuples) is not supported")),
                Some(items) => read(items, &format!("{path}[]"))?,
                None => return Err(err(path, "an array with no `items`: nothing says what to fill")),
            };
            let min = count("minItems")?.unwrap_or(0);
            let most = count("maxItems")?;
            if most.is_some_and(|m| m < min) {
                return Err(err(path, "`maxItems` is below `minItems`"));
            }
            Shape::Array { items: Box::new(items), min, max: most.unwrap_or(MAX_ITEMS).min(MAX_ITEMS).max(min) }
        }
        Type::String => {
            let (min, max) = (count("minLength")?.unwrap_or(0), count("maxLength")?);
            if max.is_some_and(|m| m < min) {
                return Err(err(path, "`maxLength` is below `minLength`"));
            }
            let format = match s.get("format") {
                None => None,
                Some(Value::String(f)) => {
                    Some(Format::read(f).ok_or_else(|| err(path, format!("format {f:?} is not supported")))?)
                }
                Some(_) => return Err(err(path, "`format` is not a string")),
            };
            Shape::String { min, max, format }
        }
        Type::Integer => {
            let limit = 10i64.pow(MAX_DIGITS) - 1;
            // Each bound as the integer it allows, tightest of the inclusive and exclusive one.
            let lo =
                [min.map(f64::ceil), xmin.map(|x| x.floor() + 1.0)].into_iter().flatten().fold(-limit as f64, f64::max);
            let hi =
                [max.map(f64::floor), xmax.map(|x| x.ceil() - 1.0)].into_iter().flatten().fold(limit as f64, f64::min);
            if lo > hi {
                return Err(err(path, "no integer within the bounds"));
            }
            Shape::Integer { min: lo as i64, max: hi as i64 }
        }
        Type::Number => {
            let limit = 10f64.powi(MAX_DIGITS as i32) - 1.0;
            let tightest = |plain: Option<f64>, exclusive: Option<f64>, low: bool| {
                let default = Bound { value: if low { -limit } else { limit }, exclusive: false };
                [
                    plain.map(|v| Bound { value: v, exclusive: false }),
                    exclusive.map(|v| Bound { value: v, exclusive: true }),
                ]
                .into_iter()
                .flatten()
                .fold(default, |best, b| {
                    let tighter = if low { b.value > best.value } else { b.value < best.value };
                    if tighter || (b.value == best.value && b.exclusive) { b } else { best }
                })
            };
            let (lo, hi) = (tightest(min, xmin, true), tightest(max, xmax, false));
            if lo.value > hi.value || (lo.value == hi.value && (lo.exclusive || hi.exclusive)) {
                return Err(err(path, "no number within the bounds"));
            }
            Shape::Number { min: lo, max: hi }
        }
        Type::Boolean => Shape::Boolean,
        Type::Null => Shape::Null,
    })
}

fn read_object(s: &Map<String, Value>, path: &str) -> Result<Shape, SchemaError> {
    let empty = Map::new();
    let props = match s.get("properties") {
        None => &empty,
        Some(Value::Object(p)) => p,
        Some(_) => return Err(err(path, "`properties` is not an object")),
    };
    let required: Vec<&str> = match s.get("required") {
        None => Vec::new(),
        Some(Value::Array(r)) => r
            .iter()
            .map(|n| n.as_str().ok_or_else(|| err(path, "`required` lists a non-string")))
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(err(path, "`required` is not a list")),
    };
    if let Some(missing) = required.iter().find(|n| !props.contains_key(**n)) {
        return Err(err(&child(path, missing), "required, but not in `properties`"));
    }
    // The required properties in the order `required` lists them, then the optional ones with
    // a default by name: the order of `properties` is not kept by every build of serde_json.
    let mut fields = Vec::new();
    for name in &required {
        if !fields.iter().any(|(n, _): &(String, Shape)| n == name) {
            fields.push((name.to_string(), read(&props[*name], &child(path, name))?));
        }
    }
    let mut optional: Vec<(&String, &Value)> = props
        .iter()
        .filter(|(name, schema)| {
            !required.contains(&name.as_str()) && schema.get("default").is_some_and(|d| !d.is_null())
        })
        .collect();
    optional.sort_by_key(|(name, _)| name.as_str());
    for (name, schema) in optional {
        // An optional property whose schema cannot be filled is left out.
        match read(schema, &child(path, name)) {
            Ok(shape) => fields.push((name.clone(), shape)),
            Err(e) => tracing::debug!(error = %e, "an optional property is left out"),
        }
    }
    let n = fields.len();
    let bound = |key: &str| s.get(key).and_then(Value::as_u64).map(|b| b as usize);
    if bound("minProperties").is_some_and(|m| n < m) {
        return Err(err(path, format!("`minProperties` asks for more than the {n} properties filled")));
    }
    if bound("maxProperties").is_some_and(|m| n > m) {
        return Err(err(path, format!("`maxProperties` allows fewer than the {n} properties filled")));
    }
    Ok(Shape::Object(fields))
}

fn whole(x: f64) -> Option<i64> {
    (x.fract() == 0.0 && x.abs() < 1e15).then_some(x as i64)
}

fn check(shape: &Shape, v: &Value, path: &str) -> Result<(), SchemaError> {
    let bad = |what: &str| Err(err(path, format!("{v} is not {what}")));
    match (shape, v) {
        (Shape::Object(fields), Value::Object(map)) => {
            if let Some(extra) = map.keys().find(|k| !fields.iter().any(|(name, _)| name == *k)) {
                return Err(err(&child(path, extra), "not a property filled"));
            }
            for (name, field) in fields {
                match map.get(name) {
                    Some(x) => check(field, x, &child(path, name))?,
                    None => return Err(err(&child(path, name), "missing")),
                }
            }
            Ok(())
        }
        (Shape::Array { items, min, max }, Value::Array(xs)) => {
            if xs.len() < *min || xs.len() > *max {
                return bad(&format!("an array of {min} to {max} items"));
            }
            let field = format!("{path}[]");
            xs.iter().try_for_each(|x| check(items, x, &field))
        }
        (Shape::String { min, max, format }, Value::String(s)) => {
            let n = s.chars().count();
            if n < *min || max.is_some_and(|m| n > m) {
                return bad(&format!(
                    "a string of {min} to {} characters",
                    max.map_or("any".into(), |m| m.to_string())
                ));
            }
            match format {
                Some(f) if !f.matches(s) => bad(&format!("a {}", f.name())),
                _ => Ok(()),
            }
        }
        // 3.0 is an integer too, as JSON Schema counts them.
        (Shape::Integer { min, max }, Value::Number(n)) => match n.as_i64().or_else(|| whole(n.as_f64()?)) {
            Some(i) if (*min..=*max).contains(&i) => Ok(()),
            _ => bad(&format!("an integer from {min} to {max}")),
        },
        (Shape::Number { min, max }, Value::Number(n)) => {
            let x = n.as_f64().unwrap_or(f64::NAN);
            let above = if min.exclusive { x > min.value } else { x >= min.value };
            let below = if max.exclusive { x < max.value } else { x <= max.value };
            if above && below { Ok(()) } else { bad("a number within the bounds") }
        }
        (Shape::Boolean, Value::Bool(_)) | (Shape::Null, Value::Null) => Ok(()),
        (Shape::OneOf(values), v) if values.contains(v) => Ok(()),
        (Shape::Is(c), v) if c == v => Ok(()),
        (Shape::OneOf(_), _) => bad("one of `enum`"),
        (Shape::Is(c), _) => bad(&format!("the `const` {c}")),
        (Shape::Object(_), _) => bad("an object"),
        (Shape::Array { .. }, _) => bad("an array"),
        (Shape::String { .. }, _) => bad("a string"),
        (Shape::Integer { .. }, _) => bad("an integer"),
        (Shape::Number { .. }, _) => bad("a number"),
        (Shape::Boolean, _) => bad("a boolean"),
        (Shape::Null, _) => bad("null"),
    }
}

#[cfg(test)]
mod tests;
