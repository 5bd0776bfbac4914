/*
 * Publishing without duplicates from C (issue 41): a message carries an id
 * as the attribute RILL_ATTR_ID; a topic's dedupe window
 * (rill_topic_options.dedupe_window_ms) appends each id once, and the
 * _outcome publish calls say RILL_PUBLISHED_DUPLICATE when a publish was a
 * duplicate (with the first message's position). Racing threads, a batch,
 * a window of 0, a program built before the field, an id too long, and a
 * restart on a data directory.
 *
 * Built with -std=c99 -Wall -Wextra -Wpedantic -Werror, and run plain, under
 * AddressSanitizer + UBSan and under valgrind memcheck by ffi/tests/run.sh.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rill.h"

#include "check.h"
#include "dirs.h"

enum {
    THREADS = 8,
    RACE_IDS = 300,
    ID_LEN = 32,
    PATH_LEN = 256,
};

/* A record whose only attribute is the id `id`. */
static rill_record with_id(const char *payload, rill_attribute *attr, const char *id) {
    rill_record r;
    memset(&r, 0, sizeof r);
    attr->key = RILL_ATTR_ID;
    attr->value = id;
    r.payload = payload;
    r.payload_len = strlen(payload);
    r.attributes = attr;
    r.attribute_count = 1;
    return r;
}

static uint64_t published(rill_broker *b, const char *topic) {
    rill_topic_stats s;
    memset(&s, 0, sizeof s);
    OK(rill_topic_get_stats(b, topic, &s));
    return s.publish_count;
}

static void duplicates_return_the_first_position(void) {
    rill_broker *b = NULL;
    OK(rill_broker_new(NULL, &b));
    rill_topic_options o;
    rill_topic_options_init(&o);
    CHECK(o.dedupe_window_ms == 120000);
    o.partitions = 4;
    OK(rill_topic_create(b, "orders", &o));

    rill_attribute a;
    rill_record r = with_id("o-1", &a, "order-1");
    rill_position first, again;
    uint32_t flags = 99;
    OK(rill_publish_outcome(b, "orders", &r, &first, &flags));
    CHECK(flags == 0);
    OK(rill_publish_outcome(b, "orders", &r, &again, &flags));
    CHECK(flags == RILL_PUBLISHED_DUPLICATE);
    CHECK(again.partition == first.partition && again.offset == first.offset);
    /* The plain call returns the first position too; NULL outputs are fine. */
    OK(rill_publish(b, "orders", &r, &again));
    CHECK(again.partition == first.partition && again.offset == first.offset);
    OK(rill_publish_outcome(b, "orders", &r, NULL, NULL));
    flags = 0;
    OK(rill_try_publish_outcome(b, "orders", &r, &again, &flags));
    CHECK(flags == RILL_PUBLISHED_DUPLICATE && again.offset == first.offset);

    rill_publisher *p = NULL;
    OK(rill_publisher_new(b, "orders", &p));
    flags = 0;
    OK(rill_publisher_publish_outcome(p, &r, &again, &flags));
    CHECK(flags == RILL_PUBLISHED_DUPLICATE && again.offset == first.offset);

    /* A batch: a new id, the old one, a message without an id, the new id again. */
    rill_attribute attrs[4];
    rill_record batch[4];
    batch[0] = with_id("a", &attrs[0], "order-2");
    batch[1] = with_id("b", &attrs[1], "order-1");
    batch[2] = with_id("c", &attrs[2], "unused");
    batch[2].attribute_count = 0;
    batch[3] = with_id("d", &attrs[3], "order-2");
    rill_position at[4];
    uint32_t fl[4] = {9, 9, 9, 9};
    OK(rill_publisher_publish_batch_outcome(p, batch, 4, at, fl));
    CHECK(fl[0] == 0 && fl[1] == RILL_PUBLISHED_DUPLICATE && fl[2] == 0 && fl[3] == RILL_PUBLISHED_DUPLICATE);
    CHECK(at[1].offset == first.offset && at[1].partition == first.partition);
    CHECK(at[3].offset == at[0].offset && at[3].partition == at[0].partition);
    OK(rill_publish_batch_outcome(b, "orders", batch, 4, NULL, fl));
    CHECK(fl[0] == RILL_PUBLISHED_DUPLICATE && fl[2] == 0 && fl[3] == RILL_PUBLISHED_DUPLICATE);
    rill_publisher_free(p);

    rill_topic_stats s;
    OK(rill_topic_get_stats(b, "orders", &s));
    /* order-1, order-2 and two messages without an id. */
    CHECK(s.publish_count == 4);
    CHECK(s.dedupe_ids == 2);
    CHECK(s.dedupe_duplicates == 10);
    CHECK(s.dedupe_evicted == 0);
    rill_broker_free(b);
}

