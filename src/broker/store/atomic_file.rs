//! Replacing a small file whole: the data directory's metadata files
//! (`topics.list`, the offsets slots, the topic journal's header) are
//! written this way, so a crash leaves either the old file or the new one.

use std::fs::{self, File};
use std::io::Write;
use std::path::Path;

use crate::error::{Error, Result};

/// Writes `bytes` to `dir/name.tmp`, syncs it (if `sync`), renames it over
/// `dir/name` and syncs the directory (if `sync`). A crash before the
/// rename leaves the old file and a stray `.tmp`, which the next replace
/// overwrites; after it, the new file.
pub(super) fn replace(dir: &Path, name: &str, bytes: &[u8], sync: bool) -> Result<()> {
    let tmp = dir.join(format!("{name}.tmp"));
    let target = dir.join(name);
    let mut f = File::create(&tmp).map_err(|e| Error::io(&tmp, &e))?;
    f.write_all(bytes).map_err(|e| Error::io(&tmp, &e))?;
    if sync {
        f.sync_data().map_err(|e| Error::io(&tmp, &e))?;
    }
    drop(f);
    fs::rename(&tmp, &target).map_err(|e| Error::io(&target, &e))?;
    if sync {
        sync_dir(dir)?;
    }
    Ok(())
}

/// Makes a directory's entries (a rename, a new file) durable.
pub(super) fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| Error::io(dir, &e))
}
