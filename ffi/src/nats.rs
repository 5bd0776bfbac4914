//! `rill_nats_bridge`: the NATS JetStream bridge (the `nats` feature),
//! declared in `include/rill_nats.h`.

use std::ffi::c_char;
use std::mem::size_of;
use std::time::Duration;

use rill_nats::{Bridge, BridgeConfig, ExportConfig, ImportConfig};

use crate::broker::rill_broker;
use crate::error::{FfiError, boundary, rill_status};
use crate::options::{self, OptionStruct};
use crate::text::copy_str;
use crate::util::{opt_cstr, out_ptr, reference, write_out};

/// A running bridge between a broker and a NATS server. Create it with
/// `rill_nats_bridge_new`, stop and free it with `rill_nats_bridge_free`.
/// Its functions may be called from any thread.
pub struct rill_nats_bridge {
    bridge: Bridge,
}

impl std::fmt::Debug for rill_nats_bridge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.bridge.fmt(f)
    }
}

/// How a bridge connects and what it carries. Fill it with
/// `rill_nats_options_init`, then set the fields you need. Export runs when
/// `export_pattern` is set, import when `import_stream` is set; at least one
/// must be. Strings are NUL-terminated UTF-8, copied by `rill_nats_bridge_new`;
/// NULL means the default.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct rill_nats_options {
    /// Set by `rill_nats_options_init`; do not change (see "Option structs" in rill.h).
    pub struct_size: u32,
    /// Server URL(s), comma-separated. Default `"nats://127.0.0.1:4222"`.
    pub url: *const c_char,
    /// User name, if the server asks for one (NULL: none).
    pub user: *const c_char,
    /// Password for `user` (NULL: none).
    pub password: *const c_char,
    /// Token, if the server asks for one (NULL: none).
    pub token: *const c_char,
    /// The broker's id in message ids; NULL makes one per bridge (see
    /// rill_nats.h's notes on duplicates).
    pub broker_id: *const c_char,
    /// How long `rill_nats_bridge_new` waits for the server, in ms. Default 5000.
    pub connect_timeout_ms: u32,
    /// How long a JetStream request or publish ack may take, in ms. Default 5000.
    pub request_timeout_ms: u32,
    /// Export: the rill pattern whose topics are exported (NULL: no export).
    pub export_pattern: *const c_char,
    /// Export: the stream that must capture the subjects.
    pub export_stream: *const c_char,
    /// Export: subjects are `prefix.<topic segments>` (NULL: no prefix).
    pub export_subject_prefix: *const c_char,
    /// Export: the durable rill subscription's name. Default `"nats-export"`.
    pub export_subscription: *const c_char,
    /// Import: the stream to read (NULL: no import).
    pub import_stream: *const c_char,
    /// Import: the durable pull consumer (created if missing). Default `"rill-import"`.
    pub import_consumer: *const c_char,
    /// Import: stripped from subjects before they map to topics (NULL: none).
    pub import_subject_prefix: *const c_char,
    /// Import: which subjects (NULL: everything under the prefix).
    pub import_subject_filter: *const c_char,
    /// Import: put before each mapped topic (NULL: nothing).
    pub import_topic_prefix: *const c_char,
    /// Import: messages per pull request; 0 means the default, 256.
    pub import_batch: u32,
    /// Import: the consumer's ack wait when the bridge creates it, in ms;
    /// 0 means the default, 10000.
    pub import_ack_wait_ms: u32,
}

// Field for field the Rust `rill_nats::BridgeStats`, whose field docs these
// are, word for word (`has_error` stands for its `last_error`), as
// ffi/tests/nats_stats.rs checks.
/// A snapshot of a bridge's counters.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct rill_nats_stats {
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
    /// Whether the bridge met a problem; `rill_nats_bridge_last_error`
    /// copies the last one (it stays after the bridge recovered).
    pub has_error: bool,
}

const DEFAULT_URL: &std::ffi::CStr = c"nats://127.0.0.1:4222";

