//! The `WorkingMemory` actor: the only writer of a persona's working memory.
//!
//! Stores thoughts per domain with importance and expiry, evicts by retention score when a
//! domain is full (see [`crate::memory`]), records every eviction with its reason, and
//! answers recalls (marking what it returns as accessed). Every change is persisted through
//! the storage writer; on (re)start the stored entries are restored.
//!
//! Messages: [`MemoryMsg`].

use std::sync::Arc;

use mindfleet_core::config::PersonaConfig;
use mindfleet_core::dump::WorkingMemoryDump;
use mindfleet_core::messages::FaultTarget;
use mindfleet_core::record::WmEntry;
use mindfleet_core::time::now_us;
use mindfleet_store::Storage;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use ractor_cluster_derive::RactorMessage;

use crate::faults::FaultBook;
use crate::memory::{Draft, Memory};

#[derive(Debug, RactorMessage)]
pub enum MemoryMsg {
    Store(Draft),
    Recall {
        domain: String,
        query: String,
        limit: usize,
        reply: RpcReplyPort<Vec<WmEntry>>,
    },
    Dump(RpcReplyPort<WorkingMemoryDump>),
    /// Every entry (for consolidation).
    Snapshot(RpcReplyPort<Vec<WmEntry>>),
    /// Injected fault: panic now.
    Panic,
}

pub struct WorkingMemory;

pub struct MemoryArgs {
    pub config: Arc<PersonaConfig>,
    pub name: Arc<str>,
    pub storage: Storage,
    pub faults: Arc<FaultBook>,
}

pub struct MemoryState {
    args: MemoryArgs,
    memory: Memory,
}

impl Actor for WorkingMemory {
    type Msg = MemoryMsg;
    type State = MemoryState;
    type Arguments = MemoryArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<MemoryMsg>,
        args: MemoryArgs,
    ) -> Result<MemoryState, ActorProcessingErr> {
        if args.faults.take_start(FaultTarget::WorkingMemory) {
            panic!("injected fault: working memory of {} panics in pre_start", args.name);
        }
        let restored = args.storage.load_memory(args.name.clone()).await?;
        let memory = Memory::new(args.config.wm_capacity, args.config.wm_ttl.as_micros() as i64, restored);
        Ok(MemoryState { args, memory })
    }

    async fn handle(
        &self,
        _myself: ActorRef<MemoryMsg>,
        msg: MemoryMsg,
        st: &mut MemoryState,
    ) -> Result<(), ActorProcessingErr> {
        let storage = &st.args.storage;
        let name = &st.args.name;
        match msg {
            MemoryMsg::Store(d) => {
                let (entry, evicted) = st.memory.store(d, now_us());
                storage.put_memory(name.clone(), entry);
                for e in evicted {
                    storage.delete_memory(name.clone(), e.entry_id, Some(e));
                }
            }
            MemoryMsg::Recall { domain, query, limit, reply } => {
                let got = st.memory.recall(&domain, &query, limit, now_us());
                for e in &got {
                    storage.put_memory(name.clone(), e.clone());
                }
                let _ = reply.send(got);
            }
            MemoryMsg::Dump(reply) => {
                let mut recent: Vec<WmEntry> = st.memory.entries.values().cloned().collect();
                recent.sort_by(|a, b| b.created_us.cmp(&a.created_us).then(b.id.cmp(&a.id)));
                recent.truncate(20);
                let _ = reply.send(WorkingMemoryDump {
                    len: st.memory.entries.len(),
                    capacity_per_domain: st.memory.capacity_per_domain,
                    per_domain: st.memory.per_domain(),
                    recent,
                    evictions: Vec::new(),
                });
            }
            MemoryMsg::Snapshot(reply) => {
                let _ = reply.send(st.memory.entries.values().cloned().collect());
            }
            MemoryMsg::Panic => panic!("injected fault: working memory of {} panics", st.args.name),
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "working_memory_props.rs"]
mod props;
