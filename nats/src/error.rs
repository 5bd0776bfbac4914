//! What went wrong, as the bridge reports it.

/// What went wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A configuration value is malformed.
    #[error("invalid bridge configuration: {0}")]
    InvalidConfig(String),
    /// The server could not be reached, or refused the connection
    /// (credentials).
    #[error("cannot connect to NATS: {0}")]
    Connect(String),
    /// A stream (or consumer) named in the configuration does not exist.
    #[error("not found in JetStream: {0}")]
    NotFound(String),
    /// A JetStream request failed.
    #[error("JetStream: {0}")]
    JetStream(String),
    /// A subject or header does not map to a rill topic, key or attribute.
    #[error("cannot map: {0}")]
    Mapping(String),
    /// rill refused a call.
    #[error(transparent)]
    Rill(#[from] rill::Error),
}

/// A `Result` with [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
