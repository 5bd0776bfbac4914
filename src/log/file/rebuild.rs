//! A compaction's rebuilt segment on a data directory: the file that
//! replaces a sealed segment's, and the swap of the two names.
//!
//! A compaction pass (`log/compact.rs`) rebuilds a sealed segment `S` that
//! loses records into `S'`: the same base, the same number of offsets, the
//! kept records under their original offsets. In memory `S'` is a heap
//! block; on a data directory it is a segment file, which must replace
//! `S`'s file so that a crash at any instant leaves one of the two whole
//! under the segment's name, never half of `S'`, and never loses a record
//! `S'` keeps.
//!
//! # The file
//!
//! `S'`'s file has the ordinary format (`format.rs`), generation 0, and is
//! *complete* from its birth: its header carries the completion fields
//! (all its offsets, the bytes they fill), since every record it will ever
//! hold is in it before anyone can see it. Its region holds, in offset
//! order, each kept record under its frame (whose checksum covers the
//! record's original offset), and for each run of removed offsets one
//! compacted-away record whose body is the run's length ("Compacted-away
//! records" in `record.rs`), under the frame of the run's first offset.
//! Recovery reads it as any complete file, giving a compacted-away record
//! as many offsets as its run (`recovery.rs`); a torn byte anywhere fails a
//! checksum, and a complete file whose records do not check is damage
//! (`Corrupt`), never a silent cut. Its index, tail word and seal are
//! zeros, as in every file, and the segment built over it sets them.
//!
//! # The durable swap
//!
//! Each step, and what a crash just before it leaves:
//!
//! 1. **Write.** The compactor creates `<base>.<pid>-<thread>.tmp`
//!    (`create_new`: a name no one else uses), preallocates it, and writes
//!    the header page and the region. A crash leaves a temporary file,
//!    which recovery deletes; `<base>.seg` is `S`'s file, untouched.
//! 2. **Sync the file.** `fsync` of the temporary file, under every fsync
//!    policy, `Never` included: the rename below may reach the disk before
//!    the data under any policy that does not sync, and a machine crash
//!    would then find a complete header over records never written, where
//!    `S` had records that were on disk. Compaction runs off the
//!    publishers' path, so the sync costs them nothing. A crash before it
//!    completes: as in 1.
//! 3. **Rename.** The temporary file and `<base>.seg` exchange names
//!    (`renameat2(RENAME_EXCHANGE)`; a plain `rename(2)` where the file
//!    system has no exchange), atomic: the name is `S`'s file or `S'`'s,
//!    whole; then the temporary name, `S`'s file now, is unlinked (a crash
//!    first leaves it to recovery, as in 1). Done under the lock of `S`'s
//!    file name ([`FileStorage::replace_with`]), see "Trimmed meanwhile".
//!    A process crash after it: recovery reads `S'`.
//! 4. **Sync the directory** (once for all the segments of a pass, if the
//!    policy flushes anything). A machine crash before it may bring `S`
//!    back under its name (the rename lost), or keep `S'`: either is
//!    whole, and `S'` holds every record compaction keeps from `S`.
//! 5. **Install.** The pass swaps `S'` for `S` in the directory (one
//!    exchange, "The swap" in `compact.rs`). Nothing on disk changes.
//!    Readers still in `S`, in this process, keep reading it through its
//!    mapping: a renamed-over file stays whole while mapped, and is freed
//!    by the kernel when the last mapping goes. `S`'s storage never goes to
//!    the spare pool: an unlinked file cannot be linked under a new name.
//!
//! So recovery never sees half a rebuilt segment: under a segment's name
//! there is `S` (steps 1 to 3, or 4 after a machine crash) or all of `S'`.
//! A sync round racing the pass (`durable.rs`) may flush or mark `S` after
//! step 3: it writes into the unlinked file, which is harmless; or `S'`
//! after step 5: its marker is already there, and rewriting the same
//! fields changes nothing.
//!
//! **Trimmed meanwhile.** Under `CompactAndDelete` a publisher's roll may
//! trim `S` from the directory at any moment of the pass, renaming its file
//! to a spare (`FileStorage::retire`). The rename of step 3 and the trim's
//! take the same lock (the storage's name), so one comes first: if the
//! trim did, `S`'s name is a spare's, step 3 gives up and deletes the
//! temporary file; if step 3 did, `S` is marked *replaced*, and the trim's
//! retire deletes the file under the name (the rebuilt one, which step 5
//! then does not install, since `S` left the directory) instead of making
//! a spare. A crash between leaves `<base>.seg` whole (`S` or `S'`), the
//! partition's oldest file, which retention trims again.
//!
//! **Several processes.** In a partition shared by processes
//! (`Sharing::Processes`) one process at a time rebuilds (the holder of
//! the partition's `compact.lock`), the segment is built over the file
//! before step 3 (its index, tail word and seal in the file, so a process
//! mapping it by name finds it whole), step 3 is an exchange that fails if
//! another process's trim took the name, and the other processes map the
//! rebuilt files in their own directories: see "The swap across processes"
//! in `log/compact.rs`.