// SAFETY: repr(C), leading u32 struct_size, fields any C value may fill
// (pointers and integers).
unsafe impl OptionStruct for rill_nats_options {
    const INIT: &'static str = "rill_nats_options_init";
    const FIRST_SIZE: usize = size_of::<rill_nats_options>();
    fn defaults() -> Self {
        let d = BridgeConfig::default();
        let null = std::ptr::null();
        rill_nats_options {
            struct_size: size_of::<Self>() as u32,
            url: DEFAULT_URL.as_ptr(),
            user: null,
            password: null,
            token: null,
            broker_id: null,
            connect_timeout_ms: d.connect_timeout.as_millis() as u32,
            request_timeout_ms: d.request_timeout.as_millis() as u32,
            export_pattern: null,
            export_stream: null,
            export_subject_prefix: null,
            export_subscription: null,
            import_stream: null,
            import_consumer: null,
            import_subject_prefix: null,
            import_subject_filter: null,
            import_topic_prefix: null,
            import_batch: 0,
            import_ack_wait_ms: 0,
        }
    }
}

/// Fills `o` with the defaults; `size` is the caller's
/// `sizeof(rill_nats_options)`. Call it as `rill_nats_options_init(o)`, the
/// macro that passes the size. NULL is a no-op.
///
/// # Safety
///
/// `o` is NULL or points to `size` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_nats_options_init_v1(o: *mut rill_nats_options, size: usize) {
    // SAFETY: forwarded from the caller.
    crate::error::boundary_value((), || unsafe { options::init(o, size) })
}

fn status_of(e: rill_nats::Error) -> FfiError {
    match e {
        rill_nats::Error::Rill(e) => e.into(),
        rill_nats::Error::InvalidConfig(_) | rill_nats::Error::Mapping(_) => FfiError::invalid(e.to_string()),
        rill_nats::Error::NotFound(_) => FfiError::new(rill_status::RILL_ERR_NOT_FOUND, e.to_string()),
        rill_nats::Error::Connect(_) | rill_nats::Error::JetStream(_) => {
            FfiError::new(rill_status::RILL_ERR_IO, e.to_string())
        }
    }
}

/// The bridge configuration the options describe.
///
/// # Safety
///
/// Every string field is NULL or a NUL-terminated string.
unsafe fn config(o: &rill_nats_options) -> Result<BridgeConfig, FfiError> {
    // SAFETY: the caller promises every field is NULL or a C string.
    let s = |p: *const c_char, what: &str| unsafe { opt_cstr(p, what) }.map(|v| v.map(str::to_owned));
    let ms = |v: u32, default: Duration| if v == 0 { default } else { Duration::from_millis(u64::from(v)) };
    let d = BridgeConfig::default();
    let mut c = BridgeConfig {
        url: s(o.url, "url")?.ok_or_else(|| FfiError::null("url"))?,
        user: s(o.user, "user")?,
        password: s(o.password, "password")?,
        token: s(o.token, "token")?,
        broker_id: s(o.broker_id, "broker_id")?,
        connect_timeout: ms(o.connect_timeout_ms, d.connect_timeout),
        request_timeout: ms(o.request_timeout_ms, d.request_timeout),
        ..d
    };
    if let Some(pattern) = s(o.export_pattern, "export_pattern")? {
        let stream = s(o.export_stream, "export_stream")?
            .ok_or_else(|| FfiError::invalid("export_pattern is set but export_stream is NULL"))?;
        let prefix = s(o.export_subject_prefix, "export_subject_prefix")?.unwrap_or_default();
        let mut e = ExportConfig::new(&pattern, &stream, &prefix);
        if let Some(name) = s(o.export_subscription, "export_subscription")? {
            e.subscription = name;
        }
        c.export = Some(e);
    }
    if let Some(stream) = s(o.import_stream, "import_stream")? {
        let prefix = s(o.import_subject_prefix, "import_subject_prefix")?.unwrap_or_default();
        let mut i = ImportConfig::new(&stream, &prefix);
        if let Some(name) = s(o.import_consumer, "import_consumer")? {
            i.consumer = name;
        }
        if let Some(filter) = s(o.import_subject_filter, "import_subject_filter")? {
            i.subject_filter = filter;
        }
        if let Some(topic_prefix) = s(o.import_topic_prefix, "import_topic_prefix")? {
            i.topic_prefix = topic_prefix;
        }
        if o.import_batch > 0 {
            i.batch = o.import_batch as usize;
        }
        i.ack_wait = ms(o.import_ack_wait_ms, i.ack_wait);
        c.import = Some(i);
    }
    Ok(c)
}

