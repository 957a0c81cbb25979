//! Reaching a live cluster from the one-shot commands: the kubeconfig, and one LIST of each
//! resource the cluster model reads, as the same documents a dump gives.

use std::path::PathBuf;

use anyhow::Context;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::Value;

use crate::api::JobKind;
use crate::api::manifest::Document;
use crate::cluster::{ClusterState, Snapshot};

/// The kubeconfig given, else the usual inference; errors as one line.
pub async fn load_config(path: Option<&PathBuf>) -> Result<kube::Config, String> {
    match path {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .map_err(|e| one_line(format!("cannot read kubeconfig {}: {e}", path.display())))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| one_line(format!("kubeconfig {}: {e}", path.display())))
        }
        None => kube::Config::infer().await.map_err(|e| {
            let detail = e.to_string().replace('\n', " ");
            format!(
                "no Kubernetes configuration: no usable kubeconfig ($KUBECONFIG, ~/.kube/config) and not running in a cluster ({detail})"
            )
        }),
    }
}

/// `message` with its line breaks as spaces.
fn one_line(message: String) -> String {
    message.replace('\n', " ")
}

/// The cluster's nodes, pods, batch/v1 Jobs, PriorityClasses and job objects of every kind, one
/// LIST each, in the order of a `kubectl get nodes,pods,jobs,priorityclasses,...` dump. A job
/// kind whose LIST answers 404 (its CRD is not installed) is left out; any other failure is an
/// error naming the resource.
pub async fn list_documents(client: &kube::Client) -> anyhow::Result<Vec<Document>> {
    let mut docs = Vec::new();
    for resource in [
        ApiResource::erase::<Node>(&()),
        ApiResource::erase::<Pod>(&()),
        ApiResource::erase::<Job>(&()),
        ApiResource::erase::<PriorityClass>(&()),
    ] {
        match list(client, &resource).await? {
            Some(items) => docs.extend(items),
            None => return Err(ListError::NotFound(resource_name(&resource)).into()),
        }
    }
    // The elastic batch/v1 Jobs are among the Jobs listed above.
    for kind in JobKind::ALL.into_iter().filter(|k| k.has_own_watch()) {
        let resource = kind.api_resource();
        match list(client, &resource).await? {
            Some(items) => docs.extend(items),
            None => tracing::debug!(kind = kind.as_str(), "not served (404); skipped"),
        }
    }
    Ok(docs)
}

/// Reads the cluster as [`list_documents`] does into a state, through the dump's path
/// ([`ClusterState::from_documents`]).
pub async fn read_cluster(client: &kube::Client) -> anyhow::Result<Snapshot> {
    Ok(ClusterState::from_documents(&list_documents(client).await?))
}

/// Why a LIST failed.
#[derive(Debug, thiserror::Error)]
enum ListError {
    #[error("listing {0}: the API server does not serve it (404)")]
    NotFound(String),
    #[error("listing {resource}: {source}")]
    Failed {
        resource: String,
        #[source]
        source: kube::Error,
    },
    #[error("listing {resource}: item {index} is not an object")]
    NotAnObject { resource: String, index: usize },
}

/// `plural` or `plural.group`, as errors name a resource.
fn resource_name(resource: &ApiResource) -> String {
    if resource.group.is_empty() {
        resource.plural.clone()
    } else {
        format!("{}.{}", resource.plural, resource.group)
    }
}

/// One LIST of `resource` across all namespaces, each item with its `apiVersion` and `kind`
/// (a LIST's items lack them); `None` when the server answers 404.
async fn list(
    client: &kube::Client,
    resource: &ApiResource,
) -> Result<Option<Vec<Document>>, ListError> {
    let name = resource_name(resource);
    let api = Api::<DynamicObject>::all_with(client.clone(), resource);
    let list = match api.list(&ListParams::default()).await {
        Ok(list) => list,
        Err(kube::Error::Api(s)) if s.code == 404 => return Ok(None),
        Err(source) => {
            return Err(ListError::Failed {
                resource: name,
                source,
            });
        }
    };
    tracing::debug!(resource = %name, items = list.items.len(), "listed");
    list.items
        .into_iter()
        .enumerate()
        .map(|(index, item)| {
            let mut value = serde_json::to_value(item).unwrap_or(Value::Null);
            let Some(object) = value.as_object_mut() else {
                return Err(ListError::NotAnObject {
                    resource: name.clone(),
                    index,
                });
            };
            object.insert(
                "apiVersion".into(),
                Value::String(resource.api_version.clone()),
            );
            object.insert("kind".into(), Value::String(resource.kind.clone()));
            Ok(Document {
                origin: format!("{name} items[{index}]"),
                value,
            })
        })
        .collect::<Result<_, _>>()
        .map(Some)
}

/// A client from the kubeconfig (see [`load_config`]); its error is one line.
pub async fn client(path: Option<&PathBuf>) -> anyhow::Result<kube::Client> {
    let config = load_config(path).await.map_err(anyhow::Error::msg)?;
    kube::Client::try_from(config).context("building the Kubernetes client")
}
