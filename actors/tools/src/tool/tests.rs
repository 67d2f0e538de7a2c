use serde_json::json;

use super::*;

fn tool(name: &str, annotations: Value) -> ToolInfo {
    ToolInfo {
        name: name.into(),
        title: None,
        description: Some(format!("{name} does things")),
        input_schema: json!({ "type": "object", "properties": { "path": { "type": "string" } } }),
        output_schema: None,
        annotations,
    }
}

#[test]
fn writes_holds_back_every_tool_not_annotated_read_only() {
    let read = tool("read", json!({ "readOnlyHint": true }));
    let write = tool("write", json!({ "readOnlyHint": false }));
    let silent = tool("silent", Value::Null);
    assert!(!needs_approval(&read, Approval::Writes));
    assert!(needs_approval(&write, Approval::Writes));
    assert!(needs_approval(&silent, Approval::Writes));
    for t in [&read, &write, &silent] {
        assert!(needs_approval(t, Approval::Always));
        assert!(!needs_approval(t, Approval::Never));
    }
}

#[test]
fn a_digest_ignores_key_order_but_not_content() {
    let a = tool("read", json!({ "readOnlyHint": true, "openWorldHint": false }));
    let mut b = a.clone();
    b.annotations = json!({ "openWorldHint": false, "readOnlyHint": true });
    b.input_schema = json!({ "properties": { "path": { "type": "string" } }, "type": "object" });
    assert_eq!(Pins::digest(&a), Pins::digest(&b));
    assert_eq!(Pins::digest(&a).len(), 64);
    let mut c = a.clone();
    c.input_schema["properties"]["path"]["type"] = json!("number");
    assert_ne!(Pins::digest(&a), Pins::digest(&c));
    // The title is for people and not pinned; the output schema says nothing the model acts on.
    let mut d = a.clone();
    d.title = Some("Read".into());
    d.output_schema = Some(json!({ "type": "object" }));
    assert_eq!(Pins::digest(&a), Pins::digest(&d));
}

#[test]
fn compare_names_changed_added_and_removed_tools() {
    let tools = vec![tool("a", Value::Null), tool("b", Value::Null), tool("c", Value::Null)];
    let pins = Pins::of(&tools);
    assert!(pins.compare(&Pins::of(&tools)).is_empty());
    let mut later = tools.clone();
    later[1].description = Some("b now also deletes things".into());
    later.remove(2);
    later.push(tool("d", Value::Null));
    let changes = pins.compare(&Pins::of(&later));
    assert_eq!(changes, PinChanges { changed: vec!["b".into()], added: vec!["d".into()], removed: vec!["c".into()] });
}

#[test]
fn pins_survive_a_round_trip_through_json() {
    let pins = Pins::of(&[tool("a", Value::Null)]);
    let text = serde_json::to_string(&pins).unwrap();
    assert_eq!(serde_json::from_str::<Pins>(&text).unwrap(), pins);
}
