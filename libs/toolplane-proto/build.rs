//! Compiles the wire contract in the workspace's `proto/` into tonic/prost code.
//!
//! Uses the protoc binary vendored by `protoc-bin-vendored`, so no system protoc is needed. Two
//! packages are compiled separately so that each gets its own file descriptor set: the production
//! contract `toolplane.v1` (served through reflection by every service) and the test-only
//! `toolplane.testing.v1`, which must never show up in a production service's reflection.

use std::error::Error;
use std::fs;
use std::path::{Path, PathBuf};

fn main() -> Result<(), Box<dyn Error>> {
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR")?);
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let proto_root = manifest_dir.join("../../proto").canonicalize()?;
    // A directory path makes cargo rerun when any file below it changes, including new files.
    println!("cargo:rerun-if-changed={}", proto_root.display());

    compile(
        &proto_root,
        &proto_root.join("toolplane/v1"),
        &out_dir.join("toolplane_v1_descriptor.bin"),
    )?;
    compile(
        &proto_root,
        &proto_root.join("toolplane/testing/v1"),
        &out_dir.join("toolplane_testing_v1_descriptor.bin"),
    )?;
    Ok(())
}

/// Compiles every `.proto` file in `package_dir` (client and server code) and writes their file
/// descriptor set, imports included, to `descriptor_path`.
fn compile(
    proto_root: &Path,
    package_dir: &Path,
    descriptor_path: &Path,
) -> Result<(), Box<dyn Error>> {
    let protos = proto_files(package_dir)?;
    if protos.is_empty() {
        return Err(format!("no .proto files in {}", package_dir.display()).into());
    }
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    let includes = [
        proto_root.to_path_buf(),
        protoc_bin_vendored::include_path()?,
    ];
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .file_descriptor_set_path(descriptor_path)
        .compile_with_config(config, &protos, &includes)?;
    Ok(())
}

/// The `.proto` files directly in `dir`, sorted so that generated code is deterministic.
fn proto_files(dir: &Path) -> Result<Vec<PathBuf>, Box<dyn Error>> {
    let mut protos = Vec::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|ext| ext == "proto") {
            protos.push(path);
        }
    }
    protos.sort();
    Ok(protos)
}
