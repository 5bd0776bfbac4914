/*
 * Robustness of two operations under load (issue 40, items 6 and 8):
 *
 * - Deleting a durable topic while three threads publish to it: the delete
 *   succeeds, the racing publishes get only RILL_OK or
 *   RILL_ERR_NO_SUCH_TOPIC, the name can be created again at once, and the
 *   data directory reopens with the last topic whole and nothing left of
 *   the deleted ones. Repeated ROUNDS times.
 * - Shared members whose every handler call overruns ack_timeout_ms: the
 *   stuck message comes again once (each message is handled at most twice,
 *   once by the stalled member and once more), the work does not go back
 *   and forth, and every message is acknowledged. With 2 and 3 members.
 *
 * Nothing here waits by sleeping: waits poll a condition up to a deadline.
 * The only sleep is a handler's "work", which must outlast the deadline.
 *
 * Built with -std=c99 -Wall -Wextra -Wpedantic -Werror, and run plain, under
 * AddressSanitizer + UBSan and under valgrind memcheck by ffi/tests/run.sh.
 * RILL_LONG_TESTS=1 runs more rounds and messages.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rill.h"

#include "check.h"

enum {
    PUBLISHERS = 3,
    PARTITIONS = 3,
    RETENTION_BYTES = 64 * 1024,
    PAYLOAD = 200,
    /* Each publisher publishes this many before the delete: enough for
     * segments to roll, be prepared ahead and be recycled by retention. */
    BEFORE_DELETE = 1500,
    WAIT_SECONDS = 60,
    MAX_MESSAGES = 400,
};

static const char *TOPIC = "jobs";

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

/* ---- item 6: deleting a durable topic under publishers ---------------- */

typedef struct {
    rill_broker *b;
    int index;
    pthread_mutex_t *lock;
    int *stop;
    /* Written by the thread, read after the join (or under `lock`). */
    long published;
    long no_such_topic;
    long other_errors;
    rill_status first_other;
    char first_other_text[256];
} publisher_arg;

static int stopped(publisher_arg *a) {
    pthread_mutex_lock(a->lock);
    int s = *a->stop;
    pthread_mutex_unlock(a->lock);
    return s;
}

/* Publishes until the topic is gone (or told to stop): by name, or through
 * a rill_publisher for the first thread, so both paths race the delete. */
static void *publish_loop(void *p) {
    publisher_arg *a = p;
    char payload[PAYLOAD];
    memset(payload, 'x', sizeof payload);
    rill_publisher *pub = NULL;
    if (a->index == 0 && rill_publisher_new(a->b, TOPIC, &pub) != RILL_OK) {
        pub = NULL;
    }
    for (long n = 0;; n++) {
        char key[32];
        snprintf(key, sizeof key, "%d-%ld", a->index, n);
        rill_record r = {key, strlen(key), payload, sizeof payload, NULL, 0};
        rill_status st = pub != NULL ? rill_publisher_publish(pub, &r, NULL) : rill_publish(a->b, TOPIC, &r, NULL);
        if (st == RILL_OK) {
            pthread_mutex_lock(a->lock);
            a->published++;
            pthread_mutex_unlock(a->lock);
        } else if (st == RILL_ERR_NO_SUCH_TOPIC) {
            a->no_such_topic++;
            break;
        } else {
            if (a->other_errors++ == 0) {
                a->first_other = st;
                rill_last_error(a->first_other_text, sizeof a->first_other_text);
            }
            if (a->other_errors > 1000) {
                break;
            }
        }
        if ((n & 63) == 0 && stopped(a)) {
            break;
        }
    }
    rill_publisher_free(pub);
    return NULL;
}

static void on_topic(void *user_data, const char *name) {
    if (strcmp(name, TOPIC) == 0) {
        (*(int *)user_data)++;
    }
}

static int listed(rill_broker *b) {
    int n = 0;
    OK(rill_topic_list(b, on_topic, &n));
    return n;
}

static rill_broker *open_durable(const char *dir) {
    rill_broker_options o;
    rill_broker_options_init(&o);
    o.data_dir = dir;
    o.fsync = RILL_FSYNC_NEVER;
    rill_broker *b = NULL;
    OK(rill_broker_new(&o, &b));
    if (b == NULL) {
        exit(2);
    }
    return b;
}

static void create_topic(rill_broker *b) {
    rill_topic_options t;
    rill_topic_options_init(&t);
    t.partitions = PARTITIONS;
    t.retention_bytes = RETENTION_BYTES;
    OK(rill_topic_create(b, TOPIC, &t));
}

