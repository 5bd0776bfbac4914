//! One page of a file in the data directory, mapped `MAP_SHARED` by every
//! process that opens it, so that what each maps is the same memory, and
//! used only through atomics: the doorbell's files (`doorbell.rs`: the
//! directory's bell, a partition's state) and a partition's `Block`
//! subscribers (`partition/blockers.rs`). Each file starts with a magic
//! word and a layout number, written by the file's maker and checked by
//! every later opener, so two rills that lay the page out differently never
//! share one. Loom has no mapping: the users keep their own memory under
//! it, so this module is not built there.

use std::fs::OpenOptions;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::ptr::NonNull;

use crate::error::{Error, Result};
use crate::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Size of a mapped file: one page.
pub(crate) const PAGE: usize = 4096;
/// Byte offset of the magic word.
const MAGIC_AT: usize = 0;
/// Byte offset of the layout number (the user's words start past it).
const LAYOUT_AT: usize = 8;

/// A mapped page; see the module docs.
pub(crate) struct MappedPage {
    ptr: NonNull<u8>,
}

// SAFETY: the page is only used through atomics, which any thread may use;
// the mapping is owned and unmapped once.
unsafe impl Send for MappedPage {}
// SAFETY: as above.
unsafe impl Sync for MappedPage {}

impl MappedPage {
    /// Maps `path`, a `what` (for errors). `init` (its maker: no other
    /// process has it open) makes it afresh, every word 0 but the header;
    /// otherwise it must exist, a page long, with `magic` and `layout`.
    pub(crate) fn open(path: &Path, init: bool, magic: u64, layout: u32, what: &str) -> Result<MappedPage> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(init)
            .truncate(false)
            .open(path)
            .map_err(|e| Error::io(path, &e))?;
        if init {
            file.set_len(0).and_then(|()| file.set_len(PAGE as u64)).map_err(|e| Error::io(path, &e))?;
        } else {
            let len = file.metadata().map_err(|e| Error::io(path, &e))?.len();
            if len < PAGE as u64 {
                return Err(Error::Corrupt { file: path.to_owned(), offset: len, reason: format!("a short {what}") });
            }
        }
        // SAFETY: a fresh shared mapping of one page of a file opened
        // read-write and at least that long; the kernel picks the address.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(Error::io(path, &std::io::Error::last_os_error()));
        }
        let page = MappedPage { ptr: NonNull::new(ptr.cast()).expect("mmap returned a null mapping") };
        if init {
            // Relaxed: nobody else has the file yet; the processes that map
            // it later do so after system calls (its name, its directory's
            // lock) that order these stores before their loads.
            page.u64_at(MAGIC_AT).store(magic, Ordering::Relaxed);
            page.u32_at(LAYOUT_AT).store(layout, Ordering::Relaxed);
        } else {
            // Relaxed: written once by the file's maker, as above.
            let (found, found_layout) =
                (page.u64_at(MAGIC_AT).load(Ordering::Relaxed), page.u32_at(LAYOUT_AT).load(Ordering::Relaxed));
            if found != magic || found_layout != layout {
                return Err(Error::Corrupt {
                    file: path.to_owned(),
                    offset: 0,
                    reason: format!(
                        "a {what} of another layout (magic {found:#x}, layout {found_layout}; this rill reads \
                         layout {layout}): every process sharing a data directory must run the same rill"
                    ),
                });
            }
        }
        Ok(page)
    }

    /// The 32-bit word at byte `at`.
    #[inline]
    pub(crate) fn u32_at(&self, at: usize) -> &AtomicU32 {
        assert!(at.is_multiple_of(4) && at + 4 <= PAGE, "a word inside the page");
        // SAFETY: `at` is a 4-aligned offset inside the page (checked), which
        // stays mapped while `self` lives; the memory is only used as atomics.
        unsafe { &*self.ptr.as_ptr().add(at).cast::<AtomicU32>() }
    }

    /// The 64-bit word at byte `at`.
    #[inline]
    pub(crate) fn u64_at(&self, at: usize) -> &AtomicU64 {
        assert!(at.is_multiple_of(8) && at + 8 <= PAGE, "a word inside the page");
        // SAFETY: as in `u32_at`, 8-aligned.
        unsafe { &*self.ptr.as_ptr().add(at).cast::<AtomicU64>() }
    }
}

impl Drop for MappedPage {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `open`, unmapped once; nothing borrows
        // it past `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), PAGE) };
    }
}
