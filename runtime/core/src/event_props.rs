//! Event JSON: any text is an event or a clear error, never a panic, and an event wrong in one
//! field is refused naming that field (property tests of `from_json` + `validate`).

use proptest::prelude::*;
use serde_json::Value;

use super::*;

/// A valid event with every field set, as (field, JSON text).
const VALID: &[(&str, &str)] = &[
    ("id", "\"e-1\""),
    ("ts", "\"2026-01-02T03:04:05Z\""),
    ("domain", "\"chat\""),
    ("room", "\"general\""),
    ("from", "\"alice\""),
    ("sender_kind", "\"persona\""),
    ("text", "\"hello @ops\""),
    ("persona", "\"helper\""),
    ("mentions", "[\"ops\"]"),
    ("priority", "0.5"),
    ("urgent", "true"),
    ("in_reply_to", "\"e-0\""),
];

fn object(fields: &[(&str, String)]) -> String {
    let body: Vec<String> = fields.iter().map(|(k, v)| format!("{k:?}:{v}")).collect();
    format!("{{{}}}", body.join(","))
}

/// JSON values of every type and at the edges: huge and tiny numbers, numbers JSON cannot
/// hold, NaN-like strings, control characters, long strings, nested containers.
fn any_json() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        prop_oneof![
            Just("NaN"),
            Just("Infinity"),
            Just("-1e999"),
            Just(""),
            Just(" \t\n"),
            Just("\u{0}\u{1b}[31m\u{7f}"),
            Just("\u{202e}é@ops 中"),
            Just("chat"),
            Just("2026-02-30T00:00:00Z"),
            Just("@ops"),
        ]
        .prop_map(|s| Value::String(s.into())),
        "\\PC{0,40}".prop_map(Value::String),
        (1usize..70_000).prop_map(|n| Value::String("x".repeat(n))),
    ];
    let value = leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map("[a-z]{1,4}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    });
    prop_oneof![
        8 => value.prop_map(|v| v.to_string()),
        // Numbers serde_json reads as text but no f64 or i64 holds, and tokens that are no JSON.
        1 => prop_oneof![
            Just("1e400"),
            Just("-1e400"),
            Just("18446744073709551616"),
            Just("-9223372036854775809"),
            Just("0.0000000000000000000000000000001e-400"),
            Just("NaN"),
            Just("-"),
            Just("\"\\ud800\""),
        ]
        .prop_map(String::from),
    ]
}

/// Parses and validates: the event, or the error's text and the field it names.
fn accept(text: &str) -> Result<Event, (String, Option<&'static str>)> {
    let input = EventInput::from_json(text).map_err(|e| (e, None))?;
    input.validate().map_err(|e| (e.to_string(), Some(e.field)))
}

fn assert_clear(message: &str) {
    assert!(!message.trim().is_empty(), "an empty error");
    assert!(!message.ends_with('.'), "a full stop: {message}");
}

