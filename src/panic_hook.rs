//! A quiet panic hook: a panic in an actor becomes a supervision event, and a restart
//! should cost microseconds, not a printed backtrace.

use std::sync::Once;

/// Installs the hook once. With `all`, every panic is one `tracing` line (the binary);
/// otherwise only injected faults are quiet and other panics keep the default report
/// (tests keep their failure messages).
pub fn install(all: bool) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let msg = info
                .payload()
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| info.payload().downcast_ref::<String>().cloned())
                .unwrap_or_default();
            if all || msg.starts_with("injected fault") {
                let at = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
                tracing::warn!(target: "mindfleet::panic", %at, "panic: {msg}");
            } else {
                default(info);
            }
        }));
    });
}
