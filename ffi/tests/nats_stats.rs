//! `rill_nats_stats` (ffi/src/nats.rs) mirrors the bridge's Rust
//! `BridgeStats` (nats/src/bridge.rs) field for field, and its field docs
//! are the Rust ones word for word, so the C header and the Rust docs cannot
//! drift apart. Read from the sources, so it runs without the `nats` feature.

use std::path::Path;

/// The fields of `pub struct <name> { ... }` in `file`, each with its doc
/// text (the `///` lines above it, joined with spaces), in order.
fn fields(file: &str, name: &str) -> Vec<(String, String)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let start = text.find(&format!("pub struct {name} {{")).unwrap_or_else(|| panic!("no struct {name} in {file}"));
    let body = &text[start..];
    let body = &body[..body.find("\n}\n").unwrap_or_else(|| panic!("{name} in {file} does not end"))];
    let mut out = Vec::new();
    let mut doc: Vec<&str> = Vec::new();
    for line in body.lines().skip(1).map(str::trim) {
        if let Some(d) = line.strip_prefix("///") {
            doc.push(d.trim());
        } else if let Some(field) = line.strip_prefix("pub ") {
            let field = field.split(':').next().expect("a field name").to_owned();
            out.push((field, doc.join(" ")));
            doc.clear();
        }
    }
    out
}

#[test]
fn the_c_stats_struct_says_what_the_rust_one_says() {
    let c = fields("ffi/src/nats.rs", "rill_nats_stats");
    let rust = fields("nats/src/bridge.rs", "BridgeStats");
    assert!(c.len() >= 7, "parsed too few fields of rill_nats_stats: {c:?}");
    let names = |fields: &[(String, String)]| fields.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>();
    // The C struct has a flag where the Rust one has the text.
    let rust_names: Vec<String> =
        names(&rust).into_iter().map(|n| if n == "last_error" { "has_error".to_owned() } else { n }).collect();
    assert_eq!(names(&c), rust_names, "rill_nats_stats and BridgeStats have the same fields, in order");
    for ((name, c_doc), (_, rust_doc)) in c.iter().zip(&rust) {
        if name != "has_error" {
            assert_eq!(c_doc, rust_doc, "the docs of {name} differ: rill_nats_stats vs BridgeStats");
        }
    }
}
