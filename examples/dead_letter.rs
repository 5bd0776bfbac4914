//! Dead letters: a message that keeps failing is retried a few times with
//! a backoff, then set aside on a dead-letter topic with the reason, and
//! the subscription moves on to the messages after it.
//!
//!     cargo run --example dead_letter
//!
//! A payment service cannot process a payment with a malformed amount.
//! Retrying will not help, but it cannot tell that from a passing fault, so
//! it retries; after the last attempt the message goes to
//! `payments/dead`, an alert callback fires, and an operator's tool reads
//! the dead letters with their reasons. The program exits non-zero if the
//! good payments were not all settled or the bad one was not set aside.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rill::{
    Ack, Broker, BrokerConfig, ConsumerOptions, Message, Record, RetryBackoff, SubscriptionOptions, TopicOptions,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let broker = Broker::new(BrokerConfig::default())?;
    broker.create_topic("payments", &TopicOptions::default())?;

    let settled = Arc::new(AtomicU64::new(0));
    let alerts: Arc<Mutex<Vec<String>>> = Arc::default();
    let options = SubscriptionOptions {
        name: Some("settlement".into()),
        start: rill::StartPosition::Earliest,
        // Three deliveries in all, 1 ms then 2 ms apart; then the message
        // is dead-lettered.
        max_attempts: Some(3),
        backoff: RetryBackoff { initial: Duration::from_millis(1), max: Duration::from_millis(50), multiplier: 2.0 },
        // Default: `$dlq/<subscription name>`.
        dead_letter_topic: Some("payments/dead".into()),
        // The alert: called once per dead letter, with the last reason.
        on_dead_letter: Some({
            let alerts = Arc::clone(&alerts);
            Arc::new(move |m: &Message<'_>, reason: &str| {
                alerts.lock().unwrap().push(format!("offset {}: {reason}", m.offset()));
            })
        }),
        ..Default::default()
    };
    let handler = {
        let settled = Arc::clone(&settled);
        move |m: &Message<'_>| {
            let amount = std::str::from_utf8(m.payload()).ok().and_then(|s| s.parse::<u64>().ok());
            match amount {
                Some(_) => {
                    settled.fetch_add(1, Ordering::Relaxed); // a counter only: the subscription orders the rest
                    Ack::Success
                }
                None => {
                    // Say why: the reason travels with the dead letter.
                    m.set_reason(format!("attempt {}: amount is not a number", m.attempt()));
                    Ack::Retry // or Ack::DeadLetter to give up at once
                }
            }
        }
    };
    let sub = broker.subscribe("payments", options, handler)?;

    for amount in ["120", "75", "12,50", "300"] {
        broker.publish("payments", &Record::new(amount.as_bytes()).with_attributes(&[("customer", "c-42")]))?;
    }
    if !sub.wait_idle(Duration::from_secs(10))? {
        return Err("the subscription did not catch up".into());
    }
    let stats = sub.stats();
    println!(
        "settled {}, retried {}, dead-lettered {}",
        settled.load(Ordering::Relaxed),
        stats.retried,
        stats.dead_lettered
    );
    println!("alerts: {:?}", alerts.lock().unwrap());

    // The operator's side: dead letters are ordinary messages, with the
    // original payload and attributes plus rill.dlq.* attributes that say
    // where they came from and why.
    let mut dead = broker.consumer("operator", "payments/dead", ConsumerOptions::default())?;
    let letters = dead.poll(10, Duration::from_secs(1))?;
    for letter in &letters {
        println!(
            "dead letter {:?} from {} offset {} after {} attempts: {}",
            String::from_utf8_lossy(letter.payload()),
            letter.attribute("rill.dlq.topic").unwrap_or("?"),
            letter.attribute("rill.dlq.offset").unwrap_or("?"),
            letter.attribute("rill.dlq.attempts").unwrap_or("?"),
            letter.attribute("rill.dlq.reason").unwrap_or("?"),
        );
    }
    let ok = settled.load(Ordering::Relaxed) == 3
        && stats.dead_lettered == 1
        && alerts.lock().unwrap().len() == 1
        && letters.len() == 1
        && letters[0].payload() == b"12,50"
        && letters[0].attribute("customer") == Some("c-42")
        && letters[0].attribute("rill.dlq.reason") == Some("attempt 3: amount is not a number");
    if !ok {
        return Err("expected 3 payments settled and 12,50 dead-lettered after 3 attempts".into());
    }
    Ok(())
}
