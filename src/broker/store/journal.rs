//! The topic journal: topic creations and deletions appended to a file, so
//! that listing a topic costs the same with a million topics as with ten.
//!
//! The data directory's topic list is a snapshot (`topics.list`, see
//! `format.rs` and `topics.rs`) plus this journal (`topics.journal`) of what changed since.
//! Rewriting the whole list on every creation made creating n topics cost
//! O(n²) bytes written (and as many synced). Now a creation or deletion
//! appends one entry and syncs it; when the journal holds more entries than
//! the snapshot has topics (and at least `COMPACT_MIN_ENTRIES`), the next
//! change writes a new snapshot instead, which includes it, and starts an
//! empty journal: each snapshot is paid for by as many appends as it is
//! long, so a change costs O(1) bytes written, amortised.
//!
//! ```text
//! topics.journal:
//! +---------------------------------------------------------------+
//! | MAGIC (8) | VERSION u32 | 0 u32 | generation u64 |  header      |
//! +---------------------------------------------------------------+
//! | length u32 | CRC32C u32 | kind u8, body ...     |  one entry   |
//! | ...                                                            |
//! +---------------------------------------------------------------+
//! ```
//!
//! # Which journal goes with which snapshot
//!
//! A snapshot carries a *generation*; a journal's header names the
//! generation it extends. A compaction writes the new snapshot with the
//! next generation (replaced atomically and synced, the commit point of the
//! change that triggered it), then replaces the journal with an empty one
//! of that generation. A crash between the two leaves a journal of an older
//! generation, whose entries are all in the snapshot: opening ignores it
//! (and the next change replaces it). A journal newer than its snapshot
//! cannot be left by any crash, and is `Corrupt`. A directory written
//! before the journal existed has a snapshot of format 1 (generation 0) and
//! no journal; its first change compacts, so the snapshot becomes format 2
//! before any journal exists, and a rill that reads only format 1 refuses
//! the directory with a clear error instead of missing the journal.
//!
//! # Torn and failed appends
//!
//! An append is acknowledged (the creation or deletion returns) only once
//! its entry is synced. A crash can leave the last entry short, failing
//! its CRC or (on a file system that extends a file before writing it) as
//! zeros: it was never acknowledged, so opening drops it and cuts the file
//! there, before anything is appended after it. Nothing is ever appended
//! after a bad entry, so one that is not last is damage: `Corrupt`. An append that fails
//! (a full disk, a failed sync) cuts the file back to where it was; if even
//! that fails, the journal is dropped and the next change compacts.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The journal's file name in the data directory.
pub(super) const JOURNAL_FILE: &str = "topics.journal";
const MAGIC: &[u8; 8] = b"rill-tj\0";
/// 2: an added topic's entry may end with its priority (see `format.rs`).
/// A journal of format 1 is still read, and replaced by the next change (a
/// rill that reads only format 1 then refuses the directory rather than
/// misread an entry).
const VERSION: u32 = 2;
const HEADER: usize = 8 + 4 + 4 + 8;
/// An entry's length and CRC.
const ENTRY_HEADER: usize = 4 + 4;
/// The largest entry body: a topic name is at most 255 bytes, its options a
/// few dozen; anything longer is damage.
const MAX_ENTRY: usize = 4096;
/// The journal is compacted once it holds more entries than the snapshot
/// has topics, and at least this many: a handful of creations on a small
/// directory do not rewrite its list each time.
pub(super) const COMPACT_MIN_ENTRIES: usize = 1024;

/// Entry kinds.
const KIND_ADD: u8 = 1;
const KIND_REMOVE: u8 = 2;

/// One change to the topic list: the body of an entry, encoded by the
/// store (which owns the topic format) after its kind byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Change {
    /// A topic was listed: its encoded `TopicMeta`.
    Add(Vec<u8>),
    /// The topic with this name was unlisted.
    Remove(String),
}

/// An open journal, appended to under the store's topic lock.
#[derive(Debug)]
pub(super) struct Journal {
    file: File,
    path: PathBuf,
    generation: u64,
    entries: usize,
    len: u64,
}

/// What opening found.
#[derive(Debug)]
pub(super) struct Found {
    /// The journal to append to; `None` if there is none of the snapshot's
    /// generation (the next change compacts).
    pub(super) journal: Option<Journal>,
    /// The changes since the snapshot, in order.
    pub(super) changes: Vec<Change>,
}

