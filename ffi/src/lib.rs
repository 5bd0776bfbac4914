//! The C ABI of rill. See `include/rill.h` for the contract.

/// The library version as a NUL-terminated string, e.g. `"0.1.0"`. Static; never free it.
#[unsafe(no_mangle)]
pub extern "C" fn rill_version() -> *const std::ffi::c_char {
    concat!(env!("CARGO_PKG_VERSION"), "\0").as_ptr().cast()
}