use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use super::file_storage::{FileStorage, allocate};
use super::files::Files;
use super::format::{FRAME_LEN, HEADER_BYTES, Header, file_len, frame_for, temp_file_name};
use crate::error::{Error, Result};
use crate::log::record::{COMPACTED_RUN_LEN, align_up, encode_compacted_run};

/// A rebuilt segment file, written and synced under a temporary name
/// (steps 1 and 2 of "The durable swap").
pub(crate) struct Rebuilt {
    /// Its mapping (named by its temporary name until step 3).
    pub(crate) storage: FileStorage,
    /// Its temporary name.
    pub(crate) temp: PathBuf,
    /// Where each offset's record starts (after its frame), in the region:
    /// a removed offset's is its run's compacted-away record.
    pub(crate) positions: Vec<u64>,
    /// Bytes its records fill, frames included.
    pub(crate) used: u64,
}

/// Writes and syncs the rebuilt file of the segment at `base`, of `count`
/// offsets, keeping the records `kept` (`(index, bytes)` in index order,
/// each record's bytes without padding); its compacted-away records are
/// stamped `stamp` (see "The file" in the module docs).
pub(crate) fn write(files: &Files, base: u64, count: u64, kept: &[(u64, &[u8])], stamp: u64) -> Result<Rebuilt> {
    let mut region: Vec<u8> = Vec::new();
    let mut positions = Vec::with_capacity(count as usize);
    let mut kept = kept.iter().peekable();
    let mut index = 0u64;
    while index < count {
        let frame_at = region.len();
        let at = frame_at + FRAME_LEN;
        let (offset, bytes_len) = match kept.next_if(|(i, _)| *i == index) {
            Some(&(_, bytes)) => {
                region.resize(at + align_up(bytes.len()), 0);
                region[at..at + bytes.len()].copy_from_slice(bytes);
                positions.push(at as u64);
                index += 1;
                (base + index - 1, bytes.len())
            }
            None => {
                // The run of removed offsets up to the next kept record.
                let next = kept.peek().map_or(count, |(i, _)| *i);
                region.resize(at + COMPACTED_RUN_LEN, 0);
                encode_compacted_run(&mut region[at..], stamp, next - index);
                positions.extend(std::iter::repeat_n(at as u64, (next - index) as usize));
                let first = base + index;
                index = next;
                (first, COMPACTED_RUN_LEN)
            }
        };
        let frame = frame_for(offset, &region[at..at + bytes_len]);
        region[frame_at..at].copy_from_slice(&frame.to_le_bytes());
    }
    let used = region.len() as u64;
    // A zero frame after the records, as a fresh file has: room for the
    // end mark a sync round flushes with a sealed segment's last records.
    region.resize(region.len() + FRAME_LEN, 0);
    let capacity = region.len() as u64;
    let mut page = vec![0u8; HEADER_BYTES];
    Header { base, capacity, complete: None, generation: 0, slots: count }.encode_complete(&mut page, count, used);
    let temp = files.dir.join(temp_file_name(base));
    let file =
        OpenOptions::new().read(true).write(true).create_new(true).open(&temp).map_err(|e| Error::io(&temp, &e))?;
    let written = (|| {
        // Preallocated, as every segment file: the index and the tail word
        // are written through the map later, and must find the disk's room.
        allocate(&file, file_len(capacity, count))?;
        file.write_all_at(&page, 0)?;
        file.write_all_at(&region, HEADER_BYTES as u64)?;
        // Step 2, under every policy (see the module docs).
        file.sync_all()
    })();
    drop(file);
    let storage = written.map_err(|e| Error::io(&temp, &e)).and_then(|()| FileStorage::open_existing(&temp));
    match storage {
        Ok(storage) => Ok(Rebuilt { storage, temp, positions, used }),
        Err(e) => {
            let _ = fs::remove_file(&temp);
            Err(e)
        }
    }
}
