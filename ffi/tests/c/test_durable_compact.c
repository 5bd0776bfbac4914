/*
 * Issue 41, compaction on a data directory, from C: a broker on its own
 * data directory creates a RILL_CLEANUP_COMPACT topic, publishes keyed
 * messages (each key rewritten many times, and a tombstone), and the
 * compactor rewrites the sealed segment files; the broker is freed and a
 * new one opened on the directory reads back, from the beginning, exactly
 * the newest message of each live key, in offset order, under the offsets
 * they were published at. The reopened topic is still compacted (a keyless
 * publish is refused) and its stats count the new broker's passes.
 *
 * The wait for the compactor is a deadline around a condition (the topic's
 * stats count the removed messages), never a sleep standing in for it.
 *
 * Built with -std=c99 -Wall -Wextra -Wpedantic -Werror, and run plain, under
 * AddressSanitizer + UBSan and under valgrind memcheck by ffi/tests/run.sh.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rill.h"

#include "check.h"
#include "dirs.h"
#include "compact.h"

enum {
    DEAD_KEY = 3,     /* the key whose last message is a tombstone */
    DEADLINE_S = 120, /* longest wait for the compactor */
    /* Data message DEAD_KEY's last is its tombstone. */
    TOMBSTONE = DATA - KEYS + DEAD_KEY,
};

/* Waits until the topic's stats count at least `removed` compacted
 * messages; true if they did before the deadline. */
static bool wait_compacted(rill_broker *b, uint64_t removed) {
    double deadline = now_s() + DEADLINE_S;
    rill_topic_stats s;
    while (now_s() < deadline) {
        OK(rill_topic_get_stats(b, TOPIC, &s));
        if (s.compacted_messages >= removed) {
            return true;
        }
        struct timespec nap = {0, 10 * 1000 * 1000};
        nanosleep(&nap, NULL);
    }
    return false;
}

int main(void) {
    char dir[] = "/tmp/rill-durable-compact-XXXXXX";
    if (!mkdtemp(dir)) {
        CHECK(false);
        return CHECK_VERDICT("test_durable_compact");
    }
    rill_broker *b = open_broker_or_exit(dir, RILL_FSYNC_INTERVAL);
    rill_topic_options o;
    rill_topic_options_init(&o);
    o.cleanup = RILL_CLEANUP_COMPACT;
    o.delete_retention_ms = 86400000u; /* the tombstone stays */
    OK(rill_topic_create(b, TOPIC, &o));

    publish_data(b, TOMBSTONE);
    CHECK(wait_compacted(b, DATA - KEYS));
    rill_topic_stats before;
    OK(rill_topic_get_stats(b, TOPIC, &before));
    CHECK(before.compaction_passes >= 1);
    CHECK(before.compacted_bytes >= (uint64_t)(DATA - KEYS) * PAYLOAD);
    rill_broker_free(b);

    /* Reopened: the newest message of each key, from the rebuilt files. */
    b = open_broker_or_exit(dir, RILL_FSYNC_INTERVAL);
    rill_position at = {0, 0};
    CHECK_STATUS(publish(b, NULL, "x", 1, &at), RILL_ERR_INVALID_ARGUMENT);
    newest_t read = read_newest(b, "after-restart", TOMBSTONE);
    CHECK(read.newest == KEYS && read.other == 0);
    CHECK(read.filler >= 1);
    /* Offsets continue after the last one. */
    OK(publish(b, "k0", "next", 4, &at));
    CHECK(at.offset == (uint64_t)(DATA + FILLER));
    rill_broker_free(b);

    remove_dir(dir);
    return CHECK_VERDICT("test_durable_compact");
}
