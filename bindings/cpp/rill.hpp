// rill.hpp: a header-only C++17 wrapper over the rill C API (rill.h).
//
// Move-only RAII handles (Broker, Subscription, Consumer, Publisher), views
// of messages (Message), and rill::Error exceptions carrying the status and
// the library's text. Handlers are std::function; an exception thrown by a
// handler never crosses into rill: it becomes a retry, with its what() as
// the reason (which a dead-lettered message carries as rill.dlq.reason).
//
//   rill::Broker broker;
//   broker.create_topic("orders");
//   auto sub = broker.subscribe("orders", [](const rill::Message& m) {
//       std::cout << m.payload() << "\n";
//       return rill::Ack::Success;
//   });
//   broker.publish("orders", "hello");
//   sub.wait_idle(std::chrono::seconds(5));
#pragma once

#if !defined(__cplusplus) || (__cplusplus < 201703L && !(defined(_MSVC_LANG) && _MSVC_LANG >= 201703L))
#error "rill.hpp needs C++17 or newer (e.g. -std=c++17); from C or older C++, include rill.h instead"
#endif

#include <rill.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace rill {

/// A failed call: the rill_status and the library's explanation.
class Error : public std::runtime_error {
  public:
    Error(rill_status status, const std::string &message) : std::runtime_error(message), status_(status) {}
    /// The status the C call returned.
    rill_status status() const noexcept { return status_; }
    /// Its name, e.g. "RILL_ERR_NO_SUCH_TOPIC".
    const char *status_name() const noexcept { return rill_status_name(status_); }

  private:
    rill_status status_;
};

/// A payload did not fit its topic's schema (RILL_ERR_SCHEMA), whose
/// on_invalid is OnInvalid::Reject: nothing was published. what() has the
/// validator's reason.
class SchemaError : public Error {
  public:
    using Error::Error;
};

namespace detail {
inline std::string last_error() {
    std::string text(rill_last_error(nullptr, 0), '\0');
    if (!text.empty()) rill_last_error(text.data(), text.size() + 1);
    return text;
}

inline void check(rill_status status) {
    if (status == RILL_OK) return;
    std::string text = std::string(rill_status_name(status)) + ": " + last_error();
    if (status == RILL_ERR_SCHEMA) throw SchemaError(status, text);
    throw Error(status, text);
}

inline int64_t to_ms(std::chrono::milliseconds timeout) { return static_cast<int64_t>(timeout.count()); }

// `s` as a C string. C strings end at the first NUL, so a string with one
// inside would reach rill cut short ("ab\0cd" would name topic "ab"): it is
// refused with RILL_ERR_INVALID_ARGUMENT instead, naming the argument.
inline const char *c_str(const std::string &s, const char *what) {
    std::string::size_type nul = s.find('\0');
    if (nul != std::string::npos) {
        throw Error(RILL_ERR_INVALID_ARGUMENT, std::string("RILL_ERR_INVALID_ARGUMENT: ") + what +
                                                   " contains a NUL byte at position " + std::to_string(nul));
    }
    return s.c_str();
}
}  // namespace detail

/// What a handler says about a message.
enum class Ack : int32_t {
    Success = RILL_ACK_SUCCESS,
    Retry = RILL_ACK_RETRY,
    DeadLetter = RILL_ACK_DEAD_LETTER,
};

/// Where a published message landed. `duplicate`: the message carried an id
/// (Record::id) that the topic published within its dedupe window, so
/// nothing was appended and this is the first message's position (see
/// rill_publish_outcome). `dead_lettered`: the payload did not fit the
/// topic's schema (OnInvalid::DeadLetter), so the message went to
/// `$dlq/<topic>` and this is its position there. Equality compares where,
/// not how.
struct Position {
    uint32_t partition;
    uint64_t offset;
    bool duplicate = false;
    bool dead_lettered = false;

    friend bool operator==(const Position &a, const Position &b) noexcept {
        return a.partition == b.partition && a.offset == b.offset;
    }
    friend bool operator!=(const Position &a, const Position &b) noexcept { return !(a == b); }
};

/// What a publish of a payload that does not fit its topic's schema does.
enum class OnInvalid : uint32_t {
    /// Throws SchemaError; nothing is published.
    Reject = RILL_ON_INVALID_REJECT,
    /// Publishes it to `$dlq/<topic>` with the reason in `rill.dlq.reason`.
    DeadLetter = RILL_ON_INVALID_DEAD_LETTER,
};

/// A validator (Broker::set_validator): std::nullopt for a valid payload,
/// the reason for an invalid one. An exception it throws makes the payload
/// invalid with its what(). Called on any publishing thread, at once on
/// several.
using Validator = std::function<std::optional<std::string>(std::string_view payload)>;

/// A message, borrowed from the broker: valid during the handler call, or
/// until the next poll/seek/rollback of the consumer that returned it.
class Message {
  public:
    explicit Message(const rill_message *m) noexcept : m_(m) {}
    std::string_view topic() const { return m_->topic; }
    uint32_t partition() const noexcept { return m_->partition; }
    uint64_t offset() const noexcept { return m_->offset; }
    uint64_t timestamp_ns() const noexcept { return m_->timestamp_ns; }
    uint32_t attempt() const noexcept { return m_->attempt; }
    /// The version of the topic's schema it was checked against when
    /// published; 0 if the topic had none then.
    uint64_t schema_version() const noexcept { return rill_message_schema_version(m_); }
    std::string_view payload() const {
        return {reinterpret_cast<const char *>(m_->payload), m_->payload_len};
    }
    /// The key, if the message has one.
    std::optional<std::string_view> key() const {
        if (m_->key == nullptr) return std::nullopt;
        return std::string_view(reinterpret_cast<const char *>(m_->key), m_->key_len);
    }
    /// One attribute's value, if present.
    std::optional<std::string_view> attribute(const std::string &name) const {
        const char *value = nullptr;
        size_t len = 0;
        rill_status st = rill_message_attribute(m_, detail::c_str(name, "attribute name"), &value, &len);
        if (st == RILL_ERR_NOT_FOUND) return std::nullopt;
        detail::check(st);
        return std::string_view(value, len);
    }
    /// All attributes, in publish order.
    std::vector<std::pair<std::string_view, std::string_view>> attributes() const {
        std::vector<std::pair<std::string_view, std::string_view>> out;
        size_t n = rill_message_attribute_count(m_);
        out.reserve(n);
        for (size_t i = 0; i < n; i++) {
            const char *k = nullptr, *v = nullptr;
            size_t kl = 0, vl = 0;
            detail::check(rill_message_attribute_at(m_, i, &k, &kl, &v, &vl));
            out.emplace_back(std::string_view(k, kl), std::string_view(v, vl));
        }
        return out;
    }
    /// Explains a Retry or DeadLetter (inside a handler).
    void set_reason(const std::string &reason) const { rill_ack_reason(m_, detail::c_str(reason, "reason")); }
    /// The C view.
    const rill_message *raw() const noexcept { return m_; }