/* Entries of `path`, not counting . and .. */
static int entries(const char *path) {
    DIR *d = opendir(path);
    if (d == NULL) {
        return -1;
    }
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) {
            n++;
        }
    }
    closedir(d);
    return n;
}

static void rm_rf(const char *path) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", path);
    if (system(cmd) != 0) {
        fprintf(stderr, "could not remove %s\n", path);
    }
}

static void delete_under_publishers(void) {
    char dir[] = "/tmp/rill-robust-ops-XXXXXX";
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        exit(2);
    }
    const int rounds = long_tests() ? 100 : 25;
    rill_broker *b = open_durable(dir);
    create_topic(b);
    long racing_ok = 0, racing_gone = 0;
    for (int round = 0; round < rounds; round++) {
        pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
        int stop = 0;
        publisher_arg args[PUBLISHERS];
        pthread_t threads[PUBLISHERS];
        for (int i = 0; i < PUBLISHERS; i++) {
            memset(&args[i], 0, sizeof args[i]);
            args[i].b = b;
            args[i].index = i;
            args[i].lock = &lock;
            args[i].stop = &stop;
            pthread_create(&threads[i], NULL, publish_loop, &args[i]);
        }
        /* Delete once every publisher is well under way. */
        double deadline = now_s() + WAIT_SECONDS;
        for (;;) {
            int ready = 1;
            pthread_mutex_lock(&lock);
            for (int i = 0; i < PUBLISHERS; i++) {
                ready &= args[i].published >= BEFORE_DELETE || args[i].no_such_topic > 0 || args[i].other_errors > 0;
            }
            pthread_mutex_unlock(&lock);
            if (ready || now_s() > deadline) {
                break;
            }
            pause_briefly();
        }
        long before[PUBLISHERS];
        pthread_mutex_lock(&lock);
        for (int i = 0; i < PUBLISHERS; i++) {
            before[i] = args[i].published;
        }
        pthread_mutex_unlock(&lock);
        rill_status deleted = rill_topic_delete(b, TOPIC);
        CHECK_STATUS(deleted, RILL_OK);
        /* Each publisher stops at its first RILL_ERR_NO_SUCH_TOPIC, which
         * comes at its next publish at the latest (or when told to, if the
         * delete failed). */
        if (deleted != RILL_OK) {
            pthread_mutex_lock(&lock);
            stop = 1;
            pthread_mutex_unlock(&lock);
        }
        for (int i = 0; i < PUBLISHERS; i++) {
            pthread_join(threads[i], NULL);
        }
        for (int i = 0; i < PUBLISHERS; i++) {
            CHECK(args[i].no_such_topic == 1);
            if (args[i].other_errors != 0) {
                fprintf(stderr, "round %d, publisher %d: %ld publishes failed with neither OK nor NO_SUCH_TOPIC, "
                                "first %s: %s\n",
                        round, i, args[i].other_errors, rill_status_name(args[i].first_other),
                        args[i].first_other_text);
            }
            CHECK(args[i].other_errors == 0);
            racing_ok += args[i].published - before[i];
            racing_gone += args[i].no_such_topic;
        }
        CHECK(listed(b) == 0);
        if (deleted != RILL_OK) {
            break;
        }
        /* The name is free again, for a new topic from offset 0. */
        create_topic(b);
        CHECK(listed(b) == 1);
        rill_position pos;
        rill_record r = {NULL, 0, "fresh", 5, NULL, 0};
        OK(rill_publish(b, TOPIC, &r, &pos));
        CHECK(pos.offset == 0);
    }
    printf("deleted a durable topic under %d publishers %d times: racing publishes %ld OK, %ld NO_SUCH_TOPIC\n",
           PUBLISHERS, rounds, racing_ok, racing_gone);
    rill_broker_free(b);

    /* The directory reopens with the last topic, whole, and holds nothing
     * of the deleted ones. */
    b = open_durable(dir);
    CHECK(listed(b) == 1);
    rill_topic_stats ts;
    OK(rill_topic_get_stats(b, TOPIC, &ts));
    rill_broker_free(b);
    char topics[300];
    snprintf(topics, sizeof topics, "%s/topics", dir);
    CHECK(entries(topics) == 1);
    rm_rf(dir);
}

/* ---- item 8: ack_timeout with shared members --------------------------- */

