/*
 * Issue 40, items 3, 5 and 9, from C: pull consumers and consumer groups.
 *
 * 3. A nack that dead-letters a message skips that message only: the rest
 *    of the polled batch (whose pointers the nack ended) is polled again.
 * 5. A group commit, or a durable subscription's saved position, above the
 *    end of a partition that recovery cut is reset to that end when the
 *    broker opens its data directory (counted in
 *    rill_topic_stats.recovered_offsets_reset): what is published afterwards
 *    is delivered, not skipped.
 * 9. A group whose session_timeout_ms is shorter than its members' poll
 *    cycle still makes progress on every partition.
 *
 * And a group name too long for its default dead-letter topic
 * "$dlq/<group>" (over 250 bytes) is refused by rill_consumer_new, where
 * before every nack at max_attempts failed; 250 bytes dead-letter, and a
 * group naming its own dead_letter_topic may use all 255.
 *
 * Built with -std=c99 -Wall -Wextra -Wpedantic -Werror, and run plain, under
 * AddressSanitizer + UBSan and under valgrind memcheck by ffi/tests/run.sh.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rill.h"

#include "check.h"
#include "dirs.h"

enum {
    /* Item 5: what the first broker publishes and commits, and where the
     * damage cuts the partition. */
    COMMITTED = 1000,
    CUT_AT = 71,
    AFTER_REPAIR = 50,
    /* Item 3: the dead-letter storm. */
    STORM = 400,
    /* Item 9. */
    MEMBERS = 8,
    PARTITIONS = 3,
    PER_PARTITION = 200,
    /* A hang guard only: a healthy run never gets near it. */
    WAIT_SECONDS = 60,
};

static rill_record record_of(const char *payload) {
    rill_record r;
    memset(&r, 0, sizeof r);
    r.payload = payload;
    r.payload_len = strlen(payload);
    return r;
}

static double now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* ---- item 3 ---------------------------------------------------------------- */

static void test_dead_letter_skips_only_that_message(void) {
    rill_broker *b = NULL;
    OK(rill_broker_new(NULL, &b));
    OK(rill_topic_create(b, "jobs", NULL));
    for (int i = 0; i < 10; i++) {
        char payload[16];
        snprintf(payload, sizeof payload, "job %d", i);
        rill_record r = record_of(payload);
        OK(rill_publish(b, "jobs", &r, NULL));
    }
    rill_consumer_options co;
    rill_consumer_options_init(&co);
    co.max_attempts = 1;
    rill_consumer *c = NULL;
    OK(rill_consumer_new(b, "workers", "jobs", &co, &c));
    const rill_message *msgs = NULL;
    size_t count = 0;
    OK(rill_consumer_poll(c, 8, 0, &msgs, &count));
    CHECK(count == 8 && msgs[0].offset == 0 && msgs[7].offset == 7);
    bool dead = false;
    OK(rill_consumer_nack(c, 0, 0, &dead));
    CHECK(dead);
    uint64_t position = 0;
    OK(rill_consumer_position(c, 0, &position));
    CHECK(position == 1); /* as a nack below max_attempts would leave it, plus the skipped one */
    OK(rill_consumer_poll(c, 100, 0, &msgs, &count));
    CHECK(count == 9 && msgs[0].offset == 1 && msgs[count - 1].offset == 9);
    rill_consumer_free(c);

    /* A storm: every message is nacked as soon as it is polled, the rest of
     * its batch coming again; each one is dead-lettered exactly once. */
    OK(rill_topic_create(b, "storm", NULL));
    for (int i = 0; i < STORM; i++) {
        rill_record r = record_of("poison");
        OK(rill_publish(b, "storm", &r, NULL));
    }
    OK(rill_consumer_new(b, "stormers", "storm", &co, &c));
    uint64_t next = 0;
    int nacks = 0;
    for (;;) {
        OK(rill_consumer_poll(c, 8, 0, &msgs, &count));
        if (count == 0) {
            break;
        }
        CHECK(msgs[0].offset == next);
        next = msgs[0].offset + 1;
        OK(rill_consumer_nack(c, msgs[0].partition, msgs[0].offset, &dead));
        CHECK(dead);
        nacks++;
    }
    CHECK(nacks == STORM);
    rill_topic_stats ts;
    OK(rill_topic_get_stats(b, "$dlq/stormers", &ts));
    CHECK(ts.publish_count == STORM);
    rill_consumer_free(c);
    rill_broker_free(b);
}

/* ---- item 5 ---------------------------------------------------------------- */

static rill_broker *open_dir(const char *dir, bool repair) {
    rill_broker_options o;
    rill_broker_options_init(&o);
    o.data_dir = dir;
    o.fsync = RILL_FSYNC_NEVER;
    o.repair = repair;
    rill_broker *b = NULL;
    OK(rill_broker_new(&o, &b));
    if (b == NULL) {
        exit(2);
    }
    return b;
}

/* Counts what a durable subscription handles, and the lowest offset. */
typedef struct {
    pthread_mutex_t lock;
    uint64_t count;
    uint64_t first;
} tally;

