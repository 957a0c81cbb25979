//! Shared by the end-to-end tests that run `tests/e2e/kmock_cluster.py`: the admin kubeconfig
//! their own clients load (the daemon gets the service account's), and the check that the
//! emulator's RBAC denied nothing.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

use kube::Client;

/// The admin kubeconfig the harness writes beside the service account's `kubeconfig`
/// (`<kubeconfig>.admin`: token `admin`, group `system:masters`).
pub fn admin_kubeconfig(kubeconfig: &Path) -> PathBuf {
    let mut path = kubeconfig.as_os_str().to_owned();
    path.push(".admin");
    PathBuf::from(path)
}

/// One request the harness's RBAC denied (`GET /_harness/denied`); an absent part is `""`.
#[derive(serde::Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    pub user: String,
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
}

/// Every denial so far, in order.
pub async fn denials(client: &Client) -> Vec<Denial> {
    let request = http::Request::get("/_harness/denied")
        .body(Vec::new())
        .expect("a request");
    client
        .request(request)
        .await
        .unwrap_or_else(|e| panic!("GET /_harness/denied: {e}"))
}

/// Fails the test when the emulator denied any request: each denial is a rule the deploy/ RBAC
/// lacks for a request the binary made (or a request it should not make).
pub async fn assert_no_denials(client: &Client) {
    let denied = denials(client).await;
    let lines: Vec<String> = denied
        .iter()
        .map(|d| {
            let resource = if d.subresource.is_empty() {
                d.resource.clone()
            } else {
                format!("{}/{}", d.resource, d.subresource)
            };
            format!(
                "{} {resource} in API group {:?}, namespace {:?}, name {:?}, by {}",
                d.verb, d.group, d.namespace, d.name, d.user
            )
        })
        .collect();
    assert!(
        denied.is_empty(),
        "the emulator's RBAC (deploy/rbac.yaml and its components) denied {} request(s):\n{}",
        denied.len(),
        lines.join("\n")
    );
}
