// The status codes of the C ABI: the one list. `ffi/src/error.rs` expands it
// into the `rill_status` enum, its `ALL` table, its names and the mapping
// from `rill::ErrorKind`; `ffi/tests/header.rs` expands it into the C enum of
// `rill.h`. Each entry: docs, name = value, and the error kinds it stands
// for (`[]` for statuses the C layer makes itself).
//
// Values are ABI: never renumber or reuse one; add new ones at the end.
statuses! {
    /// The result of every fallible call. `RILL_OK` is 0; every other value is
    /// an error whose text `rill_last_error` returns on the same thread.
    enum rill_status {
        /// Success.
        RILL_OK = 0 => [],
        /// A required pointer argument was NULL.
        RILL_ERR_NULL_ARGUMENT = 1 => [],
        /// An argument was malformed or out of range (including strings that are
        /// not UTF-8, option values that are not one of their constants, and
        /// option structs not filled by their `_init`).
        RILL_ERR_INVALID_ARGUMENT = 2 => [InvalidArgument],
        /// A topic name broke the naming rules.
        RILL_ERR_INVALID_TOPIC = 3 => [InvalidTopic],
        /// A subscription pattern broke the pattern rules.
        RILL_ERR_INVALID_PATTERN = 4 => [InvalidPattern],
        /// A filter did not parse; the error text gives the byte position.
        RILL_ERR_INVALID_FILTER = 5 => [InvalidFilter],
        /// The topic does not exist (and the broker does not auto-create topics).
        RILL_ERR_NO_SUCH_TOPIC = 6 => [NoSuchTopic],
        /// The topic already exists.
        RILL_ERR_TOPIC_EXISTS = 7 => [TopicExists],
        /// The message is larger than the topic accepts.
        RILL_ERR_MESSAGE_TOO_LARGE = 8 => [MessageTooLarge],
        /// `rill_try_publish`: a `Block` subscriber is at its lag limit; or a
        /// publish from that subscriber's own handler, which does not wait for
        /// itself (see `rill_publish`).
        RILL_ERR_FULL = 9 => [Full],
        /// A wait ran out of time.
        RILL_ERR_TIMEOUT = 10 => [Timeout],
        /// The broker, subscription or consumer is closed.
        RILL_ERR_CLOSED = 11 => [Closed],
        /// An offset outside the retained range.
        RILL_ERR_OUT_OF_RANGE = 12 => [OutOfRange],
        /// A subscription name or consumer group is already in use.
        RILL_ERR_BUSY = 13 => [Busy],
        /// A lookup found nothing (an attribute, a partition, a committed offset).
        RILL_ERR_NOT_FOUND = 14 => [NotFound],
        /// rill panicked; the error text has the panic message. The call had no
        /// effect that can be relied on, but the process can go on.
        RILL_ERR_PANIC = 15 => [],
        /// The system ran out of a resource: memory, threads, address space.
        RILL_ERR_RESOURCE_EXHAUSTED = 16 => [ResourceExhausted],
        /// A storage operation failed: disk full, permission denied, not a
        /// directory (the error text names the path and has the OS error;
        /// nothing already acknowledged was lost). For the NATS bridge: the
        /// server could not be reached, refused the credentials, or a
        /// JetStream request failed.
        RILL_ERR_IO = 17 => [Io],
        /// Recovery found damage it will not silently drop (a damaged record in
        /// a sealed segment); the error text names the file and the byte
        /// offset. Opening with `repair` truncates the partition there instead.
        RILL_ERR_CORRUPT = 18 => [Corrupt],
        /// A consumer group gave the partition to another member (a rebalance,
        /// or this member's session timeout passed without a poll): its commit
        /// there was refused. Its other partitions are unaffected.
        RILL_ERR_REASSIGNED = 19 => [Reassigned],
        /// A payload does not fit its topic's schema and the topic refuses
        /// invalid records (`RILL_ON_INVALID_REJECT`): nothing was appended.
        /// The error text has the validator's reason (for a JSON schema, the
        /// failing instance path and keyword; in a batch, the failing
        /// record's index first).
        RILL_ERR_SCHEMA = 20 => [Schema],
    }
}
