//! Gives the shared library its SONAME, `librill.so.0`: programs linked
//! against it record that name, and any later `librill.so.0.x.y` (a
//! compatible release, see "ABI and versions" in rill.h) satisfies them.
//! The major number follows the crate's: 0 until the ABI breaks.

fn main() {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if os == "linux" || os == "android" || os.ends_with("bsd") {
        let major = env!("CARGO_PKG_VERSION_MAJOR");
        println!("cargo:rustc-link-arg-cdylib=-Wl,-soname,librill.so.{major}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
