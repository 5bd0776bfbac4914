//! The README's "Using the broker from Rust" snippet as a program:
//! `cargo run --example broker`. The snippet's body (the README's program
//! without its `fn main` and `Ok(())`) is kept as the README has it
//! (tests/readme_examples.rs checks that); the checks after it make the run
//! fail if the snippet stops doing what the README says.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    use rill::{Ack, Broker, BrokerConfig, Message, Record, SubscriptionOptions, TopicOptions};
    use std::time::Duration;

    let broker = Broker::new(BrokerConfig::default())?; // worker pool = cores
    broker.create_topic("sports/cricket", &TopicOptions::with_partitions(4))?;

    let sub = broker.subscribe(
        "sports/*", // `*` one segment, `**` any number
        SubscriptionOptions { filter: Some(r#"attributes.region = "IN""#.into()), ..Default::default() },
        |m: &Message<'_>| {
            println!("{}[{}]@{} {:?}", m.topic(), m.partition(), m.offset(), m.payload());
            Ack::Success // or Ack::Retry / Ack::DeadLetter
        },
    )?;

    let pos = broker
        .publish("sports/cricket", &Record::new(b"six!").with_key(b"match-7").with_attributes(&[("region", "IN")]))?;
    sub.wait_idle(Duration::from_secs(5))?;
    println!("{:?} {:?}", pos, sub.stats());

    // What the snippet promises: the message was delivered to the filtered
    // subscription and acknowledged; another region is filtered out.
    broker.publish("sports/cricket", &Record::new(b"four").with_attributes(&[("region", "AU")]))?;
    sub.wait_idle(Duration::from_secs(5))?;
    let stats = sub.stats();
    assert_eq!((stats.delivered, stats.acked, stats.filtered), (1, 1, 1), "{stats:?}");
    assert!(pos.partition < 4);
    Ok(())
}
