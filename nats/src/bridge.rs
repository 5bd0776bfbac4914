//! The bridge: its runtime, counters, configuration checks, start and
//! stop. The connection to the server is conn.rs's.

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_nats::jetstream;
use tokio::sync::watch;

use crate::config::{BridgeConfig, ExportConfig, ImportConfig};
use crate::conn;
use crate::error::{Error, Result};
use crate::export::Exporter;
use crate::import::Importer;
use crate::shared::{Shared, stopped, stream_error};
use crate::subject::{validate_filter, validate_prefix};

/// Tokio worker threads of a bridge's runtime: the client's reader and
/// writer tasks and the ack futures; the rill sides run on threads of their
/// own and only wait on the runtime.
const RUNTIME_THREADS: usize = 2;

/// How often the bridge looks whether its broker was closed.
const BROKER_WATCH: Duration = Duration::from_millis(20);

/// How long `stop` gives the client to send what it has buffered (import's
/// last acks) before the runtime is shut down.
const FLUSH_ON_STOP: Duration = Duration::from_secs(2);

// The C ABI's `rill_nats_stats` (ffi/src/nats.rs) repeats these field docs
// word for word, as ffi/tests/nats_stats.rs checks.
/// A snapshot of a bridge's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BridgeStats {
    /// rill messages JetStream acknowledged as stored (one the bridge stopped
    /// before acknowledging to rill is exported again at the next start, and
    /// counted again).
    pub exported: u64,
    /// JetStream messages published into rill, each then acknowledged to
    /// JetStream (a redelivery the bridge recognises is acknowledged without
    /// being published again or counted).
    pub imported: u64,
    /// Publishes awaiting JetStream's ack plus imported messages awaiting
    /// rill's publish.
    pub in_flight: u64,
    /// Times the connection came back after it was lost.
    pub reconnects: u64,
    /// Messages that can never cross (dead-lettered in rill on export,
    /// terminated in JetStream on import).
    pub rejected: u64,
    /// The export subscription's lag: messages in rill's log it has not yet
    /// handled (had stored in JetStream, or passed over as imported); they
    /// wait there while the server is away. 0 without export.
    pub export_lag: u64,
    /// The last problem met, if any (it stays after the bridge recovered).
    pub last_error: Option<String>,
}

/// A running bridge between a rill broker and a NATS server. Stops on
/// [`Bridge::stop`] or when dropped.
pub struct Bridge {
    shared: Arc<Shared>,
    broker_id: String,
    export: Option<rill::Subscription>,
    import: Option<JoinHandle<()>>,
    client: async_nats::Client,
    runtime: Option<tokio::runtime::Runtime>,
}

impl fmt::Debug for Bridge {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bridge").field("broker_id", &self.broker_id).field("stats", &self.stats()).finish()
    }
}

