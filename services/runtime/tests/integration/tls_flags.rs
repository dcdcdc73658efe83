//! The runtime binary reads its TLS flags (docs/auth.md, "mTLS between services"): certificate
//! files it cannot read stop it at start with `tls.files` naming the file, and half a pair with
//! `tls.invalid_request`, before it serves anything.

#[test]
fn unreadable_or_half_given_certificates_stop_the_runtime() {
    toolplane_testkit::binary::assert_unusable_tls_flags_stop_it(
        env!("CARGO_BIN_EXE_toolplane-runtime"),
        "TOOLPLANE_RUNTIME_CONFIG",
    );
}
