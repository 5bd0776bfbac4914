//! The eventfds of `rill_consumer_notify_fd` and `rill_subscription_notify_fd`:
//! what the core's bell hook writes ("The bell" in the Rust `waiters.rs`)
//! and what the C calls that look (`rill_consumer_poll`,
//! `rill_subscription_wait_idle`) empty before they look.

use std::ffi::c_void;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

use crate::error::{FfiError, rill_status};

/// The value a ring adds to the eventfd's counter (any non-zero value makes
/// it readable; a read returns the sum and zeroes it).
const RING: u64 = 1;

/// A new non-blocking, close-on-exec eventfd, and the hook that rings it.
/// The C handle and the hook share the descriptor: it is closed once both
/// are gone. Closing a subscription drops its hook, but the C handle keeps
/// the fd's number until it is freed (to drain it, to give it again), so
/// the descriptor must stay open until then: closed earlier, its number
/// would go to the program's next `open` or `pipe`, and the handle would
/// read from that. `what` names the C function in the error text.
pub(crate) fn eventfd(what: &str) -> Result<(Arc<OwnedFd>, impl Fn() + Send + Sync + 'static), FfiError> {
    // SAFETY: eventfd takes no pointers; a negative result is an error.
    let made = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if made < 0 {
        let e = std::io::Error::last_os_error();
        return Err(FfiError::new(rill_status::RILL_ERR_IO, format!("{what}: eventfd failed: {e}")));
    }
    // SAFETY: a new descriptor, owned by nothing else.
    let owned = Arc::new(unsafe { OwnedFd::from_raw_fd(made) });
    let held = Arc::clone(&owned);
    let ring = move || {
        let one = RING;
        // SAFETY: the hook holds a reference to the descriptor, so it is
        // open; the write reads 8 bytes from `one`. It cannot block
        // (EFD_NONBLOCK) and fails only if the counter would overflow, when
        // the fd is readable anyway.
        unsafe { libc::write(held.as_raw_fd(), (&raw const one).cast::<c_void>(), size_of::<u64>()) };
    };
    Ok((owned, ring))
}

/// Empties an eventfd made by [`eventfd`]: one read takes the whole counter.
pub(crate) fn drain(fd: &OwnedFd) {
    let mut counter = 0u64;
    // SAFETY: `fd` is borrowed, so open, and is an eventfd made by
    // [`eventfd`]; the read writes at most 8 bytes into `counter`. EAGAIN
    // (nothing to take) is the usual, harmless, result.
    unsafe { libc::read(fd.as_raw_fd(), (&raw mut counter).cast::<c_void>(), size_of::<u64>()) };
}
