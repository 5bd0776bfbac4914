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

enum {
    KEYS = 10,       /* distinct keys of the data */
    DATA = 1200,     /* data messages: more than a 4 MiB segment holds */
    FILLER = 1100,   /* filler messages: more than a 4 MiB segment holds */
    PAYLOAD = 4000,  /* bytes of every message */
    DEAD_KEY = 3,    /* the key whose last message is a tombstone */
    LINE = 64,
    DEADLINE_S = 120, /* longest wait for the compactor */
};

static const char *TOPIC = "prices";

static rill_status publish(rill_broker *b, const char *key, const char *payload, size_t len, rill_position *at) {
    rill_record r;
    memset(&r, 0, sizeof r);
    r.key = key;
    r.key_len = key ? strlen(key) : 0;
    r.payload = payload;
    r.payload_len = len;
    return rill_publish(b, TOPIC, &r, at);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Message i of the data: key "k<i % KEYS>", payload "v<i>" padded with
 * '.'; the last message of DEAD_KEY is its tombstone (no payload). */
static bool is_tombstone(int i) {
    return i == DATA - KEYS + DEAD_KEY;
}

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

    char *payload = malloc(PAYLOAD);
    char key[LINE];
    rill_position at = {0, 0};
    for (int i = 0; i < DATA; i++) {
        snprintf(key, sizeof key, "k%d", i % KEYS);
        memset(payload, '.', PAYLOAD);
        snprintf(payload, LINE, "v%d", i);
        OK(publish(b, key, payload, is_tombstone(i) ? 0 : PAYLOAD, &at));
        CHECK(at.offset == (uint64_t)i);
    }
    /* Filler of its own key, more than a segment, so that every data
     * message is in a sealed segment file (the compactor never touches the
     * one being written). */
    memset(payload, '-', PAYLOAD);
    for (int i = 0; i < FILLER; i++) {
        OK(publish(b, "~", payload, PAYLOAD, &at));
    }
    CHECK(wait_compacted(b, DATA - KEYS));
    rill_topic_stats before;
    OK(rill_topic_get_stats(b, TOPIC, &before));
    CHECK(before.compaction_passes >= 1);
    CHECK(before.compacted_bytes >= (uint64_t)(DATA - KEYS) * PAYLOAD);
    rill_broker_free(b);

    /* Reopened: the newest message of each key, from the rebuilt files. */
    b = open_broker_or_exit(dir, RILL_FSYNC_INTERVAL);
    CHECK_STATUS(publish(b, NULL, "x", 1, &at), RILL_ERR_INVALID_ARGUMENT);
    rill_consumer *c = NULL;
    OK(rill_consumer_new(b, "after-restart", TOPIC, NULL, &c));
    int seen = 0, filler = 0;
    bool any = false;
    uint64_t last = 0;
    for (;;) {
        const rill_message *ms = NULL;
        size_t n = 0;
        OK(rill_consumer_poll(c, 1000, 20, &ms, &n));
        if (n == 0) {
            break;
        }
        for (size_t i = 0; i < n; i++) {
            const rill_message *m = &ms[i];
            CHECK(!any || m->offset > last);
            any = true;
            last = m->offset;
            if (m->key_len == 1 && m->key[0] == '~') {
                filler++;
                continue;
            }
            CHECK(m->key_len >= 2 && m->key[0] == 'k');
            int k = atoi((const char *)m->key + 1);
            int want = DATA - KEYS + k;
            CHECK(m->offset == (uint64_t)want);
            if (is_tombstone(want)) {
                CHECK(m->payload_len == 0);
            } else {
                char expect[LINE];
                snprintf(expect, sizeof expect, "v%d", want);
                CHECK(m->payload_len == PAYLOAD && memcmp(m->payload, expect, strlen(expect)) == 0);
            }
            seen++;
        }
    }
    CHECK(seen == KEYS);
    CHECK(filler >= 1);
    rill_consumer_free(c);
    /* Offsets continue after the last one. */
    OK(publish(b, "k0", "next", 4, &at));
    CHECK(at.offset == (uint64_t)(DATA + FILLER));
    free(payload);
    rill_broker_free(b);

    char cmd[LINE * 2];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0);
    return CHECK_VERDICT("test_durable_compact");
}
