//! The `bridge` scenario (the `nats` feature): rill -> JetStream -> rill
//! through two `rill_nats` bridges, against a plain async-nats JetStream
//! publisher and pull consumer doing the same work, interleaved in pairs on
//! one nats-server started for the run.
//!
//! Same work on both sides: N messages of `payload` bytes (a publish
//! timestamp in the first 8), each published to JetStream with a
//! `Nats-Msg-Id` and its publish ack awaited, stored in a file-backed stream,
//! read by a durable pull consumer and acknowledged one by one. The bridged
//! side adds what the bridge is for: the rill publish on one broker, the
//! export subscription, the import's rill publish, and the delivery to a
//! subscriber of the other broker. The plain publisher keeps at most
//! [`PLAIN_WINDOW`] publishes in flight (async-nats' ack futures), the
//! bridge's batch size, so both batch their acks the same way.

use std::future::IntoFuture;
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::PullConsumer, consumer::pull, message::PublishMessage};
use futures_util::StreamExt;
use futures_util::stream::FuturesOrdered;

/// Publishes the plain publisher keeps in flight: the export's batch.
pub const PLAIN_WINDOW: usize = 64;

/// The target: the bridge's throughput over the plain pair's.
pub const TARGET_RATIO: f64 = 0.8;

/// The paced runs' rate, messages per second: well below what either side
/// sustains, so the latency measured is the path's, not a queue's.
pub const LATENCY_RATE: u64 = 2_000;

/// How long a paced run publishes.
const LATENCY_SECONDS: u64 = 2;

/// How long a run may take before it counts as failed.
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

/// One side's result.
#[derive(Debug, Clone, Copy)]
pub struct Run {
    /// Delivered messages per second, first publish to last delivery.
    pub rate: f64,
    /// Median publish-to-delivery latency, microseconds (sampled).
    pub p50_us: f64,
}

/// A nats-server for the run, killed on drop.
struct Server {
    child: Child,
    store: PathBuf,
    url: String,
}

impl Server {
    fn start() -> Result<Server, String> {
        let port = TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_err(|e| e.to_string())?.port();
        let store = std::env::temp_dir().join(format!("rill-bench-nats-{}", std::process::id()));
        std::fs::create_dir_all(&store).map_err(|e| e.to_string())?;
        let child = Command::new(std::env::var_os("NATS_SERVER").unwrap_or_else(|| "nats-server".into()))
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(&store)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start nats-server (apt-get install nats-server): {e}"))?;
        let server = Server { child, store, url: format!("nats://127.0.0.1:{port}") };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return Err("nats-server did not start".into());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(server)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.store);
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("a tokio runtime")
}

/// A fresh file-backed stream `name` on `subject.>`.
fn fresh_stream(rt: &tokio::runtime::Runtime, url: &str, name: &str, subject: &str) -> Result<(), String> {
    rt.block_on(async {
        let js = jetstream::new(async_nats::connect(url).await.map_err(|e| e.to_string())?);
        let _ = js.delete_stream(name).await;
        js.create_stream(jetstream::stream::Config {
            name: name.into(),
            subjects: vec![format!("{subject}.>")],
            storage: jetstream::stream::StorageType::File,
            ..Default::default()
        })
        .await
        .map_err(|e| e.to_string())?;
        Ok(())
    })
}

fn payload(size: usize) -> Vec<u8> {
    let mut p = vec![0xa5u8; size.max(8)];
    p[..8].copy_from_slice(&rill::clock::now_ns().to_le_bytes());
    p
}

