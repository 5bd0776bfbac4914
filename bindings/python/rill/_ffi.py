"""The one place that loads librill and declares every C symbol.

Every function is declared from ``FUNCTIONS``, a table written in the C
types of ``include/rill.h``; ``tests/test_ffi.py`` parses the header and
fails if the two differ, so they cannot drift. The ``rill_message`` layout is
checked against a ``struct`` format used for fast decoding.
"""

from __future__ import annotations

import ctypes
import os
import struct
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_bool,
    c_char_p,
    c_double,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_uint32,
    c_uint64,
    c_void_p,
)
from pathlib import Path
from typing import Callable

# ---- library lookup ---------------------------------------------------------

_LIB_NAME = "librill.so"


def _candidates() -> list[tuple[str, Path]]:
    """Where to look, in order, with a label for the error message."""
    found: list[tuple[str, Path]] = []
    env = os.environ.get("RILL_LIBRARY")
    if env:
        found.append(("RILL_LIBRARY", Path(env)))
    here = Path(__file__).resolve().parent
    found.append(("the package", here / _LIB_NAME))
    # Run from a source checkout (bindings/python/rill, not installed): the
    # workspace's own build. An installed package carries its library.
    root = here.parent.parent.parent
    if (root / "ffi" / "Cargo.toml").is_file():
        for profile in ("release", "debug"):
            found.append((f"the workspace's target/{profile}", root / "target" / profile / _LIB_NAME))
    return found


def _load() -> ctypes.CDLL:
    tried = []
    for label, path in _candidates():
        if path.is_file():
            return ctypes.CDLL(str(path))
        tried.append(f"  {label}: {path}")
        if label == "RILL_LIBRARY":
            raise OSError(f"RILL_LIBRARY points to {path}, which does not exist")
    raise OSError(
        "cannot find librill.so; looked in:\n"
        + "\n".join(tried)
        + "\ninstall the package with `pip install ./bindings/python` (it builds the library), "
        + "build it with `cargo build --release -p rill-ffi`, or set RILL_LIBRARY"
    )


lib = _load()

# ---- types ------------------------------------------------------------------


class rill_broker_options(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("worker_threads", c_uint32),
        ("auto_create_topics", c_bool),
        ("publish_timeout_ms", c_int64),
        ("data_dir", c_char_p),
        ("fsync", c_int32),
        ("fsync_interval_ms", c_uint32),
        ("repair", c_bool),
        ("sharing", c_uint64),
    ]


class rill_topic_options(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("partitions", c_uint32),
        ("retention_bytes", c_uint64),
        ("retention_messages", c_uint64),
        ("max_message_bytes", c_uint64),
        ("retention_ms", c_uint64),
        ("dedupe_window_ms", c_uint64),
        ("cleanup", c_int32),
        ("delete_retention_ms", c_uint64),
        ("min_compaction_lag_ms", c_uint64),
        ("priority", c_int32),
        ("segment_bytes", c_uint64),
    ]


class rill_attribute(Structure):
    _fields_ = [("key", c_char_p), ("value", c_char_p)]


class rill_record(Structure):
    _fields_ = [
        ("key", c_void_p),
        ("key_len", c_size_t),
        ("payload", c_void_p),
        ("payload_len", c_size_t),
        ("attributes", POINTER(rill_attribute)),
        ("attribute_count", c_size_t),
    ]


class rill_position(Structure):
    _fields_ = [("partition", c_uint32), ("offset", c_uint64)]


class rill_topic_stats(Structure):
    _fields_ = [
        ("partitions", c_uint32),
        ("publish_count", c_uint64),
        ("retained_bytes", c_uint64),
        ("recovered_truncated_records", c_uint64),
        ("recovered_truncated_bytes", c_uint64),
        ("recovered_repaired_partitions", c_uint32),
        ("recovered_offsets_reset", c_uint64),
        ("dedupe_duplicates", c_uint64),
        ("dedupe_ids", c_uint64),
        ("dedupe_evicted", c_uint64),
        ("dedupe_waits", c_uint64),
        ("compacted_messages", c_uint64),
        ("compacted_bytes", c_uint64),
        ("compaction_passes", c_uint64),
        ("compaction_keys", c_uint64),
    ]


