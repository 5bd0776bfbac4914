//! The topic list's I/O: reading it back at open (the snapshot in
//! `topics.list` and the journal's changes since), listing a change (an
//! appended journal entry, or a new snapshot when the journal is due for
//! compaction; see `journal.rs`), and clearing what a deletion cut short
//! left under `topics/` (see "Deleting a topic" in `mod.rs`). The
//! encodings are `format.rs`'s.

use std::fs;
use std::path::Path;

use super::atomic_file::replace;
use super::format::{
    Appended, Reader, TOPICS_VERSION, TopicMeta, decode_topic, decode_topics, encode_topics, frame_of, read_frame,
};
use super::journal::{COMPACT_MIN_ENTRIES, Change, JOURNAL_FILE, Journal};
use crate::error::{Error, Result};

/// Name of the topic list.
pub(super) const TOPICS_FILE: &str = "topics.list";
/// Name of the file that keeps the next directory number across snapshots
/// (see [`TopicList::next_dir`]).
pub(super) const NEXT_DIR_FILE: &str = "topics.next";
/// Its frame's format: the number, eight bytes little-endian.
const NEXT_DIR_VERSION: u32 = 1;
/// Folder of the topic directories.
pub(super) const TOPICS_DIR: &str = "topics";
/// Ends the name of a deleted topic's directory while it is being removed.
const TOMBSTONE_SUFFIX: &str = ".deleted";

/// The topic list, behind `Store::topics`.
#[derive(Debug)]
pub(super) struct TopicList {
    pub(super) list: Vec<TopicMeta>,
    /// The directory number the next topic gets. Numbers only grow: a
    /// number names one topic for good, as the commits stored with it
    /// ("Commits and directory numbers" in `membership.rs`) and a process
    /// that has not yet seen a delete (its files under `topics/<n>`)
    /// require. The snapshot lists only the topics, so a deleted topic
    /// with the highest number would be forgotten by it: each snapshot is
    /// preceded by [`NEXT_DIR_FILE`], and a reader takes the larger of the
    /// two.
    pub(super) next_dir: u64,
    /// The generation of the snapshot in `topics.list`.
    pub(super) generation: u64,
    /// The journal extending it; `None` if there is none to append to (the
    /// next change compacts).
    pub(super) journal: Option<Journal>,
    /// How many topics the snapshot holds.
    pub(super) snapshot_len: usize,
    /// Compact once the journal holds this many entries and more than the
    /// snapshot has topics (`COMPACT_MIN_ENTRIES`; tests lower it).
    pub(super) compact_min: usize,
    /// Bytes written to list changes since opening (snapshots and entries).
    #[cfg(test)]
    pub(super) bytes_listed: u64,
}

impl TopicList {
    /// Applies a change read back from the journal or just made.
    fn apply(&mut self, change: Change, path: &Path) -> Result<()> {
        apply_change(&mut self.list, &mut self.next_dir, change, path)
    }

    /// Lists `change` durably, then applies it to the list: appended to the
    /// journal, or, when the journal is due for compaction (or there is
    /// none), in a new snapshot that includes it (see `journal.rs`). On
    /// failure nothing is listed and the list is unchanged.
    pub(super) fn list_change(&mut self, root: &Path, change: Change) -> Result<()> {
        let topics = self;
        let path = root.join(JOURNAL_FILE);
        let due = topics.journal.as_ref().is_none_or(|j| {
            j.generation() != topics.generation
                || (j.entries() >= topics.compact_min && j.entries() > topics.snapshot_len)
        });
        if !due {
            let journal = topics.journal.as_mut().expect("checked above");
            #[cfg(test)]
            let before = journal.len();
            match journal.append(&change) {
                Ok(()) => {
                    #[cfg(test)]
                    {
                        topics.bytes_listed += journal.len() - before;
                    }
                    return topics.apply(change, &path);
                }
                Err((e, cut)) => {
                    if !cut {
                        // It may end in a partial entry: never append after it.
                        topics.journal = None;
                    }
                    return Err(e);
                }
            }
        }
        let (mut list, mut next_dir) = (topics.list.clone(), topics.next_dir);
        apply_change(&mut list, &mut next_dir, change, &path)?;
        let generation = topics.generation + 1;
        let snapshot = frame_of(TOPICS_VERSION, &encode_topics(generation, &list));
        // Before the snapshot, which may no longer list the topic that had
        // the highest number: a crash between the two leaves the number
        // kept higher than the list needs, never lower.
        replace(root, NEXT_DIR_FILE, &frame_of(NEXT_DIR_VERSION, &next_dir.to_le_bytes()), true)?;
        // The commit point: the new snapshot, replaced and synced.
        replace(root, TOPICS_FILE, &snapshot, true)?;
        #[cfg(test)]
        {
            topics.bytes_listed += snapshot.len() as u64;
        }
        topics.snapshot_len = list.len();
        topics.list = list;
        topics.next_dir = next_dir;
        topics.generation = generation;
        // A journal that cannot be started leaves the old one, of an older
        // generation, which opening ignores; the next change compacts again.
        topics.journal = match Journal::start(root, topics.generation) {
            Ok(j) => Some(j),
            Err(e) => {
                log::warn!("rill: could not start a new topic journal ({e}); the next topic change rewrites the list");
                None
            }
        };
        Ok(())
    }
}

