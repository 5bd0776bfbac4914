//! Growable option structs: the one rule every `rill_*_options` follows.
//!
//! Each option struct starts with `uint32_t struct_size`. A program fills it
//! with the struct's `_init`, which in `rill.h` is a macro passing the
//! program's own `sizeof` to the `_init_v1` entry point, so the library
//! never writes past the end of the caller's struct, whichever of the two is
//! newer. `_init_v1` stores that size in `struct_size`; every call that takes
//! the options reads `struct_size` and then:
//!
//! * `0`: the struct was zeroed (memset, `= {0}`) instead of filled by
//!   `_init`: `RILL_ERR_INVALID_ARGUMENT`, naming the `_init` to call. A zero
//!   struct is never read as "all defaults", because zero is not the default
//!   of every field.
//! * less than [`OptionStruct::FIRST_SIZE`] (the size of the first layout
//!   that had `struct_size`, rill 0.2): not a size any `rill.h` ever
//!   produced: `RILL_ERR_INVALID_ARGUMENT`.
//! * up to our size: the fields it covers are read, the rest keep their
//!   defaults (an older program that never heard of them).
//! * more than our size (a program built against a newer `rill.h`): the
//!   bytes we do not know must all be zero (what `_init_v1` of this library
//!   wrote there), else `RILL_ERR_INVALID_ARGUMENT`: the program set an
//!   option this library does not have, and ignoring it would silently change
//!   what the program asked for.
//!
//! * more than [`RILL_STRUCT_SIZE_MAX`]: `RILL_ERR_INVALID_ARGUMENT`, before
//!   a byte past our own fields is read. No `rill.h` struct comes near that
//!   size, so such a `struct_size` is garbage (an uninitialised struct, a
//!   stray store), and checking that the bytes it claims are zero would read
//!   up to 4 GiB past the caller's struct, into whatever is mapped there or
//!   off the end of its mapping. `_init_v1` with a larger size writes
//!   nothing, and the stats calls taking a size refuse one this large too.
//!
//! Layouts only ever grow by appending fields, so a size always ends on a
//! field boundary of some published layout. Programs built against rill 0.1's
//! header (no `struct_size`) call the unsuffixed symbols, which read the 0.1
//! layout: see [`crate::legacy`].

use std::mem::size_of;

use crate::error::FfiError;

/// The largest `struct_size` (and stats `size`) the library accepts: 64 KiB.
/// Larger ones are `RILL_ERR_INVALID_ARGUMENT` before any byte past the
/// library's own fields is read or written, so a garbage size cannot make it
/// run off the caller's struct. Every layout in `rill.h` is far smaller, and
/// grows by a few fields per release.
pub const RILL_STRUCT_SIZE_MAX: u32 = 65536;

/// Refuses a size above [`RILL_STRUCT_SIZE_MAX`]; `what` names the struct.
pub(crate) fn within_max(size: usize, what: &str) -> Result<(), FfiError> {
    if size > RILL_STRUCT_SIZE_MAX as usize {
        return Err(FfiError::invalid(format!(
            "{what} of {size} bytes is larger than RILL_STRUCT_SIZE_MAX ({RILL_STRUCT_SIZE_MAX} bytes): \
             pass sizeof of the struct"
        )));
    }
    Ok(())
}

/// An option struct with a leading `struct_size`.
///
/// # Safety
///
/// The implementor is `#[repr(C)]`, starts with a `u32` `struct_size`, and
/// every bit pattern a C program can store in its fields is a valid value
/// (integers, pointers, `Option<fn>`, `bool` as 0 or 1 per the C contract).
pub(crate) unsafe trait OptionStruct: Copy {
    /// The `_init` a program must call, for error messages.
    const INIT: &'static str;
    /// Size of the first layout with `struct_size`; no valid size is smaller.
    const FIRST_SIZE: usize;
    /// The defaults, with `struct_size` set to our size.
    fn defaults() -> Self;
}

