//! The connection to the NATS server: connecting (credentials, the
//! reconnect backoff, one deadline for the whole start), counting
//! reconnects and recording connection problems as they happen, and the
//! JetStream context the bridge's parts publish and pull through.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use async_nats::jetstream;

use crate::config::BridgeConfig;
use crate::error::{Error, Result};
use crate::shared::{Shared, backoff};

/// Publishes to JetStream awaiting their acks, at most (async-nats makes a
/// publish wait for room beyond it).
const MAX_ACKS_IN_FLIGHT: usize = 4096;

/// Connects to the server(s) of `config`, within `connect_timeout` in all;
/// afterwards the client reconnects by itself, and its events update
/// `shared` (reconnects, the last error).
pub(crate) async fn connect(config: &BridgeConfig, shared: Arc<Shared>) -> Result<async_nats::Client> {
    let events = shared.clone();
    let delay = config.reconnect_delay;
    let mut options = async_nats::ConnectOptions::new()
        .name("rill-nats")
        .connection_timeout(config.connect_timeout)
        .request_timeout(Some(config.request_timeout))
        .reconnect_delay_callback(move |attempt| backoff(delay, attempt))
        .event_callback(move |event| {
            let shared = events.clone();
            async move {
                match event {
                    async_nats::Event::Disconnected => {
                        shared.disconnected.store(true, Ordering::Relaxed);
                        shared.record_error("disconnected from the NATS server");
                    }
                    // Relaxed: one flag, read and written by the client's
                    // event task only.
                    async_nats::Event::Connected if shared.disconnected.swap(false, Ordering::Relaxed) => {
                        shared.reconnects.fetch_add(1, Ordering::Relaxed);
                    }
                    async_nats::Event::ServerError(e) => shared.record_error(format!("server error: {e}")),
                    async_nats::Event::ClientError(e) => shared.record_error(format!("client error: {e}")),
                    _ => {}
                }
            }
        });
    if let Some(token) = &config.token {
        options = options.token(token.clone());
    }
    if let (Some(user), password) = (&config.user, &config.password) {
        options = options.user_and_password(user.clone(), password.clone().unwrap_or_default());
    }
    let addrs: Vec<async_nats::ServerAddr> = config.url.split(',').filter_map(|u| u.trim().parse().ok()).collect();
    // connection_timeout bounds each attempt; this bounds the whole start.
    match tokio::time::timeout(config.connect_timeout, options.connect(addrs)).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(e)) => Err(Error::Connect(match e.kind() {
            async_nats::ConnectErrorKind::AuthorizationViolation | async_nats::ConnectErrorKind::Authentication => {
                format!("{} refused the credentials: {e}", config.url)
            }
            _ => format!("{}: {e}", config.url),
        })),
        Err(_) => Err(Error::Connect(format!("{}: no answer within {:?}", config.url, config.connect_timeout))),
    }
}

/// The JetStream context over `client`: requests time out after
/// `request_timeout`, and a publish waits while `MAX_ACKS_IN_FLIGHT` acks
/// are awaited. Call it inside the bridge's runtime: the context spawns its
/// ack-handling task there.
pub(crate) fn jetstream(client: &async_nats::Client, config: &BridgeConfig) -> jetstream::Context {
    jetstream::ContextBuilder::new()
        .timeout(config.request_timeout)
        .max_ack_inflight(MAX_ACKS_IN_FLIGHT)
        .backpressure_on_inflight(true)
        .build(client.clone())
}
