//! Which subscription's user code the current thread is running.
//!
//! A handler (or an `on_lagged` callback) may call back into the broker.
//! Some of those calls would wait for the very handler call they are made
//! from: closing its own subscription, `wait_idle` on it, or a publish that
//! waits for room under a `Block` subscriber that is itself. The drainer
//! marks the thread for the length of each call of user code (for a batch
//! of handler calls, from before the first to after the last: nothing the
//! drainer does between them looks at the mark or waits), and those
//! calls look at the mark: `close` then does not wait, `wait_idle` and such
//! a publish fail at once instead of waiting for ever.
//!
//! The mark is a thread-local, not state of the subscription: what matters
//! is whether *this thread* is inside the call, and only the drainer that
//! runs it can be. This file names nothing above it, so a partition's
//! publish can read the mark without depending on subscriptions.

use std::cell::Cell;

use crate::sync::thread;

// The mark is set and restored around every batch of handler calls (and
// around each other call of user code), so it is a
// `const` thread-local where it can be: a plain TLS access, with no lazy
// initialisation check per message.
#[cfg(not(loom))]
thread::thread_local! {
    /// The subscription whose handler this thread is running (0: none).
    static IN_HANDLER: Cell<u64> = const { Cell::new(0) };
}
#[cfg(loom)]
thread::thread_local! {
    /// As above; loom's `thread_local!` does not accept `const { .. }`.
    #[allow(clippy::missing_const_for_thread_local)]
    static IN_HANDLER: Cell<u64> = Cell::new(0);
}

/// Marks this thread as running subscription `id`'s user code (a handler or
/// callback) until dropped, when the previous mark comes back (a handler may
/// run inside another's, e.g. through a nested broker call).
#[derive(Debug)]
pub(crate) struct InHandler {
    previous: u64,
}

impl InHandler {
    pub(crate) fn enter(id: u64) -> InHandler {
        InHandler { previous: IN_HANDLER.with(|h| h.replace(id)) }
    }

    /// The subscription whose user code this thread runs (0: none).
    pub(crate) fn current() -> u64 {
        IN_HANDLER.with(Cell::get)
    }
}

impl Drop for InHandler {
    fn drop(&mut self) {
        IN_HANDLER.with(|h| h.set(self.previous));
    }
}