static rill_ack count_message(void *user_data, const rill_message *m) {
    tally *t = user_data;
    pthread_mutex_lock(&t->lock);
    if (t->count == 0 || m->offset < t->first) {
        t->first = m->offset;
    }
    t->count++;
    pthread_mutex_unlock(&t->lock);
    return RILL_ACK_SUCCESS;
}

/* Subscribes the durable subscription "audit", waits until it has handled
 * everything published so far, closes it (saving its position) and returns
 * what it handled. */
static tally run_audit(rill_broker *b) {
    tally t;
    memset(&t, 0, sizeof t);
    pthread_mutex_init(&t.lock, NULL);
    rill_subscription_options so;
    rill_subscription_options_init(&so);
    so.name = "audit";
    so.start = RILL_START_EARLIEST;
    rill_subscription *s = NULL;
    OK(rill_subscribe(b, "t", &so, count_message, &t, &s));
    OK(rill_subscription_wait_idle(s, WAIT_SECONDS * 1000));
    rill_subscription_free(s);
    pthread_mutex_destroy(&t.lock);
    return t;
}

/* Polls `c` until a poll returns nothing; returns how many it got and the
 * lowest offset. */
static uint64_t drain(rill_consumer *c, uint64_t *first) {
    uint64_t got = 0;
    const rill_message *msgs = NULL;
    size_t count = 0;
    do {
        OK(rill_consumer_poll(c, 256, 0, &msgs, &count));
        for (size_t i = 0; i < count; i++) {
            if (got == 0 || msgs[i].offset < *first) {
                *first = msgs[i].offset;
            }
            got++;
        }
    } while (count > 0);
    return got;
}

static void publish_numbered(rill_broker *b, int from, int n) {
    for (int i = from; i < from + n; i++) {
        char payload[100];
        memset(payload, 'x', sizeof payload);
        int len = snprintf(payload, sizeof payload, "record number %04d", i);
        payload[len] = ' ';
        rill_record r = {NULL, 0, payload, sizeof payload, NULL, 0};
        OK(rill_publish(b, "t", &r, NULL));
    }
}

static void test_commit_past_a_repaired_end_is_reset(const char *root) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/cut", root);
    rill_broker *b = open_dir(dir, false);
    /* retention_bytes of 256 KiB makes 64 KiB segments: offset 71 is in the
     * first, sealed once the partition moves on. */
    rill_topic_options to;
    rill_topic_options_init(&to);
    to.retention_bytes = 256 << 10;
    OK(rill_topic_create(b, "t", &to));
    publish_numbered(b, 0, COMMITTED);
    rill_consumer *c = NULL;
    OK(rill_consumer_new(b, "billing", "t", NULL, &c));
    uint64_t first = 0;
    CHECK(drain(c, &first) == COMMITTED);
    OK(rill_consumer_commit(c));
    rill_consumer_free(c);
    CHECK(run_audit(b).count == COMMITTED);
    rill_broker_free(b);

    char part[600];
    snprintf(part, sizeof part, "%s/topics/0/0", dir);
    char needle[32];
    snprintf(needle, sizeof needle, "record number %04d", CUT_AT);
    CHECK(flip_inside(part, needle) == 1);

    b = open_dir(dir, true);
    rill_topic_stats ts;
    OK(rill_topic_get_stats(b, "t", &ts));
    CHECK(ts.publish_count == CUT_AT);
    CHECK(ts.recovered_repaired_partitions == 1);
    /* The group's commit and the durable subscription's position. */
    CHECK(ts.recovered_offsets_reset == 2);
    rill_consumer_stats gs;
    OK(rill_group_get_stats(b, "billing", "t", &gs));
    CHECK(gs.lag == 0);
    /* Published after the repair, before anyone reads: all delivered. */
    publish_numbered(b, CUT_AT, AFTER_REPAIR);
    OK(rill_consumer_new(b, "billing", "t", NULL, &c));
    uint64_t committed = 0;
    OK(rill_consumer_committed(c, 0, &committed));
    CHECK(committed == CUT_AT);
    first = 0;
    CHECK(drain(c, &first) == AFTER_REPAIR);
    CHECK(first == CUT_AT);
    OK(rill_consumer_commit(c));
    rill_consumer_free(c);
    tally t = run_audit(b);
    CHECK(t.count == AFTER_REPAIR && t.first == CUT_AT);
    rill_broker_free(b);

    /* A clean reopen resets nothing and delivers nothing again. */
    b = open_dir(dir, false);
    OK(rill_topic_get_stats(b, "t", &ts));
    CHECK(ts.publish_count == CUT_AT + AFTER_REPAIR && ts.recovered_offsets_reset == 0);
    OK(rill_consumer_new(b, "billing", "t", NULL, &c));
    CHECK(drain(c, &first) == 0);
    rill_consumer_free(c);
    CHECK(run_audit(b).count == 0);
    rill_broker_free(b);
}

/* ---- item 9 ---------------------------------------------------------------- */