/// `_init_v1`: writes the defaults into the caller's `size` bytes. Our
/// fields beyond `size` are left out; bytes beyond our size are zeroed.
/// `struct_size` becomes `size`. NULL, or a size below the first layout's
/// or above [`RILL_STRUCT_SIZE_MAX`], writes nothing.
///
/// # Safety
///
/// `o` is NULL or writable for `size` bytes.
pub(crate) unsafe fn init<T: OptionStruct>(o: *mut T, size: usize) {
    if o.is_null() || size < T::FIRST_SIZE || size > RILL_STRUCT_SIZE_MAX as usize {
        return;
    }
    let defaults = T::defaults();
    let ours = size_of::<T>();
    let p = o.cast::<u8>();
    // SAFETY: the caller promises `size` writable bytes; we write
    // min(size, ours) bytes from our own value, then zero the rest of `size`,
    // then the leading u32 (every OptionStruct starts with it; size >= FIRST_SIZE > 4).
    unsafe {
        std::ptr::copy_nonoverlapping((&raw const defaults).cast::<u8>(), p, size.min(ours));
        if size > ours {
            std::ptr::write_bytes(p.add(ours), 0, size - ours);
        }
        p.cast::<u32>().write_unaligned(size as u32); // at most RILL_STRUCT_SIZE_MAX
    }
}