  private:
    const rill_message *m_;
};

/// A message to publish. `id` (1 to RILL_ID_MAX_LEN bytes) is sent as the
/// attribute RILL_ATTR_ID: a topic appends a message whose id it published
/// within its dedupe window (TopicOptions::dedupe_window_ms) only once. An
/// attribute RILL_ATTR_SCHEMA ("rill.schema") is the broker's and is dropped
/// (see rill.h).
struct Record {
    std::string_view payload;
    std::optional<std::string_view> key = std::nullopt;
    std::vector<std::pair<std::string, std::string>> attributes = {};
    std::optional<std::string> id = std::nullopt;
};

/// When a broker with a data directory forces writes to stable storage; see
/// rill_broker_options for what each promises.
enum class Fsync : int32_t {
    Never = RILL_FSYNC_NEVER,
    Interval = RILL_FSYNC_INTERVAL,
    Always = RILL_FSYNC_ALWAYS,
};

/// Who else may open a broker's data directory meanwhile; see
/// rill_broker_options.sharing.
enum class Sharing : uint64_t {
    Exclusive = RILL_SHARING_EXCLUSIVE,
    Processes = RILL_SHARING_PROCESSES,
};

/// How a broker runs; see rill_broker_options.
struct BrokerOptions {
    uint32_t worker_threads = 0;  // handler pool size; 0: one per CPU core
    bool auto_create_topics = false;
    /// Longest a publish waits for a Block subscriber; nullopt: no limit.
    std::optional<std::chrono::milliseconds> publish_timeout = std::chrono::milliseconds(10000);
    /// Where topics, messages, group commits and durable subscription
    /// positions survive restarts; nullopt: in memory only.
    std::optional<std::string> data_dir = std::nullopt;
    Fsync fsync = Fsync::Interval;
    /// The interval of Fsync::Interval, at least 1 ms.
    std::chrono::milliseconds fsync_interval = std::chrono::milliseconds(100);
    /// Truncate at damage in an older segment instead of failing with RILL_ERR_CORRUPT.
    bool repair = false;
    /// Sharing::Processes: any number of brokers, in this process and others,
    /// share data_dir (which it needs); see "Several processes" in the README.
    Sharing sharing = Sharing::Exclusive;
};

/// What keeps a topic from growing without end; see rill_topic_options.cleanup.
enum class Cleanup : int32_t {
    Delete = RILL_CLEANUP_DELETE,                ///< the size and age limits (the default)
    Compact = RILL_CLEANUP_COMPACT,              ///< the newest message of every key; no limits
    CompactAndDelete = RILL_CLEANUP_COMPACT_DELETE,  ///< compaction and the limits
};

/// Topic layout; see rill_topic_options.
struct TopicOptions {
    uint32_t partitions = 1;
    uint64_t retention_bytes = 256ull << 20;  // 0: keep everything
    uint64_t retention_messages = 0;          // 0: no count limit
    uint64_t max_message_bytes = 0;           // 0: the default
    uint64_t retention_ms = 0;                // 0: no age limit
    uint64_t dedupe_window_ms = 120000;       // how long ids are remembered; 0: no dedupe
    Cleanup cleanup = Cleanup::Delete;        // Compact: keyless publishes throw RILL_ERR_INVALID_ARGUMENT
    uint64_t delete_retention_ms = 86400000;  // under compaction: how long a tombstone stays (24 h)
    uint64_t min_compaction_lag_ms = 0;       // under compaction: how long a message stays uncompacted
    /// Default priority (0-7) of the topic's subscriptions that set none;
    /// nullopt: theirs is RILL_PRIORITY_DEFAULT. See rill_topic_options.priority.
    std::optional<int> priority = std::nullopt;
    uint64_t segment_bytes = 0;  // 0: 4 MiB (or a quarter of retention_bytes); see rill_topic_options
};

/// A consumer group member's options; see rill_consumer_options.
struct ConsumerOptions {
    rill_start start = RILL_START_EARLIEST;
    uint64_t start_offset = 0;
    /// Zero: the default, 10 s.
    std::chrono::milliseconds session_timeout = std::chrono::milliseconds(0);
    /// Nacks of one message before it is dead-lettered (at least 1);
    /// nullopt: the default, 5.
    std::optional<uint32_t> max_attempts = std::nullopt;
    /// Where given-up messages go; nullopt: `$dlq/<group>`.
    std::optional<std::string> dead_letter_topic = std::nullopt;
};

/// Subscription behaviour; see rill_subscription_options.
struct SubscriptionOptions {
    std::optional<std::string> name;
    std::optional<std::string> filter;
    rill_start start = RILL_START_LATEST;
    uint64_t start_offset = 0;
    rill_delivery delivery = RILL_DELIVERY_AT_LEAST_ONCE;
    uint32_t max_attempts = 5;
    std::chrono::milliseconds backoff_initial{10};
    std::chrono::milliseconds backoff_max{10000};
    double backoff_multiplier = 2.0;
    std::optional<std::string> dead_letter_topic;
    rill_overflow overflow = RILL_OVERFLOW_DROP_OLDEST;
    uint64_t lag_limit = 0;  // 0: none
    bool dedicated_thread = false;
    std::chrono::microseconds idle_spin{0};  // with dedicated_thread; 0: spin briefly, then park
    /// Told (topic, partition, missed) when retention trimmed messages before
    /// the subscription read them; empty: none. Exceptions are swallowed.
    std::function<void(std::string_view, uint32_t, uint64_t)> on_lagged;
    /// Told (message, reason) when a message is dead-lettered: the alert that
    /// it failed for good; empty: none. Exceptions are swallowed.
    std::function<void(const class Message &, std::string_view)> on_dead_letter;
    /// A competing member: live shared subscriptions with the same name (on
    /// one topic) divide its partitions; see rill_subscription_options.shared.
    bool shared = false;
    /// The ack deadline (0: none): a handler call running longer makes a
    /// shared member give its partitions to the others, which deliver again
    /// from the last acked offset, and its late ack is discarded; counted in
    /// stats().ack_timeouts. See rill_subscription_options.ack_timeout_ms.
    std::chrono::milliseconds ack_timeout{0};
    /// Priority in the shared worker pool, 0-7, higher runs first, with aging
    /// (nothing starves); nullopt: the topic's, else RILL_PRIORITY_DEFAULT (4).
    /// Out of range: RILL_ERR_INVALID_ARGUMENT. stats() shows the queue waits.
    /// See rill_subscription_options.priority.
    std::optional<int> priority = std::nullopt;
};

