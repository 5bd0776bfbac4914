/*
 * The compacted topic the C compaction tests (test_robust_compact.c in
 * memory, test_durable_compact.c on a data directory) write and read back:
 * DATA keyed messages over KEYS keys, then FILLER messages of a key of
 * their own so that every data message is in a sealed segment (the
 * compactor never touches the one being written), and a reader from the
 * beginning that checks it sees the newest message of each key only.
 * Include after check.h, with _POSIX_C_SOURCE 200809L defined before any
 * system header.
 */
#ifndef RILL_TEST_COMPACT_H
#define RILL_TEST_COMPACT_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rill.h"

enum {
    KEYS = 10,      /* distinct keys of the data */
    DATA = 1200,    /* data messages: more than a 4 MiB segment holds */
    FILLER = 1100,  /* filler messages: more than a 4 MiB segment holds */
    PAYLOAD = 4000, /* bytes of every message */
    LINE = 64,
    NO_TOMBSTONE = -1, /* for publish_data: every data message has a value */
};

/* The compacted topic. */
static const char *TOPIC = "prices";

/* Publishes to TOPIC under `key` (NULL: none). */
static inline rill_status publish(rill_broker *b, const char *key, const char *payload, size_t len,
                                  rill_position *at) {
    rill_record r;
    memset(&r, 0, sizeof r);
    r.key = key;
    r.key_len = key ? strlen(key) : 0;
    r.payload = payload;
    r.payload_len = len;
    return rill_publish(b, TOPIC, &r, at);
}

/* Seconds on the monotonic clock, for deadlines. */
static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Publishes the data and the filler, checking the data's offsets start at
 * 0. Data message i has key "k<i % KEYS>" and payload "v<i>" padded
 * with '.', but message `tombstone` (or none: NO_TOMBSTONE) is its key's
 * tombstone (no payload). The filler has key "~" and payload '-'. */
static inline void publish_data(rill_broker *b, int tombstone) {
    char *payload = malloc(PAYLOAD);
    CHECK(payload != NULL);
    if (payload == NULL) {
        return;
    }
    char key[LINE];
    rill_position at = {0, 0};
    for (int i = 0; i < DATA; i++) {
        snprintf(key, sizeof key, "k%d", i % KEYS);
        memset(payload, '.', PAYLOAD);
        snprintf(payload, LINE, "v%d", i);
        OK(publish(b, key, payload, i == tombstone ? 0 : PAYLOAD, &at));
        CHECK(at.offset == (uint64_t)i);
    }
    memset(payload, '-', PAYLOAD);
    for (int i = 0; i < FILLER; i++) {
        OK(publish(b, "~", payload, PAYLOAD, &at));
    }
    free(payload);
}

/* What read_newest found. */
typedef struct {
    int newest; /* data messages that are the newest of their key, as published */
    int other;  /* data messages that are not */
    int filler; /* filler messages */
} newest_t;

/* Reads TOPIC from the beginning with a new consumer in `group`, checking
 * offsets only grow, and sorts what it reads: the newest message of key k
 * is the last i < DATA with i % KEYS == k, its payload as publish_data
 * wrote it (none if it is `tombstone`). */
static inline newest_t read_newest(rill_broker *b, const char *group, int tombstone) {
    newest_t got = {0, 0, 0};
    rill_consumer *c = NULL;
    OK(rill_consumer_new(b, group, TOPIC, NULL, &c));
    if (c == NULL) {
        return got;
    }
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
                got.filler++;
                continue;
            }
            CHECK(m->key_len >= 2 && m->key[0] == 'k');
            int want = DATA - KEYS + atoi((const char *)m->key + 1);
            char expect[LINE];
            snprintf(expect, sizeof expect, "v%d", want);
            bool value = want == tombstone
                             ? m->payload_len == 0
                             : m->payload_len == PAYLOAD && memcmp(m->payload, expect, strlen(expect)) == 0;
            if (m->offset == (uint64_t)want && value) {
                got.newest++;
            } else {
                got.other++;
            }
        }
    }
    rill_consumer_free(c);
    return got;
}

#endif
