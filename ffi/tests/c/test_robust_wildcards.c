// Wildcard subscriptions under churn, from C (issue 40, items 7 and 10).
//
// Item 7: a long-lived `c/**` subscription while three threads publish to
// auto-created `c/<0..199>`, a loop creates `c/made/<i>` and publishes one
// message to each, and another thread opens and frees `c/**` and `c/*`
// subscriptions: the long-lived one must catch up (it used to stall on some
// partitions with lag that never drained).
//
// Item 10: two threads each loop creating `soak/<id>/<i%4>` (2 partitions,
// 64 KiB retention), subscribing `soak/**` by name `d<id>-<i%3>` from the
// earliest message, publishing 20 records, deleting the topic every 7th
// round and freeing the subscription. A topic created while the other
// thread's subscription was closing used to keep that subscription as a
// listener, in a cycle nothing freed: the resident set grew without bound
// and stayed after rill_broker_free. Checked here by the resident set (after
// malloc_trim) staying within a generous bound over the later rounds, when
// run plain; under AddressSanitizer and valgrind, which hold freed memory
// back on purpose, by their leak checks at exit instead (a cycle is a
// definite leak once the broker is freed).
//
// Both races depend on timing; the Rust unit tests beside the fixes hold
// each window open. RILL_SOAK_ROUNDS sets the rounds (default: short).
//
// Built with -std=c99 -Wall -Wextra -Wpedantic -Werror, and run plain, under
// AddressSanitizer + UBSan and under valgrind memcheck by ffi/tests/run.sh.
#define _GNU_SOURCE
#include <malloc.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rill.h"

#include "check.h"

enum {
    PUBLISHERS = 3,
    AUTO_TOPICS = 200,
    SOAK_THREADS = 2,
    SOAK_TOPICS = 4,        /* soak/<id>/<i % SOAK_TOPICS> */
    SOAK_NAMES = 3,         /* d<id>-<i % SOAK_NAMES> */
    SOAK_RECORDS = 20,      /* published per round */
    SOAK_DELETE_EVERY = 7,  /* the topic is deleted every 7th round */
    SOAK_WARM_UP = 100,     /* rounds before the first resident-set reading */
    DEFAULT_ROUNDS = 2000,  /* plain: a second or two */
    INSTRUMENTED_ROUNDS = 300, /* under valgrind or AddressSanitizer */
    WAIT_MS = 30000,
    NAME = 64,
};

/* How much the resident set may grow over the rounds after the warm-up:
 * generous (allocator caches, the topics' retained segments), so that only
 * a leak that grows with the rounds (a subscription and its retained
 * partitions per lost race) crosses it, given rounds enough
 * (RILL_SOAK_ROUNDS); a short run leaves a small leak to the leak checks of
 * the ASan and valgrind runs. */
static const long RSS_GROWTH_LIMIT = 64L << 20;

/* True under valgrind (its preload library) or AddressSanitizer: both keep
 * freed memory back, so the resident set says nothing about leaks there,
 * and both run the churn many times slower. */
static int memory_is_instrumented(void) {
#if defined(__SANITIZE_ADDRESS__)
    return 1;
#else
    const char *preload = getenv("LD_PRELOAD");
    return preload != NULL && strstr(preload, "vgpreload") != NULL;
#endif
}

static int rounds(void) {
    const char *s = getenv("RILL_SOAK_ROUNDS");
    int n = s ? atoi(s) : 0;
    if (n > 0) {
        return n;
    }
    return memory_is_instrumented() ? INSTRUMENTED_ROUNDS : DEFAULT_ROUNDS;
}

static long resident_bytes(void) {
    malloc_trim(0);
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, resident = 0;
    if (f == NULL) {
        return -1;
    }
    if (fscanf(f, "%ld %ld", &size, &resident) != 2) {
        resident = -1;
    }
    fclose(f);
    return resident < 0 ? -1 : resident * sysconf(_SC_PAGESIZE);
}

/* An unkeyed record of `len` bytes at `payload`. */
static rill_record record_of(const void *payload, size_t len) {
    rill_record r;
    memset(&r, 0, sizeof r);
    r.payload = payload;
    r.payload_len = len;
    return r;
}

static rill_ack ack(void *user_data, const rill_message *m) {
    (void)user_data;
    (void)m;
    return RILL_ACK_SUCCESS;
}

static size_t ack_all(void *user_data, const rill_message *m, size_t count, rill_ack *acks) {
    (void)user_data;
    (void)m;
    (void)acks;
    return count;
}

/* ---- item 7 ---------------------------------------------------------- */

typedef struct {
    rill_broker *b;
    atomic_int stop;
} churn;

typedef struct {
    churn *c;
    int first; /* this publisher's first topic; it steps by PUBLISHERS */
} publisher_arg;

static void *publish_loop(void *arg) {
    publisher_arg *p = arg;
    char topic[NAME];
    rill_record r = record_of("x", 1);
    for (int i = p->first; !atomic_load(&p->c->stop); i += PUBLISHERS) {
        snprintf(topic, sizeof topic, "c/%d", i % AUTO_TOPICS);
        OK(rill_publish(p->c->b, topic, &r, NULL));
    }
    return NULL;
}

static void *subscribe_loop(void *arg) {
    churn *c = arg;
    rill_subscription_options o;
    rill_subscription_options_init(&o);
    while (!atomic_load(&c->stop)) {
        rill_subscription *all = NULL, *one = NULL;
        OK(rill_subscribe(c->b, "c/**", &o, ack, NULL, &all));
        OK(rill_subscribe(c->b, "c/*", &o, ack, NULL, &one));
        rill_subscription_free(all);
        rill_subscription_free(one);
    }
    return NULL;
}