typedef struct {
    pthread_mutex_t lock;
    int calls[PARTITIONS][MAX_MESSAGES];
    int total;
    int max_offset_seen;
    long work_ns;
} stall_counter;

static rill_ack slow_handler(void *user_data, const rill_message *m) {
    stall_counter *c = user_data;
    pthread_mutex_lock(&c->lock);
    if (m->partition < PARTITIONS && m->offset < MAX_MESSAGES) {
        c->calls[m->partition][m->offset]++;
    }
    c->total++;
    pthread_mutex_unlock(&c->lock);
    /* The work: longer than the ack deadline, so every call stalls. */
    struct timespec t = {0, c->work_ns};
    nanosleep(&t, NULL);
    return RILL_ACK_SUCCESS;
}

static uint64_t acked_by(rill_subscription **subs, int n) {
    uint64_t acked = 0;
    for (int i = 0; i < n; i++) {
        rill_subscription_stats st;
        /* Polled: not counted as a check each time; a failure reads 0. */
        if (rill_subscription_get_stats(subs[i], &st) == RILL_OK) {
            acked += st.acked;
        }
    }
    return acked;
}

static void stalling_members(int members, int messages, uint32_t timeout_ms, long work_ms) {
    rill_broker *b = NULL;
    OK(rill_broker_new(NULL, &b));
    rill_topic_options t;
    rill_topic_options_init(&t);
    t.partitions = PARTITIONS;
    OK(rill_topic_create(b, TOPIC, &t));
    for (int i = 0; i < messages; i++) {
        char key[16];
        snprintf(key, sizeof key, "%d", i);
        rill_record r = {key, strlen(key), "slow", 4, NULL, 0};
        OK(rill_publish(b, TOPIC, &r, NULL));
    }
    stall_counter *c = calloc(1, sizeof *c);
    if (c == NULL) {
        exit(2);
    }
    pthread_mutex_init(&c->lock, NULL);
    c->work_ns = work_ms * 1000000L;
    rill_subscription *subs[3] = {NULL, NULL, NULL};
    for (int i = 0; i < members; i++) {
        rill_subscription_options so;
        rill_subscription_options_init(&so);
        so.name = "workers";
        so.shared = true;
        so.start = RILL_START_EARLIEST;
        so.ack_timeout_ms = timeout_ms;
        OK(rill_subscribe(b, TOPIC, &so, slow_handler, c, &subs[i]));
    }
    double deadline = now_s() + WAIT_SECONDS;
    while (acked_by(subs, members) < (uint64_t)messages && now_s() < deadline) {
        pause_briefly();
    }
    for (int i = 0; i < members; i++) {
        OK(rill_subscription_wait_idle(subs[i], WAIT_SECONDS * 1000));
    }
    uint64_t acked = acked_by(subs, members);
    uint64_t timeouts = 0;
    for (int i = 0; i < members; i++) {
        rill_subscription_stats st;
        OK(rill_subscription_get_stats(subs[i], &st));
        timeouts += st.ack_timeouts;
    }
    CHECK(acked == (uint64_t)messages);
    pthread_mutex_lock(&c->lock);
    int handled = 0, twice = 0, more = 0;
    for (int p = 0; p < PARTITIONS; p++) {
        for (int o = 0; o < MAX_MESSAGES; o++) {
            int n = c->calls[p][o];
            handled += n > 0;
            twice += n == 2;
            if (n > 2) {
                fprintf(stderr, "%d members: partition %d offset %d handled %d times\n", members, p, o, n);
                more++;
            }
        }
    }
    int total = c->total;
    pthread_mutex_unlock(&c->lock);
    printf("%d shared members, ack_timeout %u ms, %ld ms handlers: %d calls for %d messages (%d twice), "
           "%llu stalls, %llu acked\n",
           members, timeout_ms, work_ms, total, messages, twice, (unsigned long long)timeouts,
           (unsigned long long)acked);
    CHECK(handled == messages);
    CHECK(more == 0);
    /* A stall moves one message once; every member but the last to stall
     * can leave one behind. */
    CHECK(total <= messages + members);
    for (int i = 0; i < members; i++) {
        rill_subscription_free(subs[i]);
    }
    rill_broker_free(b);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

int main(void) {
    delete_under_publishers();
    stalling_members(2, 20, 5, 20);
    stalling_members(3, 20, 5, 20);
    stalling_members(3, long_tests() ? 300 : 60, 1, 3);
    return CHECK_VERDICT("test_robust_ops");
}
