//! The toolplane wire contract as Rust code: tonic clients and servers and prost messages, generated
//! at build time from the `.proto` files in the workspace's `proto/` directory.
//!
//! Only service crates (and tests) depend on this crate: the pure domain crates never see protobuf
//! types, and each service converts between these messages and domain types in one `convert`
//! module.
//!
//! - [`v1`]: package `toolplane.v1`, the services `CatalogService`, `ProfileService`,
//!   `RuntimeService`, `WorkspaceService`, `McpProxyService` and `ToolExecutor`, with their shared
//!   types.
//! - [`testing::v1`]: package `toolplane.testing.v1`, the test-only `EchoService` that benchmarks
//!   compare against.
//! - [`FILE_DESCRIPTOR_SET`] and [`testing::FILE_DESCRIPTOR_SET`]: encoded descriptor sets for
//!   `tonic-reflection`.
//! - [`reflection`] (feature `reflection`): the reflection services every toolplane server
//!   mounts, listing only the services that server answers, built on the first reflection request.
//! - [`cells`]: [`cells::CellScoped`], the cells each request message names, for the services'
//!   one rule that a request acts in its caller's cell.
//! - [`status`]: the one way every server builds an error status, with its `google.rpc` details
//!   (`ErrorInfo`, `RetryInfo`, `BadRequest`).
//! - [`idempotency`]: the first answer to a creating request's `request_id`, replayed to its retries.
//! - [`page_token`]: the opaque, versioned page tokens every listing issues and validates.

/// Package `toolplane.v1`: the production wire contract.
#[allow(
    clippy::all,
    clippy::pedantic,
    clippy::nursery,
    clippy::unwrap_used,
    clippy::expect_used,
    missing_debug_implementations,
    rustdoc::all
)]
pub mod v1 {
    tonic::include_proto!("toolplane.v1");
}

/// Test-only packages. Never served by a production service.
pub mod testing {
    /// Package `toolplane.testing.v1`: the bare unary echo used as the benchmark baseline.
    #[allow(
        clippy::all,
        clippy::pedantic,
        clippy::nursery,
        clippy::unwrap_used,
        clippy::expect_used,
        missing_debug_implementations,
        rustdoc::all
    )]
    pub mod v1 {
        tonic::include_proto!("toolplane.testing.v1");
    }

    /// Encoded `FileDescriptorSet` of `toolplane.testing.v1`, for `tonic-reflection` in tests.
    pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(
        env!("OUT_DIR"),
        "/toolplane_testing_v1_descriptor.bin"
    ));
}

/// Encoded `FileDescriptorSet` of `toolplane.v1` (imports included, with source comments), for
/// `tonic-reflection`: `Builder::configure().register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)`.
pub const FILE_DESCRIPTOR_SET: &[u8] =
    include_bytes!(concat!(env!("OUT_DIR"), "/toolplane_v1_descriptor.bin"));

pub mod cells;
#[cfg(feature = "reflection")]
pub mod reflection;

pub mod idempotency;
pub mod page_token;
pub mod status;
