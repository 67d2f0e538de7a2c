//! Schemas read into shapes, refused with the field named, and values checked; every shape's
//! own schema reads back as the same shape.

use serde_json::{Value, json};

use super::{Bound, Format, Shape};

fn git_log() -> Value {
    json!({
        "type": "object",
        "properties": {
            "repo_path": { "type": "string", "title": "Repo Path" },
            "max_count": { "type": "integer", "default": 10 }
        },
        "required": ["repo_path"]
    })
}

fn refused(schema: Value) -> String {
    Shape::compile(&schema).unwrap_err().to_string()
}

#[test]
fn required_properties_and_those_with_a_default_are_filled_in_their_order() {
    let shape = Shape::compile(&git_log()).unwrap();
    let string = Shape::String { min: 0, max: None, format: None };
    let integer = Shape::Integer { min: -999_999_999_999_999, max: 999_999_999_999_999 };
    assert_eq!(shape, Shape::Object(vec![("repo_path".into(), string), ("max_count".into(), integer)]));
    // Optional ones without a default, with a null one, or whose schema is not read are left out.
    let schema = json!({
        "type": "object",
        "properties": {
            "a": { "type": "string" },
            "b": { "type": "string", "default": null },
            "c": { "type": "string", "pattern": "^x", "default": "x" },
            "d": { "type": "boolean", "default": false }
        },
        "required": []
    });
    assert_eq!(Shape::compile(&schema).unwrap(), Shape::Object(vec![("d".into(), Shape::Boolean)]));
}

#[test]
fn an_unsupported_construct_is_refused_naming_its_field() {
    let mut schema = git_log();
    schema["properties"]["repo_path"]["pattern"] = json!("^/");
    assert_eq!(refused(schema), "field `repo_path`: `pattern` is not supported");
    let nested = json!({
        "type": "object",
        "properties": { "options": { "type": "object", "properties": { "depth": { "$ref": "#/$defs/d" } }, "required": ["depth"] } },
        "required": ["options"]
    });
    assert_eq!(refused(nested), "field `options.depth`: `$ref` is not supported");
    let items = json!({ "type": "object", "properties": { "paths": { "type": "array", "items": { "allOf": [] } } }, "required": ["paths"] });
    assert_eq!(refused(items), "field `paths[]`: `allOf` is not supported");
    assert_eq!(
        refused(json!({ "type": "string", "format": "hostname" })),
        "field `.`: format \"hostname\" is not supported"
    );
    assert_eq!(
        refused(json!({ "description": "anything" })),
        "field `.`: no `type`, `enum` or `const`: nothing says what to fill"
    );
    let unknown = json!({ "type": "object", "properties": {}, "required": ["x"] });
    assert_eq!(refused(unknown), "field `x`: required, but not in `properties`");
    assert!(
        refused(json!({ "type": "array", "items": { "type": "string" }, "uniqueItems": true })).contains("uniqueItems")
    );
    assert!(refused(json!({ "anyOf": [{ "type": "string" }, { "type": "integer" }] })).contains("anyOf"));
    assert!(refused(json!({ "type": "integer", "minimum": 5, "maximum": 4 })).contains("no integer"));
}

#[test]
fn an_optional_type_is_its_type_and_enums_keep_the_values_the_rest_allows() {
    let nullable = json!({ "anyOf": [{ "type": "string", "maxLength": 4 }, { "type": "null" }], "title": "T" });
    assert_eq!(Shape::compile(&nullable).unwrap(), Shape::String { min: 0, max: Some(4), format: None });
    assert_eq!(
        Shape::compile(&json!({ "type": ["integer", "null"], "minimum": 1, "maximum": 3 })).unwrap(),
        Shape::Integer { min: 1, max: 3 }
    );
    let e = json!({ "type": "string", "enum": ["main", "dev", 7, "main"] });
    assert_eq!(Shape::compile(&e).unwrap(), Shape::OneOf(vec![json!("main"), json!("dev")]));
    assert_eq!(Shape::compile(&json!({ "const": "x" })).unwrap(), Shape::Is(json!("x")));
    assert_eq!(Shape::compile(&json!({ "enum": ["x"] })).unwrap(), Shape::Is(json!("x")));
}

#[test]
fn bounds_are_read_as_the_values_they_allow() {
    let i = json!({ "type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 1000000, "multipleOf": 1 });
    assert_eq!(Shape::compile(&i).unwrap(), Shape::Integer { min: 1, max: 999_999 });
    let n = json!({ "type": "number", "minimum": 0, "exclusiveMinimum": 0, "maximum": 2.5 });
    let want =
        Shape::Number { min: Bound { value: 0.0, exclusive: true }, max: Bound { value: 2.5, exclusive: false } };
    assert_eq!(Shape::compile(&n).unwrap(), want);
    let a = json!({ "type": "array", "items": { "type": "boolean" }, "minItems": 1, "maxItems": 100 });
    assert_eq!(Shape::compile(&a).unwrap(), Shape::Array { items: Box::new(Shape::Boolean), min: 1, max: 16 });
}

#[test]
fn a_value_is_checked_with_the_failing_field_named() {
    let shape = Shape::compile(&git_log()).unwrap();
    assert_eq!(shape.check(&json!({ "repo_path": "/r", "max_count": 3 })), Ok(()));
    assert_eq!(shape.check(&json!({ "repo_path": "/r", "max_count": 3.0 })), Ok(()), "3.0 is an integer");
    let e = shape.check(&json!({ "repo_path": 1, "max_count": 3 })).unwrap_err();
    assert_eq!(e.to_string(), "field `repo_path`: 1 is not a string");
    let e = shape.check(&json!({ "repo_path": "/r" })).unwrap_err();
    assert_eq!(e.to_string(), "field `max_count`: missing");
    let e = shape.check(&json!({ "repo_path": "/r", "max_count": 1, "x": 1 })).unwrap_err();
    assert_eq!(e.to_string(), "field `x`: not a property filled");
}

#[test]
fn every_shape_s_own_schema_reads_back_as_the_same_shape() {
    let schemas = [
        git_log(),
        json!({ "type": "array", "items": { "type": "number", "exclusiveMaximum": 1 }, "maxItems": 3 }),
        json!({ "type": "string", "format": "uri", "minLength": 1 }),
        json!({ "enum": [1, "a", null] }),
        json!({ "type": "object", "properties": { "x": { "type": "null" } }, "required": ["x"] }),
    ];
    for schema in schemas {
        let shape = Shape::compile(&schema).unwrap();
        assert_eq!(Shape::compile(&shape.to_schema()).unwrap(), shape, "{schema}");
    }
}

#[test]
fn formats_are_checked_as_written() {
    for (f, good, bad) in [
        (Format::Uri, "https://example.com/a?b=c", "no scheme here"),
        (Format::Uri, "file:///tmp/x", "https://a b"),
        (Format::Email, "a.b@example.org", "a@b@c.org"),
        (Format::Date, "2026-11-29", "2026-13-01"),
        (Format::DateTime, "2026-11-29T04:20:42.5+01:00", "2026-11-29 04:20"),
        (Format::DateTime, "2026-11-29T04:20:42Z", "2026-11-29T25:00:00Z"),
        (Format::Uuid, "123e4567-e89b-12d3-a456-426614174000", "123e4567-e89b-12d3-a456"),
    ] {
        assert!(f.matches(good), "{f:?} {good}");
        assert!(!f.matches(bad), "{f:?} {bad}");
    }
}
