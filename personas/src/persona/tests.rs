//! The persona actor with real storage, and no other actor answering: what a message does to it.

use std::marker::PhantomData;
use std::time::Duration;

use mindfleet_core::config::FleetConfig;
use mindfleet_core::private::Private;
use mindfleet_core::sched::SchedulerMsg;

use super::*;
use mindfleet_core::record::SelfStateData;

/// An actor that takes every message and does nothing (the admin, the coordinator and the
/// scheduler a lone persona talks to).
struct Sink<M>(PhantomData<fn() -> M>);

impl<M: ractor::Message> Actor for Sink<M> {
    type Msg = M;
    type State = ();
    type Arguments = ();

    async fn pre_start(&self, _: ActorRef<M>, _: ()) -> Result<(), ActorProcessingErr> {
        Ok(())
    }
}

async fn sink<M: ractor::Message>() -> ActorRef<M> {
    Actor::spawn(None, Sink(PhantomData), ()).await.expect("a sink starts").0
}

/// A persona of a one-persona fleet on storage in `dir`.
async fn persona(dir: &std::path::Path) -> ActorRef<PersonaMsg> {
    let one = "[[persona]]\nname = \"helper\"\nrole = \"generalist assistant\"\n";
    let mut fleet = FleetConfig::from_toml(std::path::Path::new("fleet.toml"), one).expect("a valid fleet");
    fleet.storage.data_dir = dir.to_path_buf();
    let storage = Storage::open(&fleet.storage).expect("storage opens");
    let args = PersonaArgs {
        config: Arc::new(fleet.personas[0].clone()),
        storage,
        admin: sink().await,
        scheduler: SchedulerHandle::new(SchedulerHandle::queues(), sink::<SchedulerMsg>().await),
        supervision: fleet.supervision,
        marker: Arc::new(AtomicU64::new(0)),
        faults: Arc::new(FaultBook::default()),
        coordinator: sink().await,
        turn_timeout: Duration::from_secs(5),
        llm: None,
        index: None,
        enricher: None,
        conversation: None,
        embedding: None,
        redundancy: None,
        open_answers: false,
        personas: Arc::from([]),
        adapters: None,
        tools: None,
        native_tools: false,
        record: false,
    };
    Actor::spawn(None, Persona, args).await.expect("the persona starts").0
}

async fn self_state(p: &ActorRef<PersonaMsg>) -> SelfStateData {
    let dump = call_t!(p, PersonaMsg::Dump, 5000, DumpDepth::Full).expect("the persona answers its dump");
    dump.self_state.expect("a persona's dump has its self-state")
}

#[tokio::test]
async fn a_forged_continuation_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let p = persona(dir.path()).await;
    // The self-state child's first snapshot is in the mailbox before anything sent from here.
    let before = self_state(&p).await;
    assert!(!before.dormant);
    let dormant = SelfStateData { dormant: true, ..before.clone() };

    // What someone else can make: a value of another type, however like the persona's own.
    #[allow(dead_code, reason = "made to be sent, never read")]
    enum Lookalike {
        SelfState(Box<SelfStateData>),
    }
    p.cast(PersonaMsg::Own(Private::new(Lookalike::SelfState(Box::new(dormant.clone()))))).unwrap();
    p.cast(PersonaMsg::Own(Private::new(Box::new(dormant.clone())))).unwrap();
    let after = self_state(&p).await;
    assert!(!after.dormant, "a forged snapshot was taken");
    assert_eq!(format!("{after:?}"), format!("{before:?}"));

    // The persona's own, through the same variant, is taken.
    p.cast(Own::SelfState(Box::new(dormant)).into()).unwrap();
    assert!(self_state(&p).await.dormant, "the persona's own snapshot was not taken");
    p.stop(None);
}
