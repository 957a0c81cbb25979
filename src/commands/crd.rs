//! `trainscale crd`: the TrainingJob and PaddleJob CustomResourceDefinitions as YAML.

use kube::CustomResourceExt;

use crate::api::{PaddleJob, TrainingJob};

/// The CRD manifests, as committed in `deploy/crd.yaml`: one YAML document per CRD.
pub fn crd_yaml() -> Result<String, serde_saphyr::SerializeError> {
    let mut out = String::new();
    for crd in [TrainingJob::crd(), PaddleJob::crd()] {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd)?);
    }
    Ok(out)
}

/// `trainscale crd`: prints the CRDs.
pub fn run() -> anyhow::Result<std::process::ExitCode> {
    use anyhow::Context;
    print!("{}", crd_yaml().context("serializing the CRD")?);
    Ok(std::process::ExitCode::SUCCESS)
}
