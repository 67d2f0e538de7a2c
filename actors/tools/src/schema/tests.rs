use serde_json::json;

use super::*;

fn refusal(schema: Value, value: Value) -> SchemaRefusal {
    validate(&schema, &value).expect_err("refused")
}

/// server-everything's `get-sum`, as zod writes it.
fn get_sum() -> Value {
    json!({
        "type": "object",
        "properties": { "a": { "type": "number" }, "b": { "type": "number" } },
        "required": ["a", "b"],
        "additionalProperties": false,
        "$schema": "http://json-schema.org/draft-07/schema#"
    })
}

#[test]
fn a_good_call_passes() {
    validate(&get_sum(), &json!({ "a": 1, "b": 2.5 })).unwrap();
}

#[test]
fn a_missing_required_field_is_named() {
    let r = refusal(get_sum(), json!({ "a": 1 }));
    assert_eq!((r.field.as_str(), r.reason.as_str()), ("b", "missing required field"));
}

#[test]
fn a_wrong_type_is_named_with_what_came() {
    let r = refusal(get_sum(), json!({ "a": "one", "b": 2 }));
    assert_eq!(r.field, "a");
    assert_eq!(r.reason, "must be a number, not the string \"one\"");
    assert_eq!(refusal(get_sum(), json!([1, 2])).field, "(arguments)");
}

#[test]
fn an_unknown_field_is_refused_only_when_the_schema_says_so() {
    let r = refusal(get_sum(), json!({ "a": 1, "b": 2, "c": 3 }));
    assert_eq!((r.field.as_str(), r.reason.as_str()), ("c", "unknown field"));
    let mut open = get_sum();
    open.as_object_mut().unwrap().remove("additionalProperties");
    validate(&open, &json!({ "a": 1, "b": 2, "c": 3 })).unwrap();
}

#[test]
fn integers_enums_and_bounds() {
    let schema = json!({
        "type": "object",
        "properties": {
            "n": { "type": "integer", "minimum": 1, "maximum": 10 },
            "city": { "enum": ["New York", "Chicago"] },
            "x": { "type": "number", "exclusiveMinimum": 0 },
            "y": { "type": "number", "minimum": 0, "exclusiveMinimum": true },
            "s": { "type": "string", "minLength": 2, "maxLength": 3 }
        }
    });
    validate(&schema, &json!({ "n": 3, "city": "Chicago", "x": 0.5, "y": 1, "s": "été" })).unwrap();
    validate(&schema, &json!({ "n": 3.0 })).unwrap();
    assert_eq!(refusal(schema.clone(), json!({ "n": 2.5 })).reason, "must be an integer, not the number 2.5");
    assert_eq!(refusal(schema.clone(), json!({ "n": 11 })).reason, "must be at most 10, not 11");
    assert_eq!(refusal(schema.clone(), json!({ "n": 0 })).reason, "must be at least 1, not 0");
    let r = refusal(schema.clone(), json!({ "city": "Paris" }));
    assert_eq!(
        (r.field.as_str(), r.reason.as_str()),
        ("city", "must be one of \"New York\", \"Chicago\", not \"Paris\"")
    );
    assert_eq!(refusal(schema.clone(), json!({ "x": 0 })).reason, "must be greater than 0, not 0");
    assert_eq!(refusal(schema.clone(), json!({ "y": 0 })).reason, "must be greater than 0, not 0");
    assert_eq!(refusal(schema.clone(), json!({ "s": "x" })).reason, "needs at least 2 characters, has 1");
    assert_eq!(refusal(schema, json!({ "s": "abcd" })).reason, "allows at most 3 characters, has 4");
}

#[test]
fn nested_items_name_their_path() {
    let schema = json!({
        "type": "object",
        "properties": {
            "edits": {
                "type": "array",
                "minItems": 1,
                "items": {
                    "type": "object",
                    "properties": { "oldText": { "type": "string" }, "newText": { "type": "string" } },
                    "required": ["oldText", "newText"]
                }
            }
        }
    });
    let r = refusal(schema.clone(), json!({ "edits": [{ "oldText": "a", "newText": "b" }, { "oldText": "c" }] }));
    assert_eq!(r.field, "edits[1].newText");
    assert_eq!(refusal(schema, json!({ "edits": [] })).reason, "needs at least 1 items, has 0");
}

/// pydantic writes `Optional[str]` as `anyOf` with `null`; OpenAPI-style schemas say `nullable`.
#[test]
fn optional_fields_accept_null_and_their_type_only() {
    let schema = json!({
        "type": "object",
        "properties": {
            "start": { "anyOf": [{ "type": "string" }, { "type": "null" }], "default": null },
            "end": { "type": "string", "nullable": true },
            "both": { "type": ["string", "null"] }
        }
    });
    validate(&schema, &json!({ "start": null, "end": null, "both": null })).unwrap();
    validate(&schema, &json!({ "start": "yesterday", "end": "now", "both": "x" })).unwrap();
    let r = refusal(schema.clone(), json!({ "start": 3 }));
    assert_eq!(r.field, "start");
    assert!(r.reason.starts_with("matches none of the 2 allowed forms"), "{}", r.reason);
    assert_eq!(refusal(schema, json!({ "both": 1 })).reason, "must be a string or null, not the number 1");
}

#[test]
fn what_is_not_checked_passes() {
    let schema = json!({
        "type": "object",
        "properties": {
            "p": { "type": "string", "pattern": "^[a-z]+$", "format": "uri" },
            "r": { "$ref": "#/$defs/thing" }
        }
    });
    validate(&schema, &json!({ "p": "NOT LOWER", "r": { "anything": 1 } })).unwrap();
    validate(&json!(true), &json!({ "x": 1 })).unwrap();
    assert_eq!(refusal(json!(false), json!(1)).reason, "no value is allowed here");
}

#[test]
fn deep_values_are_refused_not_followed() {
    let mut schema = json!({ "type": "string" });
    let mut value = json!("leaf");
    for _ in 0..100 {
        schema = json!({ "type": "object", "properties": { "a": schema } });
        value = json!({ "a": value });
    }
    assert!(refusal(schema, value).reason.starts_with("nested deeper than"));
}
