//! Fan-out with filters: every subscription sees every message of its
//! topics, and an attribute filter narrows that down without a line of
//! code in the handler.
//!
//!     cargo run --example fan_out
//!
//! Three services read one stream of orders: shipping for Europe only,
//! an alerting service for urgent orders in any region, and an audit log
//! of everything. Each has its own position, so a slow one holds up no
//! other. The program exits non-zero if a service saw the wrong orders.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use rill::broker::wait_all_idle;
use rill::{Ack, Broker, BrokerConfig, Message, Record, Subscription, SubscriptionOptions, TopicOptions};

/// Collects the payloads a subscription was handed.
fn collector(seen: &Arc<Mutex<Vec<String>>>) -> impl Fn(&Message<'_>) -> Ack + Send + Sync + 'static {
    let seen = Arc::clone(seen);
    move |m: &Message<'_>| {
        seen.lock().unwrap().push(String::from_utf8_lossy(m.payload()).into_owned());
        Ack::Success
    }
}

fn subscribe(
    broker: &Broker,
    pattern: &str,
    filter: Option<&str>,
    seen: &Arc<Mutex<Vec<String>>>,
) -> rill::Result<Subscription> {
    let options = SubscriptionOptions {
        // Pub/Sub's filter syntax: =, !=, attributes:key (present),
        // hasPrefix(...), NOT, AND, OR and parentheses.
        filter: filter.map(String::from),
        ..Default::default()
    };
    broker.subscribe(pattern, options, collector(seen))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let broker = Broker::new(BrokerConfig::default())?;
    broker.create_topic("shop/orders", &TopicOptions::with_partitions(2))?;
    broker.create_topic("shop/returns", &TopicOptions::default())?;

    let (eu, urgent, audit) = Default::default();
    let shipping = subscribe(&broker, "shop/orders", Some(r#"hasPrefix(attributes.region, "eu-")"#), &eu)?;
    let alerts = subscribe(&broker, "shop/*", Some(r#"attributes.priority = "high""#), &urgent)?;
    // `**` matches any number of segments: every topic under shop/.
    let log = subscribe(&broker, "shop/**", None, &audit)?;

    let orders = [
        ("shop/orders", "order-1", "eu-west", "normal"),
        ("shop/orders", "order-2", "us-east", "high"),
        ("shop/orders", "order-3", "eu-north", "high"),
        ("shop/returns", "return-4", "eu-west", "high"),
        ("shop/orders", "order-5", "ap-south", "normal"),
    ];
    for (topic, id, region, priority) in orders {
        let attributes = [("region", region), ("priority", priority)];
        broker.publish(topic, &Record::new(id.as_bytes()).with_key(id.as_bytes()).with_attributes(&attributes))?;
    }
    // Handlers run on the broker's threads; wait until all three caught up.
    if !wait_all_idle(&[&shipping, &alerts, &log], Duration::from_secs(10))? {
        return Err("the subscriptions did not catch up".into());
    }

    let sorted = |seen: &Arc<Mutex<Vec<String>>>| {
        let mut v = seen.lock().unwrap().clone();
        v.sort(); // partitions are delivered in parallel: order holds per partition
        v
    };
    let (eu, urgent, audit) = (sorted(&eu), sorted(&urgent), sorted(&audit));
    println!("shipping (eu-*): {eu:?}\nalerts (high): {urgent:?}\naudit (all): {audit:?}");
    println!("shipping skipped {} orders by its filter", shipping.stats().filtered);
    if eu != ["order-1", "order-3"]
        || urgent != ["order-2", "order-3", "return-4"]
        || audit != ["order-1", "order-2", "order-3", "order-5", "return-4"]
    {
        return Err("a service saw the wrong orders".into());
    }
    Ok(())
}