fn sent_at(p: &[u8]) -> u64 {
    p.get(..8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
}

fn median(mut v: Vec<u64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_unstable();
    v[v.len() / 2] as f64 / 1000.0
}

/// When message `i` of a run paced at `rate` is due.
fn due(start: Instant, i: usize, rate: Option<u64>) -> Option<Instant> {
    rate.map(|r| start + Duration::from_nanos(i as u64 * 1_000_000_000 / r))
}

/// rill -> JetStream -> rill; `rate` paces the publisher.
fn bridged(url: &str, n: usize, size: usize, tag: usize, rate: Option<u64>) -> Result<Run, String> {
    let topic = "bench/t";
    let broker = || -> Result<rill::Broker, String> {
        let b = rill::Broker::new(rill::BrokerConfig::default()).map_err(|e| e.to_string())?;
        b.create_topic(topic, &rill::TopicOptions::default()).map_err(|e| e.to_string())?;
        Ok(b)
    };
    let (a, b) = (broker()?, broker()?);
    let (done_tx, done_rx) = mpsc::channel();
    let samples = Arc::new(Mutex::new(Vec::with_capacity(n / 64 + 1)));
    let count = Arc::new(AtomicU64::new(0));
    let options = rill::SubscriptionOptions { dedicated_thread: true, ..Default::default() };
    let (s, c) = (samples.clone(), count.clone());
    let _sub = b
        .subscribe("bench/*", options, move |m| {
            // Relaxed: one thread counts; the channel carries the end.
            let k = c.fetch_add(1, Ordering::Relaxed) + 1;
            if k % 64 == 0 {
                s.lock().unwrap().push(rill::clock::now_ns().saturating_sub(sent_at(m.payload())));
            }
            if k == n as u64 {
                let _ = done_tx.send(());
            }
            rill::Ack::Success
        })
        .map_err(|e| e.to_string())?;
    let config = |import: bool| rill_nats::BridgeConfig {
        url: url.into(),
        export: (!import).then(|| rill_nats::ExportConfig {
            subscription: format!("bench-export-{tag}"),
            ..rill_nats::ExportConfig::new("bench/*", "BENCH", "bench")
        }),
        import: import.then(|| rill_nats::ImportConfig {
            consumer: format!("bench-import-{tag}"),
            ..rill_nats::ImportConfig::new("BENCH", "bench")
        }),
        ..Default::default()
    };
    let importer = rill_nats::Bridge::start(&b, config(true)).map_err(|e| e.to_string())?;
    let exporter = rill_nats::Bridge::start(&a, config(false)).map_err(|e| e.to_string())?;
    let start = Instant::now();
    for i in 0..n {
        if let Some(at) = due(start, i, rate) {
            std::thread::sleep(at.saturating_duration_since(Instant::now()));
        }
        a.publish(topic, &rill::Record::new(&payload(size))).map_err(|e| e.to_string())?;
    }
    done_rx.recv_timeout(RUN_TIMEOUT).map_err(|_| {
        format!("bridged run: {} of {n} arrived; {:?}", count.load(Ordering::Relaxed), exporter.stats())
    })?;
    let elapsed = start.elapsed().as_secs_f64();
    exporter.stop();
    importer.stop();
    let p50 = median(std::mem::take(&mut *samples.lock().unwrap()));
    Ok(Run { rate: n as f64 / elapsed, p50_us: p50 })
}

/// A plain async-nats publisher and pull consumer; `rate` paces the publisher.
fn plain(
    rt: &tokio::runtime::Runtime,
    url: &str,
    n: usize,
    size: usize,
    tag: usize,
    rate: Option<u64>,
) -> Result<Run, String> {
    rt.block_on(async {
        let client = async_nats::connect(url).await.map_err(|e| e.to_string())?;
        let js = jetstream::new(client);
        let stream = js.get_stream("BENCH").await.map_err(|e| e.to_string())?;
        let consumer: PullConsumer = stream
            .create_consumer(pull::Config {
                durable_name: Some(format!("plain-{tag}")),
                filter_subject: "bench.>".into(),
                ack_policy: jetstream::consumer::AckPolicy::Explicit,
                ..Default::default()
            })
            .await
            .map_err(|e| e.to_string())?;
        let start = Instant::now();
        let reader = tokio::spawn(async move {
            let mut messages =
                consumer.stream().max_messages_per_batch(256).messages().await.map_err(|e| e.to_string())?;
            let mut samples = Vec::with_capacity(n / 64 + 1);
            let mut k = 0;
            while k < n {
                let m = match messages.next().await {
                    Some(Ok(m)) => m,
                    Some(Err(e)) => return Err(e.to_string()),
                    None => return Err("the pull ended".to_string()),
                };
                k += 1;
                if k % 64 == 0 {
                    samples.push(rill::clock::now_ns().saturating_sub(sent_at(&m.payload)));
                }
                m.ack().await.map_err(|e| e.to_string())?;
            }
            Ok::<_, String>(samples)
        });
        let mut acks: FuturesOrdered<<jetstream::context::PublishAckFuture as IntoFuture>::IntoFuture> =
            FuturesOrdered::new();
        for i in 0..n {
            if let Some(at) = due(start, i, rate) {
                tokio::time::sleep_until(at.into()).await;
            }
            if acks.len() >= PLAIN_WINDOW {
                acks.next().await.expect("an ack in flight").map_err(|e| e.to_string())?;
            }
            let publish =
                PublishMessage::build().payload(payload(size).into()).message_id(format!("plain-{tag}:bench.t:0:{i}"));
            acks.push_back(js.send_publish("bench.t", publish).await.map_err(|e| e.to_string())?.into_future());
        }
        while let Some(ack) = acks.next().await {
            ack.map_err(|e| e.to_string())?;
        }
        let samples = tokio::time::timeout(RUN_TIMEOUT, reader)
            .await
            .map_err(|_| "plain run: the consumer did not finish".to_string())?
            .map_err(|e| e.to_string())??;
        let elapsed = start.elapsed().as_secs_f64();
        Ok(Run { rate: n as f64 / elapsed, p50_us: median(samples) })
    })
}

/// Runs `pairs` interleaved pairs (bridge first, then plain first, ...) of
/// `n` messages each, as fast as they go, or `rate` messages per second for
/// [`LATENCY_SECONDS`] when `rate` is given, and returns them.
pub fn run(n: usize, size: usize, pairs: usize, rate: Option<u64>) -> Result<Vec<(Run, Run)>, String> {
    let server = Server::start()?;
    let rt = runtime();
    let n = rate.map_or(n, |r| (r * LATENCY_SECONDS) as usize);
    let mut out = Vec::new();
    for pair in 0..pairs {
        let one = |plain_side: bool, tag: usize| -> Result<Run, String> {
            fresh_stream(&rt, &server.url, "BENCH", "bench")?;
            if plain_side {
                plain(&rt, &server.url, n, size, tag, rate)
            } else {
                bridged(&server.url, n, size, tag, rate)
            }
        };
        let (b, p) = if pair % 2 == 0 {
            let b = one(false, pair)?;
            (b, one(true, pair)?)
        } else {
            let p = one(true, pair)?;
            (one(false, pair)?, p)
        };
        out.push((b, p));
    }
    Ok(out)
}

/// The report of [`run`]'s throughput pairs and latency pairs, as text.
pub fn report(n: usize, size: usize, pairs: &[(Run, Run)], latency: &[(Run, Run)]) -> String {
    let mut s = format!(
        "bridge: rill -> JetStream -> rill (two rill_nats bridges) vs plain async-nats publisher + pull consumer\n\
         {n} messages of {size} bytes per run, file-backed stream, publish acks awaited ({PLAIN_WINDOW} in flight)\n\
         throughput (publish as fast as possible; p50 includes queueing):\n"
    );
    let mut ratios = Vec::new();
    for (i, (b, p)) in pairs.iter().enumerate() {
        let ratio = b.rate / p.rate;
        ratios.push(ratio);
        s += &format!(
            "  pair {}: bridge {:>9.0} msg/s (p50 {:>7.0} us) | plain {:>9.0} msg/s (p50 {:>7.0} us) | {:.2}x\n",
            i + 1,
            b.rate,
            b.p50_us,
            p.rate,
            p.p50_us,
            ratio
        );
    }
    ratios.sort_by(f64::total_cmp);
    let med = ratios.get(ratios.len() / 2).copied().unwrap_or(0.0);
    let worst = ratios.first().copied().unwrap_or(0.0);
    s += &format!(
        "  bridge/plain throughput: median {med:.2}x, worst {worst:.2}x (target >= {TARGET_RATIO}x: {})\n",
        if med >= TARGET_RATIO { "met" } else { "NOT met" }
    );
    s += &format!("latency (paced at {LATENCY_RATE} msg/s for {LATENCY_SECONDS} s; publish to delivery):\n");
    let mut lat = Vec::new();
    for (i, (b, p)) in latency.iter().enumerate() {
        lat.push(b.p50_us / p.p50_us.max(1.0));
        s += &format!("  pair {}: bridge p50 {:>7.0} us | plain p50 {:>7.0} us\n", i + 1, b.p50_us, p.p50_us);
    }
    lat.sort_by(f64::total_cmp);
    if let Some(m) = lat.get(lat.len() / 2) {
        s += &format!("  bridge/plain p50 latency: median {m:.2}x\n");
    }
    s
}