impl Bridge {
    /// Connects to the server, checks the configuration against it and starts
    /// export and import. Every configuration problem is an error here.
    pub fn start(broker: &rill::Broker, config: BridgeConfig) -> Result<Bridge> {
        check_config(&config)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(RUNTIME_THREADS)
            .thread_name("rill-nats")
            .enable_all()
            .build()
            .map_err(|e| Error::Rill(rill::Error::ResourceExhausted(format!("cannot start the NATS runtime: {e}"))))?;
        let (stop, _) = watch::channel(false);
        let shared = Arc::new(Shared {
            exported: AtomicU64::new(0),
            imported: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            disconnected: AtomicBool::new(false),
            last_error: Mutex::new(None),
            stop,
            retry_delay: config.reconnect_delay,
        });
        let client = runtime.block_on(conn::connect(&config, shared.clone()))?;
        // The context spawns its ack-handling task on the runtime.
        let _entered = runtime.enter();
        let js = conn::jetstream(&client, &config);
        let broker_id = config.broker_id.clone().unwrap_or_else(default_broker_id);
        let mut bridge =
            Bridge { shared: shared.clone(), broker_id, export: None, import: None, client, runtime: None };
        // Checked before anything starts, so a failed start leaves nothing
        // running: the import consumer is created (an idempotent request),
        // the export stream looked up.
        let importer = match &config.import {
            Some(ic) => Some(runtime.block_on(Importer::prepare(&js, ic, broker, shared.clone()))?),
            None => None,
        };
        if let Some(ec) = &config.export {
            runtime.block_on(check_export_stream(&js, ec))?;
        }
        if let Some(ec) = &config.export {
            let exporter = Exporter::new(js.clone(), runtime.handle().clone(), shared.clone(), ec, &bridge.broker_id);
            bridge.export = Some(exporter.subscribe(broker, ec)?);
        }
        // A broker closed under the bridge stops it: the export handler (which
        // the close waits for) must not go on retrying a publish meanwhile.
        let watched = broker.clone();
        let watcher = shared.clone();
        let mut stop_watch = shared.stop_signal();
        runtime.spawn(async move {
            let mut tick = tokio::time::interval(BROKER_WATCH);
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        if watched.is_closed() {
                            watcher.record_error("the broker was closed: the bridge stopped");
                            watcher.stop.send_replace(true);
                            return;
                        }
                    }
                    () = stopped(&mut stop_watch) => return,
                }
            }
        });
        if let Some(importer) = importer {
            let handle = runtime.handle().clone();
            let thread = std::thread::Builder::new()
                .name("rill-nats-import".into())
                .spawn(move || importer.run(&handle))
                .map_err(|e| rill::Error::ResourceExhausted(format!("cannot start the import thread: {e}")));
            match thread {
                Ok(t) => bridge.import = Some(t),
                Err(e) => {
                    bridge.runtime = Some(runtime);
                    return Err(e.into());
                }
            }
        }
        bridge.runtime = Some(runtime);
        Ok(bridge)
    }

    /// The id in this bridge's message ids (configured or made at start).
    pub fn broker_id(&self) -> &str {
        &self.broker_id
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> BridgeStats {
        let s = &self.shared;
        // Relaxed: statistics.
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        BridgeStats {
            exported: get(&s.exported),
            imported: get(&s.imported),
            in_flight: get(&s.in_flight),
            reconnects: get(&s.reconnects),
            rejected: get(&s.rejected),
            export_lag: self.export.as_ref().map_or(0, |sub| sub.stats().lag),
            last_error: s.last_error.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        }
    }

    /// Stops export and import: what is in flight is left unacknowledged on
    /// both sides (it is published again on the next start), the client
    /// flushes its buffered acks, and the runtime shuts down. Blocks until
    /// done.
    pub fn stop(self) {
        drop(self);
    }

    fn shutdown(&mut self) {
        self.shared.stop.send_replace(true);
        // Wakes the export handler, then waits for its call in flight.
        if let Some(sub) = self.export.take() {
            sub.close();
        }
        if let Some(t) = self.import.take() {
            let _ = t.join();
        }
        if let Some(rt) = self.runtime.take() {
            let client = self.client.clone();
            rt.block_on(async move {
                let _ = tokio::time::timeout(FLUSH_ON_STOP, client.flush()).await;
            });
            rt.shutdown_timeout(FLUSH_ON_STOP);
        }
    }
}

