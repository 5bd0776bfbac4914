/*
 * Subscription priorities from C (issue 42):
 *
 * - rill_subscription_options.priority and rill_topic_options.priority:
 *   _init writes RILL_PRIORITY_UNSET; a value outside 0..7 (other than
 *   RILL_PRIORITY_UNSET) is RILL_ERR_INVALID_ARGUMENT and creates nothing;
 *   an unset subscription priority takes its topic's, else
 *   RILL_PRIORITY_DEFAULT; a program built before the field (a smaller
 *   struct_size) gets the default.
 * - An overloaded pool (2 workers, 2 priority-7 and 6 priority-0
 *   subscriptions, all with more work than the run lasts, handlers that
 *   spin for a fixed amount of work): every low one gets several turns
 *   (the stats count its waits; they are read while the run goes on and
 *   added up), none having waited more than RILL_PRIORITY_AGING_TAKES plus
 *   the 7 others, in takes; and the high ones' median queue wait over the
 *   run is far below the median of every read of every low one, their
 *   99th percentile no higher (waits of one run compared, no time limit).
 *
 * Nothing here waits by sleeping: waits poll a condition up to a deadline.
 *
 * Built with -std=c99 -Wall -Wextra -Wpedantic -Werror, and run plain, under
 * AddressSanitizer + UBSan and under valgrind memcheck by ffi/tests/run.sh.
 * RILL_LONG_TESTS=1 makes every low-priority subscription wait for ten times
 * as many turns.
 */
#define _POSIX_C_SOURCE 200809L
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rill.h"

#include "check.h"

enum {
    WORKERS = 2,
    HIGH = 2,
    LOW = 6,
    /* Messages queued for each high-priority subscription: more than it
     * handles before the low ones reach their target (times 10 with
     * RILL_LONG_TESTS). */
    HIGH_BACKLOG = 40000,
    /* Messages queued for each low-priority one: more than it handles in
     * its target's turns, so it is ready all along too. */
    LOW_BACKLOG_PER_TURN = 400,
    CHUNK = 1000,
    /* Iterations of the handlers' fixed work per message: a drain's turn
     * (about a millisecond) then holds a few dozen messages. */
    WORK = 20000,
    WAIT_SECONDS = 240,
};

