//! The one place rill takes its synchronisation primitives from.
//!
//! Under `--cfg loom` every atomic, cell, lock, thread and park below comes from
//! [loom], so the model tests in `loom-tests/` run the real protocols of this
//! crate under loom's scheduler. In a normal build they are the `std` types
//! (or zero-cost stand-ins with the same API). No other module may import
//! `std::sync::atomic`, `std::thread` or `std::cell::UnsafeCell` directly.
//!
//! crossbeam-epoch is re-exported as [`epoch`]: built with its `loom` feature
//! and `--cfg crossbeam_loom`, it uses loom's atomics itself.
//!
//! The rule is checked: `clippy.toml` disallows std's locks and cells in the
//! crate (this module excepted), and `tests/structure.rs` fails if a file
//! other than this one names `std::sync::atomic`, `std::thread` or
//! `std::cell::UnsafeCell`.

#![allow(clippy::disallowed_types, clippy::disallowed_methods)]

#[cfg(not(loom))]
#[allow(unused_imports)]
pub(crate) mod atomic {
    pub(crate) use std::sync::atomic::{
        AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering, compiler_fence, fence,
    };
}
#[cfg(loom)]
#[allow(unused_imports)]
pub(crate) mod atomic {
    pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering, fence};
}

#[cfg(loom)]
#[allow(unused_imports)]
pub(crate) use loom::sync::{Arc, MutexGuard};
#[cfg(not(loom))]
#[allow(unused_imports)]
pub(crate) use std::sync::{Arc, MutexGuard};

#[cfg(loom)]
use loom::sync as lock_impl;
#[cfg(not(loom))]
use std::sync as lock_impl;

/// A mutex that ignores poisoning: `lock` returns the guard.
///
/// Nothing rill guards with a mutex can be left half-updated by a panic: user
/// code (handlers, callbacks) runs inside `catch_unwind`, so a panic in it
/// never unwinds through a critical section (a push subscription's handler
/// runs with its `drain` lock held, and that lock's state is consistent
/// whenever a handler is called), and rill's own critical sections do not
/// panic. So a poisoned lock carries no information, and every caller would
/// only unwrap it.
#[derive(Debug, Default)]
pub(crate) struct Mutex<T: ?Sized>(lock_impl::Mutex<T>);

impl<T> Mutex<T> {
    pub(crate) fn new(value: T) -> Mutex<T> {
        Mutex(lock_impl::Mutex::new(value))
    }
}

impl<T: ?Sized> Mutex<T> {
    /// Locks, waiting as long as it takes.
    #[inline]
    pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Locks if nobody holds the lock now.
    #[inline]
    pub(crate) fn try_lock(&self) -> Option<MutexGuard<'_, T>> {
        match self.0.try_lock() {
            Ok(guard) => Some(guard),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }
}

/// A condition variable for [`Mutex`], ignoring poisoning likewise.
#[derive(Debug, Default)]
pub(crate) struct Condvar(lock_impl::Condvar);

impl Condvar {
    pub(crate) fn new() -> Condvar {
        Condvar(lock_impl::Condvar::new())
    }

    /// Releases `guard`, waits for a notification (or a spurious wakeup),
    /// and locks again.
    #[inline]
    pub(crate) fn wait<'a, T>(&self, guard: MutexGuard<'a, T>) -> MutexGuard<'a, T> {
        self.0.wait(guard).unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Like [`Condvar::wait`], giving up after `timeout`.
    #[inline]
    pub(crate) fn wait_timeout<'a, T>(&self, guard: MutexGuard<'a, T>, timeout: Duration) -> MutexGuard<'a, T> {
        self.0.wait_timeout(guard, timeout).unwrap_or_else(std::sync::PoisonError::into_inner).0
    }

    #[inline]
    pub(crate) fn notify_one(&self) {
        self.0.notify_one();
    }

    #[inline]
    pub(crate) fn notify_all(&self) {
        self.0.notify_all();
    }
}

/// `Arc<dyn Trait>` from a value, in the shim's `Arc`: loom's `Arc` cannot
/// be coerced to a trait object, so under loom the value goes through a std
/// `Arc` first (`loom::sync::Arc::from_std`). Use as `dyn_arc!(value => dyn Trait)`.
macro_rules! dyn_arc {
    ($value:expr => $ty:ty) => {{
        #[cfg(not(loom))]
        let arc: $crate::sync::Arc<$ty> = $crate::sync::Arc::new($value);
        #[cfg(loom)]
        let arc: $crate::sync::Arc<$ty> = {
            #[allow(clippy::disallowed_types)]
            let std_arc: std::sync::Arc<$ty> = std::sync::Arc::new($value);
            $crate::sync::Arc::from_std(std_arc)
        };
        arc
    }};
}
pub(crate) use dyn_arc;

