//! The README's "Using the log from Rust" snippet as a program:
//! `cargo run --example log`. The snippet's body (the README's program
//! without its `fn main` and `Ok(())`) is kept as the README has it
//! (tests/readme_examples.rs checks that); the checks after it make the run
//! fail if the snippet stops doing what the README says.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    use rill::log::{Log, LogConfig, Record};

    let log = Log::new(&LogConfig::default())?; // 256 MiB retention by default
    let offset = log.append(&Record::new(b"hello").with_key(b"user-7").with_attributes(&[("region", "IN")]))?;
    println!("appended at {offset}");
    let mut cursor = log.cursor_from_first();
    while let Some(record) = cursor.read()? {
        // Err(Lagged) if retention overtook us
        println!("{} {:?}", record.offset(), record.payload());
    }

    // What the snippet promises: the first record is at offset 0 and reads back.
    assert_eq!(offset, 0);
    let mut again = log.cursor_from_first();
    let record = again.read()?.expect("the appended record");
    assert_eq!((record.offset(), record.payload()), (0, &b"hello"[..]));
    assert!(again.read()?.is_none());
    Ok(())
}
