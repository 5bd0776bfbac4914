/*
 * The NATS bridge from C (librill built with the nats feature): two brokers
 * bridged through one JetStream stream, the counters, and the errors at
 * start. Needs a nats-server at $RILL_NATS_URL with a stream RILL capturing
 * "rill.>" (ffi/tests/run_nats.sh runs it under
 * bindings/python/tests/nats_helper.py, which provides both).
 *
 * Built with -std=c99 -Wall -Wextra -Wpedantic -Werror.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rill_nats.h"

#include "check.h"

#define N 200
#define WAIT_MS 60000

/* What the importing broker's subscriber saw. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int count;
    int intact;          /* messages whose key, payload and attributes matched */
    int out_of_order;    /* per-key order breaks */
    int last_of_key[4];
} seen;

static void expected_payload(int i, char *buf, size_t len) {
    snprintf(buf, len, "order %d", i);
}

static rill_ack on_message(void *user_data, const rill_message *m) {
    seen *s = (seen *)user_data;
    const char *v = NULL;
    size_t vlen = 0;
    int i = -1;
    char tmp[32];
    if (rill_message_attribute(m, "i", &v, &vlen) == RILL_OK && vlen < sizeof tmp) {
        memcpy(tmp, v, vlen);
        tmp[vlen] = 0;
        i = atoi(tmp);
    }
    char want[32];
    expected_payload(i, want, sizeof want);
    unsigned char key[2] = {'k', (unsigned char)(i % 4)};
    /* Four attributes: the two published, the JetStream sequence, and the
     * message's id (RILL_ATTR_ID), which the importer takes from the
     * Nats-Msg-Id the exporter gave it, for the topic's dedupe window. */
    int ok = i >= 0 && m->payload_len == strlen(want) && memcmp(m->payload, want, m->payload_len) == 0 &&
             m->key_len == 2 && memcmp(m->key, key, 2) == 0 && m->attribute_count == 4 &&
             rill_message_attribute(m, "region", &v, &vlen) == RILL_OK && vlen == 7 &&
             memcmp(v, "eu west", 7) == 0 && rill_message_attribute(m, "nats.seq", &v, &vlen) == RILL_OK &&
             rill_message_attribute(m, RILL_ATTR_ID, &v, &vlen) == RILL_OK && vlen > 0;
    pthread_mutex_lock(&s->lock);
    s->count++;
    s->intact += ok;
    if (i >= 0) {
        if (s->last_of_key[i % 4] >= i) s->out_of_order++;
        s->last_of_key[i % 4] = i;
    }
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->lock);
    return RILL_ACK_SUCCESS;
}

static int wait_for(seen *s, int n) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += WAIT_MS / 1000;
    pthread_mutex_lock(&s->lock);
    while (s->count < n && pthread_cond_timedwait(&s->changed, &s->lock, &deadline) == 0) {
    }
    int got = s->count;
    pthread_mutex_unlock(&s->lock);
    return got;
}

static rill_broker *new_broker(void) {
    rill_broker *b = NULL;
    OK(rill_broker_new(NULL, &b));
    rill_topic_options t;
    rill_topic_options_init(&t);
    t.partitions = 2;
    OK(rill_topic_create(b, "orders/eu", &t));
    return b;
}