#[test]
fn a_value_of_the_wrong_type_names_its_field() {
    let err = EventInput::from_json(r#"{"domain":"chat","room":"general","from":"a","text":"x","priority":"high"}"#)
        .unwrap_err();
    assert!(err.starts_with("field `priority`: invalid type: string \"high\", expected f64"), "{err}");
    let err = EventInput::from_json(r#"{"domain":"chat","room":"general","from":"a","text":"x","mentions":["a",1]}"#)
        .unwrap_err();
    assert!(err.starts_with("field `mentions[1]`: invalid type"), "{err}");
    let err =
        EventInput::from_json(r#"{"domain":"chat","room":"general","from":"a","text":"x","colour":1}"#).unwrap_err();
    assert!(err.contains("unknown field `colour`"), "{err}");
    let err = EventInput::from_json(r#"{"domain":"chat","room":"general","from":"a","text":"x"} {}"#).unwrap_err();
    assert!(err.contains("trailing characters"), "{err}");
}

#[test]
fn an_in_reply_to_with_control_characters_or_too_long_is_refused() {
    for bad in ["", "e\u{0}1", &"e".repeat(129)] {
        let text = object(&[
            ("domain", "\"chat\"".into()),
            ("room", "\"general\"".into()),
            ("from", "\"a\"".into()),
            ("text", "\"x\"".into()),
            ("in_reply_to", Value::String(bad.into()).to_string()),
        ]);
        assert_eq!(accept(&text).unwrap_err().1, Some("in_reply_to"), "{bad:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_is_an_event_or_a_clear_error(text in "\\PC{0,120}") {
        if let Err((message, _)) = accept(&text) {
            assert_clear(&message);
        }
    }

    #[test]
    fn arbitrary_objects_are_an_event_or_a_clear_error(
        fields in proptest::collection::vec((proptest::sample::select(VALID), any_json()), 0..8),
    ) {
        let fields: Vec<(&str, String)> = fields.into_iter().map(|((k, _), v)| (k, v)).collect();
        if let Err((message, _)) = accept(&object(&fields)) {
            assert_clear(&message);
        }
    }

    /// A valid event with one field set to anything: accepted, or refused naming that field.
    #[test]
    fn one_wrong_field_is_named(
        which in 0..VALID.len(),
        value in any_json(),
        keep in proptest::collection::vec(any::<bool>(), VALID.len()),
    ) {
        let field = VALID[which].0;
        let required = ["domain", "room", "from", "text"];
        let fields: Vec<(&str, String)> = VALID
            .iter()
            .zip(&keep)
            .enumerate()
            .filter(|(i, ((k, _), keep))| *i == which || **keep || required.contains(k))
            .map(|(i, ((k, v), _))| (*k, if i == which { value.clone() } else { v.to_string() }))
            .collect();
        let text = object(&fields);
        match accept(&text) {
            Ok(event) => prop_assert!(!event.id.is_empty()),
            Err((message, named)) => {
                assert_clear(&message);
                match named {
                    Some(named) => prop_assert_eq!(named, field, "{}: {}", text, message),
                    None => prop_assert!(message.contains(&format!("`{field}")), "{text}: {message}"),
                }
            }
        }
    }

    /// A field missing, or one more that is unknown: the error names it.
    #[test]
    fn a_missing_or_unknown_field_is_named(which in 0..4usize, unknown in "[a-z_]{1,12}") {
        let required = ["domain", "room", "from", "text"];
        let fields: Vec<(&str, String)> =
            VALID.iter().filter(|(k, _)| *k != required[which]).map(|(k, v)| (*k, v.to_string())).collect();
        let (message, _) = accept(&object(&fields)).unwrap_err();
        prop_assert!(message.contains(&format!("missing field `{}`", required[which])), "{}", message);
        prop_assume!(VALID.iter().all(|(k, _)| *k != unknown));
        let mut fields: Vec<(&str, String)> = VALID.iter().map(|(k, v)| (*k, v.to_string())).collect();
        fields.push((&unknown, "1".into()));
        let (message, _) = accept(&object(&fields)).unwrap_err();
        prop_assert!(message.contains(&format!("unknown field `{unknown}`")), "{}", message);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// A valid event body with bytes cut or put in at random: an event or a clear error.
    #[test]
    fn a_valid_body_edited_at_random_is_an_event_or_a_clear_error(
        edits in proptest::collection::vec(
            (any::<prop::sample::Index>(), 0usize..6, prop_oneof![Just(String::new()), "\\PC{1,4}", Just("\"".to_string()), Just("{".to_string())]),
            1..4,
        ),
    ) {
        let fields: Vec<(&str, String)> = VALID.iter().map(|(k, v)| (*k, v.to_string())).collect();
        let mut text = object(&fields);
        for (at, cut, put) in edits {
            let start = at.index(text.len() + 1);
            let start = (0..=start).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
            let end = (start + cut).min(text.len());
            let end = (end..=text.len()).find(|i| text.is_char_boundary(*i)).unwrap_or(text.len());
            text.replace_range(start..end, &put);
        }
        if let Err((message, _)) = accept(&text) {
            assert_clear(&message);
        }
    }
}