class rill_message(Structure):
    _fields_ = [
        ("topic", c_void_p),
        ("partition", c_uint32),
        ("offset", c_uint64),
        ("timestamp_ns", c_uint64),
        ("key", c_void_p),
        ("key_len", c_size_t),
        ("payload", c_void_p),
        ("payload_len", c_size_t),
        ("attempt", c_uint32),
        ("attribute_count", c_size_t),
        ("internal", c_void_p),
    ]


# The same layout as a native struct format, to decode a message with one
# call: topic, partition, offset, timestamp_ns, key, key_len, payload,
# payload_len, attempt, attribute_count, internal.
MESSAGE_FORMAT = struct.Struct("@PIQQPNPNINP")
if MESSAGE_FORMAT.size != ctypes.sizeof(rill_message) or [
    struct.calcsize("@" + "PIQQPNPNINP"[:i]) for i in range(1, 11)
] != [getattr(rill_message, f[0]).offset + getattr(rill_message, f[0]).size for f in rill_message._fields_[:10]]:
    raise ImportError("rill_message layout does not match the decoding format")

HANDLER = CFUNCTYPE(c_int32, c_void_p, c_void_p)
BATCH_HANDLER = CFUNCTYPE(c_size_t, c_void_p, c_void_p, c_size_t, c_void_p)
DESTRUCTOR = CFUNCTYPE(None, c_void_p)
LAG_CALLBACK = CFUNCTYPE(None, c_void_p, c_char_p, c_uint32, c_uint64)
DEAD_LETTER_CALLBACK = CFUNCTYPE(None, c_void_p, c_void_p, c_char_p)
LOG_CALLBACK = CFUNCTYPE(None, c_void_p, c_int32, c_char_p, c_char_p)
# rill_validator_fn: (user, payload, len, reason, reason_len) -> 0 if valid.
VALIDATOR = CFUNCTYPE(c_int, c_void_p, c_void_p, c_size_t, c_void_p, c_size_t)


class rill_subscription_options(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("name", c_char_p),
        ("filter", c_char_p),
        ("start", c_int32),
        ("start_offset", c_uint64),
        ("delivery", c_int32),
        ("max_attempts", c_uint32),
        ("backoff_initial_ms", c_uint64),
        ("backoff_max_ms", c_uint64),
        ("backoff_multiplier", c_double),
        ("dead_letter_topic", c_char_p),
        ("overflow", c_int32),
        ("lag_limit", c_uint64),
        ("dedicated_thread", c_bool),
        ("user_data_free", DESTRUCTOR),
        ("idle_spin_us", c_uint64),
        ("on_lagged", LAG_CALLBACK),
        ("on_dead_letter", DEAD_LETTER_CALLBACK),
        ("shared", c_bool),
        ("ack_timeout_ms", c_uint32),
        ("priority", c_int32),
    ]


class rill_subscription_stats(Structure):
    _fields_ = [
        ("delivered", c_uint64),
        ("acked", c_uint64),
        ("retried", c_uint64),
        ("dead_lettered", c_uint64),
        ("filtered", c_uint64),
        ("dropped", c_uint64),
        ("missed", c_uint64),
        ("lag", c_uint64),
        ("partitions", c_uint32),
        ("state", c_int32),
        ("name", c_char_p),
        ("pattern", c_char_p),
        ("last_error", c_char_p),
        ("ack_timeouts", c_uint64),
        ("queue_waits", c_uint64),
        ("queue_wait_p50_ns", c_uint64),
        ("queue_wait_p99_ns", c_uint64),
        ("queue_wait_max_takes", c_uint64),
        ("priority", c_uint32),
    ]


