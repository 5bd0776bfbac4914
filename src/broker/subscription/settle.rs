//! Settling messages: what each acknowledgement does (success, a retry
//! after a backoff, a dead letter), and calling user code so that a panic
//! becomes a retry instead of taking the drainer down.

use std::any::Any;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::time::Duration;

use super::core::{Retry, SubCore, Tally};
use super::options::{Ack, BatchHandler, DeliveryMode, LagCallback, Message};
use crate::broker::dead_letter::{self, Failed};
use crate::broker::partition::in_handler::InHandler;
use crate::broker::topic::Wait;
use crate::error::{Error, Result};

/// What one acknowledgement means for the rest of a batch.
pub(super) enum Settled {
    /// Go on with the next message.
    Next,
    /// Stop the drain, put the cursor back at `rewind`, and back off for
    /// `delay` before delivering it again.
    Stop { rewind: u64, delay: Duration },
}

/// Where a subscription closed while its handler ran resumes: at the
/// unacknowledged message (at least once), or after it (at most once).
pub(super) fn unacked_resume(core: &SubCore, offset: u64) -> u64 {
    match core.delivery {
        DeliveryMode::AtLeastOnce => offset,
        DeliveryMode::AtMostOnce => offset + 1,
    }
}

/// Applies one acknowledgement: counts it, schedules a redelivery or
/// dead-letters the message. `Stop` means the drain must stop and put
/// the cursor back at `rewind`.
///
/// A success is settled inline (it is every message's path when handlers
/// succeed): counted, and a pending retry, which can only be of this
/// message, is done. With at-most-once there is never a pending retry.
#[inline(always)]
pub(super) fn settle(
    core: &SubCore,
    ack: Ack,
    msg: &Message<'_>,
    i: usize,
    retry: &mut Option<Retry>,
    tally: &mut Tally,
) -> Settled {
    if ack == Ack::Success {
        tally.acked += 1;
        if retry.is_some() {
            *retry = None;
        }
        return Settled::Next;
    }
    settle_failure(core, ack, msg, i, retry, tally)
}

/// `settle` for a `Retry` or a `DeadLetter`.
#[inline(never)]
fn settle_failure(
    core: &SubCore,
    ack: Ack,
    msg: &Message<'_>,
    i: usize,
    retry: &mut Option<Retry>,
    tally: &mut Tally,
) -> Settled {
    let (offset, attempt) = (msg.offset(), msg.attempt());
    let ack = match (core.delivery, ack) {
        (DeliveryMode::AtMostOnce, Ack::Success) => {
            tally.acked += 1;
            return Settled::Next;
        }
        (DeliveryMode::AtMostOnce, Ack::Retry) => {
            tally.dropped += 1;
            return Settled::Next;
        }
        (_, ack) => ack,
    };
    let backoff = |retry: &mut Option<Retry>, reason: Option<String>| {
        *retry = Some(Retry { reader: i, offset, attempt: attempt + 1, reason });
        Settled::Stop { rewind: offset, delay: core.backoff.delay(attempt) }
    };
    match ack {
        Ack::Success => {
            tally.acked += 1;
            *retry = None;
            Settled::Next
        }
        Ack::Retry if attempt < core.max_attempts => {
            tally.retried += 1;
            let reason = msg.reason.take();
            note_handler_error(core, msg, reason.as_deref().unwrap_or("the handler asked for a retry"));
            backoff(retry, reason)
        }
        Ack::Retry | Ack::DeadLetter => {
            let why = msg.reason.take().unwrap_or_else(|| {
                if ack == Ack::Retry {
                    format!("gave up after {attempt} attempts")
                } else {
                    "dead-lettered by the handler".into()
                }
            });
            note_handler_error(core, msg, &why);
            let published = dead_letter(core, msg, &why);
            if !matches!(published, Err(Error::Full(_) | Error::Timeout)) || core.delivery != DeliveryMode::AtLeastOnce
            {
                alert_dead_letter(core, msg, &why);
            }
            match published {
                Ok(()) => {
                    tally.dead_lettered += 1;
                    ::log::warn!(
                        target: "rill::subscription",
                        "subscription {:?} dead-lettered {} partition {} offset {}: {why}",
                        core.name,
                        msg.topic(),
                        msg.partition(),
                        offset
                    );
                }
                Err(e @ (Error::Full(_) | Error::Timeout)) if core.delivery == DeliveryMode::AtLeastOnce => {
                    // The dead-letter topic cannot take it now (a Block
                    // subscriber of its own): keep the message at the head
                    // and try again after a backoff; nothing is lost.
                    core.set_last_error(format!("dead-lettering offset {offset} deferred: {e}"));
                    return backoff(retry, Some(why));
                }
                Err(e) => {
                    ::log::error!(
                        target: "rill::subscription",
                        "subscription {:?} could not dead-letter {} partition {} offset {} ({why}): {e}; \
                         the message is dropped",
                        core.name,
                        msg.topic(),
                        msg.partition(),
                        offset
                    );
                    core.set_last_error(format!("dead-lettering offset {offset} failed: {e}"));
                    tally.dropped += 1;
                }
            }
            *retry = None;
            Settled::Next
        }
    }
}