/// A cell for a `static` whose contents are guarded by a lock outside Rust
/// (a `pthread` mutex that `fork` handlers take and release: the lock
/// files' list in `log/file/lock_file.rs`). It is std's `UnsafeCell` in
/// every build, loom's included: a `static` needs a `const` constructor,
/// which loom's cell lacks, and nothing in such a static is a protocol
/// loom models. Its user implements `Sync` and says why.
#[derive(Debug)]
pub(crate) struct StaticCell<T>(std::cell::UnsafeCell<T>);

impl<T> StaticCell<T> {
    pub(crate) const fn new(value: T) -> StaticCell<T> {
        StaticCell(std::cell::UnsafeCell::new(value))
    }

    /// A pointer to the contents; dereferencing it is the caller's to
    /// justify (under the lock that guards them).
    pub(crate) fn get(&self) -> *mut T {
        self.0.get()
    }
}

pub(crate) use crossbeam_epoch as epoch;

use std::time::Duration;

/// A shared immutable string (topic and subscription names). Always std's
/// `Arc`: it guards no protocol, and loom's `Arc` does not hold unsized values.
pub(crate) type Name = std::sync::Arc<str>;

/// Threads, parking and yielding.
#[allow(unused_imports)]
pub(crate) mod thread {
    #[cfg(loom)]
    pub(crate) use loom::thread::{Builder, JoinHandle, Thread, current, park, spawn, yield_now};
    #[cfg(loom)]
    pub(crate) use loom::thread_local;
    /// How many threads can run at once: a hint read once, the same under loom.
    pub(crate) use std::thread::available_parallelism;
    #[cfg(not(loom))]
    pub(crate) use std::thread::{Builder, JoinHandle, Thread, current, park, park_timeout, spawn, yield_now};
    #[cfg(not(loom))]
    pub(crate) use std::thread_local;
}

/// A process-wide count that guards nothing: a hint read to choose a policy
/// (e.g. how many dedicated drain threads are awake), never to publish or
/// order other memory. It is `std`'s atomic even under loom, since it lives in
/// a `static` (loom's atomics exist only inside a model), and no model has a
/// schedule that depends on it.
#[derive(Debug)]
pub(crate) struct HintCount(std::sync::atomic::AtomicUsize);

impl HintCount {
    pub(crate) const fn new() -> HintCount {
        HintCount(std::sync::atomic::AtomicUsize::new(0))
    }

    pub(crate) fn add(&self) {
        // Relaxed: a hint; nothing is ordered by it.
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }

    pub(crate) fn sub(&self) {
        // Relaxed: as in `add`.
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }

    /// (Not under loom: its one reader, the dedicated drainer's idle
    /// policy, is not built there.)
    #[cfg(not(loom))]
    pub(crate) fn get(&self) -> usize {
        // Relaxed: as in `add`; a stale count only picks the other policy once.
        self.0.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Starts a thread named `name`: the one way rill spawns threads. A failure
/// (the system is out of threads, or of memory for a stack: `EAGAIN`) is
/// [`Error::ResourceExhausted`](crate::error::Error::ResourceExhausted) with the
/// operating system's error text.
pub(crate) fn spawn_named<F, T>(name: String, f: F) -> crate::error::Result<thread::JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    #[cfg(all(test, not(loom)))]
    let result = spawn_fault::check().and_then(|()| thread::Builder::new().name(name.clone()).spawn(f));
    #[cfg(not(all(test, not(loom))))]
    let result = thread::Builder::new().name(name.clone()).spawn(f);
    result.map_err(|e| crate::error::Error::ResourceExhausted(format!("cannot start thread {name:?}: {e}")))
}

/// Test seam: makes a thread's spawns fail after a given number succeed, as
/// `EAGAIN` from the system would. Per calling thread, so tests running in
/// parallel do not see each other's faults.
#[cfg(all(test, not(loom)))]
pub(crate) mod spawn_fault {
    use std::cell::Cell;

    std::thread_local! {
        static SUCCEED_BEFORE_FAILING: Cell<Option<usize>> = const { Cell::new(None) };
    }

    /// From now on, this thread's spawns fail once `n` more have succeeded;
    /// `None` lifts the fault.
    pub(crate) fn fail_after(n: Option<usize>) {
        SUCCEED_BEFORE_FAILING.with(|c| c.set(n));
    }

