//! Payloads as the peers carry them: the types a user of each would send.

use std::sync::Arc;

use serde::Serialize;

use crate::measure::Shape;

/// How peers carry a payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum PeerPayload {
    /// What a user of the peer would send: a fixed-size array by value
    /// (`[u8; 64]`) with one subscriber, an `Arc<[u8]>` shared by reference
    /// count when fanning out to several.
    Auto,
    /// `Vec<u8>`: a fresh buffer per message, cloned per subscriber when fanned out.
    Vec,
    /// `Arc<[u8]>`: one buffer per message, shared by reference count.
    Arc,
    /// A fixed-size array by value (`[u8; 64]` for 64-byte payloads; the
    /// payload size rounded up to 64, 256, 1024 or 4096 bytes, with a length):
    /// no allocation at all, the cheapest way to send small messages.
    Array,
}

/// The largest payload `PeerPayload::Array` carries.
pub const MAX_ARRAY_PAYLOAD: usize = 4096;

/// A payload as peers carry it: a byte buffer, cloned per subscriber.
pub trait Payload: Clone + Send + Sync + 'static {
    /// A new payload with these bytes.
    fn copy_from(bytes: &[u8]) -> Self;
    /// Its bytes.
    fn bytes(&self) -> &[u8];
}

impl Payload for Vec<u8> {
    #[inline]
    fn copy_from(bytes: &[u8]) -> Self {
        bytes.to_vec()
    }
    #[inline]
    fn bytes(&self) -> &[u8] {
        self
    }
}

impl Payload for Arc<[u8]> {
    #[inline]
    fn copy_from(bytes: &[u8]) -> Self {
        Arc::from(bytes)
    }
    #[inline]
    fn bytes(&self) -> &[u8] {
        self
    }
}

impl<const N: usize> Payload for [u8; N] {
    #[inline]
    fn copy_from(bytes: &[u8]) -> Self {
        let mut a = [0u8; N];
        a.copy_from_slice(bytes);
        a
    }
    #[inline]
    fn bytes(&self) -> &[u8] {
        self
    }
}

impl PeerPayload {
    /// The payload type peers carry in `shape` (resolves `Auto`).
    pub fn resolve(self, shape: &Shape) -> PeerPayload {
        match self {
            PeerPayload::Auto if shape.subscribers > 1 => PeerPayload::Arc,
            PeerPayload::Auto => PeerPayload::Array,
            p => p,
        }
    }

    /// The Rust type, for tables ("[u8; 64]", "Arc<[u8]>", ...).
    pub fn type_name(self, shape: &Shape) -> String {
        match self.resolve(shape) {
            PeerPayload::Vec => "Vec<u8>".into(),
            PeerPayload::Arc => "Arc<[u8]>".into(),
            _ if matches!(shape.payload, 64 | 256 | 1024 | 4096) => format!("[u8; {}]", shape.payload),
            _ => "Inline<[u8; N]> (array + length)".into(),
        }
    }
}

/// A payload held by value in an array of `N` bytes, of which the first
/// `len` are the payload (sizes that are not exactly 64, 256, 1024 or 4096;
/// those travel as a bare `[u8; N]`).
#[derive(Debug, Clone, Copy)]
pub struct Inline<const N: usize> {
    len: usize,
    buf: [u8; N],
}

impl<const N: usize> Payload for Inline<N> {
    #[inline]
    fn copy_from(bytes: &[u8]) -> Self {
        let mut buf = [0u8; N];
        buf[..bytes.len()].copy_from_slice(bytes);
        Inline { len: bytes.len(), buf }
    }
    #[inline]
    fn bytes(&self) -> &[u8] {
        &self.buf[..self.len]
    }
}
