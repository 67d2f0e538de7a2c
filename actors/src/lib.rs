//! Shared service actors: one of each per fleet, used by every persona.
//!
//! ```text
//! FleetSupervisor
//! ├── Scheduler          grants inference and cheap slots, highest class first
//! ├── Coordinator        turn-taking: who answers an undirected human message
//! ├── EmbeddingWorker    all-MiniLM-L6-v2 (`embed`), batching every caller's texts
//! ├── [LlmWorker]        SmolLM2 or an OpenAI-compatible endpoint (`llm`)
//! └── Index              the codebase knowledge (`index`): rag commands and cursors
//!       └── index thread       owns the `mindfleet_index::Index`; embeds through the worker
//! ```

pub mod coordinator;
pub mod embed;
pub mod index;
pub mod llm;
pub mod scheduler;

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