static void a_window_of_0_and_an_older_program_layout(void) {
    rill_broker *b = NULL;
    OK(rill_broker_new(NULL, &b));
    rill_topic_options o;
    rill_topic_options_init(&o);
    o.dedupe_window_ms = 0;
    OK(rill_topic_create(b, "off", &o));
    rill_attribute a;
    rill_record r = with_id("x", &a, "id");
    uint32_t flags = 99;
    OK(rill_publish_outcome(b, "off", &r, NULL, &flags));
    CHECK(flags == 0);
    OK(rill_publish_outcome(b, "off", &r, NULL, &flags));
    CHECK(flags == 0);
    CHECK(published(b, "off") == 2);

    /* A program built before the field passes a shorter struct_size: the
     * window is then the default, whatever the bytes past its struct hold. */
    rill_topic_options_init(&o);
    o.struct_size = (uint32_t)offsetof(rill_topic_options, dedupe_window_ms);
    o.dedupe_window_ms = 0;
    OK(rill_topic_create(b, "older", &o));
    OK(rill_publish_outcome(b, "older", &r, NULL, &flags));
    OK(rill_publish_outcome(b, "older", &r, NULL, &flags));
    CHECK(flags == RILL_PUBLISHED_DUPLICATE);
    CHECK(published(b, "older") == 1);
    rill_broker_free(b);
}

static void bad_ids_are_refused(void) {
    rill_broker *b = NULL;
    OK(rill_broker_new(NULL, &b));
    OK(rill_topic_create(b, "orders", NULL));
    char longest[RILL_ID_MAX_LEN + 2];
    memset(longest, 'i', sizeof longest - 1);
    longest[sizeof longest - 1] = '\0';
    rill_attribute a;
    rill_record r = with_id("x", &a, longest);
    rill_position pos = {7, 7};
    uint32_t flags = 7;
    CHECK_STATUS(rill_publish_outcome(b, "orders", &r, &pos, &flags), RILL_ERR_INVALID_ARGUMENT);
    CHECK(pos.partition == 7 && pos.offset == 7 && flags == 7); /* written only on RILL_OK */
    CHECK_STATUS(rill_publish(b, "orders", &r, &pos), RILL_ERR_INVALID_ARGUMENT);
    char err[512];
    rill_last_error(err, sizeof err);
    CHECK(strstr(err, "1 to 128 bytes") != NULL);
    r = with_id("x", &a, "");
    CHECK_STATUS(rill_publish_outcome(b, "orders", &r, &pos, &flags), RILL_ERR_INVALID_ARGUMENT);
    /* Two ids on one message. */
    rill_attribute two[2] = {{RILL_ATTR_ID, "a"}, {RILL_ATTR_ID, "b"}};
    r.attributes = two;
    r.attribute_count = 2;
    CHECK_STATUS(rill_publish_batch_outcome(b, "orders", &r, 1, &pos, &flags), RILL_ERR_INVALID_ARGUMENT);
    CHECK(published(b, "orders") == 0);
    /* The longest id is fine. */
    longest[RILL_ID_MAX_LEN] = '\0';
    r = with_id("x", &a, longest);
    OK(rill_publish_outcome(b, "orders", &r, &pos, &flags));
    CHECK(flags == 0 && published(b, "orders") == 1);
    CHECK_STATUS(rill_publish_outcome(NULL, "orders", &r, &pos, &flags), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_publisher_publish_outcome(NULL, &r, &pos, &flags), RILL_ERR_NULL_ARGUMENT);
    rill_broker_free(b);
}

