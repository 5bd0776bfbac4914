//! Sequences of C ABI calls driven by the fuzzer's bytes: brokers, topics,
//! publishes (single, batch, through a publisher), subscriptions (plain and
//! batch, with handlers that publish, read attributes, set reasons, retry
//! and dead-letter), waits, consumers and frees, in any order. The real
//! exported functions are called, compiled in from ffi/src.
//!
//! Checks: no panic escapes (a `RILL_ERR_PANIC` status fails the target), no
//! call hangs (every wait has a short timeout, the broker's publish timeout
//! is short), and statuses are ones the header lists.
//!
//! The C ABI's modules are compiled in as modules of this crate's root, as
//! in ffi/src/lib.rs (they refer to each other through `crate::`); a module
//! added there is added here too.
#![no_main]
#![allow(non_camel_case_types, unsafe_op_in_unsafe_fn, clippy::undocumented_unsafe_blocks, dead_code)]

#[path = "../../ffi/src/broker.rs"]
mod broker;
#[path = "../../ffi/src/consumer.rs"]
mod consumer;
#[path = "../../ffi/src/error.rs"]
mod error;
#[path = "../../ffi/src/group_member.rs"]
mod group_member;
#[path = "../../ffi/src/lag.rs"]
mod lag;
#[path = "../../ffi/src/legacy.rs"]
mod legacy;
#[path = "../../ffi/src/logging.rs"]
mod logging;
#[path = "../../ffi/src/message.rs"]
mod message;
#[path = "../../ffi/src/named_subscription.rs"]
mod named_subscription;
#[path = "../../ffi/src/notify.rs"]
mod notify;
#[path = "../../ffi/src/options.rs"]
mod options;
#[path = "../../ffi/src/priority.rs"]
mod priority;
#[path = "../../ffi/src/publish.rs"]
mod publish;
#[path = "../../ffi/src/publisher.rs"]
mod publisher;
#[path = "../../ffi/src/subscription.rs"]
mod subscription;
#[path = "../../ffi/src/subscription_options.rs"]
mod subscription_options;
#[path = "../../ffi/src/subscription_stats.rs"]
mod subscription_stats;
#[path = "../../ffi/src/text.rs"]
mod text;
#[path = "../../ffi/src/topic.rs"]
mod topic;
#[path = "../../ffi/src/util.rs"]
mod util;

use std::ffi::{CString, c_char, c_void};
use std::ptr;

use broker::*;
use consumer::*;
use error::rill_status;
use group_member::*;
use libfuzzer_sys::fuzz_target;
use message::*;
use lag::*;
use named_subscription::*;
use publish::*;
use publisher::*;
use subscription::*;
use subscription_options::*;
use subscription_stats::*;
use topic::*;

/// Reads the fuzzer's bytes as a stream of small choices.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }

    /// True about once in `n` times.
    fn one_in(&mut self, n: u8) -> bool {
        self.byte().unwrap_or(0).is_multiple_of(n)
    }

    fn pick<T: Copy>(&mut self, from: &[T]) -> T {
        from[self.byte().unwrap_or(0) as usize % from.len()]
    }

    /// A string: one of `known`, or (rarely) a few raw bytes without NUL.
    fn name(&mut self, known: &[&str]) -> CString {
        let b = self.byte().unwrap_or(0);
        if (b as usize) < known.len() * 32 {
            return CString::new(known[b as usize % known.len()]).unwrap();
        }
        let len = self.byte().unwrap_or(0) as usize % 12;
        let raw: Vec<u8> = (0..len).filter_map(|_| self.byte()).map(|b| if b == 0 { b'/' } else { b }).collect();
        CString::new(raw).unwrap()
    }
}

const TOPICS: &[&str] = &["a", "a/b", "b", "$dlq/x", "a/b/c"];
const PATTERNS: &[&str] = &["a", "a/*", "**", "a/**", "b", "*/b", "$dlq/**", "a/b"];
const GROUPS: &[&str] = &["g", "h", "g/1"];

