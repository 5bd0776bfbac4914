//! Every Rust snippet in README.md is a whole program (doc tests compile and
//! run it as pasted: src/lib.rs includes the README under `cfg(doctest)`),
//! and its body, token for token, is part of a program in examples/ that CI
//! runs (`cargo run --example ...` in .ci/test), where checks after it make
//! the run fail if the snippet stops doing what the README says. Whitespace
//! is ignored: the examples are laid out by rustfmt, the README for reading.

use std::path::Path;

/// The line every README program opens its `main` with (whitespace removed).
const MAIN: &str = "fnmain()->Result<(),Box<dynstd::error::Error>>{";
/// How every README program ends (whitespace removed).
const END: &str = "Ok(())}";

fn without_whitespace(text: &str) -> String {
    text.chars().filter(|c| !c.is_whitespace()).collect()
}

/// The snippet without its `fn main` line and closing `Ok(()) }`: its `use`
/// lines followed by the body. None if it is not a whole program.
fn body_of(snippet: &str) -> Option<String> {
    let text = without_whitespace(snippet);
    let (uses, rest) = text.split_once(MAIN)?;
    Some(format!("{uses}{}", rest.strip_suffix(END)?))
}

#[test]
fn every_readme_rust_snippet_is_a_program_whose_body_is_an_example() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let mut examples = Vec::new();
    for entry in std::fs::read_dir(root.join("examples")).expect("examples/") {
        let path = entry.expect("a directory entry").path();
        if path.extension().is_some_and(|e| e == "rs") {
            examples.push(without_whitespace(&std::fs::read_to_string(&path).expect("an example")));
        }
    }
    let snippets: Vec<&str> = readme.split("```rust\n").skip(1).map(|s| s.split("```").next().unwrap()).collect();
    assert!(!snippets.is_empty(), "no Rust snippets in README.md");
    for snippet in snippets {
        let body = body_of(snippet).unwrap_or_else(|| {
            panic!("this README snippet is not a whole program (`fn main() -> Result<(), Box<dyn std::error::Error>> {{ .. Ok(()) }}`):\n{snippet}")
        });
        let found = examples.iter().any(|text| text.contains(&body));
        assert!(found, "this README snippet's body is not in any examples/*.rs program:\n{snippet}");
    }
}

#[test]
fn the_readme_is_included_as_doc_tests() {
    let lib = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).expect("src/lib.rs");
    let include =
        lib.find("#[doc = include_str!(\"../README.md\")]").expect("src/lib.rs includes README.md as doc tests");
    assert!(lib[..include].trim_end().ends_with("#[cfg(doctest)]"), "the README is included under cfg(doctest) only");
}
