//! server-filesystem 2026.8.31 on a temporary directory.

use crate::{Approval, CallError, ErrorClass, ToolClient, needs_approval};
use serde_json::json;

use super::util::{FILESYSTEM, connect, in_secs, stdio};

async fn serve(dir: &tempfile::TempDir) -> ToolClient {
    // The server compares real paths: give it the temporary directory's.
    let root = dir.path().canonicalize().unwrap();
    connect(stdio("fs", FILESYSTEM, &[root.to_str().unwrap()])).await
}

#[tokio::test]
async fn reads_a_file_in_its_root() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().canonicalize().unwrap().join("notes.txt");
    std::fs::write(&file, "retry with backoff, capped\n").unwrap();
    let client = serve(&dir).await;
    let out = client.call("read_text_file", json!({ "path": file }), in_secs(10)).await.unwrap();
    assert_eq!(out.text, "retry with backoff, capped\n");
}

#[tokio::test]
async fn a_path_outside_its_root_is_access_denied() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::NamedTempFile::new().unwrap();
    let client = serve(&dir).await;
    let err = client.call("read_text_file", json!({ "path": outside.path() }), in_secs(10)).await.unwrap_err();
    assert_eq!(err.class(), ErrorClass::AccessDenied, "{err}");
    // The server's words reach the model.
    assert!(matches!(&err, CallError::Failed { text, .. } if text.contains("Access denied")), "{err:?}");
    assert!(err.model_text().is_some());
}

#[tokio::test]
async fn writes_need_approval_under_writes_and_reads_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let client = serve(&dir).await;
    assert_eq!(client.spec().approval, Approval::Writes, "the default");
    for (tool, waits) in [
        ("read_text_file", false),
        ("list_directory", false),
        ("write_file", true),
        ("edit_file", true),
        ("move_file", true),
    ] {
        let info = client.tool(tool).unwrap_or_else(|| panic!("{tool} listed"));
        assert_eq!(needs_approval(&info, Approval::Writes), waits, "{tool}: {}", info.annotations);
        assert_eq!(client.needs_approval(tool), Some(waits), "{tool}");
        assert!(!needs_approval(&info, Approval::Never));
        assert!(needs_approval(&info, Approval::Always));
    }
    assert_eq!(client.needs_approval("format_disk"), None);
}
