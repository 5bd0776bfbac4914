//! The NATS JetStream bridge: two brokers, standing for two services on
//! different machines, exchange orders through a JetStream stream.
//!
//!     nats-server -js &
//!     nats stream add ORDERS --subjects 'shop.>' --defaults
//!     cargo run -p rill-nats --example bridge
//!
//! It needs a nats-server with JetStream at $RILL_NATS_URL (default
//! nats://127.0.0.1:4222) and a stream ORDERS that captures `shop.>`. (The
//! tests run it beside a server of their own: ffi/tests/run_nats.sh.)
//!
//! The shop's broker exports its topics `orders/*`; each message is
//! stored on subject `shop.orders.<region>` and acknowledged to rill only
//! once JetStream has it. The warehouse's broker imports the stream into
//! the same topic names, with key and attributes as they were. The
//! program exits non-zero if the warehouse did not get every order.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use rill::{Ack, Broker, BrokerConfig, Message, Record, SubscriptionOptions, TopicOptions};
use rill_nats::{Bridge, BridgeConfig, ExportConfig, ImportConfig};

const ORDERS: [(&str, &str); 3] = [("orders/eu", "order-1"), ("orders/us", "order-2"), ("orders/eu", "order-3")];
const DEADLINE: Duration = Duration::from_secs(30);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::var("RILL_NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into());

    // The shop: its orders go out through the stream.
    let shop = Broker::new(BrokerConfig::default())?;
    shop.create_topic("orders/eu", &TopicOptions::default())?;
    shop.create_topic("orders/us", &TopicOptions::default())?;
    let export = Bridge::start(
        &shop,
        BridgeConfig {
            url: url.clone(),
            // Export is a durable subscription on `orders/*`: a bridge
            // started again on this broker resumes where the last one got
            // to, and while the server is away the orders wait in rill's log.
            export: Some(ExportConfig::new("orders/*", "ORDERS", "shop")),
            ..BridgeConfig::default()
        },
    )?;

    // The warehouse: the stream's messages come in as rill messages.
    let warehouse = Broker::new(BrokerConfig::default())?;
    warehouse.create_topic("orders/eu", &TopicOptions::default())?;
    warehouse.create_topic("orders/us", &TopicOptions::default())?;
    // What the warehouse received, and a condition variable to wait on it.
    let received: Arc<(Mutex<Vec<String>>, Condvar)> = Arc::default();
    let sub = warehouse.subscribe("orders/*", SubscriptionOptions::default(), {
        let received = Arc::clone(&received);
        move |m: &Message<'_>| {
            let region = m.attribute("region").unwrap_or("?");
            // The import adds the stream sequence as `nats.seq`.
            let seq = m.attribute("nats.seq").unwrap_or("?");
            let line = format!("{} {} region={region} seq={seq}", m.topic(), String::from_utf8_lossy(m.payload()));
            let (lines, arrived) = &*received;
            lines.lock().unwrap().push(line);
            arrived.notify_all();
            Ack::Success
        }
    })?;
    // A durable JetStream consumer (`rill-import`): the server remembers
    // what the warehouse acknowledged.
    let import = Bridge::start(
        &warehouse,
        BridgeConfig { url, import: Some(ImportConfig::new("ORDERS", "shop")), ..BridgeConfig::default() },
    )?;

    for (topic, id) in ORDERS {
        let region = topic.rsplit('/').next().unwrap_or("");
        shop.publish(
            topic,
            &Record::new(id.as_bytes()).with_key(id.as_bytes()).with_attributes(&[("region", region)]),
        )?;
    }

    // Delivery across the network takes a moment: wait for it, with a
    // deadline (the bridge's stats say how far each side got).
    let (lines, arrived) = &*received;
    let (lines, _) = arrived.wait_timeout_while(lines.lock().unwrap(), DEADLINE, |l| l.len() < ORDERS.len()).unwrap();
    let mut got = lines.clone();
    drop(lines);
    println!("shop exported {}, warehouse imported {}", export.stats().exported, import.stats().imported);
    got.sort();
    for line in &got {
        println!("warehouse got {line}");
    }
    import.stop();
    export.stop();
    drop(sub);

    let expected = ["orders/eu order-1 region=eu", "orders/eu order-3 region=eu", "orders/us order-2 region=us"];
    let matches = got.len() == expected.len() && got.iter().zip(expected).all(|(g, e)| g.starts_with(e));
    if !matches {
        return Err(format!("expected {expected:?}, the warehouse got {got:?}").into());
    }
    Ok(())
}
