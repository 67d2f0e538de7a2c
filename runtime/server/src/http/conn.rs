//! Connections of the admin API: hyper serves each one under the `[admin]` limits (a cap on
//! connections, a header timeout, an idle keep-alive timeout) that `axum::serve` does not have,
//! and a graceful shutdown lets the requests in flight finish.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;

use super::{Edges, HttpState, router};

/// Serves the API until `shutdown` resolves, then lets the requests in flight finish.
///
/// Each connection is served by hyper under three limits (`[admin]`): at most
/// `max_connections` at once (one over the cap is accepted and closed at once, so the backlog
/// does not hold it); a request's head must arrive within `header_timeout` of the connection or
/// of its first byte; a kept-alive connection may wait `idle_timeout` for its next request.
/// Both timeouts are kept here, not by hyper's `header_read_timeout`: hyper starts that timer
/// when it begins waiting for a head, so on a kept-alive connection it would also end the idle
/// wait at the header timeout.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: HttpState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let edges = state.edges.clone();
    serve_router(listener, router(state), edges, shutdown).await
}

async fn serve_router(
    listener: tokio::net::TcpListener,
    app: Router,
    edges: Edges,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(edges.max_connections));
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::pin!(shutdown);
    let mut last_warned: Option<Instant> = None;
    loop {
        let (stream, peer) = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors, most likely: wait for some to be freed.
                    tracing::warn!(error = %e, "admin API: accept failed");
                    tokio::select! {
                        () = &mut shutdown => break,
                        () = tokio::time::sleep(Duration::from_millis(100)) => continue,
                    }
                }
            },
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if last_warned.is_none_or(|t| t.elapsed() >= Duration::from_secs(10)) {
                tracing::warn!(
                    %peer,
                    max_connections = edges.max_connections,
                    "admin API: connection limit reached, closing new connections (`[admin] max_connections`)"
                );
                last_warned = Some(Instant::now());
            }
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(serve_connection(stream, app.clone(), edges.clone(), stop_rx.clone(), slot));
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Every connection holds a slot until it ends: all are back once the last one ended.
    let all = u32::try_from(edges.max_connections).unwrap_or(u32::MAX);
    let _ = slots.acquire_many(all).await;
    Ok(())
}