using Handler = std::function<Ack(const Message &)>;

/// Consecutive messages of one partition, given to a batch handler. Every
/// message is acknowledged Success unless the handler says otherwise with
/// ack(); a Retry stops the batch there (later messages come again).
class Batch {
  public:
    Batch(const rill_message *messages, size_t count, rill_ack *acks) noexcept
        : messages_(messages), count_(count), acks_(acks) {}
    size_t size() const noexcept { return count_; }
    Message operator[](size_t i) const noexcept { return Message(&messages_[i]); }
    /// Sets the ack of message i (i < size()).
    void ack(size_t i, Ack a) noexcept { acks_[i] = static_cast<rill_ack>(a); }
    /// Handles only the first n messages; the rest are delivered again at
    /// once. handled(0) handles none: it counts as a retry of the first
    /// message (an attempt toward max_attempts, after the backoff), as a
    /// batch handler returning 0 does in C.
    void handled(size_t n) noexcept { handled_ = n < count_ ? n : count_; }
    size_t handled_count() const noexcept { return handled_; }

  private:
    const rill_message *messages_;
    size_t count_;
    rill_ack *acks_;
    size_t handled_ = count_;
};

using BatchHandler = std::function<void(Batch &)>;

/// Position and lag of one partition a subscription or consumer group reads.
struct PartitionLag {
    std::string topic;
    uint32_t partition = 0;
    /// Next offset to handle (a group's committed offset).
    uint64_t position = 0;
    /// One past the newest offset published.
    uint64_t end = 0;
    uint64_t lag = 0;
};

/// One live subscription as `Broker::subscriptions` lists it.
struct SubscriptionInfo {
    std::string name;
    std::string pattern;
    /// The handler's latest failure, or a dead letter that could not be published.
    std::optional<std::string> last_error;
    /// The counters (its string fields are NULL here: use the members above).
    rill_subscription_stats counters;
};

/// A durable (named) subscription and the process holding it, as
/// `Broker::named_subscriptions` lists it.
struct NamedSubscription {
    std::string name;
    /// The holder's pid (this process's included); empty if no live process
    /// holds the name. 0 for a holder in a PID namespace this process cannot see.
    std::optional<uint32_t> holder_pid;
};

/// A live push subscription of the data directory and the process it lives
/// in, as `Broker::directory_subscriptions` lists it.
struct DirectorySubscription {
    /// The pid of the process whose broker has it.
    uint32_t pid = 0;
    /// True if it is this broker's.
    bool this_broker = false;
    /// A durable (named, not shared) subscription.
    bool durable = false;
    /// A member of a shared subscription.
    bool shared = false;
    /// Its name, pattern and counters (another broker's as that broker
    /// published them: see rill_directory_subscription).
    SubscriptionInfo info;
};

/// A live pull consumer (a member of a consumer group) of the data
/// directory and the process it lives in, as `Broker::directory_consumers`
/// lists it.
struct DirectoryConsumer {
    /// The pid of the process whose broker has it.
    uint32_t pid = 0;
    /// True if it is this broker's.
    bool this_broker = false;
    /// Its id, unique in its process: the `GroupMember::id` of the member it is.
    uint64_t id = 0;
    /// Its consumer group.
    std::string group;
    /// The topic it reads.
    std::string topic;
    /// Messages its polls returned.
    uint64_t delivered = 0;
    /// Messages retention trimmed before it polled them.
    uint64_t missed = 0;
    /// What the partitions it owned held past its position in them, at the
    /// end of its last poll (not the group's lag from its commits).
    uint64_t lag = 0;
};

/// A live member of a consumer group on one topic, as `Broker::group_members`
/// lists it.
struct GroupMember {
    /// The pid of the member's process.
    uint32_t pid = 0;
    /// The member's id, unique in its process.
    uint64_t id = 0;
    /// The partitions it owns, ascending (per process: see rill_group_member).
    std::vector<uint32_t> partitions;
};

namespace detail {
/// Collects what a C listing callback hands over into `out`; an exception
/// (out of memory) is kept and rethrown after the C call, never thrown
/// through it.
template <typename T> struct Collect {
    std::vector<T> out;
    std::exception_ptr error;
    template <typename F> void add(F &&make) noexcept {
        if (error) return;
        try {
            out.push_back(make());
        } catch (...) {
            error = std::current_exception();
        }
    }
    std::vector<T> take(rill_status st) {
        if (error) std::rethrow_exception(error);
        check(st);
        return std::move(out);
    }
};

inline void collect_lag(void *user_data, const rill_partition_lag *p) noexcept {
    static_cast<Collect<PartitionLag> *>(user_data)->add(
        [p] { return PartitionLag{p->topic, p->partition, p->position, p->end, p->lag}; });
}
}  // namespace detail

/// A log record's level, as rill.h numbers them.
enum class LogLevel : int32_t {
    Off = RILL_LOG_OFF,
    Error = RILL_LOG_ERROR,
    Warn = RILL_LOG_WARN,
    Info = RILL_LOG_INFO,
    Debug = RILL_LOG_DEBUG,
    Trace = RILL_LOG_TRACE,
};

/// Receives the library's log records: (level, target, message).
using LogCallback = std::function<void(LogLevel, std::string_view, std::string_view)>;

namespace detail {
inline void log_trampoline(void *user_data, int32_t level, const char *target, const char *message) noexcept {
    try {
        (*static_cast<LogCallback *>(user_data))(static_cast<LogLevel>(level), target, message);
    } catch (...) {
    }
}
}  // namespace detail

