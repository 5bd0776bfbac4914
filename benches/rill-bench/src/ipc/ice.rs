//! iceoryx2's publish-subscribe between two processes, as its documentation
//! shows it: a service of `[u8]` slices on the ipc service variant, a
//! publisher that loans a sample, writes the message into it and sends it,
//! and a subscriber that calls `receive` in a loop (polling: what
//! iceoryx2's own throughput benchmarks do). Nothing is lost: no safe
//! overflow, and a publisher that finds the subscriber's buffer (`BUFFER`
//! samples, the other peers' capacity) full retries until it has room.
//! A publisher's samples live in its own data segment, so the publisher
//! process stays until the parent says the subscriber has them all.
//! Built with the `iceoryx2` feature only; without it a child asked to
//! play it fails, and the parent does not ask.

use super::proto::{ChildConf, ChildOut};

/// The subscriber's buffer, in samples.
#[cfg(feature = "iceoryx2")]
pub(super) const BUFFER: usize = 4096;

/// Plays `IcePub` or `IceSub`.
#[cfg(feature = "iceoryx2")]
pub(super) fn child(conf: &ChildConf) -> Result<ChildOut, String> {
    use iceoryx2::prelude::{
        BackpressureStrategy, LogLevel, NodeBuilder, PortFactory, ServiceName, ipc, set_log_level,
    };

    use super::proto::{CHILD_CAP, Checker, Role, hear, mono_ns, publish, say};

    fn e<E: std::fmt::Debug>(what: &'static str) -> impl Fn(E) -> String {
        move |x| format!("iceoryx2 {what}: {x:?}")
    }
    // Its warning that no config file was found (the defaults are what
    // this peer means to use) would fill the report's stderr.
    set_log_level(LogLevel::Error);
    // The run's directory names the service: one service per run.
    let name = format!("rill-bench/ipc/{}", conf.dir.file_name().unwrap_or_default().to_string_lossy());
    let name: ServiceName = name.as_str().try_into().map_err(e("service name"))?;
    let node = NodeBuilder::new().create::<ipc::Service>().map_err(e("node"))?;
    let service = node
        .service_builder(&name)
        .publish_subscribe::<[u8]>()
        .enable_safe_overflow(false)
        .subscriber_max_buffer_size(BUFFER)
        .open_or_create()
        .map_err(e("service"))?;
    if conf.role == Role::IcePub {
        let publisher = service
            .publisher_builder()
            .initial_max_slice_len(conf.payload)
            .backpressure_strategy(BackpressureStrategy::RetryUntilDelivered)
            .create()
            .map_err(e("publisher"))?;
        // Publishing before the subscriber is known reaches nobody.
        let deadline = std::time::Instant::now() + CHILD_CAP;
        while service.dynamic_config().number_of_subscribers() == 0 {
            if std::time::Instant::now() > deadline {
                return Err("iceoryx2: no subscriber appeared".into());
            }
            std::thread::yield_now();
        }
        say("ready")?;
        hear("go")?;
        let t0 = mono_ns();
        publish(conf, |p| {
            // `send` says how many subscribers got the sample: none means
            // it was not delivered, so it is sent again.
            loop {
                let sample = publisher.loan_slice_uninit(p.len()).map_err(e("loan"))?;
                if sample.write_from_slice(p).send().map_err(e("send"))? > 0 {
                    return Ok(());
                }
                if std::time::Instant::now() > deadline {
                    return Err("iceoryx2: the subscriber stopped taking samples".into());
                }
            }
        })?;
        // A publisher's samples go with it: it stays until the subscriber
        // has taken them all.
        say("sent")?;
        hear("exit")?;
        return Ok(ChildOut { t0, ..ChildOut::default() });
    }
    let subscriber = service.subscriber_builder().buffer_size(BUFFER).create().map_err(e("subscriber"))?;
    say("ready")?;
    let mut checker = Checker::new(conf.publishers, conf.payload);
    let expected = conf.messages * u64::from(conf.publishers);
    let deadline = std::time::Instant::now() + CHILD_CAP;
    while checker.received < expected {
        match subscriber.receive().map_err(e("receive"))? {
            Some(sample) => {
                checker.on(sample.payload());
            }
            None if std::time::Instant::now() > deadline => {
                return Err(format!("iceoryx2: {} of {expected} messages arrived", checker.received));
            }
            None => std::hint::spin_loop(),
        }
    }
    Ok(ChildOut { t_end: mono_ns(), received: checker.received, bad: checker.bad, ..ChildOut::default() })
}

/// Without the feature: no iceoryx2 to play.
#[cfg(not(feature = "iceoryx2"))]
pub(super) fn child(_: &ChildConf) -> Result<ChildOut, String> {
    Err("rill-bench was built without the iceoryx2 feature".into())
}
