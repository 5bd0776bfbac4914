//! `--recovery-mib N`: how long opening a durable partition of N MiB takes,
//! against reading the same files from the page cache (issue 11's target:
//! recovery within 2x of that read).
//!
//! The measurement fills one partition (a `rill::log::Log` on a fresh data
//! directory under `RILL_BENCH_DATA_DIR`, else the temp directory;
//! `Fsync::Never`, default segment size, no retention) with records of the
//! given payload size, closes it, reads every segment file once so the page
//! cache holds them, and then alternates the two timed operations: a read of
//! every segment file into a 1 MiB buffer, and a `Log::open` (recovery
//! scans and verifies every record of every file; the opened log is closed
//! again, untimed). The data directory is deleted at the end, also when a
//! step fails.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Instant;

use rill::log::{DurableLog, Fsync, Log, LogConfig};
use rill::{Error, Record};
use serde::Serialize;

use crate::stats::median;

/// What `--recovery-mib` measured.
#[derive(Debug, Clone, Serialize)]
pub struct Recovery {
    /// The partition's directory (deleted after the measurement).
    pub dir: String,
    /// Bytes of its segment files.
    pub file_bytes: u64,
    /// Records in the partition.
    pub records: u64,
    /// Payload bytes per record.
    pub payload: usize,
    /// Each timed read of every segment file from the page cache, seconds.
    pub read_s: Vec<f64>,
    /// Each timed recovery (`Log::open`), seconds, alternating with the reads.
    pub recover_s: Vec<f64>,
}

impl Recovery {
    /// Recovery time over the read time of the same pair, for each pair.
    pub fn ratios(&self) -> Vec<f64> {
        self.recover_s.iter().zip(&self.read_s).map(|(r, c)| r / c).collect()
    }

    /// The report's lines.
    pub fn describe(&self) -> String {
        let ratios = self.ratios();
        let worst = ratios.iter().copied().fold(f64::NAN, f64::max);
        format!(
            "recovery of one partition: {} records of {} B payload, {:.0} MiB of segment files in {}\n\
             \x20  read from the page cache: median {:.0} ms ({:.2} GB/s); recovery (Log::open): median {:.0} ms\n\
             \x20  recovery / page-cache read, {} interleaved pairs: median {:.2}x, worst {:.2}x",
            self.records,
            self.payload,
            self.file_bytes as f64 / f64::from(1 << 20),
            self.dir,
            median(&self.read_s) * 1e3,
            self.file_bytes as f64 / 1e9 / median(&self.read_s),
            median(&self.recover_s) * 1e3,
            ratios.len(),
            median(&ratios),
            worst,
        )
    }
}

/// Removes the directory when dropped.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Fills a partition of `mib` MiB of records with `payload`-byte payloads
/// under `root`, and times `pairs` interleaved page-cache reads and recoveries.
pub fn measure(root: &Path, mib: u64, payload: usize, pairs: usize) -> rill::Result<Recovery> {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let scratch = Scratch(root.join(format!("rill-bench-recovery-{}-{nanos}", std::process::id())));
    let config = LogConfig { retention_bytes: None, ..LogConfig::default() };
    let durable = DurableLog { fsync: Fsync::Never, ..DurableLog::new(&scratch.0) };
    let target = mib << 20;
    let records = {
        let (log, _) = Log::open(&config, 0, &durable)?;
        let body: Vec<u8> = (0..payload).map(|i| i as u8).collect();
        let batch: Vec<Record<'_>> = (0..64).map(|_| Record::new(&body)).collect();
        let mut offsets = Vec::new();
        while log.stats().used_bytes < target {
            log.append_batch(&batch, &mut offsets)?;
        }
        log.end_offset()
    };
    let files = segment_files(&scratch.0)?;
    let file_bytes = files.iter().map(|(_, len)| len).sum();
    let mut buf = vec![0u8; 1 << 20];
    // Once untimed, so the page cache holds every file.
    read_all(&files, &mut buf)?;
    let (mut read_s, mut recover_s) = (Vec::new(), Vec::new());
    for i in 0..pairs.max(1) {
        let mut timed_read = || -> rill::Result<()> {
            let t = Instant::now();
            read_all(&files, &mut buf)?;
            read_s.push(t.elapsed().as_secs_f64());
            Ok(())
        };
        let mut timed_open = || -> rill::Result<()> {
            let t = Instant::now();
            let (log, report) = Log::open(&config, 0, &durable)?;
            recover_s.push(t.elapsed().as_secs_f64());
            if report.records != records || report.truncated_records != 0 {
                return Err(Error::InvalidArgument(format!(
                    "recovery kept {} of {records} records ({report:?})",
                    report.records
                )));
            }
            drop(log);
            Ok(())
        };
        // Alternate the order, so neither always runs on a warmer machine.
        if i % 2 == 0 {
            timed_read()?;
            timed_open()?;
        } else {
            timed_open()?;
            timed_read()?;
        }
    }
    Ok(Recovery { dir: scratch.0.display().to_string(), file_bytes, records, payload, read_s, recover_s })
}

/// The segment files in `dir` and their sizes.
fn segment_files(dir: &Path) -> rill::Result<Vec<(PathBuf, u64)>> {
    let io = |e: std::io::Error| Error::Io { path: dir.to_path_buf(), kind: e.kind(), message: e.to_string() };
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io)? {
        let entry = entry.map_err(io)?;
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "seg") {
            out.push((path, entry.metadata().map_err(io)?.len()));
        }
    }
    out.sort();
    Ok(out)
}

/// Reads every file through `buf`, returning the bytes read.
fn read_all(files: &[(PathBuf, u64)], buf: &mut [u8]) -> rill::Result<u64> {
    let mut total = 0u64;
    for (path, _) in files {
        let io = |e: std::io::Error| Error::Io { path: path.clone(), kind: e.kind(), message: e.to_string() };
        let mut f = std::fs::File::open(path).map_err(io)?;
        loop {
            let n = f.read(buf).map_err(io)?;
            if n == 0 {
                break;
            }
            total += n as u64;
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_partition_is_measured_and_its_directory_removed() {
        let root = std::env::temp_dir().join(format!("rill-bench-recovery-test-{}", std::process::id()));
        std::fs::create_dir_all(&root).unwrap();
        let r = measure(&root, 2, 100, 2).unwrap();
        assert!(r.records > 0 && r.file_bytes >= 2 << 20, "{r:?}");
        assert_eq!((r.read_s.len(), r.recover_s.len()), (2, 2));
        assert!(r.describe().contains("interleaved pairs"));
        assert_eq!(std::fs::read_dir(&root).unwrap().count(), 0, "the data directory is deleted");
        std::fs::remove_dir_all(&root).unwrap();
    }
}
