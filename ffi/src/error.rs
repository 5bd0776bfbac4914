//! Status codes, the thread's last error text, and the panic boundary.

use std::cell::RefCell;
use std::ffi::{CStr, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

use rill::{Error, ErrorKind, PublishFailure};

/// Expands the list in `status_list.rs`: the enum (with its docs), `ALL`,
/// the names, and the exhaustive mapping from `rill::ErrorKind`: a kind
/// missing from the list, or listed twice, does not compile.
macro_rules! statuses {
    (
        $(#[doc = $doc:literal])*
        enum $ty:ident {
            $( $(#[doc = $vdoc:literal])* $name:ident = $value:literal => [$($kind:ident),*], )*
        }
    ) => {
        $(#[doc = $doc])*
        ///
        /// The C declaration in `rill.h` is generated from the same list
        /// (`ffi/src/status_list.rs`).
        #[repr(C)]
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum $ty {
            $( $(#[doc = $vdoc])* $name = $value, )*
        }

        impl $ty {
            /// Every status, in the order of the list.
            pub(crate) const ALL: &'static [$ty] = &[$($ty::$name),*];

            /// The constant's name as a NUL-terminated static string.
            pub(crate) fn name(self) -> &'static CStr {
                match self {
                    $( $ty::$name => {
                        const NAME: &CStr = match CStr::from_bytes_with_nul(concat!(stringify!($name), "\0").as_bytes()) {
                            Ok(n) => n,
                            Err(_) => panic!("a status name has an interior NUL"),
                        };
                        NAME
                    } )*
                }
            }

            /// The status a core error kind maps to.
            fn of_kind(kind: ErrorKind) -> $ty {
                match kind {
                    $( $( ErrorKind::$kind => $ty::$name, )* )*
                }
            }
        }
    };
}

include!("status_list.rs");

use rill_status::*;

impl rill_status {
    /// The status with this number, if there is one.
    pub(crate) fn from_i32(v: i32) -> Option<rill_status> {
        Self::ALL.iter().copied().find(|s| *s as i32 == v)
    }
}

/// An error on its way to C: a status and the text for `rill_last_error`
/// (read through `Deref`: `e.status`, `e.text`).
///
/// Boxed, so a `Result<T, FfiError>` carries one pointer on its error side:
/// the success path of a call (`Result<(), FfiError>` is a single word)
/// moves no more than that, and the box is only made on an error.
#[derive(Debug)]
pub(crate) struct FfiError(Box<FfiErrorParts>);

/// What an [`FfiError`] holds.
#[derive(Debug)]
pub(crate) struct FfiErrorParts {
    pub(crate) status: rill_status,
    pub(crate) text: String,
}

impl std::ops::Deref for FfiError {
    type Target = FfiErrorParts;

    fn deref(&self) -> &FfiErrorParts {
        &self.0
    }
}

impl std::ops::DerefMut for FfiError {
    fn deref_mut(&mut self) -> &mut FfiErrorParts {
        &mut self.0
    }
}

impl FfiError {
    #[cold]
    pub(crate) fn new(status: rill_status, text: impl Into<String>) -> FfiError {
        FfiError(Box::new(FfiErrorParts { status, text: text.into() }))
    }

    pub(crate) fn null(what: &str) -> FfiError {
        FfiError::new(RILL_ERR_NULL_ARGUMENT, format!("{what} must not be NULL"))
    }

    pub(crate) fn invalid(text: impl Into<String>) -> FfiError {
        FfiError::new(RILL_ERR_INVALID_ARGUMENT, text)
    }
}

impl From<Error> for FfiError {
    /// Out of line and cold: a publish's `?` on the core's 64-byte error
    /// leaves only a test and a call on its success path.
    #[cold]
    #[inline(never)]
    fn from(e: Error) -> FfiError {
        let status = rill_status::of_kind(e.kind());
        FfiError::new(status, e.to_string())
    }
}

impl From<PublishFailure> for FfiError {
    /// For the single-record publish, whose failure comes up from the core
    /// as a [`PublishFailure`] (one word): the status and the text of the
    /// `rill::Error` the Rust API reports for it, made here, out of line,
    /// only on a failure.
    #[cold]
    #[inline(never)]
    fn from(f: PublishFailure) -> FfiError {
        FfiError::from(Error::from(f))
    }
}

thread_local! {
    static LAST_ERROR: RefCell<String> = const { RefCell::new(String::new()) };
}

/// Records `text` as this thread's last error.
pub(crate) fn set_last_error(text: &str) {
    // An interior NUL would truncate the text in C; show it instead.
    let text = text.replace('\0', "\\0");
    LAST_ERROR.with(|e| *e.borrow_mut() = text);
}

/// Copies this thread's last error into `buf` (truncated, NUL-terminated);
/// returns the full length without the NUL.
pub(crate) fn copy_last_error(buf: *mut c_char, buf_len: usize) -> usize {
    LAST_ERROR.with(|e| crate::text::copy_str(&e.borrow(), buf, buf_len))
}

/// Runs `body` as the body of an exported function: a panic becomes
/// `RILL_ERR_PANIC` with its message as the last error, and an error becomes
/// its status with its text as the last error. Success does not touch the
/// last error (it keeps the text of the thread's last failure).
///
/// Inlined, with both failures out of line: on success a call costs the
/// body, a status in a register, and no thread-local access.
#[inline]
pub(crate) fn boundary(body: impl FnOnce() -> Result<(), FfiError>) -> rill_status {
    let status = catch_unwind(AssertUnwindSafe(|| match body() {
        Ok(()) => RILL_OK,
        Err(e) => failed(e),
    }));
    status.unwrap_or_else(panicked)
}

/// An error's status, its text recorded as the last error.
#[cold]
#[inline(never)]
fn failed(e: FfiError) -> rill_status {
    set_last_error(&e.text);
    e.status
}

/// `RILL_ERR_PANIC`, the panic's message recorded as the last error.
#[cold]
#[inline(never)]
fn panicked(panic: Box<dyn std::any::Any + Send>) -> rill_status {
    set_last_error(&format!("rill panicked: {}", rill::panic_message(&*panic)));
    RILL_ERR_PANIC
}

/// Like [`boundary`] for functions without a status: a panic is recorded as
/// the last error and `fallback` is returned.
pub(crate) fn boundary_value<T>(fallback: T, body: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(panic) => {
            panicked(panic);
            fallback
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_has_a_distinct_value_and_its_own_name() {
        let mut seen = std::collections::HashSet::new();
        for &s in rill_status::ALL {
            assert!(seen.insert(s as i32), "{s:?} reuses a value");
            assert_eq!(rill_status::from_i32(s as i32), Some(s));
            assert_eq!(s.name().to_str().unwrap(), format!("{s:?}"));
        }
        assert_eq!(rill_status::from_i32(-1), None);
    }

    #[test]
    fn core_errors_map_to_their_statuses() {
        let e = FfiError::from(Error::ResourceExhausted("threads".into()));
        assert_eq!(e.status, RILL_ERR_RESOURCE_EXHAUSTED);
        assert_eq!(RILL_ERR_RESOURCE_EXHAUSTED as i32, 16);
        assert!(e.text.contains("threads"));
        assert_eq!(FfiError::from(Error::Timeout).status, RILL_ERR_TIMEOUT);
        assert_eq!(FfiError::from(Error::NotFound("x".into())).status, RILL_ERR_NOT_FOUND);
    }
}