/// Sends the library's log records to `callback` (empty: nowhere, the
/// default). It runs on the thread that logged; see rill_set_log_callback.
/// When this returns, a replaced callback is never called again (and is
/// destroyed). Call it from one thread at a time, never from the callback.
inline void set_log_callback(LogCallback callback) {
    static LogCallback *current = nullptr;
    LogCallback *next = callback ? new LogCallback(std::move(callback)) : nullptr;
    rill_status st = rill_set_log_callback(next ? detail::log_trampoline : nullptr, next);
    if (st != RILL_OK) {
        delete next;
        detail::check(st);
    }
    delete current;  // no call of it is in flight any more
    current = next;
}

/// The most detailed level passed to the log callback (default Info).
inline void set_log_level(LogLevel level) { detail::check(rill_set_log_level(static_cast<int32_t>(level))); }

/// A live subscription; destroying it unsubscribes.
class Subscription {
  public:
    explicit Subscription(rill_subscription *s) noexcept : s_(s) {}
    Subscription(Subscription &&o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
    Subscription &operator=(Subscription &&o) noexcept {
        if (this != &o) {
            rill_subscription_free(s_);
            s_ = std::exchange(o.s_, nullptr);
        }
        return *this;
    }
    Subscription(const Subscription &) = delete;
    Subscription &operator=(const Subscription &) = delete;
    ~Subscription() { rill_subscription_free(s_); }

    /// True once caught up; false on timeout. Throws if closed.
    bool wait_idle(std::chrono::milliseconds timeout) const {
        rill_status st = rill_subscription_wait_idle(s_, detail::to_ms(timeout));
        if (st == RILL_ERR_TIMEOUT) return false;
        detail::check(st);
        return true;
    }
    /// The eventfd that becomes readable when it may have become idle, for
    /// an event loop: see `rill_subscription_notify_fd` (owned by the
    /// subscription; wait on it after `wait_idle(0ms)` returned false).
    int notify_fd() const {
        int fd = -1;
        detail::check(rill_subscription_notify_fd(s_, &fd));
        return fd;
    }
    rill_subscription_stats stats() const {
        rill_subscription_stats out;
        detail::check(rill_subscription_get_stats(s_, &out));
        return out;
    }
    std::string name() const {
        std::string n(rill_subscription_name(s_, nullptr, 0), '\0');
        rill_subscription_name(s_, n.data(), n.size() + 1);
        return n;
    }
    /// Why the library closed it (empty if it did not).
    std::string closed_reason() const {
        std::string r(rill_subscription_closed_reason(s_, nullptr, 0), '\0');
        rill_subscription_closed_reason(s_, r.data(), r.size() + 1);
        return r;
    }
    /// The handler's latest failure (empty if none): see `rill_subscription_last_error`.
    std::string last_error() const {
        std::string e(rill_subscription_last_error(s_, nullptr, 0), '\0');
        rill_subscription_last_error(s_, e.data(), e.size() + 1);
        return e;
    }
    /// Position and lag of every partition it reads.
    std::vector<PartitionLag> partitions() const {
        detail::Collect<PartitionLag> c;
        rill_status st = rill_subscription_partitions(s_, detail::collect_lag, &c);
        return c.take(st);
    }
    /// Unsubscribes now (the destructor does it otherwise).
    void close() noexcept {
        rill_subscription_free(s_);
        s_ = nullptr;
    }
    rill_subscription *raw() const noexcept { return s_; }

  private:
    rill_subscription *s_;
};

/// A pull consumer; use from one thread at a time.
class Consumer {
  public:
    explicit Consumer(rill_consumer *c) noexcept : c_(c) {}
    Consumer(Consumer &&o) noexcept : c_(std::exchange(o.c_, nullptr)) {}
    Consumer &operator=(Consumer &&o) noexcept {
        if (this != &o) {
            rill_consumer_free(c_);
            c_ = std::exchange(o.c_, nullptr);
        }
        return *this;
    }
    Consumer(const Consumer &) = delete;
    Consumer &operator=(const Consumer &) = delete;
    ~Consumer() { rill_consumer_free(c_); }

    /// Up to max messages, valid until the next poll/seek/rollback.
    std::vector<Message> poll(size_t max, std::chrono::milliseconds timeout) {
        const rill_message *msgs = nullptr;
        size_t count = 0;
        detail::check(rill_consumer_poll(c_, max, detail::to_ms(timeout), &msgs, &count));
        std::vector<Message> out;
        out.reserve(count);
        for (size_t i = 0; i < count; i++) out.emplace_back(&msgs[i]);
        return out;
    }
    /// The eventfd that becomes readable when `poll` has something, for an
    /// event loop: see `rill_consumer_notify_fd` (owned by the consumer;
    /// wait on it after a `poll(max, 0ms)` that returned nothing).
    int notify_fd() {
        int fd = -1;
        detail::check(rill_consumer_notify_fd(c_, &fd));
        return fd;
    }
    void commit() { detail::check(rill_consumer_commit(c_)); }
    void commit_offset(uint32_t partition, uint64_t offset) {
        detail::check(rill_consumer_commit_offset(c_, partition, offset));
    }
    /// Handling the message at (partition, offset) failed: below max_attempts
    /// it comes again (with those after it); at max_attempts it is
    /// dead-lettered and skipped (those after it come again), and this
    /// returns true. Ends the last
    /// poll's messages, like seek.
    bool nack(uint32_t partition, uint64_t offset) {
        bool dead = false;
        detail::check(rill_consumer_nack(c_, partition, offset, &dead));
        return dead;
    }
    void seek(uint32_t partition, uint64_t offset) { detail::check(rill_consumer_seek(c_, partition, offset)); }
    /// Moves to the first message published at or after `timestamp_ns`
    /// (nanoseconds since the Unix epoch); see `rill_consumer_seek_time`.
    void seek_to_time(uint32_t partition, int64_t timestamp_ns) {
        detail::check(rill_consumer_seek_time(c_, partition, timestamp_ns));
    }
    /// The same with a point in time of the system clock.
    void seek_to_time(uint32_t partition, std::chrono::system_clock::time_point when) {
        auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(when.time_since_epoch()).count();
        seek_to_time(partition, static_cast<int64_t>(ns));
    }
    void seek_to_beginning() { detail::check(rill_consumer_seek_to_beginning(c_)); }
    void seek_to_end() { detail::check(rill_consumer_seek_to_end(c_)); }
    void rollback() { detail::check(rill_consumer_rollback(c_)); }
    uint64_t position(uint32_t partition = 0) const {
        uint64_t out = 0;
        detail::check(rill_consumer_position(c_, partition, &out));
        return out;
    }
    /// The committed offset, or nullopt if nothing was committed yet.
    std::optional<uint64_t> committed(uint32_t partition = 0) const {
        uint64_t out = 0;
        rill_status st = rill_consumer_committed(c_, partition, &out);
        if (st == RILL_ERR_NOT_FOUND) return std::nullopt;
        detail::check(st);
        return out;
    }
    uint32_t partition_count() const noexcept { return rill_consumer_partition_count(c_); }
    /// The partitions this member of its group owns now, ascending.
    std::vector<uint32_t> assignment() const {
        std::vector<uint32_t> out(partition_count());
        size_t count = 0;
        detail::check(rill_consumer_assignment(c_, out.data(), out.size(), &count));
        out.resize(count < out.size() ? count : out.size());
        return out;
    }