static void test_two_brokers_bridged(const char *url) {
    rill_broker *a = new_broker();
    rill_broker *b = new_broker();
    seen s;
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.lock, NULL);
    pthread_cond_init(&s.changed, NULL);
    for (int k = 0; k < 4; k++) s.last_of_key[k] = -1;
    rill_subscription_options so;
    rill_subscription_options_init(&so);
    so.start = RILL_START_EARLIEST;
    rill_subscription *sub = NULL;
    OK(rill_subscribe(b, "orders/*", &so, on_message, &s, &sub));

    rill_nats_options o;
    rill_nats_options_init(&o);
    o.url = url;
    o.export_pattern = "orders/*";
    o.export_stream = "RILL";
    o.export_subject_prefix = "rill.c";
    rill_nats_bridge *exporter = NULL;
    OK(rill_nats_bridge_new(a, &o, &exporter));

    rill_nats_options_init(&o);
    o.url = url;
    o.import_stream = "RILL";
    o.import_subject_prefix = "rill.c";
    o.import_consumer = "c-import";
    rill_nats_bridge *importer = NULL;
    OK(rill_nats_bridge_new(b, &o, &importer));

    for (int i = 0; i < N; i++) {
        char payload[32], idx[16];
        expected_payload(i, payload, sizeof payload);
        snprintf(idx, sizeof idx, "%d", i);
        unsigned char key[2] = {'k', (unsigned char)(i % 4)};
        rill_attribute attrs[2] = {{"region", "eu west"}, {"i", idx}};
        rill_record r = {key, 2, payload, strlen(payload), attrs, 2};
        OK(rill_publish(a, "orders/eu", &r, NULL));
    }
    CHECK(wait_for(&s, N) == N);
    pthread_mutex_lock(&s.lock);
    CHECK(s.intact == N);
    CHECK(s.out_of_order == 0);
    pthread_mutex_unlock(&s.lock);

    /* The exporter counts a message once JetStream's ack is in, which may
     * be just after the importer saw it; the importer counts one once its
     * publish into rill has returned, which may be just after the
     * subscription got it. */
    rill_nats_stats es, is;
    for (int waited = 0;; waited += 10) {
        OK(rill_nats_bridge_get_stats(exporter, &es));
        OK(rill_nats_bridge_get_stats(importer, &is));
        if ((es.exported == N && is.imported == N) || waited >= WAIT_MS) break;
        struct timespec ten_ms = {0, 10 * 1000 * 1000};
        nanosleep(&ten_ms, NULL);
    }
    CHECK(es.exported == N && es.export_lag == 0 && es.in_flight == 0);
    CHECK(is.imported == N);
    CHECK(is.reconnects == 0 && is.rejected == 0);
    CHECK(rill_nats_bridge_last_error(importer, NULL, 0) == 0 && !is.has_error);
    CHECK_STATUS(rill_nats_bridge_get_stats(NULL, &es), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_nats_bridge_get_stats(exporter, NULL), RILL_ERR_NULL_ARGUMENT);
    CHECK(rill_nats_bridge_last_error(NULL, NULL, 0) == 0);

    rill_nats_bridge_free(exporter);
    rill_nats_bridge_free(importer);
    rill_nats_bridge_free(NULL);
    rill_subscription_free(sub);
    rill_broker_free(a);
    rill_broker_free(b);
    pthread_mutex_destroy(&s.lock);
    pthread_cond_destroy(&s.changed);
}

static void test_errors_at_start(const char *url) {
    rill_broker *a = new_broker();
    rill_nats_bridge *br = NULL;
    rill_nats_options o;

    rill_nats_options_init(&o);
    o.url = url;
    o.export_pattern = "orders/*";
    o.export_stream = "NOPE";
    CHECK_STATUS(rill_nats_bridge_new(a, &o, &br), RILL_ERR_NOT_FOUND);

    rill_nats_options_init(&o);
    o.url = url;
    o.import_stream = "NOPE";
    CHECK_STATUS(rill_nats_bridge_new(a, &o, &br), RILL_ERR_NOT_FOUND);

    rill_nats_options_init(&o);
    o.url = "nats://127.0.0.1:notaport";
    o.export_pattern = "orders/*";
    o.export_stream = "RILL";
    CHECK_STATUS(rill_nats_bridge_new(a, &o, &br), RILL_ERR_INVALID_ARGUMENT);

    /* Port 1: nothing listens there. */
    o.url = "nats://127.0.0.1:1";
    o.connect_timeout_ms = 2000;
    CHECK_STATUS(rill_nats_bridge_new(a, &o, &br), RILL_ERR_IO);

    rill_nats_options_init(&o);
    o.url = url;
    CHECK_STATUS(rill_nats_bridge_new(a, &o, &br), RILL_ERR_INVALID_ARGUMENT); /* nothing to do */
    o.export_pattern = "orders/*";
    CHECK_STATUS(rill_nats_bridge_new(a, &o, &br), RILL_ERR_INVALID_ARGUMENT); /* no stream */
    o.export_stream = "RILL";
    o.export_subject_prefix = "bad prefix";
    CHECK_STATUS(rill_nats_bridge_new(a, &o, &br), RILL_ERR_INVALID_ARGUMENT);

    memset(&o, 0, sizeof o);
    CHECK_STATUS(rill_nats_bridge_new(a, &o, &br), RILL_ERR_INVALID_ARGUMENT); /* not _init'ed */
    CHECK_STATUS(rill_nats_bridge_new(NULL, NULL, &br), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_nats_bridge_new(a, NULL, NULL), RILL_ERR_NULL_ARGUMENT);
    CHECK(br == NULL);
    rill_broker_free(a);
}

int main(void) {
    const char *url = getenv("RILL_NATS_URL");
    if (url == NULL) {
        fprintf(stderr, "RILL_NATS_URL is not set: run this under nats_helper.py\n");
        return 1;
    }
    test_two_brokers_bridged(url);
    test_errors_at_start(url);
    printf("%d passed, %d failed\n", checks - failures, failures);
    return failures ? 1 : 0;
}
