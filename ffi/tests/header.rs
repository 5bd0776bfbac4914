//! `include/rill.h` must be exactly what cbindgen (the version pinned in
//! Cargo.lock) generates from this crate. Regenerate it with
//! `RILL_BLESS=1 cargo test -p rill-ffi --test header`.

use std::path::Path;

#[test]
fn committed_header_matches_cbindgen_output() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml parses");
    let bindings = cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    let generated = String::from_utf8(generated).expect("the header is UTF-8");

    let path = crate_dir.join("../include/rill.h");
    if std::env::var_os("RILL_BLESS").is_some() {
        std::fs::write(&path, &generated).expect("write include/rill.h");
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/rill.h is stale: regenerate it with `RILL_BLESS=1 cargo test -p rill-ffi --test header` and commit it"
    );
}
