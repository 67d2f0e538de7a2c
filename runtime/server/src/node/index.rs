//! The codebase index of another node (`[cluster] index = "node"`): an actor that takes
//! [`IndexMsg`] like the local index and has the designated node's index answer, so the cluster
//! keeps one index (one set of vectors, one keyword index, one set of cursors) instead of a
//! replica per node.

use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef, call_t};
use serde::{Deserialize, Serialize};

use mindfleet_core::cluster::{NodeMsg, REMOTE_CALL_MS, Serving, decode, encode};
use mindfleet_core::knowledge::{IndexMsg, IndexStats, RagError, RagRequest};

/// What a node asks the designated node's index.
#[derive(Debug, Serialize, Deserialize)]
pub enum IndexRequest {
    /// A `rag` command with its JSON body, as `POST /rag/{command}` takes it.
    Rag {
        command: String,
        body: String,
    },
    OpenList {
        items: Vec<serde_json::Value>,
        page_size: usize,
    },
    Stats,
}

/// How long a request may take there (indexing a directory, a model's answer).
const INDEX_CALL_MS: u64 = 600_000;

/// Answers a request from another node with this node's index; the JSON of the answer
/// (`Result<Value, RagError>`, or `IndexStats` for `Stats`).
pub async fn serve(index: &ActorRef<IndexMsg>, request: &[u8]) -> Vec<u8> {
    let failed = |e: String| encode(&Err::<serde_json::Value, _>(RagError::Unavailable(e)));
    let request = match decode::<IndexRequest>(request) {
        Ok(r) => r,
        Err(e) => return failed(e.to_string()),
    };
    let asked = match request {
        IndexRequest::Rag { command, body } => match RagRequest::parse(&command, &body) {
            Ok(r) => call_t!(index, IndexMsg::Request, INDEX_CALL_MS, Box::new(r)),
            Err(e) => return encode(&Err::<serde_json::Value, _>(e)),
        },
        IndexRequest::OpenList { items, page_size } => {
            call_t!(index, |reply| IndexMsg::OpenList { items, page_size, reply }, INDEX_CALL_MS)
        }
        IndexRequest::Stats => {
            return encode(&call_t!(index, IndexMsg::Stats, REMOTE_CALL_MS).unwrap_or_default());
        }
    };
    match asked {
        Ok(r) => encode(&r),
        Err(e) => failed(format!("index: {e}")),
    }
}

/// The local stand-in for the index of node `node`.
pub struct RemoteIndex;

impl Actor for RemoteIndex {
    type Msg = IndexMsg;
    type State = std::sync::Arc<Serving>;
    type Arguments = Serving;

    async fn pre_start(&self, _me: ActorRef<IndexMsg>, args: Serving) -> Result<Self::State, ActorProcessingErr> {
        Ok(std::sync::Arc::new(args))
    }

    async fn handle(
        &self,
        _me: ActorRef<IndexMsg>,
        msg: IndexMsg,
        st: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let st = st.clone();
        let wait = Duration::from_millis(INDEX_CALL_MS);
        // Each request on its own task: the other node's index orders them.
        tokio::spawn(async move {
            let (request, reply) = match msg {
                IndexMsg::Request(r, reply) => {
                    let (command, body) = r.to_body();
                    (IndexRequest::Rag { command: command.into(), body: body.to_string() }, reply)
                }
                IndexMsg::OpenList { items, page_size, reply } => (IndexRequest::OpenList { items, page_size }, reply),
                IndexMsg::Stats(reply) => {
                    let mut s = match st
                        .ask(NodeMsg::Index, encode(&IndexRequest::Stats), Duration::from_millis(REMOTE_CALL_MS))
                        .await
                    {
                        Ok(bytes) => decode::<IndexStats>(&bytes).unwrap_or_else(|e| IndexStats {
                            status: "failed".into(),
                            error: Some(e.to_string()),
                            ..Default::default()
                        }),
                        Err(why) => IndexStats { status: "failed".into(), error: Some(why), ..Default::default() },
                    };
                    s.node = Some(st.node.clone());
                    let _ = reply.send(s);
                    return;
                }
            };
            let r = match st.ask(NodeMsg::Index, encode(&request), wait).await {
                Ok(bytes) => decode::<Result<serde_json::Value, RagError>>(&bytes)
                    .unwrap_or_else(|e| Err(RagError::Unavailable(e.to_string()))),
                Err(why) => Err(RagError::Unavailable(why)),
            };
            let _ = reply.send(r);
        });
        Ok(())
    }
}