class rill_partition_lag(Structure):
    _fields_ = [
        ("topic", c_char_p),
        ("partition", c_uint32),
        ("position", c_uint64),
        ("end", c_uint64),
        ("lag", c_uint64),
    ]


class rill_named_subscription(Structure):
    _fields_ = [("name", c_char_p), ("held", c_bool), ("holder_pid", c_uint32)]


class rill_directory_subscription(Structure):
    _fields_ = [
        ("pid", c_uint32),
        ("this_broker", c_bool),
        ("durable", c_bool),
        ("shared", c_bool),
        ("stats", POINTER(rill_subscription_stats)),
    ]


class rill_directory_consumer(Structure):
    _fields_ = [
        ("pid", c_uint32),
        ("this_broker", c_bool),
        ("id", c_uint64),
        ("group", c_char_p),
        ("topic", c_char_p),
        ("delivered", c_uint64),
        ("missed", c_uint64),
        ("lag", c_uint64),
    ]


class rill_group_member(Structure):
    _fields_ = [
        ("pid", c_uint32),
        ("id", c_uint64),
        ("partitions", POINTER(c_uint32)),
        ("partition_count", c_size_t),
    ]


TOPIC_CALLBACK = CFUNCTYPE(None, c_void_p, c_char_p)
SUBSCRIPTION_CALLBACK = CFUNCTYPE(None, c_void_p, POINTER(rill_subscription_stats))
GROUP_CALLBACK = CFUNCTYPE(None, c_void_p, c_char_p, c_char_p)
PARTITION_LAG_CALLBACK = CFUNCTYPE(None, c_void_p, POINTER(rill_partition_lag))
NAMED_SUBSCRIPTION_CALLBACK = CFUNCTYPE(None, c_void_p, POINTER(rill_named_subscription))
GROUP_MEMBER_CALLBACK = CFUNCTYPE(None, c_void_p, POINTER(rill_group_member))
DIRECTORY_SUBSCRIPTION_CALLBACK = CFUNCTYPE(None, c_void_p, POINTER(rill_directory_subscription))
DIRECTORY_CONSUMER_CALLBACK = CFUNCTYPE(None, c_void_p, POINTER(rill_directory_consumer))


class rill_consumer_stats(Structure):
    _fields_ = [("delivered", c_uint64), ("missed", c_uint64), ("lag", c_uint64), ("partitions", c_uint32)]


class rill_consumer_options(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("start", c_int32),
        ("start_offset", c_uint64),
        ("session_timeout_ms", c_uint32),
        ("max_attempts", c_uint32),
        ("dead_letter_topic", c_char_p),
    ]


# ---- statuses (the rill_status enum of rill.h) ---------------------------------

STATUS: dict[str, int] = {
    "RILL_OK": 0,
    "RILL_ERR_NULL_ARGUMENT": 1,
    "RILL_ERR_INVALID_ARGUMENT": 2,
    "RILL_ERR_INVALID_TOPIC": 3,
    "RILL_ERR_INVALID_PATTERN": 4,
    "RILL_ERR_INVALID_FILTER": 5,
    "RILL_ERR_NO_SUCH_TOPIC": 6,
    "RILL_ERR_TOPIC_EXISTS": 7,
    "RILL_ERR_MESSAGE_TOO_LARGE": 8,
    "RILL_ERR_FULL": 9,
    "RILL_ERR_TIMEOUT": 10,
    "RILL_ERR_CLOSED": 11,
    "RILL_ERR_OUT_OF_RANGE": 12,
    "RILL_ERR_BUSY": 13,
    "RILL_ERR_NOT_FOUND": 14,
    "RILL_ERR_PANIC": 15,
    # Ahead of the header: a thread or mapping the system refused to give.
    "RILL_ERR_RESOURCE_EXHAUSTED": 16,
    "RILL_ERR_IO": 17,
    "RILL_ERR_CORRUPT": 18,
    "RILL_ERR_REASSIGNED": 19,
    "RILL_ERR_SCHEMA": 20,
}
RILL_ERR_INVALID_ARGUMENT = STATUS["RILL_ERR_INVALID_ARGUMENT"]
RILL_ERR_TIMEOUT = STATUS["RILL_ERR_TIMEOUT"]
RILL_ERR_CLOSED = STATUS["RILL_ERR_CLOSED"]

