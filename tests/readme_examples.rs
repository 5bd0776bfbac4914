//! Every Rust snippet in README.md is, token for token, part of a program in
//! examples/ that CI runs (`cargo run --example ...` in .ci/test), so the
//! README cannot show code that no longer compiles or works. Whitespace is
//! ignored: the examples are laid out by rustfmt, the README for reading.

use std::path::Path;

fn without_whitespace(text: &str) -> String {
    text.chars().filter(|c| !c.is_whitespace()).collect()
}

#[test]
fn every_readme_rust_snippet_is_an_example_program() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let mut examples = Vec::new();
    for entry in std::fs::read_dir(root.join("examples")).expect("examples/") {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_some_and(|e| e == "rs") {
            examples.push(std::fs::read_to_string(&path).expect("an example"));
        }
    }
    let snippets: Vec<&str> = readme.split("```rust\n").skip(1).map(|s| s.split("```").next().unwrap()).collect();
    assert!(!snippets.is_empty(), "no Rust snippets in README.md");
    for snippet in snippets {
        let want = without_whitespace(snippet);
        let found = examples.iter().any(|text| without_whitespace(text).contains(&want));
        assert!(found, "this README snippet is not in any examples/*.rs program:\n{snippet}");
    }
}