/// Connects to the server, checks the configuration against it and starts
/// the bridge. Every configuration problem fails here: a malformed value
/// (`RILL_ERR_INVALID_ARGUMENT`), a stream that does not exist
/// (`RILL_ERR_NOT_FOUND`), a server that cannot be reached or refuses the
/// credentials (`RILL_ERR_IO`). On success `*out` is the bridge; stop and
/// free it with `rill_nats_bridge_free` (before or after the broker: a
/// freed broker stops the bridge's rill side).
///
/// # Safety
///
/// `b` is a live broker; `o` is NULL or options filled by
/// `rill_nats_options_init`; `out` points to writable storage.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_nats_bridge_new(
    b: *mut rill_broker,
    o: *const rill_nats_options,
    out: *mut *mut rill_nats_bridge,
) -> rill_status {
    boundary(|| {
        out_ptr(out, "out")?;
        // SAFETY: the caller promises `b` is NULL or live and `o` NULL or valid.
        let (b, o) = unsafe { (reference(b, "broker")?, options::read(o)?) };
        let o = o.unwrap_or_else(rill_nats_options::defaults);
        // SAFETY: the caller promises the string fields are NULL or C strings.
        let config = unsafe { config(&o) }?;
        let bridge = Bridge::start(&b.broker, config).map_err(status_of)?;
        // SAFETY: checked non-NULL above; the caller promises it is writable.
        unsafe { write_out(out, Box::into_raw(Box::new(rill_nats_bridge { bridge }))) };
        Ok(())
    })
}

/// Fills `*out` with the bridge's counters.
///
/// # Safety
///
/// `bridge` is a live bridge; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_nats_bridge_get_stats(
    bridge: *const rill_nats_bridge,
    out: *mut rill_nats_stats,
) -> rill_status {
    boundary(|| {
        out_ptr(out, "out")?;
        // SAFETY: the caller's promise, checked for NULL.
        let s = unsafe { reference(bridge, "bridge") }?.bridge.stats();
        let stats = rill_nats_stats {
            exported: s.exported,
            imported: s.imported,
            in_flight: s.in_flight,
            reconnects: s.reconnects,
            rejected: s.rejected,
            export_lag: s.export_lag,
            has_error: s.last_error.is_some(),
        };
        // SAFETY: checked non-NULL; the caller promises it is writable.
        unsafe { write_out(out, stats) };
        Ok(())
    })
}

/// Copies the bridge's last problem (kept after it recovered) into `buf`
/// (at most `buf_len - 1` bytes, then a NUL) and returns its full length;
/// 0 when there was none, or `bridge` is NULL.
///
/// # Safety
///
/// `bridge` is NULL or a live bridge; `buf` is NULL or writable for `buf_len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_nats_bridge_last_error(
    bridge: *const rill_nats_bridge,
    buf: *mut c_char,
    buf_len: usize,
) -> usize {
    crate::error::boundary_value(0, || {
        // SAFETY: the caller promises `bridge` is NULL or live.
        let text = unsafe { bridge.as_ref() }.and_then(|b| b.bridge.stats().last_error).unwrap_or_default();
        copy_str(&text, buf, buf_len)
    })
}

/// Stops the bridge (what is in flight is published again on the next
/// start) and frees it. Blocks until its threads are done. NULL is a no-op.
///
/// # Safety
///
/// `bridge` is NULL or a bridge from `rill_nats_bridge_new` not yet freed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rill_nats_bridge_free(bridge: *mut rill_nats_bridge) {
    crate::error::boundary_value((), || {
        if !bridge.is_null() {
            // SAFETY: the caller hands back a pointer from
            // `rill_nats_bridge_new`, freed exactly once.
            drop(unsafe { Box::from_raw(bridge) });
        }
    })
}
