//! Text handed back to C: copied into a caller's buffer, or lent to a
//! callback as a NUL-terminated string.

use std::ffi::{CString, c_char};

/// Copies `s` into `buf` (truncated to `buf_len - 1` bytes, NUL-terminated)
/// and returns its full length; NULL or 0-length `buf` only measures.
pub(crate) fn copy_str(s: &str, buf: *mut c_char, buf_len: usize) -> usize {
    let bytes = s.as_bytes();
    if !buf.is_null() && buf_len > 0 {
        let n = bytes.len().min(buf_len - 1);
        // SAFETY: the exported caller promises `buf` is writable for
        // `buf_len` bytes; we write `n + 1 <= buf_len`, from another allocation.
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr().cast::<c_char>(), buf, n);
            *buf.add(n) = 0;
        }
    }
    bytes.len()
}

/// `s` as a C string for a callback to borrow. Names never hold a NUL (they
/// are validated); free text (an error reason a handler gave) might, and
/// each NUL becomes U+FFFD rather than cutting the text short.
pub(crate) fn c_string(s: &str) -> CString {
    CString::new(s.replace('\0', "\u{fffd}")).expect("no NUL is left")
}
