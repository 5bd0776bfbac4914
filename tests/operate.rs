//! Operating a broker (issue 13): listing and describing topics,
//! subscriptions and consumer groups; deleting them.

mod common;

use rill::{Ack, ConsumerOptions, Error, SubscriptionOptions, SubscriptionState};

use common::{WAIT, broker, earliest, publish, topic};

#[test]
fn topics_subscriptions_and_groups_are_listed_with_their_stats() {
    let b = broker();
    topic(&b, "orders/eu", 2);
    topic(&b, "orders/us", 1);
    topic(&b, "audit", 1);
    assert_eq!(b.topics(), vec!["audit", "orders/eu", "orders/us"]);

    let named = SubscriptionOptions { name: Some("billing".into()), ..earliest() };
    let billing = b.subscribe("orders/*", named, |_| Ack::Success).unwrap();
    let audit = b.subscribe("audit", earliest(), |_| Ack::Success).unwrap();
    for i in 0..5u8 {
        publish(&b, "orders/us", &[i]);
    }
    assert!(billing.wait_idle(WAIT).unwrap());
    assert!(audit.wait_idle(WAIT).unwrap());

    let subs = b.subscriptions();
    assert_eq!(subs.len(), 2, "{subs:?}");
    let names: Vec<&str> = subs.iter().map(|s| s.name.as_str()).collect();
    assert!(names.contains(&"billing") && names.contains(&audit.name()), "{names:?}");
    let s = subs.iter().find(|s| s.name == "billing").unwrap();
    assert_eq!(
        (s.pattern.as_str(), s.state, s.delivered, s.acked, s.lag),
        ("orders/*", SubscriptionState::Idle, 5, 5, 0)
    );
    // One entry per partition of every matched topic, each with its lag.
    assert_eq!(s.partitions.len(), 3);
    assert_eq!(s.partitions.iter().find(|p| p.topic == "orders/us").unwrap().position, 5);
    // A closed subscription is no longer listed.
    drop(audit);
    assert_eq!(b.subscriptions().iter().map(|s| s.name.clone()).collect::<Vec<_>>(), vec!["billing".to_string()]);

    assert!(b.groups().is_empty());
    let mut c = b.consumer("reports", "orders/us", ConsumerOptions::default()).unwrap();
    let got = c.poll(3, WAIT).unwrap().len();
    assert_eq!(got, 3);
    c.commit().unwrap();
    drop(c);
    let _other = b.consumer("archive", "audit", ConsumerOptions::default()).unwrap();
    assert_eq!(
        b.groups(),
        vec![("archive".to_string(), "audit".to_string()), ("reports".to_string(), "orders/us".to_string())]
    );
    // The group's lag per partition, with no live consumer.
    let g = b.group_stats("reports", "orders/us").unwrap();
    assert_eq!((g.lag, g.partitions[0].committed, g.partitions[0].end), (2, Some(3), 5));
    assert!(matches!(b.group_stats("nobody", "orders/us"), Err(Error::NotFound(_))));
    assert!(matches!(b.group_stats("reports", "gone"), Err(Error::NoSuchTopic(_))));
}

#[test]
fn the_last_handler_error_is_kept_in_the_stats() {
    let b = broker();
    topic(&b, "jobs", 1);
    let options = SubscriptionOptions { max_attempts: Some(1), ..earliest() };
    let sub = b
        .subscribe("jobs", options, |m| {
            if m.payload() == b"bad" {
                m.set_reason("cannot parse the job");
                Ack::Retry
            } else if m.payload() == b"boom" {
                panic!("the job blew up");
            } else {
                Ack::Success
            }
        })
        .unwrap();
    publish(&b, "jobs", b"fine");
    assert!(sub.wait_idle(WAIT).unwrap());
    assert_eq!(sub.stats().last_error, None, "a success is not an error");
    publish(&b, "jobs", b"bad");
    assert!(sub.wait_idle(WAIT).unwrap());
    let e = sub.stats().last_error.expect("the failure is recorded");
    assert!(e.contains("cannot parse the job") && e.contains("offset 1"), "{e}");
    publish(&b, "jobs", b"boom");
    assert!(sub.wait_idle(WAIT).unwrap());
    let e = sub.stats().last_error.expect("the panic is recorded");
    assert!(e.contains("handler panicked: the job blew up") && e.contains("offset 2"), "{e}");
    // The listing carries the same text.
    assert_eq!(b.subscriptions()[0].last_error.as_deref(), Some(e.as_str()));
}
