//! The `toolplane` CLI as a library: [`plane`] composes the four services in one process (each on
//! its own loopback port, over real gRPC, with embedded storage), which `toolplane up` and the
//! end-to-end tests both use.

pub mod plane;