/// Serves one connection until it ends, times out between requests, or (once `stop` turns
/// true) has finished its request in flight.
async fn serve_connection(
    stream: tokio::net::TcpStream,
    app: Router,
    edges: Edges,
    mut stop: tokio::sync::watch::Receiver<bool>,
    _slot: tokio::sync::OwnedSemaphorePermit,
) {
    let watch = Arc::new(ConnWatch::new());
    let app = hyper_util::service::TowerToHyperService::new(app);
    let in_service = watch.clone();
    let service = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let active = Active::new(in_service.clone());
        let call = hyper::service::Service::call(&app, req);
        async move {
            let res = call.await?;
            Ok::<_, std::convert::Infallible>(res.map(|body| Body::new(Holding { body, _guard: active })))
        }
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.header_read_timeout(None);
    let io = hyper_util::rt::TokioIo::new(Watched { stream, watch: watch.clone() });
    let conn = http.serve_connection(io, service);
    tokio::pin!(conn);
    let mut stopping = false;
    loop {
        // A change (a request started or ended, a head begun) wakes the loop to read the new
        // deadline; `notify_one` keeps it for the next wait if the loop is elsewhere.
        let changed = watch.changed.notified();
        let deadline = watch.deadline(&edges);
        tokio::select! {
            res = conn.as_mut() => {
                if let Err(e) = res {
                    tracing::debug!(error = %e, "admin API connection ended");
                }
                return;
            }
            () = sleep_until(deadline) => {
                if watch.deadline(&edges).is_some_and(|(d, _)| d <= Instant::now()) {
                    let wait = deadline.map_or(Wait::Head, |(_, w)| w);
                    tracing::debug!(?wait, "admin API connection timed out");
                    return;
                }
            }
            () = changed => {}
            _ = stop.changed(), if !stopping => {
                stopping = true;
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

async fn sleep_until(deadline: Option<(Instant, Wait)>) {
    match deadline {
        Some((d, _)) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// What a connection with no request in flight waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    /// The rest of a request's head (or the first byte of a new connection's).
    Head,
    /// The next request on a kept-alive connection.
    Idle,
}

/// Where a connection is, for its timeouts: requests in flight, or what it has waited for
/// since when.
#[derive(Debug)]
struct ConnState {
    in_flight: usize,
    wait: Wait,
    since: Instant,
}

struct ConnWatch {
    state: Mutex<ConnState>,
    changed: Notify,
}

impl ConnWatch {
    fn new() -> ConnWatch {
        ConnWatch {
            state: Mutex::new(ConnState { in_flight: 0, wait: Wait::Head, since: Instant::now() }),
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ConnState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// When the connection times out, if nothing arrives; none while a request is in flight.
    fn deadline(&self, edges: &Edges) -> Option<(Instant, Wait)> {
        let s = self.lock();
        let limit = match s.wait {
            Wait::Head => edges.header_timeout,
            Wait::Idle => edges.idle_timeout,
        };
        (s.in_flight == 0).then_some((s.since + limit, s.wait))
    }

    /// Bytes arrived: on an idle connection they start a request's head.
    fn read(&self) {
        let mut s = self.lock();
        if s.in_flight == 0 && s.wait == Wait::Idle {
            s.wait = Wait::Head;
            s.since = Instant::now();
            drop(s);
            self.changed.notify_one();
        }
    }

    fn started(&self) {
        self.lock().in_flight += 1;
        self.changed.notify_one();
    }

    fn finished(&self) {
        let mut s = self.lock();
        s.in_flight = s.in_flight.saturating_sub(1);
        if s.in_flight == 0 {
            s.wait = Wait::Idle;
            s.since = Instant::now();
        }
        drop(s);
        self.changed.notify_one();
    }
}

/// A request in flight, from its head until its response's body is written (or dropped).
struct Active(Arc<ConnWatch>);

impl Active {
    fn new(watch: Arc<ConnWatch>) -> Active {
        watch.started();
        Active(watch)
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.0.finished();
    }
}

/// A response body that holds `guard` until hyper has written or dropped it: its request in
/// flight ([`Active`]), a stream's slot (`streams`).
pub(super) struct Holding<G> {
    pub(super) body: Body,
    pub(super) _guard: G,
}

impl<G: Send + Unpin + 'static> hyper::body::Body for Holding<G> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// The connection's socket, telling its [`ConnWatch`] when bytes arrive.
struct Watched {
    stream: tokio::net::TcpStream,
    watch: Arc<ConnWatch>,
}

impl AsyncRead for Watched {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let res = Pin::new(&mut self.stream).poll_read(cx, buf);
        if matches!(res, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.watch.read();
        }
        res
    }
}

impl AsyncWrite for Watched {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use axum::routing::get;

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_graceful_shutdown_lets_the_request_in_flight_finish_and_closes_idle_connections() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (release_tx, release_rx) = tokio::sync::oneshot::channel::<()>();
        let (started_tx, mut started) = tokio::sync::mpsc::unbounded_channel::<()>();
        let release = Arc::new(Mutex::new(Some(release_rx)));
        let app = Router::new().route(
            "/slow",
            get(move || {
                let rx = release.lock().unwrap().take();
                let _ = started_tx.send(());
                async move {
                    if let Some(rx) = rx {
                        let _ = rx.await;
                    }
                    "done"
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let edges = Edges {
            allowed_hosts: Arc::new([]),
            header_timeout: Duration::from_secs(60),
            idle_timeout: Duration::from_secs(60),
            max_connections: 8,
            max_streams: 4,
        };
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve_router(listener, app, edges, async {
            let _ = stop_rx.await;
        }));
        let request = b"GET /slow HTTP/1.1\r\nHost: localhost\r\n\r\n";
        // An idle kept-alive connection, and one whose request is in flight.
        let mut idle = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut busy = tokio::net::TcpStream::connect(addr).await.unwrap();
        busy.write_all(request).await.unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        tokio::time::timeout(Duration::from_secs(30), started.recv()).await.unwrap().unwrap();
        stop_tx.send(()).unwrap();
        // The idle one is closed; no new connection is taken.
        let mut buf = [0u8; 256];
        let n = tokio::time::timeout(Duration::from_secs(30), idle.read(&mut buf)).await.unwrap().unwrap_or(0);
        assert_eq!(n, 0);
        loop {
            match tokio::net::TcpStream::connect(addr).await {
                Err(_) => break,
                Ok(_) => assert!(Instant::now() < deadline, "still accepting after shutdown"),
            }
            tokio::task::yield_now().await;
        }
        assert!(!server.is_finished(), "returned with a request in flight");
        release_tx.send(()).unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(Duration::from_secs(30), busy.read_to_end(&mut answer)).await.unwrap().unwrap();
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 200") && answer.ends_with("done"), "{answer}");
        tokio::time::timeout(Duration::from_secs(30), server).await.unwrap().unwrap().unwrap();
    }
}