  private:
    rill_consumer *c_;
};

namespace detail {
struct RecordData {
    std::vector<rill_attribute> attributes;
    rill_record record;
};

inline Position position(const rill_position &p, uint32_t flags) noexcept {
    return {p.partition, p.offset, (flags & RILL_PUBLISHED_DUPLICATE) != 0,
            (flags & RILL_PUBLISHED_DEAD_LETTERED) != 0};
}

/// Deletes a Broker::set_validator validator: its `user_free`.
inline void free_validator(void *user) noexcept { delete static_cast<Validator *>(user); }

/// The C trampoline of a Broker::set_validator validator: nothing is
/// thrown through C.
inline int call_validator(void *user, const uint8_t *payload, size_t len, char *reason, size_t reason_len) noexcept {
    std::optional<std::string> why;
    try {
        why = (*static_cast<const Validator *>(user))(std::string_view(reinterpret_cast<const char *>(payload), len));
        if (!why) return 0;
    } catch (const std::exception &e) {
        why.reset();
        try {
            why = std::string("validator threw: ") + e.what();
        } catch (...) {
        }
    } catch (...) {
        why.reset();
    }
    if (why && reason_len > 0) {
        size_t n = why->size() < reason_len - 1 ? why->size() : reason_len - 1;
        std::memcpy(reason, why->data(), n);
        reason[n] = '\0';
    }
    return 1;
}

inline RecordData to_c(const Record &r) {
    RecordData d;
    if (r.id) d.attributes.push_back({RILL_ATTR_ID, c_str(*r.id, "id")});
    for (const auto &a : r.attributes) d.attributes.push_back({c_str(a.first, "attribute key"), c_str(a.second, "attribute value")});
    d.record.key = r.key ? r.key->data() : nullptr;
    d.record.key_len = r.key ? r.key->size() : 0;
    d.record.payload = r.payload.data();
    d.record.payload_len = r.payload.size();
    d.record.attributes = d.attributes.empty() ? nullptr : d.attributes.data();
    d.record.attribute_count = d.attributes.size();
    return d;
}

// What a subscription's user_data points to.
struct Callbacks {
    Handler handler;
    BatchHandler batch_handler;
    std::function<void(std::string_view, uint32_t, uint64_t)> on_lagged;
    std::function<void(const Message &, std::string_view)> on_dead_letter;
};

inline void destroy(void *user_data) noexcept { delete static_cast<Callbacks *>(user_data); }
inline void lagged(void *user_data, const char *topic, uint32_t partition, uint64_t missed) noexcept;
inline void dead_lettered(void *user_data, const rill_message *m, const char *reason) noexcept;

// Calls the std::function; exceptions become a retry with their text.
inline rill_ack trampoline(void *user_data, const rill_message *m) noexcept {
    auto *cb = static_cast<Callbacks *>(user_data);
    try {
        return static_cast<rill_ack>(cb->handler(Message(m)));
    } catch (const std::exception &e) {
        rill_ack_reason(m, e.what());
    } catch (...) {
        rill_ack_reason(m, "the handler threw a non-standard C++ exception");
    }
    return RILL_ACK_RETRY;
}

// Calls the batch std::function; an exception retries the first message,
// with its text as the reason (the messages before it were not handled).
inline size_t batch_trampoline(void *user_data, const rill_message *ms, size_t n, rill_ack *acks) noexcept {
    auto *cb = static_cast<Callbacks *>(user_data);
    try {
        Batch batch(ms, n, acks);
        cb->batch_handler(batch);
        return batch.handled_count();
    } catch (const std::exception &e) {
        rill_ack_reason(&ms[0], e.what());
    } catch (...) {
        rill_ack_reason(&ms[0], "the handler threw a non-standard C++ exception");
    }
    acks[0] = RILL_ACK_RETRY;
    return 1;
}

// A C++ priority as the C field: nullopt is RILL_PRIORITY_UNSET; any set
// value outside 0-7 (RILL_PRIORITY_UNSET included) is refused by the library.
inline int32_t to_c_priority(const std::optional<int> &p) {
    if (!p) return RILL_PRIORITY_UNSET;
    // A value that is not a priority, and that the library would read as unset.
    if (*p == RILL_PRIORITY_UNSET)
        throw Error(RILL_ERR_INVALID_ARGUMENT, "RILL_ERR_INVALID_ARGUMENT: priority must be 0 to 7, not -1");
    return static_cast<int32_t>(*p);
}

// The count of `d` for a C field of unsigned milliseconds or microseconds:
// a negative one is refused (cast, it would wrap to a huge value).
template <class Duration> inline uint64_t non_negative(Duration d, const char *what) {
    if (d.count() < 0)
        throw Error(RILL_ERR_INVALID_ARGUMENT, std::string("RILL_ERR_INVALID_ARGUMENT: ") + what + " must not be negative");
    return static_cast<uint64_t>(d.count());
}

// Fills C subscription options from the C++ ones; the strings stay owned by `o`.
inline void to_c(const SubscriptionOptions &o, rill_subscription_options &c) {
    rill_subscription_options_init(&c);
    // Checked first, before anything is handed over.
    const uint64_t backoff_initial = non_negative(o.backoff_initial, "backoff_initial");
    const uint64_t backoff_max = non_negative(o.backoff_max, "backoff_max");
    const uint64_t idle_spin = non_negative(o.idle_spin, "idle_spin");
    c.name = o.name ? c_str(*o.name, "subscription name") : nullptr;
    c.filter = o.filter ? c_str(*o.filter, "filter") : nullptr;
    c.start = o.start;
    c.start_offset = o.start_offset;
    c.delivery = o.delivery;
    c.max_attempts = o.max_attempts;
    c.backoff_initial_ms = backoff_initial;
    c.backoff_max_ms = backoff_max;
    c.backoff_multiplier = o.backoff_multiplier;
    c.dead_letter_topic = o.dead_letter_topic ? c_str(*o.dead_letter_topic, "dead_letter_topic") : nullptr;
    c.overflow = o.overflow;
    c.lag_limit = o.lag_limit;
    c.dedicated_thread = o.dedicated_thread;
    c.idle_spin_us = idle_spin;
    c.user_data_free = destroy;  // also runs if subscribing fails
    if (o.on_lagged) c.on_lagged = lagged;
    if (o.on_dead_letter) c.on_dead_letter = dead_lettered;
    c.shared = o.shared;
    if (o.ack_timeout.count() < 0 || o.ack_timeout.count() > UINT32_MAX)
        throw Error(RILL_ERR_INVALID_ARGUMENT, "RILL_ERR_INVALID_ARGUMENT: ack_timeout must be 0 to 2^32-1 ms");
    c.ack_timeout_ms = static_cast<uint32_t>(o.ack_timeout.count());
    c.priority = to_c_priority(o.priority);
}

// Calls on_dead_letter; nothing may cross back into C.
inline void dead_lettered(void *user_data, const rill_message *m, const char *reason) noexcept {
    auto *cb = static_cast<Callbacks *>(user_data);
    try {
        cb->on_dead_letter(Message(m), reason);
    } catch (...) {
    }
}

// Calls on_lagged; nothing may cross back into C.
inline void lagged(void *user_data, const char *topic, uint32_t partition, uint64_t missed) noexcept {
    auto *cb = static_cast<Callbacks *>(user_data);
    try {
        cb->on_lagged(topic, partition, missed);
    } catch (...) {
    }
}

}  // namespace detail

/// Publishes to one topic without a lookup per message; thread-safe.
class Publisher {
  public:
    explicit Publisher(rill_publisher *p) noexcept : p_(p) {}
    Publisher(Publisher &&o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
    Publisher &operator=(Publisher &&o) noexcept {
        if (this != &o) {
            rill_publisher_free(p_);
            p_ = std::exchange(o.p_, nullptr);
        }
        return *this;
    }
    Publisher(const Publisher &) = delete;
    Publisher &operator=(const Publisher &) = delete;
    ~Publisher() { rill_publisher_free(p_); }

    /// `duplicate` is set in the result if the record's id was a duplicate.
    /// `dead_lettered` is set in the result if the topic's schema sent the
    /// message to `$dlq/<topic>`.
    Position publish(const Record &r) const {
        auto d = detail::to_c(r);
        rill_position pos;
        uint32_t flags = 0;
        detail::check(rill_publisher_publish_outcome(p_, &d.record, &pos, &flags));
        return detail::position(pos, flags);
    }

  private:
    rill_publisher *p_;
};

/// A broker; destroying it closes everything made from it.
class Broker {
  public:
    Broker() { detail::check(rill_broker_new(nullptr, &b_)); }
    explicit Broker(const BrokerOptions &o) {
        rill_broker_options c;
        rill_broker_options_init(&c);
        c.worker_threads = o.worker_threads;
        c.auto_create_topics = o.auto_create_topics;
        c.publish_timeout_ms = o.publish_timeout ? detail::to_ms(*o.publish_timeout) : -1;
        if (o.data_dir) c.data_dir = detail::c_str(*o.data_dir, "data_dir");
        c.fsync = static_cast<rill_fsync>(o.fsync);
        if (o.fsync_interval.count() < 1 || o.fsync_interval.count() > INT32_MAX)
            throw Error(RILL_ERR_INVALID_ARGUMENT,
                        "RILL_ERR_INVALID_ARGUMENT: fsync_interval must be between 1 ms and 2^31 - 1 ms");
        c.fsync_interval_ms = static_cast<uint32_t>(o.fsync_interval.count());
        c.repair = o.repair;
        c.sharing = static_cast<rill_sharing>(o.sharing);
        detail::check(rill_broker_new(&c, &b_));
    }
    Broker(Broker &&o) noexcept : b_(std::exchange(o.b_, nullptr)) {}
    Broker &operator=(Broker &&o) noexcept {
        if (this != &o) {
            rill_broker_free(b_);
            b_ = std::exchange(o.b_, nullptr);
        }
        return *this;
    }
    Broker(const Broker &) = delete;
    Broker &operator=(const Broker &) = delete;
    ~Broker() { rill_broker_free(b_); }

