//! `trainscale crd`: the TrainingJob CustomResourceDefinition as YAML.

use kube::CustomResourceExt;

use crate::api::TrainingJob;

/// The CRD manifest, as committed in `deploy/crd.yaml`.
pub fn crd_yaml() -> Result<String, serde_saphyr::SerializeError> {
    serde_saphyr::to_string(&TrainingJob::crd())
}

/// `trainscale crd`: prints the CRD.
pub fn run() -> anyhow::Result<std::process::ExitCode> {
    use anyhow::Context;
    print!("{}", crd_yaml().context("serializing the CRD")?);
    Ok(std::process::ExitCode::SUCCESS)
}
