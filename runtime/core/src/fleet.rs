//! The fleet supervisor's interface: what the admin asks of it (stop or start a persona that
//! moves between nodes) and the handles of the shared actors it hands in-process callers.

use ractor::{ActorRef, RpcReplyPort};
use ractor_cluster_derive::RactorMessage;

use crate::embedding::EmbedMsg;
use crate::knowledge::IndexMsg;
use crate::llm::LlmMsg;
use crate::messages::AdminMsg;
use crate::sched::SchedulerHandle;
use crate::tools::ToolsMsg;

/// The fleet supervisor's messages.
#[derive(Debug, RactorMessage)]
pub enum FleetMsg {
    /// The actors in-process callers and the HTTP API talk to.
    Handles(RpcReplyPort<Handles>),
    /// Stop a persona of this node for good (it moves to another node); answers once it
    /// has stopped.
    Stop(String, RpcReplyPort<()>),
    /// Start a persona that moved to this node.
    Start(String),
}

#[derive(Debug, Clone)]
pub struct Handles {
    pub admin: ActorRef<AdminMsg>,
    pub scheduler: SchedulerHandle,
    pub embedding: ActorRef<EmbedMsg>,
    pub llm: Option<ActorRef<LlmMsg>>,
    pub index: ActorRef<IndexMsg>,
    /// The tool host, when the fleet declares tool servers.
    pub tools: Option<ActorRef<ToolsMsg>>,
}
