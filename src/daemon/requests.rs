//! Counts every request the process sends to the API server: a `tower` layer on the kube
//! `Client` that names each request's verb and resource (`trainscale_api_requests_total`).

use std::task::{Context, Poll};

use http::{Method, Request, Uri};
use tower::{Layer, Service};

use super::metrics;

/// The Kubernetes verb of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verb {
    Get,
    List,
    Watch,
    Create,
    Update,
    Patch,
    Delete,
    DeleteCollection,
    /// A method kube never sends (HEAD, OPTIONS, …).
    Other,
}

impl Verb {
    /// The verb as Kubernetes audit logs and RBAC spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "get",
            Verb::List => "list",
            Verb::Watch => "watch",
            Verb::Create => "create",
            Verb::Update => "update",
            Verb::Patch => "patch",
            Verb::Delete => "delete",
            Verb::DeleteCollection => "deletecollection",
            Verb::Other => "other",
        }
    }

    /// Whether the verb changes objects.
    pub fn is_write(self) -> bool {
        matches!(
            self,
            Verb::Create | Verb::Update | Verb::Patch | Verb::Delete | Verb::DeleteCollection
        )
    }
}

/// A request named as Kubernetes names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiRequest {
    pub verb: Verb,
    /// The plural resource, with `/subresource` when there is one (`trainingjobs/status`);
    /// `nonresource` for paths outside `/api` and `/apis/<group>/<version>` (discovery, `/version`).
    pub resource: String,
}

/// Names the request `method path?query` (`watch=true` makes a watch; a GET or DELETE without an
/// object name a list or a deletecollection).
pub fn classify(method: &Method, path: &str, query: Option<&str>) -> ApiRequest {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let rest = match segments.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => &[],
    };
    let (legacy_watch, rest) = match rest {
        ["watch", rest @ ..] => (true, rest),
        _ => (false, rest),
    };
    let (resource, name, sub) = match rest {
        ["namespaces", _ns, resource, tail @ ..] => (Some(*resource), tail.first(), tail.get(1)),
        [resource, tail @ ..] => (Some(*resource), tail.first(), tail.get(1)),
        [] => (None, None, None),
    };
    let resource = match (resource, sub) {
        (None, _) => "nonresource".to_string(),
        (Some(r), Some(s)) => format!("{r}/{s}"),
        (Some(r), None) => r.to_string(),
    };
    let watch = legacy_watch
        || query
            .unwrap_or_default()
            .split('&')
            .any(|kv| kv == "watch=true" || kv == "watch=1");
    let named = name.is_some();
    let verb = match *method {
        Method::GET if watch => Verb::Watch,
        Method::GET | Method::HEAD if named || resource == "nonresource" => Verb::Get,
        Method::GET | Method::HEAD => Verb::List,
        Method::POST => Verb::Create,
        Method::PUT => Verb::Update,
        Method::PATCH => Verb::Patch,
        Method::DELETE if named => Verb::Delete,
        Method::DELETE => Verb::DeleteCollection,
        _ => Verb::Other,
    };
    ApiRequest { verb, resource }
}

fn classify_uri(method: &Method, uri: &Uri) -> ApiRequest {
    classify(method, uri.path(), uri.query())
}

/// The layer counting requests into `trainscale_api_requests_total{verb,resource}`.
#[derive(Debug, Clone, Copy, Default)]
pub struct CountRequestsLayer;

impl<S> Layer<S> for CountRequestsLayer {
    type Service = CountRequests<S>;

    fn layer(&self, inner: S) -> CountRequests<S> {
        CountRequests { inner }
    }
}

/// The service of [`CountRequestsLayer`].
#[derive(Debug, Clone)]
pub struct CountRequests<S> {
    inner: S,
}

impl<S, B> Service<Request<B>> for CountRequests<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> S::Future {
        let named = classify_uri(request.method(), request.uri());
        metrics::api_request(named.verb.as_str(), named.resource);
        self.inner.call(request)
    }
}

/// The layer naming this replica in every request's `User-Agent`:
/// `trainscale/<version> (<identity>)`, as client-go names its binary, so the API server's audit
/// log tells the replicas apart.
#[derive(Debug, Clone)]
pub struct UserAgentLayer {
    value: http::HeaderValue,
}

