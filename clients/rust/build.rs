//! Generates the helix.runner.v1 messages and the RunnerService client from `proto/` at build
//! time. protox (a protobuf compiler written in Rust) parses the schema, so building this crate
//! needs no `protoc` on the machine.

use std::path::PathBuf;

const FILES: &[&str] = &[
    "helix/runner/v1/runner_service.proto",
    "helix/runner/v1/events.proto",
    "helix/runner/v1/resources.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?).join("../../proto");
    for file in FILES {
        println!("cargo:rerun-if-changed={}", root.join(file).display());
    }
    let descriptors = protox::compile(FILES, [&root])?;
    tonic_prost_build::configure()
        .build_server(false)
        .build_client(true)
        .compile_fds(descriptors)?;
    Ok(())
}