    void create_topic(const std::string &name, const TopicOptions &o = {}) {
        rill_topic_options c;
        rill_topic_options_init(&c);
        c.partitions = o.partitions;
        c.retention_bytes = o.retention_bytes;
        c.retention_messages = o.retention_messages;
        c.max_message_bytes = o.max_message_bytes;
        c.retention_ms = o.retention_ms;
        c.dedupe_window_ms = o.dedupe_window_ms;
        c.cleanup = static_cast<rill_cleanup>(o.cleanup);
        c.delete_retention_ms = o.delete_retention_ms;
        c.min_compaction_lag_ms = o.min_compaction_lag_ms;
        c.priority = detail::to_c_priority(o.priority);
        c.segment_bytes = o.segment_bytes;
        detail::check(rill_topic_create(b_, detail::c_str(name, "topic name"), &c));
    }

    /// `duplicate` is set in the result if the record's id was a duplicate.
    /// `dead_lettered` is set in the result if the topic's schema sent the
    /// message to `$dlq/<topic>`.
    Position publish(const std::string &topic, const Record &r) {
        auto d = detail::to_c(r);
        rill_position pos;
        uint32_t flags = 0;
        detail::check(rill_publish_outcome(b_, detail::c_str(topic, "topic name"), &d.record, &pos, &flags));
        return detail::position(pos, flags);
    }
    Position publish(const std::string &topic, std::string_view payload) { return publish(topic, Record{payload}); }

    /// Fails with RILL_ERR_FULL instead of waiting for a Block subscriber.
    Position try_publish(const std::string &topic, const Record &r) {
        auto d = detail::to_c(r);
        rill_position pos;
        uint32_t flags = 0;
        detail::check(rill_try_publish_outcome(b_, detail::c_str(topic, "topic name"), &d.record, &pos, &flags));
        return detail::position(pos, flags);
    }