/// Applies `change` to a topic list and its next directory number.
pub(super) fn apply_change(list: &mut Vec<TopicMeta>, next_dir: &mut u64, change: Change, path: &Path) -> Result<()> {
    match change {
        Change::Add(meta) => {
            let mut r = Reader::new(path, &meta);
            let t = decode_topic(&mut r, Appended::IfAny)?;
            r.end()?;
            *next_dir = (*next_dir).max(t.dir + 1);
            list.push(t);
        }
        Change::Remove(name) => list.retain(|t| t.name != name),
    }
    Ok(())
}

/// The name a deleted topic's directory `topics/<dir>` is renamed to
/// before it is removed (see "Deleting a topic" in `mod.rs`).
pub(super) fn tombstone_name(dir: u64) -> String {
    format!("{dir}{TOMBSTONE_SUFFIX}")
}

/// The topic list as the directory holds it: the snapshot in `topics.list`
/// and the journal's changes since.
pub(super) fn read_topic_list(root: &Path) -> Result<TopicList> {
    let list_path = root.join(TOPICS_FILE);
    let (generation, topics) = match read_frame(&list_path, TOPICS_VERSION)? {
        Some((version, body)) => decode_topics(&list_path, version, &body)?,
        None => (0, Vec::new()),
    };
    let found = Journal::open(root, generation)?;
    let mut list = TopicList {
        next_dir: topics.iter().map(|t| t.dir + 1).max().unwrap_or(0),
        snapshot_len: topics.len(),
        list: topics,
        generation,
        journal: found.journal,
        compact_min: COMPACT_MIN_ENTRIES,
        #[cfg(test)]
        bytes_listed: 0,
    };
    let journal_path = root.join(JOURNAL_FILE);
    for change in found.changes {
        list.apply(change, &journal_path)?;
    }
    // Absent in a directory that never compacted its list (or of an older
    // rill, whose snapshots kept no number).
    let next_path = root.join(NEXT_DIR_FILE);
    if let Some((_, body)) = read_frame(&next_path, NEXT_DIR_VERSION)? {
        let kept = body.as_slice().try_into().map(u64::from_le_bytes).map_err(|_| Error::Corrupt {
            file: next_path.clone(),
            offset: 0,
            reason: format!("a next directory number of {} bytes, not 8", body.len()),
        })?;
        list.next_dir = list.next_dir.max(kept);
    }
    Ok(list)
}

/// Removes, under `topics/` (at open, before any topic is opened), what
/// deletions left: every tombstone, and every numbered directory below
/// `next_dir` that no listed topic has (unlisted, its removal cut short).
/// A numbered directory at or above `next_dir` is one a creation left
/// before listing it; the next creation clears it. Failures are logged and
/// left for the next open: nothing reads these directories.
pub(super) fn sweep_deleted(topics_dir: &Path, listed: &[TopicMeta], next_dir: u64) {
    let Ok(entries) = fs::read_dir(topics_dir) else { return };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let leftover = match name.strip_suffix(TOMBSTONE_SUFFIX) {
            Some(n) => n.parse::<u64>().is_ok(),
            None => name.parse::<u64>().is_ok_and(|n| n < next_dir && !listed.iter().any(|t| t.dir == n)),
        };
        if !leftover {
            continue;
        }
        let path = entry.path();
        match fs::remove_dir_all(&path) {
            Ok(()) => log::info!("rill: removed {} left by a topic deletion", path.display()),
            Err(e) => log::warn!("rill: could not remove {} left by a topic deletion: {e}", path.display()),
        }
    }
}
