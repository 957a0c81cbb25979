//! Dump loading (`ClusterState::from_file`, as `plan`, `state` and `explain` read a dump): a
//! generated `kubectl get -A -o json` List (`testkit::dump`) of 2,000 nodes and 1,000
//! TrainingJobs with their trainer Jobs and 2,000 bound Pods (~8 MB), and a quarter of it as
//! YAML. Throughput is reported in bytes of the file.
//!
//! `cargo bench --bench dump_load`

use std::hint::black_box;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use serde_json::Value;
use trainscale::cluster::ClusterState;
use trainscale::testkit::dump::{DumpShape, write_dump};

/// The allocator the `trainscale` binary runs with.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The JSON dump of `shape`.
fn json_dump(shape: DumpShape) -> Vec<u8> {
    let mut out = Vec::new();
    write_dump(&mut out, shape).expect("writing to a Vec cannot fail");
    out
}

/// Writes `bytes` to `dir/name` and returns the file's size.
fn write_file(dir: &Path, name: &str, bytes: &[u8]) -> u64 {
    let path = dir.join(name);
    let mut file = BufWriter::new(std::fs::File::create(&path).expect("temporary file"));
    file.write_all(bytes).expect("write dump");
    file.flush().expect("flush dump");
    bytes.len() as u64
}

/// Loads `path` and checks it has `nodes` nodes and no warnings, so a bench of a dump that no
/// longer loads fails instead of timing the error path.
fn load(path: &Path, nodes: usize) {
    let snapshot = ClusterState::from_file(path).expect("generated dump loads");
    assert_eq!(snapshot.state.nodes().count(), nodes, "{}", path.display());
    assert!(snapshot.warnings.is_empty(), "{:?}", snapshot.warnings);
    black_box(snapshot);
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut group = c.benchmark_group("dump_load");
    group.sample_size(10);
    // The YAML load takes ~0.5 s: ten of them do not fit criterion's default 5 s.
    group.measurement_time(Duration::from_secs(8));

    let json_shape = DumpShape {
        nodes: 2_000,
        jobs: 1_000,
        trainers_per_job: 2,
        duplicate_nodes: 0,
    };
    let json = json_dump(json_shape);
    let json_bytes = write_file(dir.path(), "dump.json", &json);
    group.throughput(Throughput::Bytes(json_bytes));
    let json_path = dir.path().join("dump.json");
    group.bench_function("json/2000_nodes", |b| {
        b.iter(|| load(&json_path, json_shape.nodes))
    });

    let yaml_shape = DumpShape {
        nodes: 500,
        jobs: 250,
        ..json_shape
    };
    let value: Value =
        serde_json::from_slice(&json_dump(yaml_shape)).expect("generated dump is JSON");
    let yaml = serde_saphyr::to_string(&value).expect("a JSON value serializes as YAML");
    let yaml_bytes = write_file(dir.path(), "dump.yaml", yaml.as_bytes());
    group.throughput(Throughput::Bytes(yaml_bytes));
    let yaml_path = dir.path().join("dump.yaml");
    group.bench_function("yaml/500_nodes", |b| {
        b.iter(|| load(&yaml_path, yaml_shape.nodes))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