# ---- constants (the #defines of rill.h) ----------------------------------------

# The header this binding was written against; rill_version() names the library's.
RILL_VERSION_MAJOR, RILL_VERSION_MINOR, RILL_VERSION_PATCH = 0, 2, 0
RILL_VERSION_STRING = "0.2.0"
RILL_VERSION_NUMBER = 200  # MAJOR * 10000 + MINOR * 100 + PATCH
RILL_ACK_SUCCESS, RILL_ACK_RETRY, RILL_ACK_DEAD_LETTER = 0, 1, 2
RILL_START_LATEST, RILL_START_EARLIEST, RILL_START_OFFSET, RILL_START_TIME = 0, 1, 2, 3
RILL_DELIVERY_AT_LEAST_ONCE, RILL_DELIVERY_AT_MOST_ONCE = 0, 1
RILL_OVERFLOW_DROP_OLDEST, RILL_OVERFLOW_BLOCK, RILL_OVERFLOW_DISCONNECT = 0, 1, 2
RILL_SUBSCRIPTION_IDLE, RILL_SUBSCRIPTION_ACTIVE, RILL_SUBSCRIPTION_BACKOFF, RILL_SUBSCRIPTION_CLOSED = 0, 1, 2, 3
RILL_FSYNC_NEVER, RILL_FSYNC_INTERVAL, RILL_FSYNC_ALWAYS = 0, 1, 2
RILL_SHARING_EXCLUSIVE, RILL_SHARING_PROCESSES = 0, 1
RILL_CLEANUP_DELETE, RILL_CLEANUP_COMPACT, RILL_CLEANUP_COMPACT_DELETE = 0, 1, 2
RILL_LOG_OFF, RILL_LOG_ERROR, RILL_LOG_WARN, RILL_LOG_INFO, RILL_LOG_DEBUG, RILL_LOG_TRACE = 0, 1, 2, 3, 4, 5
# The largest struct_size (and stats size) the library accepts.
RILL_STRUCT_SIZE_MAX = 65536
# A message's id (the dedupe window's key), its longest length, and the flag
# the _outcome publish calls set for a duplicate.
RILL_ATTR_ID = "rill.id"
RILL_ID_MAX_LEN = 128
RILL_PUBLISHED_DUPLICATE = 1
RILL_PRIORITY_UNSET, RILL_PRIORITY_MIN, RILL_PRIORITY_MAX, RILL_PRIORITY_DEFAULT = -1, 0, 7, 4
RILL_PRIORITY_AGING_TAKES = 32
# Topic schemas: what an invalid payload does, the flag the _outcome publish
# calls set for a dead-lettered one, and the attribute holding a record's
# schema version.
RILL_ON_INVALID_REJECT, RILL_ON_INVALID_DEAD_LETTER = 0, 1
RILL_PUBLISHED_DEAD_LETTERED = 2
RILL_SCHEMA_REASON_MAX = 512
RILL_ATTR_SCHEMA = "rill.schema"
SCHEMA_ATTRIBUTE = RILL_ATTR_SCHEMA

# ---- functions ------------------------------------------------------------------

