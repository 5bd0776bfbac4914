//! Checked conversions of what C hands us: pointers, strings, byte ranges.

use std::ffi::{c_char, c_void};

use crate::error::FfiError;

/// A required NUL-terminated UTF-8 string.
///
/// # Safety
///
/// `p` is NULL or points to a NUL-terminated string that stays valid and
/// unchanged for `'a`.
pub(crate) unsafe fn cstr<'a>(p: *const c_char, what: &str) -> Result<&'a str, FfiError> {
    if p.is_null() {
        return Err(FfiError::null(what));
    }
    // Names are short and usually ASCII: one pass finds the NUL and sees
    // whether every byte is ASCII (cheaper for a topic name than a `strlen`
    // call and a separate check; `bash ffi/bench/run.sh`, mode
    // `publish/nosub`, measures the by-name publish that pays for it);
    // anything else goes through the full UTF-8 check.
    let mut len = 0;
    let mut high = 0u8;
    loop {
        // SAFETY: the caller promises a NUL-terminated string: every byte up
        // to and including the NUL is readable, and we stop at the NUL.
        let b = unsafe { *p.add(len) } as u8;
        if b == 0 {
            break;
        }
        high |= b;
        len += 1;
    }
    // SAFETY: the `len` bytes before the NUL, readable as above, unchanged for 'a.
    let c = unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) };
    if high < 0x80 {
        // SAFETY: every byte is ASCII, which is valid UTF-8.
        return Ok(unsafe { std::str::from_utf8_unchecked(c) });
    }
    std::str::from_utf8(c)
        .map_err(|e| FfiError::invalid(format!("{what} is not valid UTF-8 (at byte {})", e.valid_up_to())))
}

/// An optional string: NULL is `None`.
///
/// # Safety
///
/// As for [`cstr`].
pub(crate) unsafe fn opt_cstr<'a>(p: *const c_char, what: &str) -> Result<Option<&'a str>, FfiError> {
    if p.is_null() {
        return Ok(None);
    }
    // SAFETY: forwarded from the caller.
    unsafe { cstr(p, what) }.map(Some)
}

/// A byte range. NULL is allowed only with length 0 (an empty range).
/// `what` names it in errors (only called on error).
///
/// # Safety
///
/// `p` is NULL or valid for reads of `len` bytes for `'a`.
pub(crate) unsafe fn bytes<'a>(
    p: *const c_void,
    len: usize,
    what: impl FnOnce() -> String,
) -> Result<&'a [u8], FfiError> {
    if p.is_null() {
        if len == 0 {
            return Ok(&[]);
        }
        return Err(FfiError::null(&what()));
    }
    if len > isize::MAX as usize {
        return Err(FfiError::invalid(format!("{} length {len} is too large", what())));
    }
    // SAFETY: non-NULL, the length fits a slice, and the caller promises the
    // range is readable for 'a.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

/// An optional byte range (a record's key): NULL with length 0 is none;
/// NULL with a length is an error, as it is for a required range, since a
/// caller that gives a length meant a key. `what` names it in errors.
///
/// # Safety
///
/// As [`bytes`].
pub(crate) unsafe fn optional_bytes<'a>(
    p: *const c_void,
    len: usize,
    what: impl FnOnce() -> String,
) -> Result<Option<&'a [u8]>, FfiError> {
    if p.is_null() {
        if len == 0 {
            return Ok(None);
        }
        let what = what();
        return Err(FfiError::invalid(format!("{what} is NULL with length {len} (an unkeyed record has NULL and 0)")));
    }
    // SAFETY: forwarded from the caller.
    unsafe { bytes(p, len, what) }.map(Some)
}

/// A required reference.
///
/// # Safety
///
/// `p` is NULL or points to a valid `T` for `'a`.
pub(crate) unsafe fn reference<'a, T>(p: *const T, what: &str) -> Result<&'a T, FfiError> {
    // SAFETY: the caller promises `p` is NULL or valid.
    unsafe { p.as_ref() }.ok_or_else(|| FfiError::null(what))
}

/// A required mutable reference.
///
/// # Safety
///
/// `p` is NULL or points to a valid `T`, not aliased, for `'a`.
pub(crate) unsafe fn reference_mut<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T, FfiError> {
    // SAFETY: the caller promises `p` is NULL or valid and unaliased.
    unsafe { p.as_mut() }.ok_or_else(|| FfiError::null(what))
}

/// Checks that an out-pointer is non-NULL before any work is done.
pub(crate) fn out_ptr<T>(p: *mut T, what: &str) -> Result<(), FfiError> {
    if p.is_null() { Err(FfiError::null(what)) } else { Ok(()) }
}

/// Writes `value` through an out-pointer already checked by [`out_ptr`].
///
/// # Safety
///
/// `p` is non-NULL, aligned and valid for a write of `T`.
pub(crate) unsafe fn write_out<T>(p: *mut T, value: T) {
    // SAFETY: forwarded from the caller.
    unsafe { p.write(value) }
}

/// A timeout in milliseconds from C: negative means "no deadline".
pub(crate) fn timeout(ms: i64) -> Option<std::time::Duration> {
    u64::try_from(ms).ok().map(std::time::Duration::from_millis)
}

/// The process a handle was made in, to compare with [`inherited`].
pub(crate) fn this_process() -> u32 {
    std::process::id()
}

/// True in a child of `fork` for a handle made in process `pid` (its
/// parent, or further up): the handle is an inherited copy, whose threads do
/// not exist here and whose locks a thread that does not exist may hold. Its
/// `_free` leaks it by design instead of closing it (see `rill_broker`).
pub(crate) fn inherited(pid: u32) -> bool {
    std::process::id() != pid
}

/// Checks a required callback before any work is done.
pub(crate) fn callback<F>(f: Option<F>, what: &str) -> Result<F, FfiError> {
    f.ok_or_else(|| FfiError::null(what))
}

/// Writes the first `size` bytes of `value` to `out`, zero past `value`'s
/// own size (a program whose header knows more fields than this library).
///
/// # Safety
///
/// `out` is non-NULL and writable for `size` bytes.
pub(crate) unsafe fn write_sized<T: Copy>(out: *mut T, value: &T, size: usize) {
    let own = std::mem::size_of::<T>();
    let out = out.cast::<u8>();
    // SAFETY: `value` is readable for `own` bytes; `out` writable for `size`
    // (the caller's promise); the two do not overlap (one is ours).
    unsafe {
        std::ptr::copy_nonoverlapping((value as *const T).cast::<u8>(), out, own.min(size));
        if size > own {
            std::ptr::write_bytes(out.add(own), 0, size - own);
        }
    }
}
