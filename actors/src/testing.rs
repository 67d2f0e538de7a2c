//! What the crate's unit tests share.

use std::fmt::Debug;
use std::time::{Duration, Instant};

use ractor::{ActorRef, Message, RpcReplyPort};

/// `actor`'s answer to `ask` once `done` holds of it, or a failure after ten seconds.
pub(crate) async fn answer_when<M: Message, T: Debug + Send + 'static>(
    actor: &ActorRef<M>,
    ask: impl Fn(RpcReplyPort<T>) -> M,
    done: impl Fn(&T) -> bool,
) -> T {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let answer = ractor::call!(actor, &ask).unwrap();
        if done(&answer) {
            return answer;
        }
        assert!(Instant::now() < deadline, "still {answer:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