# The C type of every parameter and return value, as rill.h spells it.
TYPES: dict[str, object] = {
    "void": None,
    "rill_status": c_int32,
    "int32_t": c_int32,
    "int64_t": c_int64,
    "uint32_t": c_uint32,
    "uint64_t": c_uint64,
    "size_t": c_size_t,
    "bool": c_bool,
    "const char*": c_char_p,
    "char*": c_void_p,
    "const void*": c_void_p,
    "const size_t*": c_void_p,
    "size_t*": POINTER(c_size_t),
    "uint32_t*": POINTER(c_uint32),
    "bool*": POINTER(c_bool),
    "uint64_t*": POINTER(c_uint64),
    "int*": POINTER(c_int),
    "const char**": POINTER(c_void_p),
    "rill_broker*": c_void_p,
    "rill_validator_fn": VALIDATOR,
    "rill_destructor": DESTRUCTOR,
    "rill_broker**": POINTER(c_void_p),
    "const rill_broker_options*": POINTER(rill_broker_options),
    "rill_broker_options*": POINTER(rill_broker_options),
    "const rill_topic_options*": POINTER(rill_topic_options),
    "rill_topic_options*": POINTER(rill_topic_options),
    "rill_topic_stats*": POINTER(rill_topic_stats),
    "const rill_record*": c_void_p,
    "rill_position*": c_void_p,
    "const rill_publisher*": c_void_p,
    "rill_publisher*": c_void_p,
    "rill_publisher**": POINTER(c_void_p),
    "rill_consumer*": c_void_p,
    "const rill_consumer*": c_void_p,
    "rill_consumer**": POINTER(c_void_p),
    "const rill_consumer_options*": POINTER(rill_consumer_options),
    "rill_consumer_options*": POINTER(rill_consumer_options),
    "const rill_message*": c_void_p,
    "const rill_message**": POINTER(c_void_p),
    "rill_subscription*": c_void_p,
    "const rill_subscription*": c_void_p,
    "rill_subscription**": POINTER(c_void_p),
    "const rill_subscription_options*": POINTER(rill_subscription_options),
    "rill_subscription_options*": POINTER(rill_subscription_options),
    "rill_subscription_stats*": POINTER(rill_subscription_stats),
    "rill_consumer_stats*": POINTER(rill_consumer_stats),
    "rill_handler": HANDLER,
    "rill_batch_handler": BATCH_HANDLER,
    "rill_log_callback": LOG_CALLBACK,
    "rill_topic_callback": TOPIC_CALLBACK,
    "rill_subscription_callback": SUBSCRIPTION_CALLBACK,
    "rill_group_callback": GROUP_CALLBACK,
    "rill_partition_lag_callback": PARTITION_LAG_CALLBACK,
    "rill_named_subscription_callback": NAMED_SUBSCRIPTION_CALLBACK,
    "rill_group_member_callback": GROUP_MEMBER_CALLBACK,
    "rill_directory_subscription_callback": DIRECTORY_SUBSCRIPTION_CALLBACK,
    "rill_directory_consumer_callback": DIRECTORY_CONSUMER_CALLBACK,
}

