/*
 * Publish through the C ABI, 64-byte payloads. Prints "<mode> <msgs/s>";
 * ffi/bench/run.sh runs it against ffi/examples/rust_baseline.rs (the same
 * work through the Rust API) and reports the ratios.
 *
 *   usage: bench_ffi [messages] [mode]
 *
 * Modes (all of them, one after the other, if none is given):
 *   publish, publisher, batch64        one push subscriber whose handler
 *                                      reads every payload byte; timed until
 *                                      it has handled everything
 *   publish/nosub, publisher/nosub,    no subscriber: the publishing thread's
 *   batch64/nosub                      own cost per message
 * publish is rill_publish by topic name, publisher rill_publisher_publish,
 * batch64 rill_publisher_publish_batch with 64 records a call. Each mode
 * publishes `messages` untimed first (see `run`), then `messages` timed.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rill.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static rill_ack sum_payload(void *user_data, const rill_message *m) {
    /* Sum into a local, as the Rust baseline does: adding to *user_data byte
     * by byte would store and reload it per byte (a payload byte may alias
     * it), a handler several times slower than the Rust one. */
    unsigned long long s = 0;
    for (size_t i = 0; i < m->payload_len; i++) s += m->payload[i];
    *(unsigned long long *)user_data += s;
    return RILL_ACK_SUCCESS;
}

/* The handler's running sum, on cache lines of its own. It used to be a
 * local of run(), on the publishing thread's stack: the drain thread's
 * store to it each message then took the line that holds the publisher's
 * loop state (the record it passes, its counter) away from the publisher,
 * which fetched it back each publish, and the modes with a subscriber ran
 * at 0.25-0.44x the Rust program, whose sum lives in its handler's own
 * allocation. */
static struct {
    char before[64];
    unsigned long long sum;
    char after[64];
} handled;

static void die(const char *what, rill_status st) {
    char err[256];
    rill_last_error(err, sizeof err);
    fprintf(stderr, "%s: %s: %s\n", what, rill_status_name(st), err);
    exit(1);
}

#define TRY(call)                          \
    do {                                   \
        rill_status st_ = (call);          \
        if (st_ != RILL_OK) die(#call, st_); \
    } while (0)

static void run(const char *mode, long n) {
    char kind[32];
    snprintf(kind, sizeof kind, "%s", mode);
    char *slash = strchr(kind, '/');
    int with_sub = slash == NULL;
    if (slash) {
        if (strcmp(slash, "/nosub") != 0) {
            fprintf(stderr, "unknown mode %s\n", mode);
            exit(2);
        }
        *slash = '\0';
    }
    if (strcmp(kind, "publish") != 0 && strcmp(kind, "publisher") != 0 && strcmp(kind, "batch64") != 0) {
        fprintf(stderr, "unknown mode %s\n", mode);
        exit(2);
    }
    rill_broker *b = NULL;
    TRY(rill_broker_new(NULL, &b));
    rill_topic_options to;
    rill_topic_options_init(&to);
    to.retention_bytes = 64u << 20;
    TRY(rill_topic_create(b, "bench", &to));
    handled.sum = 0;
    rill_subscription *s = NULL;
    if (with_sub) TRY(rill_subscribe(b, "bench", NULL, sum_payload, &handled.sum, &s));
    rill_publisher *p = NULL;
    TRY(rill_publisher_new(b, "bench", &p));
    unsigned char payload[64];
    memset(payload, 0x5a, sizeof payload);
    rill_record r = {NULL, 0, payload, sizeof payload, NULL, 0};
    rill_record batch[64];
    for (int i = 0; i < 64; i++) batch[i] = r;

    /* The first round, untimed, fills the topic's retention, so the timed
     * round reuses segments rather than faulting fresh memory in (which
     * made the first runs of a series the slow ones, on either side). */
    double t0 = 0;
    for (int round = 0; round < 2; round++) {
        if (round == 1) t0 = now_s();
        if (strcmp(kind, "publish") == 0) {
            for (long i = 0; i < n; i++) TRY(rill_publish(b, "bench", &r, NULL));
        } else if (strcmp(kind, "publisher") == 0) {
            for (long i = 0; i < n; i++) TRY(rill_publisher_publish(p, &r, NULL));
        } else {
            for (long i = 0; i < n; i += 64) TRY(rill_publisher_publish_batch(p, batch, 64, NULL));
        }
        if (with_sub) TRY(rill_subscription_wait_idle(s, 60000));
    }
    double dt = now_s() - t0;
    printf("%s %.0f\n", mode, (double)n / dt);
    if (with_sub && handled.sum == 0) printf("(no payload bytes read)\n");
    rill_publisher_free(p);
    rill_subscription_free(s);
    rill_broker_free(b);
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 2000000;
    if (argc > 2) {
        run(argv[2], n);
        return 0;
    }
    const char *modes[] = {"publish", "publisher", "batch64", "publish/nosub", "publisher/nosub", "batch64/nosub"};
    for (size_t i = 0; i < sizeof modes / sizeof modes[0]; i++) run(modes[i], n);
    return 0;
}
