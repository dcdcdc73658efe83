//! The runtime binary bound beyond loopback without `--auth` exits at once with one clear line
//! and status 2, before it serves anything (the check every service binary shares,
//! `toolplane_testkit::binary`).

use toolplane_testkit::binary;

#[test]
fn beyond_loopback_without_auth_the_runtime_exits_with_auth_required() {
    binary::assert_beyond_loopback_without_auth_it_exits(
        env!("CARGO_BIN_EXE_toolplane-runtime"),
        "runtime",
        "TOOLPLANE_RUNTIME_CONFIG",
    );
}