# name -> (return type, parameter types), exactly as in rill.h.
FUNCTIONS: dict[str, tuple[str, list[str]]] = {
    "rill_version": ("const char*", []),
    "rill_status_name": ("const char*", ["int32_t"]),
    "rill_set_log_callback": ("rill_status", ["rill_log_callback", "void*"]),
    "rill_set_log_level": ("rill_status", ["int32_t"]),
    "rill_last_error": ("size_t", ["char*", "size_t"]),
    "rill_broker_options_init_v1": ("void", ["rill_broker_options*", "size_t"]),
    "rill_broker_new_v1": ("rill_status", ["const rill_broker_options*", "rill_broker**"]),
    "rill_broker_close": ("void", ["rill_broker*"]),
    "rill_broker_free": ("void", ["rill_broker*"]),
    "rill_topic_options_init_v1": ("void", ["rill_topic_options*", "size_t"]),
    "rill_topic_create_v1": ("rill_status", ["rill_broker*", "const char*", "const rill_topic_options*"]),
    "rill_topic_list": ("rill_status", ["rill_broker*", "rill_topic_callback", "void*"]),
    "rill_topic_delete": ("rill_status", ["rill_broker*", "const char*"]),
    "rill_topic_get_stats_v1": ("rill_status", ["rill_broker*", "const char*", "rill_topic_stats*", "size_t"]),
    "rill_publish": ("rill_status", ["rill_broker*", "const char*", "const rill_record*", "rill_position*"]),
    "rill_try_publish": ("rill_status", ["rill_broker*", "const char*", "const rill_record*", "rill_position*"]),
    "rill_publish_outcome": (
        "rill_status",
        ["rill_broker*", "const char*", "const rill_record*", "rill_position*", "uint32_t*"],
    ),
    "rill_try_publish_outcome": (
        "rill_status",
        ["rill_broker*", "const char*", "const rill_record*", "rill_position*", "uint32_t*"],
    ),
    "rill_publish_batch_outcome": (
        "rill_status",
        ["rill_broker*", "const char*", "const rill_record*", "size_t", "rill_position*", "uint32_t*"],
    ),
    "rill_publisher_publish_outcome": (
        "rill_status",
        ["const rill_publisher*", "const rill_record*", "rill_position*", "uint32_t*"],
    ),
    "rill_publisher_publish_batch_outcome": (
        "rill_status",
        ["const rill_publisher*", "const rill_record*", "size_t", "rill_position*", "uint32_t*"],
    ),
    "rill_publish_batch": (
        "rill_status",
        ["rill_broker*", "const char*", "const rill_record*", "size_t", "rill_position*"],
    ),
    "rill_topic_set_schema_json": ("rill_status", ["rill_broker*", "const char*", "const char*", "uint32_t"]),
    "rill_topic_set_validator": (
        "rill_status",
        ["rill_broker*", "const char*", "rill_validator_fn", "void*", "uint32_t"],
    ),
    "rill_topic_set_validator_with_free": (
        "rill_status",
        ["rill_broker*", "const char*", "rill_validator_fn", "void*", "rill_destructor", "uint32_t"],
    ),
    "rill_topic_remove_schema": ("rill_status", ["rill_broker*", "const char*"]),
    "rill_topic_schema_version": ("rill_status", ["rill_broker*", "const char*", "uint64_t*"]),
    "rill_publisher_new": ("rill_status", ["rill_broker*", "const char*", "rill_publisher**"]),
    "rill_publisher_publish": ("rill_status", ["const rill_publisher*", "const rill_record*", "rill_position*"]),
    "rill_publisher_publish_batch": (
        "rill_status",
        ["const rill_publisher*", "const rill_record*", "size_t", "rill_position*"],
    ),
    "rill_publisher_publish_bytes": (
        "rill_status",
        ["const rill_publisher*", "const void*", "size_t", "const void*", "size_t", "rill_position*"],
    ),
    "rill_publisher_publish_packed": (
        "rill_status",
        ["const rill_publisher*", "const void*", "const size_t*", "size_t", "rill_position*"],
    ),
    "rill_publisher_publish_bytes_outcome": (
        "rill_status",
        ["const rill_publisher*", "const void*", "size_t", "const void*", "size_t", "rill_position*", "uint32_t*"],
    ),
    "rill_publisher_publish_packed_outcome": (
        "rill_status",
        ["const rill_publisher*", "const void*", "const size_t*", "size_t", "rill_position*", "uint32_t*"],
    ),
    "rill_publisher_free": ("void", ["rill_publisher*"]),
    "rill_consumer_options_init_v1": ("void", ["rill_consumer_options*", "size_t"]),
    "rill_consumer_new_v1": (
        "rill_status",
        ["rill_broker*", "const char*", "const char*", "const rill_consumer_options*", "rill_consumer**"],
    ),
    "rill_consumer_poll": ("rill_status", ["rill_consumer*", "size_t", "int64_t", "const rill_message**", "size_t*"]),
    "rill_consumer_commit": ("rill_status", ["rill_consumer*"]),
    "rill_consumer_commit_offset": ("rill_status", ["rill_consumer*", "uint32_t", "uint64_t"]),
    "rill_consumer_seek": ("rill_status", ["rill_consumer*", "uint32_t", "uint64_t"]),
    "rill_consumer_nack": ("rill_status", ["rill_consumer*", "uint32_t", "uint64_t", "bool*"]),
    "rill_consumer_seek_time": ("rill_status", ["rill_consumer*", "uint32_t", "int64_t"]),
    "rill_consumer_seek_to_beginning": ("rill_status", ["rill_consumer*"]),
    "rill_consumer_seek_to_end": ("rill_status", ["rill_consumer*"]),
    "rill_consumer_rollback": ("rill_status", ["rill_consumer*"]),
    "rill_consumer_position": ("rill_status", ["const rill_consumer*", "uint32_t", "uint64_t*"]),
    "rill_consumer_committed": ("rill_status", ["const rill_consumer*", "uint32_t", "uint64_t*"]),
    "rill_consumer_get_stats": ("rill_status", ["const rill_consumer*", "rill_consumer_stats*"]),
    "rill_group_get_stats": ("rill_status", ["rill_broker*", "const char*", "const char*", "rill_consumer_stats*"]),
    "rill_group_partitions": (
        "rill_status",
        ["rill_broker*", "const char*", "const char*", "rill_partition_lag_callback", "void*"],
    ),
    "rill_group_list": ("rill_status", ["rill_broker*", "rill_group_callback", "void*"]),
    "rill_group_delete": ("rill_status", ["rill_broker*", "const char*", "const char*"]),
    "rill_group_member_list": (
        "rill_status",
        ["rill_broker*", "const char*", "const char*", "rill_group_member_callback", "void*"],
    ),
    "rill_named_subscription_list": ("rill_status", ["rill_broker*", "rill_named_subscription_callback", "void*"]),
    "rill_directory_subscription_list": (
        "rill_status",
        ["rill_broker*", "rill_directory_subscription_callback", "void*"],
    ),
    "rill_directory_consumer_list": ("rill_status", ["rill_broker*", "rill_directory_consumer_callback", "void*"]),
    "rill_consumer_partition_count": ("uint32_t", ["const rill_consumer*"]),
    "rill_consumer_assignment": ("rill_status", ["const rill_consumer*", "uint32_t*", "size_t", "size_t*"]),
    "rill_consumer_notify_fd": ("rill_status", ["rill_consumer*", "int*"]),
    "rill_consumer_free": ("void", ["rill_consumer*"]),
    "rill_message_attribute_count": ("size_t", ["const rill_message*"]),
    "rill_message_schema_version": ("uint64_t", ["const rill_message*"]),
    "rill_message_attribute_at": (
        "rill_status",
        ["const rill_message*", "size_t", "const char**", "size_t*", "const char**", "size_t*"],
    ),
    "rill_message_attribute": ("rill_status", ["const rill_message*", "const char*", "const char**", "size_t*"]),
    "rill_ack_reason": ("void", ["const rill_message*", "const char*"]),
    "rill_subscription_options_init_v1": ("void", ["rill_subscription_options*", "size_t"]),
    "rill_subscribe_v1": (
        "rill_status",
        [
            "rill_broker*",
            "const char*",
            "const rill_subscription_options*",
            "rill_handler",
            "void*",
            "rill_subscription**",
        ],
    ),
    "rill_subscribe_batch_v1": (
        "rill_status",
        [
            "rill_broker*",
            "const char*",
            "const rill_subscription_options*",
            "rill_batch_handler",
            "void*",
            "rill_subscription**",
        ],
    ),
    "rill_subscription_wait_idle": ("rill_status", ["rill_subscription*", "int64_t"]),
    "rill_subscription_notify_fd": ("rill_status", ["rill_subscription*", "int*"]),
    "rill_subscription_get_stats_v1": (
        "rill_status",
        ["const rill_subscription*", "rill_subscription_stats*", "size_t"],
    ),
    "rill_subscription_name": ("size_t", ["const rill_subscription*", "char*", "size_t"]),
    "rill_subscription_closed_reason": ("size_t", ["const rill_subscription*", "char*", "size_t"]),
    "rill_subscription_last_error": ("size_t", ["const rill_subscription*", "char*", "size_t"]),
    "rill_subscription_list": ("rill_status", ["rill_broker*", "rill_subscription_callback", "void*"]),
    "rill_durable_delete": ("rill_status", ["rill_broker*", "const char*"]),
    "rill_subscription_partitions": (
        "rill_status",
        ["const rill_subscription*", "rill_partition_lag_callback", "void*"],
    ),
    "rill_subscription_free": ("void", ["rill_subscription*"]),
    "rill_subscription_close": ("void", ["rill_subscription*"]),
}
TYPES["void*"] = c_void_p