    pub(super) fn check() -> std::io::Result<()> {
        SUCCEED_BEFORE_FAILING.with(|c| match c.get() {
            Some(0) => Err(std::io::Error::from(std::io::ErrorKind::WouldBlock)),
            Some(n) => {
                c.set(Some(n - 1));
                Ok(())
            }
            None => Ok(()),
        })
    }
}

/// A process-wide unique, non-zero id (for brokers and subscriptions).
///
/// A plain std atomic on purpose: it hands out numbers and synchronises
/// nothing, so loom has nothing to check in it (and loom atomics cannot be
/// statics).
pub(crate) fn unique_id() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    // Relaxed: only uniqueness matters, which the RMW guarantees.
    NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// A hint that the caller is spinning. Under loom it yields to the scheduler,
/// which loom needs to explore a spin loop at all.
#[inline]
pub(crate) fn spin_loop() {
    #[cfg(not(loom))]
    std::hint::spin_loop();
    #[cfg(loom)]
    loom::thread::yield_now();
}

/// Asks the CPU to bring the cache line holding `addr` here for writing
/// (`prefetchw`), so that a compare-and-swap on it soon after finds it
/// exclusive. A hint: it reads and writes nothing the program can observe
/// and never faults. Emitted only on x86-64 CPUs that report the
/// instruction (CPUID 0x8000_0001, ECX bit 8, checked once); elsewhere,
/// and under loom, it does nothing.
#[inline]
pub(crate) fn prefetch_write(addr: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    if has_prefetchw() {
        // SAFETY: PREFETCHW is supported (checked above); it is a hint that
        // never faults, whatever the address, and touches no register but
        // the one holding the address, no flag and no stack.
        unsafe { std::arch::asm!("prefetchw [{0}]", in(reg) addr, options(nostack, preserves_flags, readonly)) };
    }
    #[cfg(not(all(target_arch = "x86_64", not(loom))))]
    let _ = addr;
}

/// Whether the CPU has PREFETCHW (3DNowPrefetch / PRFCHW), read from
/// CPUID once and cached. Rust's `is_x86_feature_detected!` has no stable
/// name for it.
#[cfg(all(target_arch = "x86_64", not(loom)))]
fn has_prefetchw() -> bool {
    // 0: not looked yet; 1: no; 2: yes.
    static HAS: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
    // Relaxed: a cached fact about the CPU; racing threads store the same.
    match HAS.load(std::sync::atomic::Ordering::Relaxed) {
        0 => {
            // SAFETY: CPUID exists on every x86-64 CPU and only reads
            // identification registers; leaf 0x8000_0001 is asked for only
            // when leaf 0x8000_0000 reports it. `__cpuid` is an unsafe function
            // in Rust 1.88 (the declared minimum) and a safe one in later
            // releases, so the block is needed on 1.88 and unused on later ones.
            #[allow(unused_unsafe)]
            let has = unsafe {
                let max_leaf = std::arch::x86_64::__cpuid(0x8000_0000).eax;
                max_leaf >= 0x8000_0001 && std::arch::x86_64::__cpuid(0x8000_0001).ecx & (1 << 8) != 0
            };
            HAS.store(if has { 2 } else { 1 }, std::sync::atomic::Ordering::Relaxed);
            has
        }
        v => v == 2,
    }
}

/// An `UnsafeCell` whose accesses loom can check for data races.
///
/// In a normal build `with`/`with_mut` just hand out the raw pointer.
#[derive(Debug)]
#[cfg(not(loom))]
pub(crate) struct UnsafeCell<T: ?Sized>(std::cell::UnsafeCell<T>);

#[cfg(not(loom))]
impl<T> UnsafeCell<T> {
    #[inline]
    #[allow(dead_code)] // normal builds zero-initialise their cells in bulk
    pub(crate) const fn new(value: T) -> Self {
        Self(std::cell::UnsafeCell::new(value))
    }
}

#[cfg(not(loom))]
impl<T: ?Sized> UnsafeCell<T> {
    /// Reads through the cell: the caller promises no concurrent writer.
    #[inline]
    pub(crate) fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        f(self.0.get())
    }

    /// Writes through the cell: the caller promises exclusive access.
    #[inline]
    pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        f(self.0.get())
    }
}

#[cfg(loom)]
pub(crate) use loom::cell::UnsafeCell;

