//! An asymmetric fence: free on the publish path, paid by whoever adds a
//! listener to a partition.
//!
//! # The race it closes
//!
//! A publisher commits a record (a `Release` store of its slot) and then
//! loads the partition's listener list to signal whoever listens. Someone
//! who starts listening (a subscription attaching a partition, a consumer
//! taking one) swaps a list with its entry in, and then reads the log for
//! what was published before. That is the store-buffering shape: each side
//! stores, then loads what the other stored. Without a `SeqCst` fence on
//! *both* sides, the memory model (and x86's store buffer in practice)
//! lets the publisher load the old list, signal no one, and the listener
//! read the log without the record: the record then waits for the
//! partition's next publish, which may never come.
//!
//! A `fence(SeqCst)` on every publish, even to a partition nobody listens
//! to, costs a full barrier (`mfence` or a locked instruction) on the
//! hottest path rill has. Adding a listener is rare. So the fence is made
//! asymmetric, as Linux's `membarrier(2)` allows:
//!
//! * the publisher, between its commit and its load of the list, issues
//!   [`light`]: a compiler fence only (the processor may still reorder);
//! * the listener, between its swap of the list and its first read of the
//!   log, issues [`heavy`]: `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`,
//!   which makes every other running thread of this process execute a full
//!   memory barrier before the call returns (a thread not running passed
//!   one when it was switched out).
//!
//! Why that is enough: take a publisher P between its commit and its load.
//! Where P is when the listener's barrier reaches it decides who sees whom:
//! if P has not loaded the list yet, its commit is drained from the store
//! buffer by that barrier, before the listener reads the log, and the
//! listener sees the record; if P loaded the list already, that load came
//! after the commit in program order (the compiler fence keeps it there),
//! and the barrier drains the commit all the same. P's load can never come
//! *before* the listener's swap while its commit stays invisible to the
//! listener's read, which is the one outcome that strands the record. This
//! is the pairing of a light and a heavy barrier that user-space RCU and
//! hazard-pointer libraries use for the same reason.
//!
//! # When the system call is not there
//!
//! `membarrier` needs Linux 4.14 and a registration per process, made the
//! first time a broker starts ([`register`]). Until it succeeds, [`light`]
//! is a real `fence(SeqCst)`, so a kernel without it (or a sandbox that
//! filters it) costs speed, never correctness. The mode is one static flag,
//! read `Relaxed` on every publish: a stale read can only see "not
//! registered" (it starts false and is set once, and stays set), which
//! takes the strong path.
//!
//! A child of `fork` inherits the flag but not the registration (the kernel
//! gives a new process a fresh memory map). Its first [`heavy`] then fails
//! with `EPERM`, registers, and tries again; if that fails too, it falls
//! back to `MEMBARRIER_CMD_GLOBAL`, which waits for every CPU to pass a
//! barrier (slower, same guarantee).
//!
//! # Under loom
//!
//! Loom has no `membarrier`: both halves are `fence(SeqCst)` there, which
//! gives the same guarantee for this pattern (the fences' total order puts
//! one side's load after the other's store). The publisher's is named `F0`
//! for `.ci/fence-check`, and the model
//! `a_record_published_while_a_listener_is_added_is_delivered` in
//! `loom-tests/tests/attach.rs` fails with it weakened (the record is never
//! delivered, which loom reports as a deadlock).

/// Issued by a publisher between committing a record and loading the
/// partition's listener list. See the module docs.
#[inline(always)]
pub(crate) fn light() {
    #[cfg(not(loom))]
    {
        use crate::sync::atomic::{Ordering, compiler_fence, fence};
        // Relaxed: see "When the system call is not there"; a stale `false`
        // only takes the strong path.
        if imp::REGISTERED.load(Ordering::Relaxed) {
            // The listener's `heavy` supplies the processor's half; this
            // keeps the compiler from moving the list's load above the commit.
            compiler_fence(Ordering::SeqCst);
        } else {
            // SeqCst fence: the symmetric form, paired with `heavy`'s fence.
            fence(Ordering::SeqCst);
        }
    }
    #[cfg(loom)]
    crate::sync::fence_or_weakened!("F0", crate::sync::atomic::Ordering::SeqCst);
}

/// Issued by whoever just added a listener to a partition, before it reads
/// the partition's log. See the module docs.
pub(crate) fn heavy() {
    #[cfg(not(loom))]
    imp::heavy();
    // SeqCst fence: loom's stand-in for membarrier (see "Under loom").
    #[cfg(loom)]
    crate::sync::atomic::fence(crate::sync::atomic::Ordering::SeqCst);
}

/// Registers this process for the expedited barrier, once; called when a
/// broker starts. Until it succeeds, [`light`] is a full fence.
pub(crate) fn register() {
    #[cfg(not(loom))]
    imp::register();
}

#[cfg(not(loom))]
mod imp {
    use crate::sync::atomic::{AtomicBool, Ordering, fence};
    use std::sync::Once;

    /// `MEMBARRIER_CMD_GLOBAL` from `<linux/membarrier.h>`: every CPU passes
    /// a barrier before the call returns (no registration needed).
    const CMD_GLOBAL: libc::c_int = 1 << 0;
    /// `MEMBARRIER_CMD_PRIVATE_EXPEDITED`: every running thread of this
    /// process executes a barrier before the call returns.
    const CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
    /// `MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED`: required once per
    /// process before the command above.
    const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

    /// True once this process (or the one it was forked from) registered.
    pub(super) static REGISTERED: AtomicBool = AtomicBool::new(false);
    static ONCE: Once = Once::new();

    fn membarrier(cmd: libc::c_int) -> bool {
        // SAFETY: membarrier takes two integers and touches no memory of ours.
        unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0 as libc::c_uint, 0 as libc::c_int) == 0 }
    }

    pub(super) fn register() {
        ONCE.call_once(|| {
            if membarrier(CMD_REGISTER_PRIVATE_EXPEDITED) {
                // Relaxed: a publisher that reads a stale `false` fences fully;
                // one that reads `true` pairs with `heavy`, which is correct
                // from the registration on.
                REGISTERED.store(true, Ordering::Relaxed);
            }
        });
    }

    pub(super) fn heavy() {
        // SeqCst fence: orders this thread's own list swap before its reads,
        // and is the whole barrier when publishers fence fully.
        fence(Ordering::SeqCst);
        // Relaxed: the flag only chooses how much more is needed.
        if !REGISTERED.load(Ordering::Relaxed) {
            return;
        }
        if membarrier(CMD_PRIVATE_EXPEDITED) {
            return;
        }
        // A child of fork is not registered (see "When the system call is
        // not there"): register it, and try again.
        if membarrier(CMD_REGISTER_PRIVATE_EXPEDITED) && membarrier(CMD_PRIVATE_EXPEDITED) {
            return;
        }
        if !membarrier(CMD_GLOBAL) {
            // Registration worked in this process's ancestry, so membarrier
            // exists; a filter that allows one command and refuses the others
            // leaves no barrier to fall back on.
            log::error!(
                "membarrier failed after registration: a record published during this attach may wait for the next publish"
            );
        }
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn the_process_registers_and_the_heavy_barrier_runs() {
            super::register();
            assert!(super::REGISTERED.load(crate::sync::atomic::Ordering::Relaxed), "membarrier unavailable here");
            super::heavy();
        }
    }
}
