//! Loads a dump into a `ClusterState` and prints the time taken, for memory (`/usr/bin/time -v`)
//! and time figures: `dump_load stream FILE` reads it object by object as `plan` does;
//! `dump_load tree FILE` reads it as trainscale did before (the whole file as a string, one
//! `serde_json::Value` tree, each List item cloned into a document), for comparison.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Context;
use serde_json::Value;
use trainscale::api::manifest::Document;
use trainscale::cluster::ClusterState;

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let mode = args.next().context("usage: dump_load stream|tree FILE")?;
    let path = PathBuf::from(args.next().context("usage: dump_load stream|tree FILE")?);
    let started = Instant::now();
    let snapshot = match mode.as_str() {
        "stream" => ClusterState::from_file(&path)?,
        "tree" => {
            let text = std::fs::read_to_string(&path)?;
            let value: Value = serde_json::from_str(&text)?;
            let items = value
                .get("items")
                .and_then(Value::as_array)
                .context("no items")?;
            let docs: Vec<Document> = items
                .iter()
                .enumerate()
                .map(|(i, item)| Document {
                    origin: format!("{} items[{i}]", path.display()),
                    value: item.clone(),
                })
                .collect();
            ClusterState::from_documents(&docs)
        }
        other => anyhow::bail!("unknown mode {other}: stream or tree"),
    };
    println!(
        "{mode}: {} nodes, {} warnings, {:.0} ms",
        snapshot.state.nodes().count(),
        snapshot.warnings.len(),
        started.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}
