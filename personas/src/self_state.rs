//! The `SelfState` actor: the only writer of a persona's self-state.
//!
//! Applies updates (see [`crate::mind`]), persists every new state through the storage
//! writer, and pushes the snapshot to its persona, which reads it for the gate. On
//! (re)start it restores the stored state.
//!
//! Messages: [`SelfStateMsg`].

use std::sync::Arc;
use std::time::Duration;

use mindfleet_core::messages::{FaultTarget, PersonaMsg};

use crate::persona::own::Own;
use mindfleet_core::record::SelfStateData;
use mindfleet_core::time::now_us;
use mindfleet_store::Storage;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use ractor_cluster_derive::RactorMessage;

use crate::faults::FaultBook;
use crate::mind::{Update, apply, focus_ends_in, settles_in};

#[derive(Debug, RactorMessage)]
pub enum SelfStateMsg {
    Apply(Update),
    Get(RpcReplyPort<SelfStateData>),
    /// Its own timer: the mood may have settled (see [`settles_in`]).
    Tick,
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
    /// Longest a focus holds (`focus_max_secs`).
    pub focus_max: Duration,
}

pub struct SelfStateState {
    args: SelfStateArgs,
    data: SelfStateData,
    /// When the `Tick` on its way is due, if one is.
    tick_due: Option<i64>,
}

impl SelfStateState {
    /// Applies `u`, persists and pushes the new state when it changed (a tick that changed
    /// nothing writes nothing), and sets the timer for when the mood settles by itself.
    /// A focus held past `focus_max` ends first (see [`focus_ends_in`]).
    fn update(&mut self, myself: &ActorRef<SelfStateMsg>, u: Update) {
        if matches!(&u, Update::Preoccupations(p) if *p == self.data.preoccupations) {
            return; // the persona says again what it keeps in mind (after a restart)
        }
        let now = now_us();
        let u = match u {
            Update::Tick if focus_ends_in(&self.data, self.args.focus_max, now) == Some(Duration::ZERO) => {
                let secs = self.args.focus_max.as_secs_f64();
                Update::ClearFocus(format!("focus on \"{}\" ended after {secs:.0} s", self.data.focus.objective))
            }
            u => u,
        };
        let before = (self.data.mood, self.data.focus.activity.clone());
        let tick = matches!(u, Update::Tick);
        apply(&mut self.data, u, now);
        if !tick || (self.data.mood, &self.data.focus.activity) != (before.0, &before.1) {
            self.args.storage.put_self_state(self.args.name.clone(), self.data.clone());
            let _ = self.args.parent.cast(Own::SelfState(Box::new(self.data.clone())).into());
        }
        // The next time something changes by time alone: the mood settles, or the focus ends.
        let next = [settles_in(&self.data, now), focus_ends_in(&self.data, self.args.focus_max, now)]
            .into_iter()
            .flatten()
            .min();
        if let Some(after) = next {
            let at = now + after.as_micros() as i64;
            if self.tick_due.is_none_or(|due| at < due) {
                self.tick_due = Some(at);
                myself.send_after(after + Duration::from_millis(10), || SelfStateMsg::Tick);
            }
        }
    }
}

impl Actor for SelfState {
    type Msg = SelfStateMsg;
    type State = SelfStateState;
    type Arguments = SelfStateArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<SelfStateMsg>,
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
        let mut st = SelfStateState { args, data, tick_due: None };
        // A mood restored as `active` settles in time too.
        st.update(&myself, Update::Tick);
        Ok(st)
    }

    async fn handle(
        &self,
        myself: ActorRef<SelfStateMsg>,
        msg: SelfStateMsg,
        st: &mut SelfStateState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SelfStateMsg::Apply(u) => st.update(&myself, u),
            SelfStateMsg::Tick => {
                st.tick_due = None;
                st.update(&myself, Update::Tick);
            }
            SelfStateMsg::Get(reply) => {
                let _ = reply.send(st.data.clone());
            }
            SelfStateMsg::Panic => panic!("injected fault: self-state of {} panics", st.args.name),
        }
        Ok(())
    }
}