impl Journal {
    /// Opens the journal of the snapshot of `generation` in `root`.
    pub(super) fn open(root: &Path, generation: u64) -> Result<Found> {
        let path = root.join(JOURNAL_FILE);
        let mut bytes = Vec::new();
        let mut file = match OpenOptions::new().read(true).append(true).open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found { journal: None, changes: vec![] }),
            Err(e) => return Err(Error::io(&path, &e)),
        };
        file.read_to_end(&mut bytes).map_err(|e| Error::io(&path, &e))?;
        let corrupt = |offset: usize, reason: &str| Error::Corrupt {
            file: path.clone(),
            offset: offset as u64,
            reason: reason.into(),
        };
        // The header is written whole by a replace (temporary file, rename),
        // so a short or foreign one is damage, not a torn write.
        if bytes.len() < HEADER || &bytes[..8] != MAGIC {
            return Err(corrupt(0, "not a rill topic journal"));
        }
        let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
        if !(1..=VERSION).contains(&version) {
            return Err(corrupt(8, &format!("topic journal format {version}, this rill reads 1 to {VERSION}")));
        }
        let of = u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes"));
        if of < generation {
            // Left by a compaction cut short: the snapshot holds all of it.
            return Ok(Found { journal: None, changes: vec![] });
        }
        if of > generation {
            return Err(corrupt(
                16,
                &format!("journal of list generation {of}, but the list is generation {generation}"),
            ));
        }
        let mut changes = Vec::new();
        let mut at = HEADER;
        while at < bytes.len() {
            let rest = &bytes[at..];
            let len = rest.get(..4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize);
            let body = len.filter(|&n| n > 0 && n <= MAX_ENTRY).and_then(|n| rest.get(ENTRY_HEADER..ENTRY_HEADER + n));
            let crc = rest.get(4..8).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")));
            let (Some(body), Some(crc)) = (body, crc) else {
                // A header or body that runs past the end, or a zero length
                // (an append torn to zeros): a torn last entry if nothing but
                // zeros or its own bytes follow, damage otherwise.
                let torn = match len {
                    Some(n) if n > 0 && n <= MAX_ENTRY => true,
                    None => true,
                    _ => rest.iter().all(|&b| b == 0),
                };
                if !torn {
                    return Err(corrupt(at, "a damaged entry in the middle of the journal"));
                }
                break;
            };
            if crc32c::crc32c(body) != crc {
                if ENTRY_HEADER + body.len() == rest.len() {
                    // The last entry, torn inside its body.
                    break;
                }
                return Err(corrupt(at, "an entry in the middle of the journal fails its CRC"));
            }
            // A body that checks but does not decode was written by a bug or
            // another program: refused, not guessed at.
            changes.push(match body.split_first() {
                Some((&KIND_ADD, meta)) => Change::Add(meta.to_vec()),
                Some((&KIND_REMOVE, name)) => Change::Remove(
                    String::from_utf8(name.to_vec()).map_err(|_| corrupt(at, "a removed topic's name is not UTF-8"))?,
                ),
                _ => return Err(corrupt(at, "an entry of unknown kind")),
            });
            at += ENTRY_HEADER + body.len();
        }
        if at < bytes.len() {
            // A torn last entry: never acknowledged (see the module docs).
            log::warn!(
                "rill: dropping {} bytes of an unfinished entry at the end of {}",
                bytes.len() - at,
                path.display()
            );
            file.set_len(at as u64).and_then(|()| file.sync_data()).map_err(|e| Error::io(&path, &e))?;
        }
        let entries = changes.len();
        // An older format is read, never appended to: the next change compacts.
        let journal = (version == VERSION).then_some(Journal { file, path, generation, entries, len: at as u64 });
        Ok(Found { journal, changes })
    }

    /// Replaces the journal with an empty one extending the snapshot of
    /// `generation` (written and synced before this is called).
    pub(super) fn start(root: &Path, generation: u64) -> Result<Journal> {
        let mut header = Vec::with_capacity(HEADER);
        header.extend_from_slice(MAGIC);
        header.extend_from_slice(&VERSION.to_le_bytes());
        header.extend_from_slice(&0u32.to_le_bytes());
        header.extend_from_slice(&generation.to_le_bytes());
        super::atomic_file::replace(root, JOURNAL_FILE, &header, true)?;
        let path = root.join(JOURNAL_FILE);
        let file = OpenOptions::new().append(true).open(&path).map_err(|e| Error::io(&path, &e))?;
        Ok(Journal { file, path, generation, entries: 0, len: HEADER as u64 })
    }

    /// The snapshot generation this journal extends.
    pub(super) fn generation(&self) -> u64 {
        self.generation
    }

    /// Entries since the snapshot.
    pub(super) fn entries(&self) -> usize {
        self.entries
    }

    /// Appends `change` and syncs it: once this returns `Ok`, the change
    /// survives a crash. On failure the file is cut back to where it was;
    /// `Err((error, false))` says that failed too, and this journal must
    /// not be appended to again.
    pub(super) fn append(&mut self, change: &Change) -> std::result::Result<(), (Error, bool)> {
        let mut body = Vec::new();
        match change {
            Change::Add(meta) => {
                body.push(KIND_ADD);
                body.extend_from_slice(meta);
            }
            Change::Remove(name) => {
                body.push(KIND_REMOVE);
                body.extend_from_slice(name.as_bytes());
            }
        }
        debug_assert!(body.len() <= MAX_ENTRY, "a topic entry longer than MAX_ENTRY");
        let mut entry = Vec::with_capacity(ENTRY_HEADER + body.len());
        entry.extend_from_slice(&(body.len() as u32).to_le_bytes());
        entry.extend_from_slice(&crc32c::crc32c(&body).to_le_bytes());
        entry.extend_from_slice(&body);
        match self.file.write_all(&entry).and_then(|()| self.file.sync_data()) {
            Ok(()) => {
                self.entries += 1;
                self.len += entry.len() as u64;
                Ok(())
            }
            Err(e) => {
                let error = Error::io(&self.path, &e);
                let cut = self.file.set_len(self.len).and_then(|()| self.file.sync_data()).is_ok();
                Err((error, cut))
            }
        }
    }

    /// The journal's length in bytes (for tests of what a change costs).
    #[cfg(test)]
    pub(super) fn len(&self) -> u64 {
        self.len
    }
}