# ---- the NATS bridge (include/rill_nats.h; only in a librill built with the nats feature) ----


class rill_nats_options(Structure):
    _fields_ = [
        ("struct_size", c_uint32),
        ("url", c_char_p),
        ("user", c_char_p),
        ("password", c_char_p),
        ("token", c_char_p),
        ("broker_id", c_char_p),
        ("connect_timeout_ms", c_uint32),
        ("request_timeout_ms", c_uint32),
        ("export_pattern", c_char_p),
        ("export_stream", c_char_p),
        ("export_subject_prefix", c_char_p),
        ("export_subscription", c_char_p),
        ("import_stream", c_char_p),
        ("import_consumer", c_char_p),
        ("import_subject_prefix", c_char_p),
        ("import_subject_filter", c_char_p),
        ("import_topic_prefix", c_char_p),
        ("import_batch", c_uint32),
        ("import_ack_wait_ms", c_uint32),
    ]


class rill_nats_stats(Structure):
    _fields_ = [
        ("exported", c_uint64),
        ("imported", c_uint64),
        ("in_flight", c_uint64),
        ("reconnects", c_uint64),
        ("rejected", c_uint64),
        ("export_lag", c_uint64),
        ("has_error", c_bool),
    ]


TYPES.update(
    {
        "rill_nats_bridge*": c_void_p,
        "const rill_nats_bridge*": c_void_p,
        "rill_nats_bridge**": POINTER(c_void_p),
        "rill_nats_options*": POINTER(rill_nats_options),
        "const rill_nats_options*": POINTER(rill_nats_options),
        "rill_nats_stats*": POINTER(rill_nats_stats),
    }
)

