//! `include/rill.h` must be exactly what cbindgen (the version pinned in
//! Cargo.lock) generates from this crate, plus the two parts cbindgen cannot
//! make: the version macros (from this crate's Cargo version) and the
//! `rill_status` enum (from the status list in `src/status_list.rs`, which
//! the crate expands with a macro cbindgen does not see through).
//! Regenerate it with `RILL_BLESS=1 cargo test -p rill-ffi --test header`.
//!
//! `include/rill_nats.h` (the bridge of the `nats` feature) is generated the
//! same way from `src/nats.rs` alone, so it declares only the bridge and
//! includes `rill.h` for the rest.

use std::fmt::Write as _;
use std::path::Path;

/// Renders the status list as the C enum cbindgen would write for it.
macro_rules! statuses {
    (
        $(#[doc = $doc:literal])*
        enum $ty:ident {
            $( $(#[doc = $vdoc:literal])* $name:ident = $value:literal => [$($kind:ident),*], )*
        }
    ) => {
        fn status_enum() -> String {
            let mut c = String::new();
            c.push_str(&doc_comment("", &[$($doc),*]));
            c.push_str("typedef enum {\n");
            // C89 has no comma after the last enumerator.
            let variants = [$((doc_comment("    ", &[$($vdoc),*]), stringify!($name), $value)),*];
            for (i, (doc, name, value)) in variants.iter().enumerate() {
                let comma = if i + 1 < variants.len() { "," } else { "" };
                c.push_str(doc);
                writeln!(c, "    {name} = {value}{comma}").unwrap();
            }
            writeln!(c, "}} {};", stringify!($ty)).unwrap();
            c
        }
    };
}

include!("../src/status_list.rs");

/// A doxygen block from `///` lines, laid out as cbindgen lays them.
fn doc_comment(indent: &str, lines: &[&str]) -> String {
    let mut c = format!("{indent}/**\n");
    for line in lines {
        let line = line.strip_prefix(' ').unwrap_or(line);
        if line.is_empty() {
            writeln!(c, "{indent} *").unwrap();
        } else {
            writeln!(c, "{indent} * {line}").unwrap();
        }
    }
    writeln!(c, "{indent} */").unwrap();
    c
}

/// How many values each of minor and patch may take in `RILL_VERSION_NUMBER`
/// (`MAJOR * 10000 + MINOR * 100 + PATCH`) before two versions' numbers could
/// compare wrongly.
const VERSION_PART_LIMIT: u32 = 100;

fn version_macros() -> String {
    let v = env!("CARGO_PKG_VERSION");
    let part = |s: &str| s.parse::<u32>().expect("a numeric version part");
    let (major, minor, patch) = (
        part(env!("CARGO_PKG_VERSION_MAJOR")),
        part(env!("CARGO_PKG_VERSION_MINOR")),
        part(env!("CARGO_PKG_VERSION_PATCH")),
    );
    assert!(
        minor < VERSION_PART_LIMIT && patch < VERSION_PART_LIMIT,
        "version {v}: RILL_VERSION_NUMBER has two decimal digits each for minor and patch"
    );
    let number = (major * VERSION_PART_LIMIT + minor) * VERSION_PART_LIMIT + patch;
    format!(
        "/** The version of rill this header belongs to; compare with rill_version() at run time. */\n\
         #define RILL_VERSION_MAJOR {major}\n#define RILL_VERSION_MINOR {minor}\n#define RILL_VERSION_PATCH {patch}\n\
         #define RILL_VERSION_STRING \"{v}\"\n\
         /**\n \
          * The same as one integer, MAJOR * 10000 + MINOR * 100 + PATCH, that grows\n \
          * with every release: `#if RILL_VERSION_NUMBER >= 200` (0.2.0 or later).\n \
          */\n\
         #define RILL_VERSION_NUMBER {number}\n",
    )
}

/// Compares `generated` with the committed `include/<name>`, or writes it
/// there under RILL_BLESS.
fn check_fresh(name: &str, generated: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../include").join(name);
    if std::env::var_os("RILL_BLESS").is_some() {
        std::fs::write(&path, generated).unwrap_or_else(|e| panic!("write include/{name}: {e}"));
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "include/{name} is stale: regenerate it with `RILL_BLESS=1 cargo test -p rill-ffi --test header` and commit it"
    );
}

#[test]
fn committed_nats_header_matches_cbindgen_output() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen_nats.toml")).expect("cbindgen_nats.toml parses");
    let bindings = cbindgen::Builder::new()
        .with_src(crate_dir.join("src/nats.rs"))
        .with_config(config)
        .generate()
        .expect("cbindgen generates the nats header");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    check_fresh("rill_nats.h", &String::from_utf8(generated).expect("the header is UTF-8"));
}

#[test]
fn committed_header_matches_cbindgen_output() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("cbindgen.toml parses");
    let rules = config.after_includes.take().unwrap_or_default();
    config.after_includes = Some(format!("\n{}\n{}\n{rules}", version_macros(), status_enum()));
    let bindings = cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen generates the header");
    let mut generated = Vec::new();
    bindings.write(&mut generated);
    check_fresh("rill.h", &String::from_utf8(generated).expect("the header is UTF-8"));
}