/// Reads options passed to a call: NULL is `None` (all defaults); otherwise
/// the rule in the module docs.
///
/// # Safety
///
/// `o` is NULL or readable for the `struct_size` bytes it declares.
pub(crate) unsafe fn read<T: OptionStruct>(o: *const T) -> Result<Option<T>, FfiError> {
    if o.is_null() {
        return Ok(None);
    }
    let p = o.cast::<u8>();
    // SAFETY: every OptionStruct starts with a u32, so at least 4 bytes are readable.
    let size = unsafe { p.cast::<u32>().read_unaligned() } as usize;
    if size == 0 {
        return Err(FfiError::invalid(format!(
            "options have struct_size 0: fill them with {} before setting fields",
            T::INIT
        )));
    }
    if size < T::FIRST_SIZE {
        return Err(FfiError::invalid(format!(
            "options have struct_size {size}, smaller than any rill.h layout ({} bytes); fill them with {}",
            T::FIRST_SIZE,
            T::INIT
        )));
    }
    // Before the tail below is read: the caller's struct is trusted to be
    // `size` bytes long only up to the bound.
    if size > RILL_STRUCT_SIZE_MAX as usize {
        return Err(FfiError::invalid(format!(
            "options have struct_size {size}, larger than RILL_STRUCT_SIZE_MAX ({RILL_STRUCT_SIZE_MAX} bytes): \
             fill them with {}",
            T::INIT
        )));
    }
    let ours = size_of::<T>();
    if size > ours {
        // SAFETY: the caller promises `size` readable bytes, and `size` is
        // within RILL_STRUCT_SIZE_MAX (checked above).
        let tail = unsafe { std::slice::from_raw_parts(p.add(ours), size - ours) };
        if let Some(i) = tail.iter().position(|&b| b != 0) {
            return Err(FfiError::invalid(format!(
                "options set a field at byte {} that this librill ({}) does not know: it is older than the rill.h the program was built with",
                ours + i,
                env!("CARGO_PKG_VERSION")
            )));
        }
    }
    let mut out = T::defaults();
    // SAFETY: we read min(size, ours) bytes the caller promises readable into
    // our own value; the trait promises any C-stored bytes are valid for T.
    unsafe { std::ptr::copy_nonoverlapping(p, (&raw mut out).cast::<u8>(), size.min(ours)) };
    Ok(Some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[repr(C)]
    #[derive(Debug, Clone, Copy, PartialEq)]
    struct Opts {
        struct_size: u32,
        a: u32,
        b: u64,
    }

    // SAFETY: repr(C), leading u32, plain integers.
    unsafe impl OptionStruct for Opts {
        const INIT: &'static str = "opts_init";
        const FIRST_SIZE: usize = 8;
        fn defaults() -> Self {
            Opts { struct_size: size_of::<Opts>() as u32, a: 7, b: 9 }
        }
    }

    #[test]
    fn a_shorter_struct_keeps_the_defaults_of_fields_it_lacks() {
        let mut buf = [0xAAu8; 8];
        // SAFETY: 8 writable bytes.
        unsafe { init(buf.as_mut_ptr().cast::<Opts>(), 8) };
        assert_eq!(u32::from_ne_bytes(buf[..4].try_into().unwrap()), 8);
        buf[4..8].copy_from_slice(&3u32.to_ne_bytes());
        let mut big = [0u8; 16];
        big[..8].copy_from_slice(&buf);
        // SAFETY: 16 readable bytes, of which struct_size claims 8.
        let o = unsafe { read(big.as_ptr().cast::<Opts>()) }.unwrap().unwrap();
        assert_eq!((o.a, o.b), (3, 9));
    }

    #[test]
    fn a_longer_struct_is_zeroed_past_our_fields_and_must_stay_so() {
        let mut buf = [0xAAu8; 24];
        // SAFETY: 24 writable bytes.
        unsafe { init(buf.as_mut_ptr().cast::<Opts>(), 24) };
        assert!(buf[16..].iter().all(|&b| b == 0));
        // SAFETY: 24 readable bytes.
        let o = unsafe { read(buf.as_ptr().cast::<Opts>()) }.unwrap().unwrap();
        assert_eq!((o.a, o.b), (7, 9));
        buf[20] = 1;
        // SAFETY: as above.
        let e = unsafe { read(buf.as_ptr().cast::<Opts>()) }.unwrap_err();
        assert!(e.text.contains("byte 20"), "{}", e.text);
    }

    #[test]
    fn sizes_above_the_bound_are_refused_without_reading_or_writing_past_the_struct() {
        for size in [u32::MAX, 1 << 20, RILL_STRUCT_SIZE_MAX + 1] {
            let o = Opts { struct_size: size, a: 1, b: 2 };
            // SAFETY: a whole Opts; a size above the bound is refused before
            // any byte past it is read (before the bound, this read 4 GiB).
            let e = unsafe { read(&o) }.unwrap_err();
            assert!(e.text.contains("RILL_STRUCT_SIZE_MAX"), "{}", e.text);
            let mut o = Opts { struct_size: 3, a: 0, b: 0 };
            // SAFETY: writable for a whole Opts, and nothing is written.
            unsafe { init(&mut o, size as usize) };
            assert_eq!(o, Opts { struct_size: 3, a: 0, b: 0 });
            assert!(within_max(size as usize, "stats").is_err());
        }
        let mut buf = vec![0xAAu8; RILL_STRUCT_SIZE_MAX as usize];
        // SAFETY: RILL_STRUCT_SIZE_MAX writable bytes (init and read copy
        // bytes and use unaligned loads and stores, so alignment is moot).
        unsafe { init(buf.as_mut_ptr().cast::<Opts>(), buf.len()) };
        // SAFETY: as above, readable.
        let o = unsafe { read(buf.as_ptr().cast::<Opts>()) }.unwrap().unwrap();
        assert_eq!((o.a, o.b), (7, 9));
    }

    #[test]
    fn zero_and_too_small_sizes_are_refused() {
        for size in [0u32, 4] {
            let o = Opts { struct_size: size, a: 1, b: 2 };
            // SAFETY: a whole Opts.
            let e = unsafe { read(&o) }.unwrap_err();
            assert!(e.text.contains("opts_init"), "{}", e.text);
        }
        // NULL: defaults.
        // SAFETY: NULL is allowed.
        assert!(unsafe { read::<Opts>(std::ptr::null()) }.unwrap().is_none());
        // init with a too-small size writes nothing.
        let mut o = Opts { struct_size: 0, a: 0, b: 0 };
        // SAFETY: writable, and nothing is written for size 4.
        unsafe { init(&mut o, 4) };
        assert_eq!(o.struct_size, 0);
    }
}