static void test_long_lived_wildcard_catches_up(void) {
    rill_broker_options bo;
    rill_broker_options_init(&bo);
    bo.auto_create_topics = true;
    rill_broker *b = NULL;
    OK(rill_broker_new(&bo, &b));
    if (b == NULL) {
        return;
    }
    rill_subscription_options so;
    rill_subscription_options_init(&so);
    so.start = RILL_START_EARLIEST;
    rill_subscription *sub = NULL;
    OK(rill_subscribe(b, "c/**", &so, ack, NULL, &sub));

    churn c = {.b = b};
    atomic_init(&c.stop, 0);
    pthread_t publishers[PUBLISHERS], subscriber;
    publisher_arg args[PUBLISHERS];
    for (int t = 0; t < PUBLISHERS; t++) {
        args[t] = (publisher_arg){.c = &c, .first = t};
        CHECK(pthread_create(&publishers[t], NULL, publish_loop, &args[t]) == 0);
    }
    CHECK(pthread_create(&subscriber, NULL, subscribe_loop, &c) == 0);
    rill_topic_options to;
    rill_topic_options_init(&to);
    char topic[NAME];
    rill_record r = record_of("m", 1);
    for (int i = 0, n = rounds(); i < n; i++) {
        snprintf(topic, sizeof topic, "c/made/%d", i);
        OK(rill_topic_create(b, topic, &to));
        OK(rill_publish(b, topic, &r, NULL));
    }
    atomic_store(&c.stop, 1);
    for (int t = 0; t < PUBLISHERS; t++) {
        CHECK(pthread_join(publishers[t], NULL) == 0);
    }
    CHECK(pthread_join(subscriber, NULL) == 0);

    OK(rill_subscription_wait_idle(sub, WAIT_MS));
    rill_subscription_stats stats;
    OK(rill_subscription_get_stats(sub, &stats));
    CHECK(stats.lag == 0);
    if (stats.lag != 0) {
        fprintf(stderr, "the long-lived c/** subscription stalled with lag %llu over %u partitions\n",
                (unsigned long long)stats.lag, stats.partitions);
    }
    rill_subscription_free(sub);
    rill_broker_free(b);
}

/* ---- item 10 --------------------------------------------------------- */

typedef struct {
    rill_broker *b;
    int id;
    int from, to; /* rounds [from, to) */
} soak_arg;

static void *soak_loop(void *arg) {
    soak_arg *s = arg;
    rill_topic_options to;
    rill_topic_options_init(&to);
    to.partitions = 2;
    to.retention_bytes = 64 << 10;
    rill_subscription_options so;
    rill_subscription_options_init(&so);
    so.start = RILL_START_EARLIEST;
    char topic[NAME], name[NAME];
    static const uint8_t payload[100];
    rill_record r = record_of(payload, sizeof payload);
    for (int i = s->from; i < s->to; i++) {
        snprintf(topic, sizeof topic, "soak/%d/%d", s->id, i % SOAK_TOPICS);
        snprintf(name, sizeof name, "d%d-%d", s->id, i % SOAK_NAMES);
        rill_status created = rill_topic_create(s->b, topic, &to);
        CHECK(created == RILL_OK || created == RILL_ERR_TOPIC_EXISTS);
        so.name = name;
        rill_subscription *sub = NULL;
        OK(rill_subscribe_batch(s->b, "soak/**", &so, ack_all, NULL, &sub));
        for (int k = 0; k < SOAK_RECORDS; k++) {
            OK(rill_publish(s->b, topic, &r, NULL));
        }
        if (i % SOAK_DELETE_EVERY == SOAK_DELETE_EVERY - 1) {
            OK(rill_topic_delete(s->b, topic));
        }
        rill_subscription_free(sub);
    }
    return NULL;
}

static void soak(rill_broker *b, int from, int to) {
    pthread_t threads[SOAK_THREADS];
    soak_arg args[SOAK_THREADS];
    for (int t = 0; t < SOAK_THREADS; t++) {
        args[t] = (soak_arg){.b = b, .id = t, .from = from, .to = to};
        CHECK(pthread_create(&threads[t], NULL, soak_loop, &args[t]) == 0);
    }
    for (int t = 0; t < SOAK_THREADS; t++) {
        CHECK(pthread_join(threads[t], NULL) == 0);
    }
}

static void test_named_wildcard_churn_keeps_memory_bounded(void) {
    rill_broker_options bo;
    rill_broker_options_init(&bo);
    rill_broker *b = NULL;
    OK(rill_broker_new(&bo, &b));
    if (b == NULL) {
        return;
    }
    soak(b, 0, SOAK_WARM_UP);
    long before = resident_bytes();
    soak(b, SOAK_WARM_UP, SOAK_WARM_UP + rounds());
    long after = resident_bytes();
    if (!memory_is_instrumented()) {
        CHECK(before > 0 && after > 0);
        CHECK(after - before < RSS_GROWTH_LIMIT);
        if (after - before >= RSS_GROWTH_LIMIT) {
            fprintf(stderr, "the resident set grew from %ld to %ld bytes over %d rounds\n", before, after,
                    rounds());
        }
    }
    rill_broker_free(b);
}

int main(void) {
    test_long_lived_wildcard_catches_up();
    test_named_wildcard_churn_keeps_memory_bounded();
    return CHECK_VERDICT("test_robust_wildcards");
}