typedef struct {
    rill_broker *b;
    pthread_barrier_t *start;
    int appended;
    int wrong;
    rill_position at[RACE_IDS];
} racer;

static void *race(void *arg) {
    racer *me = arg;
    rill_publisher *p = NULL;
    if (rill_publisher_new(me->b, "race", &p) != RILL_OK) {
        me->wrong++;
        return NULL;
    }
    pthread_barrier_wait(me->start);
    for (int i = 0; i < RACE_IDS; i++) {
        char id[ID_LEN];
        snprintf(id, sizeof id, "id-%d", i);
        rill_attribute a;
        rill_record r = with_id(id, &a, id);
        uint32_t flags = 0;
        if (rill_publisher_publish_outcome(p, &r, &me->at[i], &flags) != RILL_OK) {
            me->wrong++;
        } else if (flags == 0) {
            me->appended++;
        }
    }
    rill_publisher_free(p);
    return NULL;
}

static void racing_threads_append_each_id_once(void) {
    rill_broker *b = NULL;
    OK(rill_broker_new(NULL, &b));
    rill_topic_options o;
    rill_topic_options_init(&o);
    o.partitions = 4;
    OK(rill_topic_create(b, "race", &o));
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, THREADS);
    static racer racers[THREADS];
    pthread_t threads[THREADS];
    for (int t = 0; t < THREADS; t++) {
        memset(&racers[t], 0, sizeof racers[t]);
        racers[t].b = b;
        racers[t].start = &start;
        CHECK(pthread_create(&threads[t], NULL, race, &racers[t]) == 0);
    }
    int appended = 0;
    for (int t = 0; t < THREADS; t++) {
        pthread_join(threads[t], NULL);
        CHECK(racers[t].wrong == 0);
        appended += racers[t].appended;
    }
    pthread_barrier_destroy(&start);
    CHECK(appended == RACE_IDS);
    CHECK(published(b, "race") == RACE_IDS);
    /* Every thread got the same position for each id. */
    int same = 1;
    for (int t = 1; t < THREADS; t++) {
        for (int i = 0; i < RACE_IDS; i++) {
            same &= racers[t].at[i].partition == racers[0].at[i].partition &&
                    racers[t].at[i].offset == racers[0].at[i].offset;
        }
    }
    CHECK(same);
    rill_broker_free(b);
}

static void the_window_survives_a_restart(void) {
    char root[] = "/tmp/rill-c-robust-dedupe-XXXXXX";
    if (mkdtemp(root) == NULL) {
        perror("mkdtemp");
        exit(2);
    }
    rill_attribute a;
    rill_record r = with_id("order", &a, "order-1");
    rill_position first, again;
    uint32_t flags = 0;
    rill_broker *b = open_broker_or_exit(root, RILL_FSYNC_INTERVAL);
    rill_topic_options o;
    rill_topic_options_init(&o);
    o.partitions = 2;
    OK(rill_topic_create(b, "orders", &o));
    OK(rill_publish_outcome(b, "orders", &r, &first, &flags));
    rill_broker_free(b);

    b = open_broker_or_exit(root, RILL_FSYNC_INTERVAL);
    OK(rill_publish_outcome(b, "orders", &r, &again, &flags));
    CHECK(flags == RILL_PUBLISHED_DUPLICATE);
    CHECK(again.partition == first.partition && again.offset == first.offset);
    CHECK(published(b, "orders") == 1);
    rill_broker_free(b);

    char rm[PATH_LEN];
    snprintf(rm, sizeof rm, "rm -rf '%s'", root);
    CHECK(system(rm) == 0);
}

int main(void) {
    duplicates_return_the_first_position();
    a_window_of_0_and_an_older_program_layout();
    bad_ids_are_refused();
    racing_threads_append_each_id_once();
    the_window_survives_a_restart();
    return CHECK_VERDICT("test_robust_dedupe");
}