static void test_a_short_session_timeout_starves_no_partition(void) {
    rill_broker *b = NULL;
    OK(rill_broker_new(NULL, &b));
    rill_topic_options to;
    rill_topic_options_init(&to);
    to.partitions = PARTITIONS;
    OK(rill_topic_create(b, "t", &to));
    /* Unkeyed messages are spread round-robin: PER_PARTITION each. */
    for (int i = 0; i < PARTITIONS * PER_PARTITION; i++) {
        rill_record r = record_of("m");
        OK(rill_publish(b, "t", &r, NULL));
    }
    rill_consumer_options co;
    rill_consumer_options_init(&co);
    co.session_timeout_ms = 1;
    rill_consumer *members[MEMBERS];
    for (int i = 0; i < MEMBERS; i++) {
        members[i] = NULL;
        OK(rill_consumer_new(b, "g", "t", &co, &members[i]));
    }
    /* The members poll in turn, 1 ms each, and commit what they polled
     * (a commit may be refused as reassigned: others read it again). */
    rill_consumer_stats gs;
    memset(&gs, 0, sizeof gs);
    double deadline = now_seconds() + WAIT_SECONDS;
    do {
        for (int i = 0; i < MEMBERS; i++) {
            const rill_message *msgs = NULL;
            size_t count = 0;
            OK(rill_consumer_poll(members[i], 10, 1, &msgs, &count));
            rill_status s = rill_consumer_commit(members[i]);
            CHECK(s == RILL_OK || s == RILL_ERR_REASSIGNED);
        }
        OK(rill_group_get_stats(b, "g", "t", &gs));
    } while (gs.lag > 0 && now_seconds() < deadline);
    CHECK(gs.lag == 0);
    for (int i = 0; i < MEMBERS; i++) {
        rill_consumer_free(members[i]);
    }
    rill_broker_free(b);
}

/* ---- group names and their default dead-letter topic --------------------- */

/* Polls one message of `c`, nacks it (max_attempts is 1) and checks that it
 * went to `dead_letter_topic`. */
static void nack_dead_letters(rill_broker *b, rill_consumer *c, const char *dead_letter_topic) {
    const rill_message *msgs = NULL;
    size_t count = 0;
    OK(rill_consumer_poll(c, 1, 0, &msgs, &count));
    CHECK(count == 1);
    if (count != 1) return;
    bool dead_lettered = false;
    OK(rill_consumer_nack(c, msgs[0].partition, msgs[0].offset, &dead_lettered));
    CHECK(dead_lettered);
    rill_consumer *reader = NULL;
    OK(rill_consumer_new(b, "reader", dead_letter_topic, NULL, &reader));
    OK(rill_consumer_poll(reader, 8, 0, &msgs, &count));
    CHECK(count == 1 && msgs[0].payload_len == 6 && memcmp(msgs[0].payload, "poison", 6) == 0);
    rill_consumer_free(reader);
}

static void test_a_group_name_must_leave_room_for_its_dead_letter_topic(void) {
    rill_broker *b = NULL;
    OK(rill_broker_new(NULL, &b));
    OK(rill_topic_create(b, "jobs", NULL));
    rill_consumer_options co;
    rill_consumer_options_init(&co);
    co.max_attempts = 1;
    char group[256], dlq[262];
    memset(group, 'g', 251);
    group[251] = '\0';
    rill_consumer *c = NULL;
    CHECK_STATUS(rill_consumer_new(b, group, "jobs", &co, &c), RILL_ERR_INVALID_ARGUMENT);
    char err[1024];
    rill_last_error(err, sizeof err);
    CHECK(strstr(err, "consumer group name") != NULL && strstr(err, "at most 250") != NULL);
    CHECK(strstr(err, "$dlq/<group>") != NULL && c == NULL);

    rill_record r = record_of("poison");
    group[250] = '\0';
    snprintf(dlq, sizeof dlq, "$dlq/%s", group);
    OK(rill_consumer_new(b, group, "jobs", &co, &c));
    OK(rill_publish(b, "jobs", &r, NULL));
    nack_dead_letters(b, c, dlq);
    rill_consumer_free(c);

    memset(group, 'g', 255);
    group[255] = '\0';
    co.dead_letter_topic = "graveyard";
    OK(rill_consumer_new(b, group, "jobs", &co, &c));
    nack_dead_letters(b, c, "graveyard");
    rill_consumer_free(c);
    rill_broker_free(b);
}

int main(void) {
    char root[] = "/tmp/rill-c-robust-groups-XXXXXX";
    if (mkdtemp(root) == NULL) {
        perror("mkdtemp");
        return 2;
    }
    test_dead_letter_skips_only_that_message();
    test_commit_past_a_repaired_end_is_reset(root);
    test_a_short_session_timeout_starves_no_partition();
    test_a_group_name_must_leave_room_for_its_dead_letter_topic();

    char rm[600];
    snprintf(rm, sizeof rm, "rm -rf '%s'", root);
    CHECK(system(rm) == 0);
    return CHECK_VERDICT("test_robust_groups");
}