/// Keeps the text of the handler's latest failure (a retry, a panic, a
/// dead letter) for `SubscriptionStats::last_error`. Only failures come
/// here, never a success, so the lock and the text cost nothing on the
/// path of messages that are handled.
fn note_handler_error(core: &SubCore, msg: &Message<'_>, reason: &str) {
    ::log::debug!(
        target: "rill::subscription",
        "subscription {:?}: the handler failed on {} partition {} offset {} (attempt {}): {reason}",
        core.name,
        msg.topic(),
        msg.partition(),
        msg.offset(),
        msg.attempt()
    );
    core.set_last_error(format!(
        "{} partition {} offset {} (attempt {}): {reason}",
        msg.topic(),
        msg.partition(),
        msg.offset(),
        msg.attempt()
    ));
}

/// Calls `on_dead_letter` (if any) the way handlers are called: marked as
/// inside this subscription, with a panic caught and dropped (the
/// message is dead-lettered either way).
fn alert_dead_letter(core: &SubCore, msg: &Message<'_>, reason: &str) {
    let Some(cb) = core.on_dead_letter.lock().clone() else { return };
    let _inside = InHandler::enter(core.id);
    let _ = catch_unwind(AssertUnwindSafe(|| cb(msg, reason)));
}

/// Publishes a failed message to the dead-letter topic, with its key,
/// payload and attributes plus `rill.dlq.*`.
fn dead_letter(core: &SubCore, msg: &Message<'_>, reason: &str) -> Result<()> {
    let Some(dead_letters) = &core.env.dead_letters else { return Ok(()) };
    let dlq = dead_letters.topic()?;
    let failed = Failed {
        topic: msg.topic(),
        partition: msg.partition(),
        record: msg.record(),
        attempts: msg.attempt(),
        reason,
        by: ("rill.dlq.subscription", core.name.as_str()),
    };
    // Never wait here: a drainer must not block on another topic's subscribers.
    dead_letter::publish(&dlq, &failed, Wait::No).map(drop)
}

/// What a handler's panic (`payload`) on `msg` comes to: `Retry`, with the
/// panic's message as the reason. (The drain loop catches the panic, once
/// per batch, and knows which message's handler call it came from.)
pub(super) fn handler_panicked(msg: &Message<'_>, payload: &(dyn Any + Send)) -> Ack {
    let text = crate::error::panic_message(payload);
    ::log::warn!(
        target: "rill::subscription",
        "a handler panicked on {} partition {} offset {}: {text}",
        msg.topic(),
        msg.partition(),
        msg.offset()
    );
    msg.set_reason(format!("handler panicked: {text}"));
    Ack::Retry
}

/// Calls a subscription's `on_lagged` callback the way handlers are called:
/// marked as inside subscription `sub_id` (so it may close it, or another
/// one, without waiting on the drain it runs in), and with a panic caught,
/// so user code cannot take down the thread that drains (the panic is
/// dropped: there is no message to retry, and the miss is counted anyway).
pub(super) fn invoke_lagged(sub_id: u64, cb: &LagCallback, topic: &str, partition: u32, missed: u64) {
    let _inside = InHandler::enter(sub_id);
    let _ = catch_unwind(AssertUnwindSafe(|| cb(topic, partition, missed)));
}

/// A redelivery carries the attempt number and the reason given last time;
/// other messages are on their first attempt.
pub(super) fn attempt_of(retry: &mut Option<Retry>, reader: usize, offset: u64) -> (u32, Option<String>) {
    match retry {
        Some(r) if r.reader == reader && r.offset == offset => (r.attempt, r.reason.take()),
        _ => (1, None),
    }
}

/// Calls a batch handler; a panic counts as `Retry` of the first message
/// (with the panic's message as its reason), and a handler that claims to
/// have handled nothing is taken to retry the first message, so a drain
/// always makes progress or backs off.
pub(super) fn invoke_many(sub_id: u64, handler: &mut BatchHandler, msgs: &[Message<'_>], acks: &mut [Ack]) -> usize {
    let result = {
        let _inside = InHandler::enter(sub_id);
        catch_unwind(AssertUnwindSafe(|| handler(msgs, acks)))
    };
    match result {
        Ok(0) => {
            msgs[0].set_reason("the batch handler handled no message");
            acks[0] = Ack::Retry;
            1
        }
        Ok(n) => n.min(msgs.len()),
        Err(panic) => {
            let text = crate::error::panic_message(&*panic);
            ::log::warn!(
                target: "rill::subscription",
                "a batch handler panicked on {} partition {} from offset {}: {text}",
                msgs[0].topic(),
                msgs[0].partition(),
                msgs[0].offset()
            );
            msgs[0].set_reason(format!("handler panicked: {text}"));
            acks[0] = Ack::Retry;
            1
        }
    }
}
