//! One HTTP port for `/metrics`, `/healthz` and `/readyz`.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use http::{Method, Request, Response, StatusCode, header};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::cluster::sync::{SYNC_GRACE, SyncReport};

/// How long after a watch error the API server counts as unreachable, unless a watch event
/// arrives first: longer than the watchers' largest backoff (30 s), so a server that stays down
/// keeps readiness false between retries.
pub const UNREACHABLE_AFTER_ERROR: Duration = Duration::from_secs(45);

/// What the probes report.
#[derive(Debug)]
pub struct Health {
    /// Caches synced: the daemon can plan.
    ready: AtomicBool,
    /// The last watch error not yet followed by a watch event.
    watch_error: Mutex<Option<Instant>>,
    /// The last time the pass loop made progress (a pass ran, or a job of a pass was written).
    progress: Mutex<Instant>,
    /// Without progress for this long, `/healthz` fails.
    stall_after: Duration,
    /// The watch caches of the daemon and the operator, each by resource.
    sync: SyncReport,
}

impl Default for Health {
    fn default() -> Self {
        Health::new(Duration::from_secs(90))
    }
}

impl Health {
    /// Health whose liveness fails after `stall_after` without progress (three pass intervals).
    pub fn new(stall_after: Duration) -> Self {
        Health {
            ready: AtomicBool::new(false),
            watch_error: Mutex::new(None),
            progress: Mutex::new(Instant::now()),
            stall_after,
            sync: SyncReport::default(),
        }
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    /// A watch stream failed: the API server may be unreachable.
    pub fn watch_failed(&self) {
        *lock(&self.watch_error) = Some(Instant::now());
    }

    /// A watch stream delivered an event: the API server answers.
    pub fn watch_delivered(&self) {
        let mut error = lock(&self.watch_error);
        if error.is_some() {
            *error = None;
        }
    }

    /// The pass loop made progress.
    pub fn progressed(&self) {
        *lock(&self.progress) = Instant::now();
    }

    /// The watch caches' sync states, which readiness also reads.
    pub fn sync(&self) -> &SyncReport {
        &self.sync
    }

    /// Ready: no cache failing (or unsynced) for [`SYNC_GRACE`], the store synced, and no
    /// unanswered watch error within [`UNREACHABLE_AFTER_ERROR`]. Not ready says why, naming
    /// each blocked cache.
    pub fn is_ready(&self) -> Result<(), String> {
        let blocked = self.sync.blocked(Instant::now(), SYNC_GRACE);
        if !blocked.is_empty() {
            let names: Vec<String> = blocked.iter().map(ToString::to_string).collect();
            return Err(format!("{}\n", names.join("\n")));
        }
        if !self.ready.load(Ordering::Relaxed) {
            return Err("caches not synced\n".to_string());
        }
        match *lock(&self.watch_error) {
            Some(at) if at.elapsed() < UNREACHABLE_AFTER_ERROR => {
                Err("API server unreachable: watches are failing\n".to_string())
            }
            _ => Ok(()),
        }
    }

    /// Whether the pass loop made progress within the stall bound.
    pub fn is_live(&self) -> bool {
        lock(&self.progress).elapsed() < self.stall_after
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Binds the port; the caller then runs [`serve`].
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Serves until `shutdown` turns true.
pub async fn serve(
    listener: TcpListener,
    metrics: Option<PrometheusHandle>,
    health: Arc<Health>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => break,
            accepted = listener.accept() => {
                let (stream, _) = match accepted {
                    Ok(conn) => conn,
                    Err(e) => {
                        tracing::warn!(error = %e, "metrics port: accept failed");
                        continue;
                    }
                };
                let metrics = metrics.clone();
                let health = health.clone();
                tokio::spawn(async move {
                    let service = service_fn(move |req| {
                        let response = respond(&req, metrics.as_ref(), &health);
                        async move { Ok::<_, Infallible>(response) }
                    });
                    if let Err(e) = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await
                    {
                        tracing::debug!(error = %e, "metrics port: connection ended");
                    }
                });
            }
        }
    }
}

fn respond(
    req: &Request<Incoming>,
    metrics: Option<&PrometheusHandle>,
    health: &Health,
) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
    }
    match req.uri().path() {
        "/metrics" => {
            let body = metrics.map(PrometheusHandle::render).unwrap_or_default();
            let mut response = Response::new(Full::new(Bytes::from(body)));
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                header::HeaderValue::from_static("text/plain; version=0.0.4"),
            );
            response
        }
        "/healthz" if health.is_live() => text(StatusCode::OK, "ok\n"),
        "/healthz" => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "the pass loop has made no progress for three intervals\n",
        ),
        "/readyz" => match health.is_ready() {
            Ok(()) => text(StatusCode::OK, "ready\n"),
            Err(why) => {
                let mut response = Response::new(Full::new(Bytes::from(why)));
                *response.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
                response
            }
        },
        _ => text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *response.status_mut() = status;
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_needs_sync_and_an_answering_server() {
        let health = Health::new(Duration::from_secs(90));
        assert!(health.is_ready().is_err(), "not synced yet");
        health.set_ready(true);
        assert_eq!(health.is_ready(), Ok(()));
        health.watch_failed();
        assert!(health.is_ready().unwrap_err().contains("unreachable"));
        health.watch_delivered();
        assert_eq!(health.is_ready(), Ok(()));
    }

    #[test]
    fn readiness_names_a_cache_that_keeps_failing() {
        let health = Health::new(Duration::from_secs(90));
        health.set_ready(true);
        let long_ago = Instant::now() - SYNC_GRACE - Duration::from_secs(1);
        health
            .sync()
            .failed("configmaps", "Forbidden: denied".into(), long_ago);
        let why = health.is_ready().unwrap_err();
        assert_eq!(why, "cache configmaps cannot sync: Forbidden: denied\n");
        health.sync().listed("configmaps", Instant::now());
        assert_eq!(health.is_ready(), Ok(()));
    }

    #[test]
    fn liveness_fails_without_progress() {
        let health = Health::new(Duration::from_millis(30));
        assert!(health.is_live());
        std::thread::sleep(Duration::from_millis(50));
        assert!(!health.is_live());
        health.progressed();
        assert!(health.is_live());
    }
}
