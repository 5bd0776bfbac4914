//! Loom models live in `tests/`; run them with `RUSTFLAGS="--cfg loom --cfg crossbeam_loom" cargo test -p loom-tests --release`.
//!
//! This library holds what the models share.

/// A loom model builder bounded to `preemptions` preemptions unless
/// `LOOM_MAX_PREEMPTIONS` says otherwise (CI sets 2 to stay well inside its
/// time limit).
#[cfg(loom)]
pub fn builder(preemptions: usize) -> loom::model::Builder {
    let mut builder = loom::model::Builder::new();
    if builder.preemption_bound.is_none() {
        builder.preemption_bound = Some(preemptions);
    }
    builder
}

/// Checks `f` under every interleaving within two preemptions (or
/// `LOOM_MAX_PREEMPTIONS`).
#[cfg(loom)]
pub fn model(f: impl Fn() + Sync + Send + 'static) {
    builder(2).check(f);
}
