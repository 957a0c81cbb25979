//! kube's mock service, request by request: each request is checked for method and path and
//! answered by hand (shared by the mock-API test files).

#![allow(dead_code)]

use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::client::Body;
use serde_json::{Value, json};
use tower_test::mock::{Handle, SendResponse};

pub type MockHandle = Handle<Request<Body>, Response<Body>>;

/// The next request, checked for method and path; returns its query, content type and body.
pub async fn expect(
    handle: &mut MockHandle,
    method: Method,
    path: &str,
) -> (
    Option<String>,
    Option<String>,
    Value,
    SendResponse<Response<Body>>,
) {
    let got = receive(handle, &format!("{method} {path}")).await;
    assert_eq!(got.method, method, "method of {}", got.path);
    assert_eq!(got.path, path);
    (got.query, got.content_type, got.body, got.send)
}

/// A request as received, its body read as JSON (`Null` when empty).
struct Received {
    method: Method,
    path: String,
    query: Option<String>,
    content_type: Option<String>,
    body: Value,
    send: SendResponse<Response<Body>>,
}

/// The next request; `expected` names it in the panic when none comes.
async fn receive(handle: &mut MockHandle, expected: &str) -> Received {
    let (req, send) = tokio::time::timeout(Duration::from_secs(5), handle.next_request())
        .await
        .unwrap_or_else(|_| panic!("no request; expected {expected}"))
        .unwrap_or_else(|| panic!("client gone; expected {expected}"));
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let query = req.uri().query().map(str::to_string);
    let content_type = req
        .headers()
        .get(http::header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap().to_string());
    let bytes = req.into_body().collect_bytes().await.unwrap();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    Received {
        method,
        path,
        query,
        content_type,
        body,
        send,
    }
}

pub fn respond(send: SendResponse<Response<Body>>, status: StatusCode, body: Value) {
    send.send_response(
        Response::builder()
            .status(status)
            .body(Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap(),
    );
}

pub fn api_status(code: u16, reason: &str, message: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Status", "metadata": {}, "status": "Failure",
           "code": code, "reason": reason, "message": message})
}

/// The next request, whatever it is (for stages that send several jobs' writes at once):
/// its method, path and body.
pub async fn next_any(
    handle: &mut MockHandle,
) -> (Method, String, Value, SendResponse<Response<Body>>) {
    let got = receive(handle, "any request").await;
    (got.method, got.path, got.body, got.send)
}