impl UserAgentLayer {
    /// The layer for the replica `identity` (characters a header cannot carry become `_`).
    pub fn new(identity: &str) -> Self {
        let clean: String = identity
            .chars()
            .map(|c| {
                if c.is_ascii_graphic() || c == ' ' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let text = format!("trainscale/{} ({clean})", env!("CARGO_PKG_VERSION"));
        let value = http::HeaderValue::from_str(&text)
            .unwrap_or_else(|_| http::HeaderValue::from_static("trainscale"));
        UserAgentLayer { value }
    }
}

impl<S> Layer<S> for UserAgentLayer {
    type Service = UserAgent<S>;

    fn layer(&self, inner: S) -> UserAgent<S> {
        UserAgent {
            inner,
            value: self.value.clone(),
        }
    }
}

/// The service of [`UserAgentLayer`].
#[derive(Debug, Clone)]
pub struct UserAgent<S> {
    inner: S,
    value: http::HeaderValue,
}

impl<S, B> Service<Request<B>> for UserAgent<S>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> S::Future {
        request
            .headers_mut()
            .insert(http::header::USER_AGENT, self.value.clone());
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_agent_names_the_version_and_the_replica() {
        let layer = UserAgentLayer::new("trainscale-abc-12\n");
        assert_eq!(
            layer.value.to_str().unwrap(),
            format!(
                "trainscale/{} (trainscale-abc-12_)",
                env!("CARGO_PKG_VERSION")
            )
        );
    }

    fn named(method: Method, target: &str) -> (&'static str, String) {
        let uri: Uri = target.parse().unwrap();
        let r = classify_uri(&method, &uri);
        (r.verb.as_str(), r.resource)
    }

    fn pair(verb: &'static str, resource: &str) -> (&'static str, String) {
        (verb, resource.to_string())
    }

    #[test]
    fn requests_are_named_by_verb_and_resource() {
        assert_eq!(
            named(
                Method::GET,
                "/api/v1/namespaces/ns/pods?labelSelector=paddle-job-pserver%3Dft"
            ),
            pair("list", "pods")
        );
        assert_eq!(
            named(Method::GET, "/apis/batch/v1/namespaces/ns/jobs/x"),
            pair("get", "jobs")
        );
        assert_eq!(
            named(
                Method::PATCH,
                "/apis/paddlepaddle.org/v1alpha1/namespaces/ns/trainingjobs/x/status"
            ),
            pair("patch", "trainingjobs/status")
        );
        assert_eq!(
            named(
                Method::GET,
                "/apis/paddlepaddle.org/v1alpha1/trainingjobs?watch=true&resourceVersion=5"
            ),
            pair("watch", "trainingjobs")
        );
        assert_eq!(
            named(
                Method::GET,
                "/api/v1/namespaces/ns/pods?&labelSelector=a&watch=true&timeoutSeconds=290"
            ),
            pair("watch", "pods")
        );
        assert_eq!(named(Method::GET, "/api/v1/nodes"), pair("list", "nodes"));
        assert_eq!(
            named(Method::GET, "/api/v1/nodes/node-1"),
            pair("get", "nodes")
        );
        assert_eq!(
            named(Method::GET, "/api/v1/nodes?watch=false"),
            pair("list", "nodes")
        );
    }

    #[test]
    fn writes_and_collections() {
        assert_eq!(
            named(Method::POST, "/apis/apps/v1/namespaces/ns/replicasets"),
            pair("create", "replicasets")
        );
        assert_eq!(
            named(
                Method::PUT,
                "/apis/coordination.k8s.io/v1/namespaces/ns/leases/leader"
            ),
            pair("update", "leases")
        );
        assert_eq!(
            named(
                Method::DELETE,
                "/api/v1/namespaces/ns/pods?&labelSelector=paddle-job%3Dft"
            ),
            pair("deletecollection", "pods")
        );
        assert_eq!(
            named(Method::DELETE, "/api/v1/namespaces/ns/pods/p-0"),
            pair("delete", "pods")
        );
        assert_eq!(
            named(Method::POST, "/api/v1/namespaces/ns/pods/p-0/eviction"),
            pair("create", "pods/eviction")
        );
        assert!(Verb::Patch.is_write() && !Verb::Watch.is_write() && !Verb::List.is_write());
    }

    #[test]
    fn namespaces_themselves_and_non_resource_paths() {
        assert_eq!(
            named(Method::GET, "/api/v1/namespaces"),
            pair("list", "namespaces")
        );
        assert_eq!(
            named(Method::GET, "/api/v1/namespaces/ml"),
            pair("get", "namespaces")
        );
        assert_eq!(
            named(Method::GET, "/api/v1/watch/namespaces/ns/pods"),
            pair("watch", "pods")
        );
        assert_eq!(named(Method::GET, "/version"), pair("get", "nonresource"));
        assert_eq!(
            named(Method::GET, "/apis/batch/v1"),
            pair("get", "nonresource")
        );
        assert_eq!(
            named(Method::OPTIONS, "/api/v1/pods"),
            pair("other", "pods")
        );
    }
}
