/*
 * Issue 41, compacted topics, from C: rill_topic_options.cleanup with
 * RILL_CLEANUP_COMPACT keeps the newest message of every key. A keyless
 * publish is RILL_ERR_INVALID_ARGUMENT and appends nothing; an unknown
 * cleanup value is refused; the broker's compactor (a background thread)
 * removes superseded messages from sealed segments while offsets stay what
 * they were, so a consumer from the beginning reads the newest value of each
 * key in offset order, a seek to a removed offset starts at the next kept
 * one, and commits across gaps work; rill_topic_stats counts what was
 * removed. A compacted topic on a data directory shared by processes is
 * refused (two processes could compact the same files); on one broker's
 * own data directory it works (test_durable_compact.c).
 *
 * The wait for the compactor is a deadline around a condition (the reader
 * sees only newest values), never a sleep standing in for it.
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
#include <unistd.h>

#include "rill.h"

#include "check.h"
#include "dirs.h"
#include "compact.h"

enum {
    DEADLINE_S = 60, /* longest wait for the compactor */
};

/* Reads the topic from the beginning with a new group; true if the data
 * keys' messages are exactly the newest of each, in offset order. */
static bool reads_newest_only(rill_broker *b, int round) {
    char group[LINE];
    snprintf(group, sizeof group, "probe-%d", round);
    newest_t read = read_newest(b, group, NO_TOMBSTONE);
    return read.other == 0 && read.newest == KEYS;
}

int main(void) {
    rill_broker *b = NULL;
    OK(rill_broker_new(NULL, &b));
    if (!b) {
        return CHECK_VERDICT("test_robust_compact");
    }
    rill_topic_options o;
    rill_topic_options_init(&o);
    CHECK(o.cleanup == RILL_CLEANUP_DELETE);
    CHECK(o.delete_retention_ms == 86400000u);
    CHECK(o.min_compaction_lag_ms == 0);
    o.cleanup = 7;
    CHECK_STATUS(rill_topic_create(b, TOPIC, &o), RILL_ERR_INVALID_ARGUMENT);
    o.cleanup = RILL_CLEANUP_COMPACT;
    OK(rill_topic_create(b, TOPIC, &o));

    /* No key: refused, nothing appended. */
    rill_position at = {0, 0};
    CHECK_STATUS(publish(b, NULL, "x", 1, &at), RILL_ERR_INVALID_ARGUMENT);

    /* The refused publish took no offset: the data's start at 0. */
    publish_data(b, NO_TOMBSTONE);
    rill_topic_stats now;

    double deadline = now_s() + DEADLINE_S;
    int round = 0;
    bool done = false;
    while (!done && now_s() < deadline) {
        done = reads_newest_only(b, round++);
    }
    CHECK(done);

    OK(rill_topic_get_stats(b, TOPIC, &now));
    CHECK(now.compaction_passes >= 1);
    CHECK(now.compacted_messages >= DATA - KEYS);
    CHECK(now.compacted_bytes >= (uint64_t)(DATA - KEYS) * PAYLOAD);
    CHECK(now.compaction_keys >= KEYS);

    /* Seek into a gap, poll, commit across it. */
    rill_consumer *c = NULL;
    OK(rill_consumer_new(b, "readers", TOPIC, NULL, &c));
    if (c) {
        OK(rill_consumer_seek(c, 0, 5));
        const rill_message *ms = NULL;
        size_t n = 0;
        OK(rill_consumer_poll(c, 1, 5000, &ms, &n));
        CHECK(n == 1);
        if (n == 1) {
            CHECK(ms[0].offset == DATA - KEYS); /* the first kept data message */
        }
        OK(rill_consumer_commit(c));
        uint64_t committed = 0;
        OK(rill_consumer_committed(c, 0, &committed));
        CHECK(committed == DATA - KEYS + 1);
        rill_consumer_free(c);
    }
    /* Offsets never change: the next message continues after the last. */
    OK(publish(b, "k0", "next", 4, &at));
    CHECK(at.offset == now.publish_count);
    rill_broker_free(b);

    /* On a data directory shared by processes: refused, clearly. */
    char dir[] = "/tmp/rill-compact-XXXXXX";
    if (mkdtemp(dir)) {
        rill_broker *d = NULL;
        OK(open_shared_broker(dir, RILL_SHARING_PROCESSES, RILL_FSYNC_NEVER, &d));
        if (d) {
            CHECK_STATUS(rill_topic_create(d, TOPIC, &o), RILL_ERR_INVALID_ARGUMENT);
            char err[512];
            rill_last_error(err, sizeof err);
            CHECK(strstr(err, "shared by processes") != NULL);
            rill_broker_free(d);
        }
        remove_dir(dir);
    }
    return CHECK_VERDICT("test_robust_compact");
}
