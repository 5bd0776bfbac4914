//! The README's "Several processes, one data directory" snippet: brokers
//! opened with `Sharing::Processes` share a data directory, and a publish
//! through one wakes an idle subscriber of another. Its body (the whole of
//! `main` up to the checks) is kept as the README has it
//! (tests/readme_examples.rs checks that); the checks after it make the run
//! fail if the snippet stops doing what the README says.
//!
//!     cargo run --example processes
//!
//! The two brokers are in one process here; `tests/processes.rs` runs them
//! in processes of their own.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    use rill::{Ack, Broker, BrokerConfig, Record, Sharing, TopicOptions};
    use std::time::Duration;

    let dir = std::env::temp_dir().join(format!("rill-sharing-{}", std::process::id()));
    let config = BrokerConfig { data_dir: Some(dir.clone()), sharing: Sharing::Processes, ..BrokerConfig::default() };
    // Two brokers here; each could as well be a process of its own.
    let billing = Broker::new(config.clone())?;
    billing.create_topic("orders", &TopicOptions::default())?;
    let shop = Broker::new(config)?;
    let (tx, rx) = std::sync::mpsc::channel();
    let sub = billing.subscribe("orders", Default::default(), move |m| {
        tx.send(m.record().payload().to_vec()).unwrap();
        Ack::Success
    })?;
    shop.publish("orders", &Record::new(b"o-1"))?; // wakes billing's idle subscriber
    assert_eq!(rx.recv_timeout(Duration::from_secs(10))?, b"o-1");
    drop((sub, billing, shop));
    std::fs::remove_dir_all(&dir)?;

    // The checks: the directory is gone with the brokers, and an opener of
    // the other mode is refused while a shared broker holds it.
    assert!(!dir.exists());
    let shared = Broker::new(BrokerConfig {
        data_dir: Some(dir.clone()),
        sharing: Sharing::Processes,
        ..BrokerConfig::default()
    })?;
    let exclusive = Broker::new(BrokerConfig { data_dir: Some(dir.clone()), ..BrokerConfig::default() });
    assert!(matches!(exclusive, Err(rill::Error::Busy(_))));
    drop(shared);
    std::fs::remove_dir_all(&dir)?;
    println!("processes: the shared directory delivered across brokers");
    Ok(())
}