impl Drop for Bridge {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Checks every value that can be checked without the server.
fn check_config(config: &BridgeConfig) -> Result<()> {
    if config.url.trim().is_empty() {
        return Err(Error::InvalidConfig("the server URL is empty".into()));
    }
    for url in config.url.split(',') {
        url.trim()
            .parse::<async_nats::ServerAddr>()
            .map_err(|e| Error::InvalidConfig(format!("malformed server URL {url:?}: {e}")))?;
    }
    if config.password.is_some() && config.user.is_none() {
        return Err(Error::InvalidConfig("a password without a user".into()));
    }
    if config.export.is_none() && config.import.is_none() {
        return Err(Error::InvalidConfig("neither export nor import is configured".into()));
    }
    if let Some(id) = &config.broker_id
        && (id.is_empty() || id.bytes().any(|b| !(0x21..0x7f).contains(&b)))
    {
        return Err(Error::InvalidConfig(format!("broker id {id:?} must be non-empty printable ASCII")));
    }
    if let Some(e) = &config.export {
        check_export(e)?;
    }
    if let Some(i) = &config.import {
        check_import(i)?;
    }
    Ok(())
}

fn check_export(e: &ExportConfig) -> Result<()> {
    if e.stream.is_empty() {
        return Err(Error::InvalidConfig("the export stream name is empty".into()));
    }
    validate_prefix(&e.subject_prefix, "export subject prefix")?;
    rill::Pattern::parse(&e.pattern).map_err(|err| Error::InvalidConfig(format!("export pattern: {err}")))?;
    Ok(())
}

fn check_import(i: &ImportConfig) -> Result<()> {
    if i.stream.is_empty() || i.consumer.is_empty() {
        return Err(Error::InvalidConfig("the import stream and consumer names must not be empty".into()));
    }
    if i.consumer.bytes().any(|b| b <= b' ' || b == b'.' || b == b'*' || b == b'>') {
        return Err(Error::InvalidConfig(format!("import consumer name {:?} is not a valid durable name", i.consumer)));
    }
    if i.batch == 0 {
        return Err(Error::InvalidConfig("the import batch must be at least 1".into()));
    }
    validate_prefix(&i.subject_prefix, "import subject prefix")?;
    validate_filter(&i.subject_filter)?;
    if !i.subject_prefix.is_empty() && !filter_under_prefix(&i.subject_filter, &i.subject_prefix) {
        return Err(Error::InvalidConfig(format!(
            "import subject filter {:?} is not under the subject prefix {:?}: its subjects would map to no topic",
            i.subject_filter, i.subject_prefix
        )));
    }
    if !i.topic_prefix.is_empty() && i.topic_prefix.split('/').any(|s| s.is_empty() || s.contains(['*', '\0'])) {
        return Err(Error::InvalidConfig(format!("import topic prefix {:?} is not a topic name", i.topic_prefix)));
    }
    Ok(())
}

/// Whether every subject `filter` matches lies strictly under `prefix`.
fn filter_under_prefix(filter: &str, prefix: &str) -> bool {
    let p: Vec<&str> = prefix.split('.').collect();
    let f: Vec<&str> = filter.split('.').collect();
    f.len() > p.len() && f.iter().zip(&p).all(|(a, b)| a == b)
}

/// Whether the stream subject `s` captures every subject under `prefix`.
pub(crate) fn covers(s: &str, prefix: &str) -> bool {
    let p: Vec<&str> = if prefix.is_empty() { Vec::new() } else { prefix.split('.').collect() };
    for (i, token) in s.split('.').enumerate() {
        if token == ">" {
            return true;
        }
        match p.get(i) {
            Some(pt) if token == "*" || token == *pt => {}
            _ => return false,
        }
    }
    false
}

async fn check_export_stream(js: &jetstream::Context, e: &ExportConfig) -> Result<()> {
    let mut stream = js.get_stream(&e.stream).await.map_err(|err| stream_error(&e.stream, err))?;
    let info = stream.info().await.map_err(|err| Error::JetStream(format!("stream {:?}: {err}", e.stream)))?;
    if !info.config.subjects.iter().any(|s| covers(s, &e.subject_prefix)) {
        return Err(Error::InvalidConfig(format!(
            "stream {:?} (subjects {:?}) does not capture the export subjects {:?}",
            e.stream,
            info.config.subjects,
            crate::subject::all_under(&e.subject_prefix)
        )));
    }
    Ok(())
}

/// A broker id for one start: the process id, the time and a count of
/// starts in this process, in hex; never the same twice.
fn default_broker_id() -> String {
    static STARTS: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    // Relaxed: only uniqueness matters.
    let n = STARTS.fetch_add(1, Ordering::Relaxed);
    format!("rill-{:x}-{nanos:x}-{n:x}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_subjects_cover_prefixes() {
        assert!(covers(">", "a.b"));
        assert!(covers("a.>", "a.b"));
        assert!(covers("a.b.>", "a.b"));
        assert!(covers("*.b.>", "a.b"));
        assert!(!covers("a.b", "a.b"));
        assert!(!covers("a.b.*", "a.b"));
        assert!(!covers("a.c.>", "a.b"));
        assert!(!covers("a.b.c.>", "a.b"));
        assert!(covers(">", ""));
        assert!(!covers("a.>", ""));
    }

    #[test]
    fn filters_must_lie_under_the_prefix() {
        assert!(filter_under_prefix("a.b.>", "a.b"));
        assert!(filter_under_prefix("a.b.*.x", "a.b"));
        assert!(!filter_under_prefix("a.b", "a.b"));
        assert!(!filter_under_prefix("a.>", "a.b"));
        assert!(!filter_under_prefix("c.b.>", "a.b"));
    }

    #[test]
    fn bad_configuration_is_refused_before_connecting() {
        let export = Some(ExportConfig::new("a/*", "S", "p"));
        let cases = [
            BridgeConfig { url: "".into(), export: export.clone(), ..Default::default() },
            BridgeConfig { url: "nats://host:notaport".into(), export: export.clone(), ..Default::default() },
            BridgeConfig::default(),
            BridgeConfig { export: Some(ExportConfig::new("a/*", "S", "p..q")), ..Default::default() },
            BridgeConfig { export: Some(ExportConfig::new("a/**x", "S", "p")), ..Default::default() },
            BridgeConfig {
                import: Some(ImportConfig { subject_filter: "other.>".into(), ..ImportConfig::new("S", "p") }),
                ..Default::default()
            },
            BridgeConfig {
                import: Some(ImportConfig { subject_filter: "p.>.x".into(), ..ImportConfig::new("S", "p") }),
                ..Default::default()
            },
            BridgeConfig {
                import: Some(ImportConfig { topic_prefix: "a//b".into(), ..ImportConfig::new("S", "p") }),
                ..Default::default()
            },
            BridgeConfig { broker_id: Some("a b".into()), export: export.clone(), ..Default::default() },
        ];
        for config in cases {
            let err = check_config(&config).expect_err(&format!("{config:?}"));
            assert!(matches!(err, Error::InvalidConfig(_)), "{config:?}: {err}");
        }
        check_config(&BridgeConfig { export, ..Default::default() }).unwrap();
    }
}