# As FUNCTIONS, for include/rill_nats.h.
NATS_FUNCTIONS: dict[str, tuple[str, list[str]]] = {
    "rill_nats_options_init_v1": ("void", ["rill_nats_options*", "size_t"]),
    "rill_nats_bridge_new": ("rill_status", ["rill_broker*", "const rill_nats_options*", "rill_nats_bridge**"]),
    "rill_nats_bridge_get_stats": ("rill_status", ["const rill_nats_bridge*", "rill_nats_stats*"]),
    "rill_nats_bridge_last_error": ("size_t", ["const rill_nats_bridge*", "char*", "size_t"]),
    "rill_nats_bridge_free": ("void", ["rill_nats_bridge*"]),
}

# Whether this librill has the bridge (built with the nats feature).
HAS_NATS = hasattr(lib, "rill_nats_bridge_new")


def _declare() -> None:
    tables = [FUNCTIONS, NATS_FUNCTIONS] if HAS_NATS else [FUNCTIONS]
    for table in tables:
        for name, (ret, params) in table.items():
            fn = getattr(lib, name)
            fn.restype = TYPES[ret]
            fn.argtypes = [TYPES[p] for p in params]


_declare()


def last_error() -> str:
    """This thread's last error text from the library."""
    n = lib.rill_last_error(None, 0)
    buf = ctypes.create_string_buffer(n + 1)
    lib.rill_last_error(buf, n + 1)
    return buf.value.decode("utf-8", "replace")


def status_name(status: int) -> str:
    return str(lib.rill_status_name(status).decode())


def read_str(fn: Callable[..., int], handle: int | None) -> str:
    """Calls a size_t fn(handle, char *buf, size_t len) string getter."""
    n = fn(handle, None, 0)
    buf = ctypes.create_string_buffer(n + 1)
    fn(handle, buf, n + 1)
    return buf.value.decode("utf-8", "replace")