/// What a subscription's handler does with each message.
#[derive(Clone, Copy)]
enum Mode {
    Ack,
    Retry,
    DeadLetter,
    Publish,
    ReadAll,
}

struct Ctx {
    broker: *mut rill_broker,
    mode: Mode,
}

fn check(status: rill_status) {
    assert!(status != rill_status::RILL_ERR_PANIC, "a call panicked: {}", last_error());
}

fn last_error() -> String {
    let mut buf = vec![0 as c_char; 512];
    error::copy_last_error(buf.as_mut_ptr(), buf.len());
    // SAFETY: copy_last_error NUL-terminates what it writes into `buf`.
    unsafe { std::ffi::CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned()
}

unsafe fn handle(ctx: *mut c_void, m: *const rill_message) -> rill_ack {
    let ctx = &*ctx.cast::<Ctx>();
    let m = &*m;
    assert!(m.payload_len == 0 || !m.payload.is_null());
    match ctx.mode {
        Mode::Ack => RILL_ACK_SUCCESS,
        Mode::Retry => RILL_ACK_RETRY,
        Mode::DeadLetter => {
            rill_ack_reason(m, c"poison".as_ptr());
            RILL_ACK_DEAD_LETTER
        }
        Mode::Publish => {
            let record = rill_record {
                key: ptr::null(),
                key_len: 0,
                payload: m.payload.cast(),
                payload_len: m.payload_len,
                attributes: ptr::null(),
                attribute_count: 0,
            };
            check(rill_publish(ctx.broker, c"b".as_ptr(), &record, ptr::null_mut()));
            RILL_ACK_SUCCESS
        }
        Mode::ReadAll => {
            let n = rill_message_attribute_count(m);
            for i in 0..n + 1 {
                let (mut k, mut kl, mut v, mut vl) = (ptr::null(), 0, ptr::null(), 0);
                check(rill_message_attribute_at(m, i, &mut k, &mut kl, &mut v, &mut vl));
            }
            let (mut v, mut vl) = (ptr::null(), 0);
            check(rill_message_attribute(m, c"k".as_ptr(), &mut v, &mut vl));
            RILL_ACK_SUCCESS
        }
    }
}

unsafe extern "C" fn handler(ctx: *mut c_void, m: *const rill_message) -> rill_ack {
    handle(ctx, m)
}

unsafe extern "C" fn batch_handler(ctx: *mut c_void, ms: *const rill_message, n: usize, acks: *mut rill_ack) -> usize {
    for i in 0..n {
        *acks.add(i) = handle(ctx, ms.add(i));
    }
    n
}

unsafe extern "C" fn each_name(_: *mut c_void, name: *const c_char) {
    assert!(!name.is_null());
}

unsafe extern "C" fn each_sub(_: *mut c_void, s: *const rill_subscription_stats) {
    assert!(!(*s).name.is_null() && !(*s).pattern.is_null());
}

unsafe extern "C" fn each_group(_: *mut c_void, group: *const c_char, topic: *const c_char) {
    assert!(!group.is_null() && !topic.is_null());
}

unsafe extern "C" fn each_named(_: *mut c_void, n: *const rill_named_subscription) {
    assert!(!(*n).name.is_null() && ((*n).held || (*n).holder_pid == 0));
}

unsafe extern "C" fn each_member(_: *mut c_void, m: *const rill_group_member) {
    let m = &*m;
    assert_eq!(m.partitions.is_null(), m.partition_count == 0);
    let parts = if m.partitions.is_null() { &[][..] } else { std::slice::from_raw_parts(m.partitions, m.partition_count) };
    assert!(parts.windows(2).all(|w| w[0] < w[1]), "partitions ascending");
}

unsafe extern "C" fn each_lag(_: *mut c_void, lag: *const rill_partition_lag) {
    assert_eq!((*lag).lag, (*lag).end.saturating_sub((*lag).position));
}

unsafe extern "C" fn free_ctx(ctx: *mut c_void) {
    drop(Box::from_raw(ctx.cast::<Ctx>()));
}

#[derive(Default)]
struct World {
    broker: Option<*mut rill_broker>,
    subs: Vec<*mut rill_subscription>,
    consumers: Vec<*mut rill_consumer>,
    publishers: Vec<*mut rill_publisher>,
}

impl World {
    unsafe fn step(&mut self, b: &mut Bytes<'_>) {
        let Some(broker) = self.broker else {
            let mut o = std::mem::zeroed::<rill_broker_options>();
            rill_broker_options_init_v1(&mut o, std::mem::size_of_val(&o));
            o.worker_threads = 1 + b.byte().unwrap_or(0) as u32 % 2;
            o.auto_create_topics = b.one_in(2);
            o.publish_timeout_ms = 20;
            let mut out = ptr::null_mut();
            check(rill_broker_new_v1(&o, &mut out));
            self.broker = Some(out);
            return;
        };
        let (key, value) = (b.name(&["k", "x"]), b.name(&["1", "2"]));
        let attribute = rill_attribute { key: key.as_ptr(), value: value.as_ptr() };
        let payload = [b.byte().unwrap_or(0); 3];
        let record = rill_record {
            key: payload.as_ptr().cast(),
            key_len: b.byte().unwrap_or(0) as usize % 2,
            payload: payload.as_ptr().cast(),
            payload_len: payload.len(),
            attributes: &attribute,
            attribute_count: b.byte().unwrap_or(0) as usize % 2,
        };
        match b.byte().unwrap_or(0) % 16 {
            0 => {
                let mut o = std::mem::zeroed::<rill_topic_options>();
                rill_topic_options_init_v1(&mut o, std::mem::size_of_val(&o));
                o.partitions = 1 + b.byte().unwrap_or(0) as u32 % 3;
                check(rill_topic_create_v1(broker, b.name(TOPICS).as_ptr(), &o));
            }
            1 => check(rill_publish(broker, b.name(TOPICS).as_ptr(), &record, ptr::null_mut())),
            2 => check(rill_try_publish(broker, b.name(TOPICS).as_ptr(), &record, ptr::null_mut())),
            3 => {
                let records = [record, record, record];
                let mut pos = [std::mem::zeroed::<rill_position>(); 3];
                check(rill_publish_batch(broker, b.name(TOPICS).as_ptr(), records.as_ptr(), 3, pos.as_mut_ptr()));
            }
            4 | 5 => {
                let mut o = std::mem::zeroed::<rill_subscription_options>();
                rill_subscription_options_init_v1(&mut o, std::mem::size_of_val(&o));
                let name = b.name(&["d1", "d2", "x/y"]);
                if b.one_in(3) {
                    o.name = name.as_ptr();
                }
                o.start = b.pick(&[RILL_START_LATEST, RILL_START_EARLIEST]);
                o.max_attempts = 1 + b.byte().unwrap_or(0) as u32 % 3;
                o.backoff_initial_ms = 0;
                o.backoff_max_ms = 1;
                o.overflow = b.pick(&[RILL_OVERFLOW_DROP_OLDEST, RILL_OVERFLOW_BLOCK, RILL_OVERFLOW_DISCONNECT]);
                o.lag_limit = b.byte().unwrap_or(0) as u64 % 4;
                o.dedicated_thread = b.one_in(4);
                let filter = c"attributes:k";
                if b.one_in(4) {
                    o.filter = filter.as_ptr();
                }
                o.user_data_free = Some(free_ctx);
                let mode = b.pick(&[Mode::Ack, Mode::Retry, Mode::DeadLetter, Mode::Publish, Mode::ReadAll]);
                let ctx = Box::into_raw(Box::new(Ctx { broker, mode })).cast::<c_void>();
                let pattern = b.name(PATTERNS);
                let mut out = ptr::null_mut();
                let status = if b.one_in(2) {
                    rill_subscribe_v1(broker, pattern.as_ptr(), &o, Some(handler), ctx, &mut out)
                } else {
                    rill_subscribe_batch_v1(broker, pattern.as_ptr(), &o, Some(batch_handler), ctx, &mut out)
                };
                check(status);
                if status == rill_status::RILL_OK {
                    self.subs.push(out);
                }
            }
            6 => {
                if !self.subs.is_empty() {
                    let i = b.byte().unwrap_or(0) as usize % self.subs.len();
                    rill_subscription_free(self.subs.swap_remove(i));
                }
            }
            7 => {
                if let Some(&s) = self.subs.get(b.byte().unwrap_or(0) as usize % self.subs.len().max(1)) {
                    check(rill_subscription_wait_idle(s, b.byte().unwrap_or(0) as i64 % 10));
                    let mut st = std::mem::zeroed::<rill_subscription_stats>();
                    // Sized getter: the whole struct, the first layout, or too small.
                    let full = std::mem::size_of::<rill_subscription_stats>();
                    let size = [full, 72, 16][b.byte().unwrap_or(0) as usize % 3];
                    check(rill_subscription_get_stats_v1(s, &mut st, size));
                    let mut buf = [0u8; 8];
                    rill_subscription_name(s, buf.as_mut_ptr().cast(), buf.len());
                    rill_subscription_closed_reason(s, buf.as_mut_ptr().cast(), buf.len());
                }
            }
            8 => {
                let mut out = ptr::null_mut();
                let status =
                    rill_consumer_new_v1(broker, b.name(GROUPS).as_ptr(), b.name(TOPICS).as_ptr(), ptr::null(), &mut out);
                check(status);
                if status == rill_status::RILL_OK {
                    self.consumers.push(out);
                }
            }
            9 => {
                if let Some(&c) = self.consumers.get(b.byte().unwrap_or(0) as usize % self.consumers.len().max(1)) {
                    let mut msgs = ptr::null();
                    let mut count = 0;
                    check(rill_consumer_poll(c, 1 + b.byte().unwrap_or(0) as usize % 8, 0, &mut msgs, &mut count));
                    match b.byte().unwrap_or(0) % 6 {
                        0 => check(rill_consumer_commit(c)),
                        1 => check(rill_consumer_seek(c, 0, b.byte().unwrap_or(0) as u64)),
                        2 => check(rill_consumer_rollback(c)),
                        // Members of one group: a nack anywhere, and the share.
                        3 => {
                            let (p, o) = (b.byte().unwrap_or(0) as u32 % 4, b.byte().unwrap_or(0) as u64);
                            check(rill_consumer_nack(c, p, o, ptr::null_mut()));
                        }
                        4 => {
                            let (mut parts, mut n) = ([0u32; 2], 0usize);
                            check(rill_consumer_assignment(c, parts.as_mut_ptr(), parts.len(), &mut n));
                        }
                        _ => check(rill_consumer_seek_to_beginning(c)),
                    }
                }
            }
            10 => {
                if !self.consumers.is_empty() {
                    let i = b.byte().unwrap_or(0) as usize % self.consumers.len();
                    rill_consumer_free(self.consumers.swap_remove(i));
                }
            }
            11 => {
                let mut out = ptr::null_mut();
                let status = rill_publisher_new(broker, b.name(TOPICS).as_ptr(), &mut out);
                check(status);
                if status == rill_status::RILL_OK {
                    self.publishers.push(out);
                }
            }
            12 => {
                if let Some(&p) = self.publishers.get(b.byte().unwrap_or(0) as usize % self.publishers.len().max(1)) {
                    check(rill_publisher_publish(p, &record, ptr::null_mut()));
                }
            }
            13 => {
                if !self.publishers.is_empty() {
                    let i = b.byte().unwrap_or(0) as usize % self.publishers.len();
                    rill_publisher_free(self.publishers.swap_remove(i));
                }
            }
            14 => match b.byte().unwrap_or(0) % 6 {
                0 => {
                    let mut st = std::mem::zeroed::<rill_topic_stats>();
                    // Sized getter: the whole struct, the first layout, or too small.
                    let full = std::mem::size_of::<rill_topic_stats>();
                    let size = [full, 24, 8][b.byte().unwrap_or(0) as usize % 3];
                    check(rill_topic_get_stats_v1(broker, b.name(TOPICS).as_ptr(), &mut st, size));
                }
                // Operating the broker while everything else goes on.
                1 => check(rill_topic_delete(broker, b.name(TOPICS).as_ptr())),
                2 => {
                    check(rill_topic_list(broker, Some(each_name), ptr::null_mut()));
                    check(rill_subscription_list(broker, Some(each_sub), ptr::null_mut()));
                    check(rill_group_list(broker, Some(each_group), ptr::null_mut()));
                    check(rill_group_partitions(
                        broker,
                        b.name(GROUPS).as_ptr(),
                        b.name(TOPICS).as_ptr(),
                        Some(each_lag),
                        ptr::null_mut(),
                    ));
                    check(rill_named_subscription_list(broker, Some(each_named), ptr::null_mut()));
                    check(rill_group_member_list(
                        broker,
                        b.name(GROUPS).as_ptr(),
                        b.name(TOPICS).as_ptr(),
                        Some(each_member),
                        ptr::null_mut(),
                    ));
                }
                3 => {
                    check(rill_durable_delete(broker, b.name(&["d1", "d2", "x/y"]).as_ptr()));
                    check(rill_group_delete(broker, b.name(GROUPS).as_ptr(), b.name(TOPICS).as_ptr()));
                }
                4 => {
                    if let Some(&c) = self.consumers.get(b.byte().unwrap_or(0) as usize % self.consumers.len().max(1)) {
                        let t = (b.byte().unwrap_or(0) as i64 - 128) << 56;
                        check(rill_consumer_seek_time(c, b.byte().unwrap_or(0) as u32 % 2, t));
                    }
                }
                _ => {
                    let mut o = std::mem::zeroed::<rill_topic_options>();
                    rill_topic_options_init_v1(&mut o, std::mem::size_of_val(&o));
                    o.retention_ms = 1 + b.byte().unwrap_or(0) as u64 % 3;
                    check(rill_topic_create_v1(broker, b.name(TOPICS).as_ptr(), &o));
                }
            },
            _ => {
                if b.one_in(8) {
                    rill_broker_close(broker);
                }
            }
        }
    }

    /// Frees everything, in an order the bytes choose: handles first, or
    /// the broker first (which closes them; they are still freed after).
    unsafe fn finish(mut self, broker_first: bool) {
        if broker_first && let Some(b) = self.broker.take() {
            rill_broker_close(b);
        }
        for s in self.subs.drain(..) {
            rill_subscription_free(s);
        }
        for c in self.consumers.drain(..) {
            rill_consumer_free(c);
        }
        for p in self.publishers.drain(..) {
            rill_publisher_free(p);
        }
        if let Some(b) = self.broker.take() {
            rill_broker_free(b);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut bytes = Bytes(data);
    let mut world = World::default();
    let broker_first = data.first().is_some_and(|b| b % 2 == 1);
    // SAFETY: every handle passed is live (freed handles leave the world).
    unsafe {
        for _ in 0..48 {
            if bytes.0.is_empty() {
                break;
            }
            world.step(&mut bytes);
        }
        let broker = world.broker;
        world.finish(broker_first);
        if broker_first && let Some(b) = broker {
            rill_broker_free(b);
        }
    }
});
