//! The `SelfState` actor: the only writer of a persona's self-state.
//!
//! Applies updates (see [`crate::mind`]), persists every new state through the storage
//! writer, and pushes the snapshot to its persona, which reads it for the gate. On
//! (re)start it restores the stored state.
//!
//! Messages: [`SelfStateMsg`].

use std::sync::Arc;

use mindfleet_core::messages::{FaultTarget, PersonaMsg};

use crate::persona::own::Own;
use mindfleet_core::model::SelfStateData;
use mindfleet_core::time::now_us;
use mindfleet_store::Storage;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use ractor_cluster_derive::RactorMessage;

use crate::faults::FaultBook;
use crate::mind::{Update, apply};

#[derive(Debug, RactorMessage)]
pub enum SelfStateMsg {
    Apply(Update),
    Get(RpcReplyPort<SelfStateData>),
    /// Injected fault: panic now.
    Panic,
}

pub struct SelfState;

pub struct SelfStateArgs {
    pub name: Arc<str>,
    /// Dormancy from the fleet file, applied at every start.
    pub dormant: bool,
    pub storage: Storage,
    pub parent: ActorRef<PersonaMsg>,
    pub faults: Arc<FaultBook>,
}

pub struct SelfStateState {
    args: SelfStateArgs,
    data: SelfStateData,
}

impl Actor for SelfState {
    type Msg = SelfStateMsg;
    type State = SelfStateState;
    type Arguments = SelfStateArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<SelfStateMsg>,
        args: SelfStateArgs,
    ) -> Result<SelfStateState, ActorProcessingErr> {
        if args.faults.take_start(FaultTarget::SelfState) {
            panic!("injected fault: self-state of {} panics in pre_start", args.name);
        }
        // The fleet file decides dormancy (there is no runtime switch yet).
        let data = match args.storage.load_self_state(args.name.clone()).await? {
            Some(d) => SelfStateData { dormant: args.dormant, ..d },
            None => SelfStateData { dormant: args.dormant, ..SelfStateData::default() },
        };
        let _ = args.parent.cast(Own::SelfState(Box::new(data.clone())).into());
        Ok(SelfStateState { args, data })
    }

    async fn handle(
        &self,
        _myself: ActorRef<SelfStateMsg>,
        msg: SelfStateMsg,
        st: &mut SelfStateState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SelfStateMsg::Apply(u) => {
                apply(&mut st.data, u, now_us());
                st.args.storage.put_self_state(st.args.name.clone(), st.data.clone());
                let _ = st.args.parent.cast(Own::SelfState(Box::new(st.data.clone())).into());
            }
            SelfStateMsg::Get(reply) => {
                let _ = reply.send(st.data.clone());
            }
            SelfStateMsg::Panic => panic!("injected fault: self-state of {} panics", st.args.name),
        }
        Ok(())
    }
}
