//! What the bridge's parts (its start and stop, its connection, export and
//! import) share: the counters, the stop signal and the retry delays.

use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Duration;

use async_nats::jetstream;
use tokio::sync::watch;

use crate::error::Error;

/// What the bridge's parts share: counters and the stop signal.
pub(crate) struct Shared {
    pub(crate) exported: AtomicU64,
    pub(crate) imported: AtomicU64,
    pub(crate) in_flight: AtomicU64,
    pub(crate) reconnects: AtomicU64,
    pub(crate) rejected: AtomicU64,
    /// Set on `Disconnected`, cleared on `Connected`: a `Connected` that
    /// clears it is a reconnect (the first connect raises no event).
    pub(crate) disconnected: AtomicBool,
    pub(crate) last_error: Mutex<Option<String>>,
    pub(crate) stop: watch::Sender<bool>,
    /// Delays between attempts of a failed publish (export) or pull (import).
    pub(crate) retry_delay: (Duration, Duration),
}

impl Shared {
    pub(crate) fn record_error(&self, e: impl fmt::Display) {
        *self.last_error.lock().unwrap_or_else(|p| p.into_inner()) = Some(e.to_string());
    }

    pub(crate) fn stop_signal(&self) -> watch::Receiver<bool> {
        self.stop.subscribe()
    }

    /// The wait before attempt `attempt + 1` (`attempt` >= 1).
    pub(crate) fn retry_after(&self, attempt: u32) -> Duration {
        backoff(self.retry_delay, attempt as usize)
    }
}

/// `initial * 2^(attempt-1)`, at most `max`.
pub(crate) fn backoff((initial, max): (Duration, Duration), attempt: usize) -> Duration {
    let shift = attempt.saturating_sub(1).min(20) as u32;
    initial.saturating_mul(1 << shift).min(max)
}

/// Resolves when `stop` is raised (or the bridge is gone).
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

pub(crate) fn stream_error(name: &str, err: jetstream::context::GetStreamError) -> Error {
    match err.kind() {
        jetstream::context::GetStreamErrorKind::JetStream(j)
            if j.error_code() == jetstream::ErrorCode::STREAM_NOT_FOUND =>
        {
            Error::NotFound(format!("stream {name:?} does not exist"))
        }
        _ => Error::JetStream(format!("stream {name:?}: {err}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_max() {
        let d = (Duration::from_millis(10), Duration::from_millis(100));
        assert_eq!(backoff(d, 0), Duration::from_millis(10));
        assert_eq!(backoff(d, 1), Duration::from_millis(10));
        assert_eq!(backoff(d, 2), Duration::from_millis(20));
        assert_eq!(backoff(d, 4), Duration::from_millis(80));
        assert_eq!(backoff(d, 5), Duration::from_millis(100));
        assert_eq!(backoff(d, 1000), Duration::from_millis(100));
    }
}
