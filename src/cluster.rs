//! This process as one node of a fleet that spans several: its ractor_cluster node server (a
//! shared cookie authenticates every link), its [`NodeAgent`], the join to a node already in
//! the cluster, and the links kept up afterwards (a dropped link to a node it joined through
//! is dialled again every second; ractor_cluster does not reconnect by itself).

use std::net::SocketAddr;
use std::time::Duration;

use mindfleet_core::cluster::{ClusterView, NodeMsg};
use mindfleet_core::embedding::EmbedMsg;
use mindfleet_core::knowledge::IndexMsg;
use mindfleet_core::messages::AdminMsg;
use mindfleet_server::node::{AgentArgs, NodeAgent};
use ractor::{Actor, ActorRef};
use ractor_cluster::node::{NodeConnectionMode, NodeServerSessionInformation};
use ractor_cluster::{NodeEventSubscription, NodeServer, NodeServerMessage};
use tokio::sync::mpsc;

use crate::error::FleetError;

/// How a process takes part in a cluster (`mindfleet run --node ...`).
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// This node's name: one of the fleet's nodes.
    pub node: String,
    /// Where the node server listens for other nodes.
    pub listen: SocketAddr,
    /// Nodes to join (`host:port` of their node servers).
    pub join: Vec<String>,
    /// The shared secret every node of the cluster is started with.
    pub cookie: String,
    /// Where the cookie came from, for messages.
    pub cookie_env: String,
}

/// How long a join waits for the handshake to finish.
const JOIN_WAIT: Duration = Duration::from_secs(10);

/// A running node: its server, agent, and the task that keeps its links.
pub(crate) struct Node {
    server: ActorRef<NodeServerMessage>,
    agent: ActorRef<NodeMsg>,
    keeper: tokio::task::JoinHandle<()>,
}

impl Node {
    pub(crate) fn stop(self) {
        self.keeper.abort();
        self.agent.stop(None);
        self.server.stop(None);
    }
}

#[derive(Debug)]
enum LinkEvent {
    Ready { addr: String },
    Down { addr: String },
}

/// Forwards the node server's session events to the view and the keeper.
struct Events {
    view: ClusterView,
    /// Told of each link that comes up (it tells that node where moved personas run).
    admin: ActorRef<AdminMsg>,
    tx: mpsc::UnboundedSender<LinkEvent>,
}

/// The node name in a session's peer name (`name@host`).
fn peer_node(ses: &NodeServerSessionInformation) -> Option<String> {
    let name = ses.peer_name.as_ref()?.name.as_str();
    Some(name.split('@').next().unwrap_or(name).to_string())
}

impl NodeEventSubscription for Events {
    fn node_session_opened(&self, _ses: NodeServerSessionInformation) {}

    fn node_session_authenticated(&self, _ses: NodeServerSessionInformation) {}

    fn node_session_ready(&self, ses: NodeServerSessionInformation) {
        if let Some(node) = peer_node(&ses) {
            tracing::info!(%node, addr = %ses.peer_addr, "cluster link up");
            self.view.linked(&node, &ses.peer_addr);
            let _ = self.admin.cast(AdminMsg::NodeLinked(node));
        }
        let _ = self.tx.send(LinkEvent::Ready { addr: ses.peer_addr });
    }

    fn node_session_disconnected(&self, ses: NodeServerSessionInformation) {
        if let Some(node) = peer_node(&ses)
            && self.view.unlinked(&node, "link closed")
        {
            tracing::warn!(%node, addr = %ses.peer_addr, "cluster link down");
        }
        let _ = self.tx.send(LinkEvent::Down { addr: ses.peer_addr });
    }
}

