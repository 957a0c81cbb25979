//! Decides whether the end-to-end tests against the kmock emulator run or are reported ignored.
//!
//! `cfg(kmock)` is set when python3 can import `kmock` and `yaml` (PyYAML: the emulator reads deploy/'s RBAC), when `CI` is set (CI installs it, and a
//! missing emulator must fail there, not pass), or when `TRAINSCALE_E2E=1`. Without it the
//! end-to-end tests are `#[ignore]`d with a message saying how to install the emulator. After
//! installing kmock, `touch build.rs` (or set `TRAINSCALE_E2E=1`) so this check runs again.

use std::process::{Command, Stdio};

fn main() {
    println!("cargo::rustc-check-cfg=cfg(kmock)");
    println!("cargo::rerun-if-changed=build.rs");
    println!("cargo::rerun-if-env-changed=CI");
    println!("cargo::rerun-if-env-changed=TRAINSCALE_E2E");
    let set =
        |name: &str| std::env::var(name).is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    let importable = Command::new("python3")
        .args(["-c", "import kmock, yaml"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if set("CI") || set("TRAINSCALE_E2E") || importable {
        println!("cargo::rustc-cfg=kmock");
    }
}
