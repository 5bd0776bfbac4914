"""rill: a lock-free, in-process publish/subscribe engine, from Python.

    import rill

    with rill.Broker() as broker:
        broker.create_topic("orders")
        sub = broker.subscribe("orders", lambda msg: print(msg.payload), start="earliest")
        broker.publish("orders", b"hello", attributes={"region": "IN"})
        sub.wait_idle(timeout=5.0)

The library is ``librill.so``, loaded with ctypes: from ``RILL_LIBRARY`` if
set, else the copy inside this package (``pip install`` builds it with cargo),
else, when run from a source checkout, the workspace's ``target/release`` or
``target/debug``.
"""

from ._broker import (
    DEFAULT_PRIORITY,
    MAX_PRIORITY,
    PRIORITY_AGING_TAKES,
    Ack,
    BatchHandler,
    Broker,
    Cleanup,
    Consumer,
    ConsumerStats,
    Delivery,
    DirectoryConsumer,
    DirectorySubscription,
    GroupMember,
    GroupStats,
    Handler,
    Message,
    NamedSubscription,
    Overflow,
    PartitionLag,
    Position,
    Start,
    State,
    Subscription,
    SubscriptionStats,
    TopicStats,
    set_log_level,
    version,
)
from ._errors import (
    Busy,
    Closed,
    CorruptData,
    Full,
    InvalidArgument,
    InvalidFilter,
    InvalidPattern,
    InvalidTopic,
    MessageTooLarge,
    NoSuchTopic,
    NotFound,
    OutOfRange,
    Panic,
    Reassigned,
    ResourceExhausted,
    RillError,
    SchemaError,
    StorageError,
    Timeout,
    TopicExists,
)

__all__ = [
    "DEFAULT_PRIORITY",
    "MAX_PRIORITY",
    "PRIORITY_AGING_TAKES",
    "Ack",
    "BatchHandler",
    "Broker",
    "Busy",
    "Cleanup",
    "Closed",
    "Consumer",
    "ConsumerStats",
    "CorruptData",
    "Delivery",
    "DirectoryConsumer",
    "DirectorySubscription",
    "Full",
    "GroupMember",
    "GroupStats",
    "Handler",
    "InvalidArgument",
    "InvalidFilter",
    "InvalidPattern",
    "InvalidTopic",
    "Message",
    "MessageTooLarge",
    "NamedSubscription",
    "NoSuchTopic",
    "NotFound",
    "OutOfRange",
    "Overflow",
    "Panic",
    "PartitionLag",
    "Position",
    "Reassigned",
    "ResourceExhausted",
    "RillError",
    "SchemaError",
    "Start",
    "State",
    "StorageError",
    "Subscription",
    "SubscriptionStats",
    "Timeout",
    "TopicExists",
    "TopicStats",
    "set_log_level",
    "version",
]

__version__ = version()