static int long_tests(void) {
    const char *v = getenv("RILL_LONG_TESTS");
    return v != NULL && v[0] != '\0' && strcmp(v, "0") != 0;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void pause_briefly(void) {
    struct timespec t = {0, 1000000};
    nanosleep(&t, NULL);
}

/* Read and written by handlers on the pool's threads and by main: only
 * through the __atomic builtins. */
typedef struct {
    long handled;
    int *stop;
} counter;

static rill_ack busy_handler(void *user_data, const rill_message *m) {
    counter *c = user_data;
    volatile unsigned long x = 0;
    unsigned long i;
    (void)m;
    if (!__atomic_load_n(c->stop, __ATOMIC_RELAXED)) {
        for (i = 0; i < WORK; i++) {
            x = x * 31 + i;
        }
    }
    __atomic_fetch_add(&c->handled, 1, __ATOMIC_RELAXED);
    return RILL_ACK_SUCCESS;
}

static rill_ack ignore(void *user_data, const rill_message *m) {
    (void)user_data;
    (void)m;
    return RILL_ACK_SUCCESS;
}

static rill_broker *new_broker(uint32_t workers) {
    rill_broker_options bo;
    rill_broker *b = NULL;
    rill_broker_options_init(&bo);
    bo.worker_threads = workers;
    OK(rill_broker_new(&bo, &b));
    return b;
}

/* The priority `o` gives a subscription to `topic` (-1 if refused). */
static int priority_of(rill_broker *b, const char *topic, const rill_subscription_options *o) {
    rill_subscription *s = NULL;
    rill_subscription_stats st;
    int p;
    if (rill_subscribe(b, topic, o, ignore, NULL, &s) != RILL_OK) {
        return -1;
    }
    OK(rill_subscription_get_stats(s, &st));
    p = (int)st.priority;
    rill_subscription_free(s);
    return p;
}

static void test_options(void) {
    rill_broker *b = new_broker(0);
    rill_topic_options to;
    rill_subscription_options so;
    rill_subscription *s = NULL;
    static const int bad[] = {8, 9, -2, 1000, -1000};
    size_t i;

    rill_topic_options_init(&to);
    CHECK(to.priority == RILL_PRIORITY_UNSET);
    rill_subscription_options_init(&so);
    CHECK(so.priority == RILL_PRIORITY_UNSET);

    for (i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        to.priority = bad[i];
        CHECK_STATUS(rill_topic_create(b, "bad", &to), RILL_ERR_INVALID_ARGUMENT);
        so.priority = bad[i];
        CHECK_STATUS(rill_subscribe(b, "**", &so, ignore, NULL, &s), RILL_ERR_INVALID_ARGUMENT);
        CHECK(s == NULL);
    }
    /* Nothing was created: publishing to "bad" finds no topic. */
    {
        rill_record r = {NULL, 0, "x", 1, NULL, 0};
        CHECK_STATUS(rill_publish(b, "bad", &r, NULL), RILL_ERR_NO_SUCH_TOPIC);
    }

    to.priority = 6;
    OK(rill_topic_create(b, "urgent", &to));
    rill_topic_options_init(&to);
    OK(rill_topic_create(b, "plain", &to));

    rill_subscription_options_init(&so);
    CHECK(priority_of(b, "urgent", &so) == 6);
    CHECK(priority_of(b, "plain", &so) == RILL_PRIORITY_DEFAULT);
    CHECK(priority_of(b, "*", &so) == RILL_PRIORITY_DEFAULT);
    CHECK(priority_of(b, "urgent", NULL) == 6);
    so.priority = 1;
    CHECK(priority_of(b, "urgent", &so) == 1);
    so.priority = RILL_PRIORITY_MIN;
    CHECK(priority_of(b, "plain", &so) == 0);
    so.priority = RILL_PRIORITY_MAX;
    CHECK(priority_of(b, "plain", &so) == 7);

    /* A program built before `priority`: its struct ends before the field,
     * and the library reads the default (the topic's). */
    rill_subscription_options_init(&so);
    so.struct_size = (uint32_t)offsetof(rill_subscription_options, priority);
    so.priority = 3; /* past the program's struct: never read */
    CHECK(priority_of(b, "urgent", &so) == 6);
    rill_topic_options_init(&to);
    to.struct_size = (uint32_t)offsetof(rill_topic_options, priority);
    to.priority = 3;
    OK(rill_topic_create(b, "old", &to));
    rill_subscription_options_init(&so);
    CHECK(priority_of(b, "old", &so) == RILL_PRIORITY_DEFAULT);

    rill_broker_free(b);
}

static void test_overload(void) {
    rill_broker *b = new_broker(WORKERS);
    rill_subscription *subs[HIGH + LOW];
    rill_subscription_stats st;
    counter counts[HIGH + LOW];
    static rill_record chunk[CHUNK];
    int stop = 0;
    long turns = long_tests() ? 30 : 3;
    /* Per low subscription, over every read: waits, the longest in takes,
     * the smallest median of a read with waits. */
    uint64_t waits[HIGH + LOW] = {0}, max_takes[HIGH + LOW] = {0};
    uint64_t fastest_low = UINT64_MAX, slowest_high = 0, slowest_high_p50 = 0;
    double deadline;
    int i, j, done;

    for (j = 0; j < CHUNK; j++) {
        rill_record r = {NULL, 0, "work", 4, NULL, 0};
        chunk[j] = r;
    }
    for (i = 0; i < HIGH + LOW; i++) {
        char topic[32];
        rill_subscription_options so;
        long backlog = i < HIGH ? HIGH_BACKLOG * (long_tests() ? 10 : 1) : LOW_BACKLOG_PER_TURN * (turns + 1);
        long n;
        snprintf(topic, sizeof topic, "busy/%d", i);
        OK(rill_topic_create(b, topic, NULL));
        for (n = 0; n < backlog; n += CHUNK) {
            size_t k = (size_t)(backlog - n < CHUNK ? backlog - n : CHUNK);
            OK(rill_publish_batch(b, topic, chunk, k, NULL));
        }
        counts[i].handled = 0;
        counts[i].stop = &stop;
        rill_subscription_options_init(&so);
        so.start = RILL_START_EARLIEST;
        so.priority = i < HIGH ? RILL_PRIORITY_MAX : RILL_PRIORITY_MIN;
        subs[i] = NULL;
        OK(rill_subscribe(b, topic, &so, busy_handler, &counts[i], &subs[i]));
    }
    deadline = now_s() + WAIT_SECONDS;
    do {
        done = 1;
        for (i = HIGH; i < HIGH + LOW; i++) {
            if (subs[i] == NULL || rill_subscription_get_stats(subs[i], &st) != RILL_OK) {
                continue;
            }
            CHECK(st.priority == RILL_PRIORITY_MIN);
            CHECK(st.lag > 0);
            waits[i] += st.queue_waits;
            if (st.queue_wait_max_takes > max_takes[i]) {
                max_takes[i] = st.queue_wait_max_takes;
            }
            if (st.queue_waits > 0 && st.queue_wait_p50_ns < fastest_low) {
                fastest_low = st.queue_wait_p50_ns;
            }
            if (waits[i] < (uint64_t)turns) {
                done = 0;
            }
        }
        if (!done) {
            pause_briefly();
        }
    } while (!done && now_s() < deadline);
    CHECK(done);
    /* The high ones' stats were not read before: the waits of the run. */
    for (i = 0; i < HIGH; i++) {
        if (subs[i] == NULL) {
            continue;
        }
        OK(rill_subscription_get_stats(subs[i], &st));
        CHECK(st.priority == RILL_PRIORITY_MAX);
        CHECK(st.queue_waits > 0);
        /* Ready all along: its backlog outlasted the run. */
        CHECK(st.lag > 0);
        if (st.queue_wait_p99_ns > slowest_high) {
            slowest_high = st.queue_wait_p99_ns;
        }
        if (st.queue_wait_p50_ns > slowest_high_p50) {
            slowest_high_p50 = st.queue_wait_p50_ns;
        }
        fprintf(stderr, "  high %d: %llu waits, p50 %llu ns, p99 %llu ns, max %llu takes\n", i,
                (unsigned long long)st.queue_waits, (unsigned long long)st.queue_wait_p50_ns,
                (unsigned long long)st.queue_wait_p99_ns, (unsigned long long)st.queue_wait_max_takes);
    }
    __atomic_store_n(&stop, 1, __ATOMIC_RELAXED);
    for (i = HIGH; i < HIGH + LOW; i++) {
        fprintf(stderr, "  low %d: %llu waits, max %llu takes\n", i, (unsigned long long)waits[i],
                (unsigned long long)max_takes[i]);
        /* At most the 7 others are queued before it. */
        CHECK(max_takes[i] <= RILL_PRIORITY_AGING_TAKES + HIGH + LOW - 1);
    }
    fprintf(stderr, "  high p99 %llu ns, low p50 at least %llu ns\n", (unsigned long long)slowest_high,
            (unsigned long long)fastest_low);
    /* Most of a high one's waits are near zero: its median is far below
     * (by more than three power-of-two buckets) every low median. Its rare
     * long waits, while aging hands both workers to the low ones, are no
     * longer than a low one's typical wait: the 99th percentile is at most
     * the low median's bucket. */
    CHECK(slowest_high_p50 * 8 < fastest_low);
    CHECK(slowest_high <= fastest_low);
    for (i = 0; i < HIGH + LOW; i++) {
        rill_subscription_free(subs[i]);
    }
    rill_broker_free(b);
}

int main(void) {
    test_options();
    test_overload();
    return CHECK_VERDICT("test_robust_priority");
}