/// Exponential backoff for short waits on another thread's progress.
///
/// Spins with a growing number of `spin_loop` hints, then yields the
/// processor; [`Backoff::is_completed`] says when a caller should stop
/// spinning and block instead. Written here rather than taken from
/// crossbeam-utils so that it yields to loom's scheduler under `cfg(loom)`.
#[derive(Debug, Default)]
pub(crate) struct Backoff {
    step: u32,
}

impl Backoff {
    /// Spins doubled each step up to 2^SPIN_LIMIT hints.
    const SPIN_LIMIT: u32 = 6;
    /// After this many steps the caller should block rather than keep trying.
    const YIELD_LIMIT: u32 = 10;

    pub(crate) fn new() -> Self {
        Self { step: 0 }
    }

    /// Waits a little, longer each call: spins first, then yields the thread.
    #[inline]
    pub(crate) fn snooze(&mut self) {
        if self.step <= Self::SPIN_LIMIT {
            for _ in 0..1u32 << self.step {
                spin_loop();
            }
        } else {
            thread::yield_now();
        }
        if self.step <= Self::YIELD_LIMIT {
            self.step += 1;
        }
    }

    /// True once spinning and yielding have gone on long enough that the
    /// caller should block instead.
    #[inline]
    pub(crate) fn is_completed(&self) -> bool {
        self.step > Self::YIELD_LIMIT
    }
}

/// A fence that the fence-removal check can weaken.
///
/// `.ci/fence-check` builds the loom models with `--cfg rill_fence_check`
/// and runs them with `RILL_WEAKEN=NAME`, which turns the one fence named
/// `NAME` (in an essay: "F1", ...) from `SeqCst` into an `AcqRel` fence, the
/// strongest one that is not totally ordered (or, with `NAME:removed`,
/// leaves it out), and requires a model to fail.
/// In every other build this is `fence($order)`, with no check at all.
macro_rules! fence_or_weakened {
    ($name:literal, $order:expr) => {{
        let order = $order;
        #[cfg(not(rill_fence_check))]
        $crate::sync::atomic::fence(order);
        #[cfg(rill_fence_check)]
        match $crate::sync::weakened($name) {
            None => $crate::sync::atomic::fence(order),
            Some(false) => $crate::sync::atomic::fence($crate::sync::atomic::Ordering::AcqRel),
            Some(true) => {}
        }
    }};
}
pub(crate) use fence_or_weakened;

/// An ordering that the fence-removal check can weaken: under
/// `--cfg rill_fence_check` with `RILL_WEAKEN=NAME`, the ordering named
/// `NAME` in an essay becomes `Relaxed`; in every other build it is `$order`.
#[allow(unused_macros)]
macro_rules! ordering_or_weakened {
    ($name:literal, $order:expr) => {{
        #[cfg(not(rill_fence_check))]
        let order = $order;
        #[cfg(rill_fence_check)]
        let order =
            if $crate::sync::weakened($name).is_some() { $crate::sync::atomic::Ordering::Relaxed } else { $order };
        order
    }};
}
#[allow(unused_imports)]
pub(crate) use ordering_or_weakened;

/// Whether the protocol step named `NAME` in an essay is taken: always,
/// except under `--cfg rill_fence_check` with `RILL_WEAKEN=NAME` (or
/// `NAME:removed`), where the fence check leaves it out and requires a loom
/// model to fail. For protocols made of a mutex and a condition variable,
/// which have no ordering to weaken: their essays name the steps that make
/// them correct instead (e.g. G1 to G3 in `broker/store/offsets.rs`).
#[allow(unused_macros)]
macro_rules! step_kept {
    ($name:literal) => {{
        #[cfg(not(rill_fence_check))]
        let kept = true;
        #[cfg(rill_fence_check)]
        let kept = $crate::sync::weakened($name).is_none();
        kept
    }};
}
#[allow(unused_imports)]
pub(crate) use step_kept;

/// How the fence check asked to weaken `name` (`RILL_WEAKEN`, read once):
/// `None`, not at all; `Some(false)`, `RILL_WEAKEN=NAME`, to the next weaker
/// ordering; `Some(true)`, `RILL_WEAKEN=NAME:removed`, a fence left out.
#[cfg(rill_fence_check)]
pub(crate) fn weakened(name: &str) -> Option<bool> {
    static WEAKEN: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    let asked = WEAKEN.get_or_init(|| std::env::var("RILL_WEAKEN").ok()).as_deref()?;
    // Several names, comma-separated, weaken several (see `.ci/fence-check`).
    asked.split(',').find_map(|one| match one.strip_suffix(":removed") {
        Some(n) => (n == name).then_some(true),
        None => (one == name).then_some(false),
    })
}
