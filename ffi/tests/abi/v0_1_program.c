/*
 * A program written for rill 0.1, built against rill_v0_1.h (a frozen,
 * unedited copy of rill 0.1's include/rill.h: option structs without
 * struct_size) and run by ffi/tests/run.sh on the current librill.so.0.
 * It uses every option struct and every function that takes one, with
 * non-default values, and checks the library understood each of them: the
 * proof that the growable-struct ABI kept the 0.1 layouts working.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>

#include "rill_v0_1.h"

static int failures = 0;

#define CHECK(cond)                                                                      \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            char err_[512];                                                              \
            rill_last_error(err_, sizeof err_);                                          \
            fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__,      \
                    __LINE__, #cond, err_);                                              \
            failures++;                                                                  \
        }                                                                                \
    } while (0)

typedef struct {
    int delivered;
    int freed;
    uint64_t first_offset;
} counter;

static rill_ack on_message(void *user_data, const rill_message *m) {
    counter *c = user_data;
    if (c->delivered++ == 0) c->first_offset = m->offset;
    return RILL_ACK_SUCCESS;
}

static size_t on_batch(void *user_data, const rill_message *ms, size_t n, rill_ack *acks) {
    counter *c = user_data;
    for (size_t i = 0; i < n; i++) {
        if (c->delivered++ == 0) c->first_offset = ms[i].offset;
        acks[i] = RILL_ACK_SUCCESS;
    }
    return n;
}

static void on_free(void *user_data) { ((counter *)user_data)->freed++; }

static rill_record record_of(const char *payload) {
    rill_record r;
    memset(&r, 0, sizeof r);
    r.payload = payload;
    r.payload_len = strlen(payload);
    return r;
}

int main(void) {
    rill_broker_options bo;
    rill_broker_options_init(&bo);
    CHECK(bo.worker_threads == 0 && !bo.auto_create_topics && bo.publish_timeout_ms == 10000);
    bo.worker_threads = 2;
    bo.auto_create_topics = true;
    rill_broker *b = NULL;
    CHECK(rill_broker_new(&bo, &b) == RILL_OK);
    if (b == NULL) return 1;

    /* auto_create_topics was read: publishing to an unknown topic creates it. */
    rill_record r = record_of("auto");
    CHECK(rill_publish(b, "auto/created", &r, NULL) == RILL_OK);

    rill_topic_options to;
    rill_topic_options_init(&to);
    CHECK(to.partitions == 1 && to.retention_bytes == 268435456u);
    to.partitions = 3;
    CHECK(rill_topic_create(b, "orders", &to) == RILL_OK);
    rill_topic_stats ts;
    CHECK(rill_topic_get_stats(b, "orders", &ts) == RILL_OK);
    CHECK(ts.partitions == 3);

    /* One partition, so offsets are the publishing order. */
    CHECK(rill_topic_create(b, "log", NULL) == RILL_OK);
    for (int i = 0; i < 10; i++) {
        r = record_of("m");
        CHECK(rill_publish(b, "log", &r, NULL) == RILL_OK);
    }

    /* Subscription options: a name, a start offset, and a destructor. */
    counter one = {0, 0, 0};
    rill_subscription_options so;
    rill_subscription_options_init(&so);
    CHECK(so.max_attempts == 5 && so.start == RILL_START_LATEST && so.user_data_free == NULL);
    so.name = "old-program";
    so.start = RILL_START_OFFSET;
    so.start_offset = 4;
    so.user_data_free = on_free;
    rill_subscription *s = NULL;
    CHECK(rill_subscribe(b, "log", &so, on_message, &one, &s) == RILL_OK);
    CHECK(rill_subscription_wait_idle(s, 10000) == RILL_OK);
    char name[64];
    rill_subscription_name(s, name, sizeof name);
    CHECK(strcmp(name, "old-program") == 0);
    rill_subscription_free(s);
    CHECK(one.delivered == 6 && one.first_offset == 4 && one.freed == 1);

    counter batch = {0, 0, 0};
    so.name = NULL;
    so.start = RILL_START_EARLIEST;
    CHECK(rill_subscribe_batch(b, "log", &so, on_batch, &batch, &s) == RILL_OK);
    CHECK(rill_subscription_wait_idle(s, 10000) == RILL_OK);
    rill_subscription_free(s);
    CHECK(batch.delivered == 10 && batch.first_offset == 0 && batch.freed == 1);

    /* Consumer options: start at an offset. */
    rill_consumer_options co;
    rill_consumer_options_init(&co);
    CHECK(co.start == RILL_START_EARLIEST);
    co.start = RILL_START_OFFSET;
    co.start_offset = 7;
    rill_consumer *c = NULL;
    CHECK(rill_consumer_new(b, "g", "log", &co, &c) == RILL_OK);
    const rill_message *ms = NULL;
    size_t n = 0;
    CHECK(rill_consumer_poll(c, 100, 10000, &ms, &n) == RILL_OK);
    CHECK(n == 3 && ms[0].offset == 7);
    rill_consumer_free(c);

    /* A 0.1 program could pass a zeroed struct: 0.1 read it as written. */
    memset(&co, 0, sizeof co);
    co.start = RILL_START_EARLIEST;
    CHECK(rill_consumer_new(b, "g2", "log", &co, &c) == RILL_OK);
    rill_consumer_free(c);

    rill_broker_free(b);
    if (failures) {
        fprintf(stderr, "rill 0.1 program: %d checks failed\n", failures);
        return 1;
    }
    printf("rill 0.1 program on librill %s: all checks passed\n", rill_version());
    return 0;
}