/// Starts this node: checks the cookie, starts the node server and the agent, then joins
/// `opts.join` and waits for the handshake. A refused handshake (another cookie, a name
/// already taken) is an error that says so.
pub(crate) async fn start(
    opts: &ClusterOptions,
    view: ClusterView,
    admin: ActorRef<AdminMsg>,
    embedding: ActorRef<EmbedMsg>,
    index: ActorRef<IndexMsg>,
) -> Result<Node, FleetError> {
    if opts.cookie.is_empty() {
        return Err(FleetError::CookieRequired { env: opts.cookie_env.clone(), listen: opts.listen });
    }
    let server = NodeServer::new(
        opts.listen.port(),
        opts.cookie.clone(),
        opts.node.clone(),
        opts.listen.ip().to_string(),
        None,
        Some(NodeConnectionMode::Transitive),
    )
    .with_listen_addr(opts.listen.ip());
    let (server, _) = Actor::spawn(None, server, ())
        .await
        .map_err(|e| FleetError::Cluster(format!("cluster listener on {}: {e}", opts.listen)))?;
    let (tx, mut rx) = mpsc::unbounded_channel();
    let subscription = Box::new(Events { view: view.clone(), admin: admin.clone(), tx });
    let _ = server.cast(NodeServerMessage::SubscribeToEvents { id: "mindfleet".into(), subscription });
    let args = AgentArgs { node: opts.node.clone(), admin: admin.clone(), embedding, index };
    let (agent, _) =
        Actor::spawn(None, NodeAgent, args).await.map_err(|e| FleetError::Cluster(format!("node agent: {e}")))?;
    let mut seeds = Vec::with_capacity(opts.join.len());
    for addr in &opts.join {
        let joined = match tokio::net::lookup_host(addr.as_str()).await.map(|mut a| a.next()) {
            Ok(Some(resolved)) => join(&server, resolved, &mut rx).await.map(|()| resolved),
            Ok(None) | Err(_) => Err(FleetError::Cluster(format!("--cluster-join {addr}: not an address"))),
        };
        match joined {
            Ok(resolved) => seeds.push(resolved),
            Err(e) => {
                agent.stop(None);
                server.stop(None);
                return Err(e);
            }
        }
    }
    let links = keep_links(server.clone(), seeds, rx);
    let keeper = tokio::spawn(async move {
        tokio::join!(links, check_liveness(view));
    });
    Ok(Node { server, agent, keeper })
}

/// Connects to `addr` and waits for the handshake to finish.
async fn join(
    server: &ActorRef<NodeServerMessage>,
    addr: SocketAddr,
    rx: &mut mpsc::UnboundedReceiver<LinkEvent>,
) -> Result<(), FleetError> {
    ractor_cluster::client_connect(server, addr)
        .await
        .map_err(|e| FleetError::Unreachable(format!("nothing answers at {addr}: {e}")))?;
    let want = addr.to_string();
    let wait = async {
        while let Some(e) = rx.recv().await {
            match e {
                LinkEvent::Ready { addr } if addr == want => return Ok(()),
                // Closed before it was ready: the other node refused the handshake.
                LinkEvent::Down { addr } if addr == want => {
                    return Err(FleetError::JoinRefused(format!(
                        "the node at {addr} closed the link during the handshake: the cookie differs, or this \
                         node's name is taken"
                    )));
                }
                _ => {}
            }
        }
        Err(FleetError::Cluster("the node server stopped".into()))
    };
    tokio::time::timeout(JOIN_WAIT, wait).await.unwrap_or_else(|_| {
        Err(FleetError::JoinRefused(format!("no handshake with {addr} within {}s", JOIN_WAIT.as_secs())))
    })
}

/// How often every linked node is asked whether it is alive, and how long it has to answer.
const LIVENESS_EVERY: Duration = Duration::from_secs(1);
const LIVENESS_WAIT_MS: u64 = 2000;

/// Asks every linked node, every second, to answer a ping within 2 s. One that keeps its link
/// open but does not answer (a stopped process, a partition that drops packets silently) is
/// unreachable until it answers again: ractor_cluster's own pings have no timeout.
async fn check_liveness(view: ClusterView) {
    let mut tick = tokio::time::interval(LIVENESS_EVERY);
    for n in 0u64.. {
        tick.tick().await;
        let checks = view.linked_nodes().into_iter().map(|node| async move {
            let ok = match mindfleet_core::cluster::agent_of(&node) {
                Some(agent) => ractor::call_t!(agent, NodeMsg::Ping, LIVENESS_WAIT_MS, n).is_ok_and(|m| m == n),
                None => false,
            };
            (node, ok)
        });
        for (node, ok) in futures::future::join_all(checks).await {
            if view.answered(&node, ok) {
                if ok {
                    tracing::info!(%node, "node answers again");
                } else {
                    tracing::warn!(%node, "node does not answer: unreachable until it does");
                }
            }
        }
    }
}

/// Dials a node this one joined through again, every second, while its link is down.
async fn keep_links(
    server: ActorRef<NodeServerMessage>,
    seeds: Vec<SocketAddr>,
    mut rx: mpsc::UnboundedReceiver<LinkEvent>,
) {
    let mut down: Vec<SocketAddr> = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            e = rx.recv() => match e {
                Some(LinkEvent::Down { addr }) => {
                    if let Some(s) = seeds.iter().find(|s| s.to_string() == addr) && !down.contains(s) {
                        down.push(*s);
                    }
                }
                Some(LinkEvent::Ready { addr }) => down.retain(|s| s.to_string() != addr),
                None => return,
            },
            _ = tick.tick() => {
                let mut dialled = Vec::new();
                for s in &down {
                    // A dial that connects waits for its handshake: a refused one comes back as
                    // another `Down`. One that does not connect is tried again on the next tick.
                    if ractor_cluster::client_connect(&server, *s).await.is_ok() {
                        dialled.push(*s);
                    }
                }
                down.retain(|s| !dialled.contains(s));
            }
        }
    }
}
