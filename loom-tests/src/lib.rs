//! Loom models live in `tests/`; run them with `RUSTFLAGS="--cfg loom --cfg crossbeam_loom" cargo test -p loom-tests --release`.