    std::vector<Position> publish_batch(const std::string &topic, const std::vector<Record> &records) {
        std::vector<detail::RecordData> data;
        data.reserve(records.size());
        for (const auto &r : records) data.push_back(detail::to_c(r));
        std::vector<rill_record> c;
        c.reserve(data.size());
        for (auto &d : data) c.push_back(d.record);
        std::vector<rill_position> pos(records.size());
        std::vector<uint32_t> flags(records.size());
        detail::check(rill_publish_batch_outcome(b_, detail::c_str(topic, "topic name"), c.data(), c.size(),
                                                 pos.data(), flags.data()));
        std::vector<Position> out;
        out.reserve(pos.size());
        for (size_t i = 0; i < pos.size(); i++) out.push_back(detail::position(pos[i], flags[i]));
        return out;
    }

    /// Sets (or replaces) `topic`'s schema to a JSON Schema (draft 2020-12)
    /// document; see rill_topic_set_schema_json. Returns its version.
    uint64_t set_schema_json(const std::string &topic, const std::string &json, OnInvalid on_invalid = OnInvalid::Reject) {
        const char *t = detail::c_str(topic, "topic name");
        detail::check(rill_topic_set_schema_json(b_, t, detail::c_str(json, "json"), static_cast<uint32_t>(on_invalid)));
        return schema_version(topic);
    }

    /// Sets (or replaces) `topic`'s schema to a validator; see
    /// rill_topic_set_validator. It lives with this Broker (not on disk).
    /// Returns the schema's version.
    uint64_t set_validator(const std::string &topic, Validator validator, OnInvalid on_invalid = OnInvalid::Reject) {
        const char *t = detail::c_str(topic, "topic name");
        auto owned = std::make_unique<Validator>(std::move(validator));
        // rill owns it from here (it frees it on failure too): deleted once
        // no call of it is in flight, which a replacement or removal made
        // from inside a validator does not wait for.
        detail::check(rill_topic_set_validator_with_free(b_, t, detail::call_validator, owned.release(),
                                                         detail::free_validator, static_cast<uint32_t>(on_invalid)));
        return schema_version(topic);
    }

    /// Removes `topic`'s schema; see rill_topic_remove_schema.
    void remove_schema(const std::string &topic) {
        detail::check(rill_topic_remove_schema(b_, detail::c_str(topic, "topic name")));
    }

    /// The version of `topic`'s schema in force; 0 if it has none (with
    /// processes sharing the directory, the directory's: see
    /// rill_topic_schema_version).
    uint64_t schema_version(const std::string &topic) const {
        uint64_t v = 0;
        detail::check(rill_topic_schema_version(b_, detail::c_str(topic, "topic name"), &v));
        return v;
    }

    Publisher publisher(const std::string &topic) {
        rill_publisher *p = nullptr;
        detail::check(rill_publisher_new(b_, detail::c_str(topic, "topic name"), &p));
        return Publisher(p);
    }

    Subscription subscribe(const std::string &pattern, Handler handler, const SubscriptionOptions &o = {}) {
        // Every string is checked before `user` is allocated, so a refusal leaks nothing.
        const char *pat = detail::c_str(pattern, "pattern");
        rill_subscription_options c;
        detail::to_c(o, c);
        auto *user = new detail::Callbacks{std::move(handler), nullptr, o.on_lagged, o.on_dead_letter};
        rill_subscription *s = nullptr;
        detail::check(rill_subscribe(b_, pat, &c, detail::trampoline, user, &s));
        return Subscription(s);
    }

    /// Like subscribe, with a handler taking runs of consecutive messages
    /// (see rill_subscribe_batch): one call for many messages.
    Subscription subscribe_batch(const std::string &pattern, BatchHandler handler,
                                 const SubscriptionOptions &o = {}) {
        const char *pat = detail::c_str(pattern, "pattern");
        rill_subscription_options c;
        detail::to_c(o, c);
        auto *user = new detail::Callbacks{nullptr, std::move(handler), o.on_lagged, o.on_dead_letter};
        rill_subscription *s = nullptr;
        detail::check(rill_subscribe_batch(b_, pat, &c, detail::batch_trampoline, user, &s));
        return Subscription(s);
    }

    /// A new member of `group` on `topic`; the group divides the topic's
    /// partitions among its members. A member that has not polled for
    /// `session_timeout` (zero: the default, 10 s) is expelled; its next call
    /// rejoins.
    Consumer consumer(const std::string &group, const std::string &topic, rill_start start = RILL_START_EARLIEST,
                      uint64_t start_offset = 0, std::chrono::milliseconds session_timeout = std::chrono::milliseconds(0)) {
        ConsumerOptions o;
        o.start = start;
        o.start_offset = start_offset;
        o.session_timeout = session_timeout;
        return consumer(group, topic, o);
    }

    /// A new member of `group` on `topic`, with all of a member's options
    /// (a poison message's max_attempts and dead_letter_topic included).
    Consumer consumer(const std::string &group, const std::string &topic, const ConsumerOptions &options) {
        rill_consumer_options o;
        rill_consumer_options_init(&o);
        o.start = options.start;
        o.start_offset = options.start_offset;
        if (options.session_timeout.count() < 0 || options.session_timeout.count() > UINT32_MAX)
            throw Error(RILL_ERR_INVALID_ARGUMENT, "RILL_ERR_INVALID_ARGUMENT: session_timeout must be 0 to 2^32-1 ms");
        o.session_timeout_ms = static_cast<uint32_t>(options.session_timeout.count());
        if (options.max_attempts) o.max_attempts = *options.max_attempts;
        if (options.dead_letter_topic) o.dead_letter_topic = detail::c_str(*options.dead_letter_topic, "dead_letter_topic");
        rill_consumer *c = nullptr;
        detail::check(rill_consumer_new(b_, detail::c_str(group, "consumer group"), detail::c_str(topic, "topic name"), &o, &c));
        return Consumer(c);
    }

    rill_topic_stats topic_stats(const std::string &topic) const {
        rill_topic_stats out;
        detail::check(rill_topic_get_stats(b_, detail::c_str(topic, "topic name"), &out));
        return out;
    }

    /// Deletes a topic (see `rill_topic_delete`); throws `RILL_ERR_NO_SUCH_TOPIC` if absent.
    void delete_topic(const std::string &name) { detail::check(rill_topic_delete(b_, detail::c_str(name, "topic name"))); }

