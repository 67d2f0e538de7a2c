//! A stdio server's stderr, read as it comes and kept as its last lines.
//!
//! A server that fails to start or dies says why on stderr (`env: 'node': No such file or
//! directory`, a Python traceback); the last line goes into the error or the state an operator
//! reads. Lines are cut, and only a few kept: the server decides how much it writes.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::AsyncReadExt;
use tokio::process::ChildStderr;
use tokio::sync::watch;

const KEEP_LINES: usize = 16;
const MAX_LINE: usize = 400;

pub(crate) struct StderrTail {
    lines: Mutex<VecDeque<String>>,
    eof: watch::Sender<bool>,
}

impl StderrTail {
    /// Reads `stderr` until it closes, logging each line at debug level.
    pub(crate) fn drain(mut stderr: ChildStderr, server: String) -> Arc<StderrTail> {
        let tail = Arc::new(StderrTail { lines: Mutex::new(VecDeque::new()), eof: watch::Sender::new(false) });
        let keep = tail.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 4096];
            let mut line: Vec<u8> = Vec::new();
            loop {
                let n = match stderr.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => n,
                };
                for &b in &buf[..n] {
                    if b == b'\n' {
                        keep.push(&server, &line);
                        line.clear();
                    } else if line.len() < MAX_LINE {
                        line.push(b);
                    }
                }
            }
            if !line.is_empty() {
                keep.push(&server, &line);
            }
            keep.eof.send_replace(true);
        });
        tail
    }

    fn push(&self, server: &str, line: &[u8]) {
        let line = String::from_utf8_lossy(line).trim_end().to_owned();
        if line.is_empty() {
            return;
        }
        tracing::debug!(server, "stderr: {line}");
        let mut lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        if lines.len() == KEEP_LINES {
            lines.pop_front();
        }
        lines.push_back(line);
    }

    pub(crate) fn last_line(&self) -> Option<String> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner()).back().cloned()
    }

    /// Waits, at most `limit`, for stderr to close: a server that has just died may still have
    /// its last words in the pipe.
    pub(crate) async fn settle(&self, limit: Duration) {
        let mut rx = self.eof.subscribe();
        let _ = tokio::time::timeout(limit, rx.wait_for(|eof| *eof)).await;
    }
}

/// `detail`, with the server's last stderr line when there is one.
pub(crate) fn with_last_line(detail: String, tail: Option<&StderrTail>) -> String {
    match tail.and_then(StderrTail::last_line) {
        Some(line) => format!("{detail} (last on stderr: {line})"),
        None => detail,
    }
}
