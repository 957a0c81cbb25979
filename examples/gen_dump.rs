//! Writes a generated cluster dump (`testkit::dump`) to stdout, for `plan`/`state` memory and
//! time measurements: `cargo run --release --example gen_dump -- NODES JOBS [TRAINERS] > big.json`.

use std::io::{BufWriter, Write};

use trainscale::testkit::dump::{DumpShape, write_dump};

fn main() -> std::io::Result<()> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().map_err(std::io::Error::other))
        .collect::<Result<_, _>>()?;
    let shape = DumpShape {
        nodes: args.first().copied().unwrap_or(18_000),
        jobs: args.get(1).copied().unwrap_or(9_000),
        trainers_per_job: args.get(2).copied().unwrap_or(2),
        duplicate_nodes: 0,
    };
    let mut out = BufWriter::new(std::io::stdout().lock());
    write_dump(&mut out, shape)?;
    out.flush()
}
