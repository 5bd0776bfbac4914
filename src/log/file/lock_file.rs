//! Lock files: files that hold no bytes, only the `flock`s and byte locks
//! taken on them (a data directory's `LOCK`, a partition's `maps.lock`, a
//! topic's `dedupe.lock`, a compaction's lock, a group's membership).

use std::fs::{File, OpenOptions};
use std::path::Path;

use crate::error::{Error, Result};

/// Opens a lock file read-write, creating it if missing and never
/// truncating it, so every opener, in any process, shares it as found.
pub(crate) fn open_lock_file(path: &Path) -> Result<File> {
    let mut options = OpenOptions::new();
    options.read(true).write(true).create(true).truncate(false);
    options.open(path).map_err(|e| Error::io(path, &e))
}