    /// Forgets a durable subscription's saved position (`RILL_ERR_BUSY` while live,
    /// `RILL_ERR_NOT_FOUND` if unknown).
    void delete_durable(const std::string &name) {
        detail::check(rill_durable_delete(b_, detail::c_str(name, "subscription name")));
    }

    /// Forgets a consumer group's offsets on `topic` (`RILL_ERR_BUSY` while it has
    /// a live consumer, `RILL_ERR_NOT_FOUND` if unknown).
    void delete_group(const std::string &group, const std::string &topic) {
        detail::check(rill_group_delete(b_, detail::c_str(group, "consumer group"), detail::c_str(topic, "topic name")));
    }

    /// Every topic's name, sorted.
    std::vector<std::string> topics() const {
        detail::Collect<std::string> c;
        rill_status st = rill_topic_list(b_, [](void *u, const char *name) noexcept {
            static_cast<detail::Collect<std::string> *>(u)->add([name] { return std::string(name); });
        }, &c);
        return c.take(st);
    }

    /// Every live subscription, sorted by name.
    std::vector<SubscriptionInfo> subscriptions() const {
        detail::Collect<SubscriptionInfo> c;
        rill_status st = rill_subscription_list(b_, [](void *u, const rill_subscription_stats *s) noexcept {
            static_cast<detail::Collect<SubscriptionInfo> *>(u)->add([s] {
                SubscriptionInfo info{s->name, s->pattern, std::nullopt, *s};
                if (s->last_error) info.last_error = std::string(s->last_error);
                info.counters.name = info.counters.pattern = info.counters.last_error = nullptr;
                return info;
            });
        }, &c);
        return c.take(st);
    }

    /// Every (group, topic) the broker keeps committed offsets for, sorted.
    std::vector<std::pair<std::string, std::string>> groups() const {
        using Pair = std::pair<std::string, std::string>;
        detail::Collect<Pair> c;
        rill_status st = rill_group_list(b_, [](void *u, const char *group, const char *topic) noexcept {
            static_cast<detail::Collect<Pair> *>(u)->add([group, topic] { return Pair(group, topic); });
        }, &c);
        return c.take(st);
    }

    /// Every durable (named) subscription, sorted by name, with the process
    /// holding it: with `Sharing::Processes` every name of the data directory,
    /// held or not (see rill_named_subscription_list).
    std::vector<NamedSubscription> named_subscriptions() const {
        detail::Collect<NamedSubscription> c;
        rill_status st = rill_named_subscription_list(b_, [](void *u, const rill_named_subscription *n) noexcept {
            static_cast<detail::Collect<NamedSubscription> *>(u)->add([n] {
                NamedSubscription out{n->name, std::nullopt};
                if (n->held) out.holder_pid = n->holder_pid;
                return out;
            });
        }, &c);
        return c.take(st);
    }

    /// Every live push subscription of the data directory, sorted by (pid,
    /// name), each with its process's pid: with `Sharing::Processes` every
    /// process's (see rill_directory_subscription_list); otherwise this
    /// broker's, as `subscriptions` (which stays per broker in either mode).
    std::vector<DirectorySubscription> directory_subscriptions() const {
        detail::Collect<DirectorySubscription> c;
        rill_status st = rill_directory_subscription_list(b_, [](void *u, const rill_directory_subscription *d) noexcept {
            static_cast<detail::Collect<DirectorySubscription> *>(u)->add([d] {
                const rill_subscription_stats *s = d->stats;
                DirectorySubscription out{d->pid, d->this_broker, d->durable, d->shared,
                                          SubscriptionInfo{s->name, s->pattern, std::nullopt, *s}};
                if (s->last_error) out.info.last_error = std::string(s->last_error);
                out.info.counters.name = out.info.counters.pattern = out.info.counters.last_error = nullptr;
                return out;
            });
        }, &c);
        return c.take(st);
    }

    /// Every live pull consumer of the data directory, sorted by (pid, id),
    /// each with its process's pid and counters: with `Sharing::Processes`
    /// every process's (see rill_directory_consumer_list); otherwise this
    /// broker's.
    std::vector<DirectoryConsumer> directory_consumers() const {
        detail::Collect<DirectoryConsumer> c;
        rill_status st = rill_directory_consumer_list(b_, [](void *u, const rill_directory_consumer *d) noexcept {
            static_cast<detail::Collect<DirectoryConsumer> *>(u)->add([d] {
                return DirectoryConsumer{d->pid, d->this_broker, d->id, d->group, d->topic,
                                         d->delivered, d->missed, d->lag};
            });
        }, &c);
        return c.take(st);
    }

    /// The live members of `group` on `topic`, sorted by (pid, id), each with
    /// the partitions it owns: with `Sharing::Processes` those of every
    /// process (see rill_group_member_list). Throws `RILL_ERR_NO_SUCH_TOPIC`.
    std::vector<GroupMember> group_members(const std::string &group, const std::string &topic) const {
        detail::Collect<GroupMember> c;
        rill_status st = rill_group_member_list(
            b_, detail::c_str(group, "consumer group"), detail::c_str(topic, "topic name"),
            [](void *u, const rill_group_member *m) noexcept {
                static_cast<detail::Collect<GroupMember> *>(u)->add([m] {
                    GroupMember out{m->pid, m->id, {}};
                    if (m->partition_count > 0) out.partitions.assign(m->partitions, m->partitions + m->partition_count);
                    return out;
                });
            },
            &c);
        return c.take(st);
    }

    /// A group's lag on `topic` (live consumer or not).
    rill_consumer_stats group_stats(const std::string &group, const std::string &topic) const {
        rill_consumer_stats out;
        detail::check(rill_group_get_stats(b_, detail::c_str(group, "consumer group"), detail::c_str(topic, "topic name"), &out));
        return out;
    }

    /// A group's committed position and lag per partition of `topic`.
    std::vector<PartitionLag> group_partitions(const std::string &group, const std::string &topic) const {
        detail::Collect<PartitionLag> c;
        rill_status st = rill_group_partitions(b_, detail::c_str(group, "consumer group"),
                                               detail::c_str(topic, "topic name"), detail::collect_lag, &c);
        return c.take(st);
    }

    /// Closes without freeing (the destructor frees).
    void close() noexcept { rill_broker_close(b_); }
    rill_broker *raw() const noexcept { return b_; }

  private:
    rill_broker *b_ = nullptr;
};

}  // namespace rill
