/*
 * The C ABI as a C program uses it: every exported function, the broker and
 * delivery scenarios, and the bad inputs (NULLs, invalid names, patterns and
 * filters, non-UTF-8 strings, oversized messages, a closed broker).
 *
 * Built with -std=c99 -Wall -Wextra -Wpedantic -Werror, and run plain, under
 * AddressSanitizer + UBSan and under valgrind memcheck by ffi/tests/run.sh.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rill.h"

/* Exported only by a library built with the test-panic feature (run.sh
 * builds the one these tests link that way); rill.h does not declare it. */
rill_status rill_test_panic(void);

#include "check.h"

static void last_error_contains(const char *needle, int line) {
    char err[512];
    rill_last_error(err, sizeof err);
    checks++;
    if (strstr(err, needle) == NULL) {
        fprintf(stderr, "%s:%d: last error %s does not mention %s\n", __FILE__, line, err, needle);
        failures++;
    }
}
#define LAST_ERROR_HAS(s) last_error_contains((s), __LINE__)

static void sleep_ms(long ms) {
    struct timespec ts;
    ts.tv_sec = ms / 1000;
    ts.tv_nsec = (ms % 1000) * 1000000L;
    nanosleep(&ts, NULL);
}

static rill_broker *new_broker(void) {
    rill_broker *b = NULL;
    OK(rill_broker_new(NULL, &b));
    return b;
}

static rill_record record_of(const char *payload) {
    rill_record r;
    memset(&r, 0, sizeof r);
    r.payload = payload;
    r.payload_len = strlen(payload);
    return r;
}

/* ---- a handler that records what it sees ---------------------------------- */

#define MAX_SEEN 4096

typedef struct {
    pthread_mutex_t lock;
    int count;
    char payloads[MAX_SEEN][64];
    uint64_t offsets[MAX_SEEN];
    uint32_t attempts[MAX_SEEN];
    char topics[MAX_SEEN][64];
    char region[MAX_SEEN][16];
    int freed;            /* times the destructor ran */
    rill_ack answer;      /* what to return */
    int fail_first_n;     /* retry the first n deliveries of "poison" */
} recorder;

static void recorder_init(recorder *r) {
    memset(r, 0, sizeof *r);
    pthread_mutex_init(&r->lock, NULL);
    r->answer = RILL_ACK_SUCCESS;
}

static int recorder_count(recorder *r) {
    pthread_mutex_lock(&r->lock);
    int n = r->count;
    pthread_mutex_unlock(&r->lock);
    return n;
}

static rill_ack record_handler(void *user_data, const rill_message *m) {
    recorder *r = (recorder *)user_data;
    pthread_mutex_lock(&r->lock);
    int i = r->count < MAX_SEEN ? r->count++ : MAX_SEEN - 1;
    size_t n = m->payload_len < 63 ? m->payload_len : 63;
    memcpy(r->payloads[i], m->payload, n);
    r->payloads[i][n] = 0;
    r->offsets[i] = m->offset;
    r->attempts[i] = m->attempt;
    snprintf(r->topics[i], sizeof r->topics[i], "%s", m->topic);
    const char *v = NULL;
    size_t vlen = 0;
    if (rill_message_attribute(m, "region", &v, &vlen) == RILL_OK && vlen < 16) {
        memcpy(r->region[i], v, vlen);
        r->region[i][vlen] = 0;
    }
    rill_ack answer = r->answer;
    pthread_mutex_unlock(&r->lock);
    if (m->payload_len == 6 && memcmp(m->payload, "poison", 6) == 0) {
        rill_ack_reason(m, "cannot parse poison");
        return RILL_ACK_RETRY;
    }
    return answer;
}

static void recorder_free(void *user_data) {
    recorder *r = (recorder *)user_data;
    pthread_mutex_lock(&r->lock);
    r->freed++;
    pthread_mutex_unlock(&r->lock);
}

static rill_subscription_options sub_options(void) {
    rill_subscription_options o;
    rill_subscription_options_init(&o);
    return o;
}

/* ---- tests ------------------------------------------------------------------ */

static void test_version_status_names_and_last_error(void) {
    CHECK(strlen(rill_version()) > 0);
    /* The header's version is the library's: run.sh links this test with the
     * library built from the same tree. */
    CHECK(strcmp(rill_version(), RILL_VERSION_STRING) == 0);
    {
        char want[64];
        snprintf(want, sizeof want, "%d.%d.%d", RILL_VERSION_MAJOR, RILL_VERSION_MINOR,
                 RILL_VERSION_PATCH);
        CHECK(strcmp(want, RILL_VERSION_STRING) == 0);
    }
    CHECK(strcmp(rill_status_name(RILL_ERR_RESOURCE_EXHAUSTED), "RILL_ERR_RESOURCE_EXHAUSTED") == 0);
    CHECK(RILL_ERR_RESOURCE_EXHAUSTED == 16);
    CHECK(strcmp(rill_status_name(RILL_ERR_REASSIGNED), "RILL_ERR_REASSIGNED") == 0);
    CHECK(RILL_ERR_REASSIGNED == 19);
    CHECK(strcmp(rill_status_name(RILL_OK), "RILL_OK") == 0);
    CHECK(strcmp(rill_status_name(RILL_ERR_NO_SUCH_TOPIC), "RILL_ERR_NO_SUCH_TOPIC") == 0);
    CHECK(strcmp(rill_status_name(RILL_ERR_PANIC), "RILL_ERR_PANIC") == 0);
    CHECK(strcmp(rill_status_name(9999), "RILL_STATUS_UNKNOWN") == 0);
    CHECK(strcmp(rill_status_name(-1), "RILL_STATUS_UNKNOWN") == 0);

    /* An error leaves its text; rill_last_error truncates and reports the full length. */
    rill_broker *b = new_broker();
    rill_record r = record_of("x");
    CHECK_STATUS(rill_publish(b, "no/such/topic", &r, NULL), RILL_ERR_NO_SUCH_TOPIC);
    size_t full = rill_last_error(NULL, 0);
    CHECK(full > 10);
    char small[8];
    size_t again = rill_last_error(small, sizeof small);
    CHECK(again == full);
    CHECK(strlen(small) == sizeof small - 1);
    char big[512];
    rill_last_error(big, sizeof big);
    CHECK(strstr(big, "no/such/topic") != NULL);
    rill_broker_free(b);
}

static void count_free(void *user_data) { (*(int *)user_data)++; }

/* The growable option structs: see "Option structs" in rill.h. */
static void test_option_struct_sizes(void) {
    rill_broker_options bo;
    rill_topic_options to;
    rill_consumer_options co;
    rill_subscription_options so;
    rill_broker *b = NULL;

    /* _init records the size this program was built with. */
    memset(&bo, 0xAB, sizeof bo);
    rill_broker_options_init(&bo);
    CHECK(bo.struct_size == sizeof bo);
    CHECK(bo.worker_threads == 0 && !bo.auto_create_topics && bo.publish_timeout_ms == 10000);
    rill_topic_options_init(&to);
    CHECK(to.struct_size == sizeof to && to.partitions == 1);
    rill_consumer_options_init(&co);
    CHECK(co.struct_size == sizeof co && co.start == RILL_START_EARLIEST && co.session_timeout_ms == 0);
    rill_subscription_options_init(&so);
    CHECK(so.struct_size == sizeof so && so.max_attempts == 5 && so.on_lagged == NULL);

    /* A struct cleared instead of filled by _init is refused, by name. */
    memset(&bo, 0, sizeof bo);
    CHECK_STATUS(rill_broker_new(&bo, &b), RILL_ERR_INVALID_ARGUMENT);
    LAST_ERROR_HAS("rill_broker_options_init");
    CHECK(b == NULL);
    b = new_broker();
    memset(&to, 0, sizeof to);
    CHECK_STATUS(rill_topic_create(b, "zeroed", &to), RILL_ERR_INVALID_ARGUMENT);
    LAST_ERROR_HAS("rill_topic_options_init");
    memset(&co, 0, sizeof co);
    rill_consumer *c = NULL;
    OK(rill_topic_create(b, "t", NULL));
    CHECK_STATUS(rill_consumer_new(b, "g", "t", &co, &c), RILL_ERR_INVALID_ARGUMENT);
    LAST_ERROR_HAS("rill_consumer_options_init");
    memset(&so, 0, sizeof so);
    so.user_data_free = count_free;
    int freed = 0;
    rill_subscription *s = NULL;
    CHECK_STATUS(rill_subscribe(b, "t", &so, record_handler, &freed, &s), RILL_ERR_INVALID_ARGUMENT);
    LAST_ERROR_HAS("rill_subscription_options_init");
    CHECK(freed == 1); /* user_data is released even though the options were refused */
    CHECK(c == NULL && s == NULL);

    /* A size smaller than any published layout is refused too. */
    rill_topic_options_init(&to);
    to.struct_size = 8;
    CHECK_STATUS(rill_topic_create(b, "small", &to), RILL_ERR_INVALID_ARGUMENT);
    LAST_ERROR_HAS("struct_size 8");

    /* A program built against a newer header: the library zeroes what it does
     * not know, accepts it while it stays zero, and refuses a set unknown field. */
    {
        unsigned char newer[sizeof(rill_topic_options) + 16];
        rill_topic_options_init_v1((rill_topic_options *)(void *)newer, sizeof newer);
        rill_topic_options head;
        memcpy(&head, newer, sizeof head);
        CHECK(head.struct_size == sizeof newer && head.partitions == 1);
        for (size_t i = sizeof(rill_topic_options); i < sizeof newer; i++) CHECK(newer[i] == 0);
        head.partitions = 3;
        memcpy(newer, &head, sizeof head);
        OK(rill_topic_create(b, "from-newer", (const rill_topic_options *)(void *)newer));
        rill_topic_stats ts;
        OK(rill_topic_get_stats(b, "from-newer", &ts));
        CHECK(ts.partitions == 3);
        newer[sizeof newer - 1] = 1;
        CHECK_STATUS(rill_topic_create(b, "from-newer-2", (const rill_topic_options *)(void *)newer),
                     RILL_ERR_INVALID_ARGUMENT);
        LAST_ERROR_HAS("older than the rill.h");
    }
    rill_broker_free(b);
}

static void test_panic_boundary(void) {
    CHECK_STATUS(rill_test_panic(), RILL_ERR_PANIC);
    LAST_ERROR_HAS("rill_test_panic was called");
    /* The process lives on and the library still works. */
    rill_broker *b = new_broker();
    OK(rill_topic_create(b, "after-panic", NULL));
    rill_broker_free(b);
}

static void test_null_arguments(void) {
    rill_broker *b = new_broker();
    rill_record r = record_of("x");
    rill_position pos;
    rill_broker *bp = NULL;
    rill_subscription *s = NULL;
    rill_consumer *c = NULL;
    rill_publisher *p = NULL;
    const rill_message *msgs = NULL;
    size_t count = 0;
    uint64_t u = 0;
    rill_topic_stats ts;
    rill_subscription_stats ss;
    OK(rill_topic_create(b, "t", NULL));

    CHECK_STATUS(rill_broker_new(NULL, NULL), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_topic_create(NULL, "t2", NULL), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_topic_create(b, NULL, NULL), RILL_ERR_NULL_ARGUMENT);
    LAST_ERROR_HAS("topic name must not be NULL");
    CHECK_STATUS(rill_topic_get_stats(b, "t", NULL), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_publish(NULL, "t", &r, &pos), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_publish(b, NULL, &r, &pos), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_publish(b, "t", NULL, &pos), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_try_publish(b, "t", NULL, &pos), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_publish_batch(b, "t", NULL, 2, NULL), RILL_ERR_NULL_ARGUMENT);
    rill_record no_payload = r;
    no_payload.payload = NULL;
    CHECK_STATUS(rill_publish(b, "t", &no_payload, &pos), RILL_ERR_NULL_ARGUMENT);
    rill_record no_attrs = r;
    no_attrs.attribute_count = 2;
    CHECK_STATUS(rill_publish(b, "t", &no_attrs, &pos), RILL_ERR_NULL_ARGUMENT);
    rill_attribute null_key = {NULL, "v"};
    rill_record bad_attr = r;
    bad_attr.attributes = &null_key;
    bad_attr.attribute_count = 1;
    CHECK_STATUS(rill_publish(b, "t", &bad_attr, &pos), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_publisher_new(b, "t", NULL), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_publisher_publish(NULL, &r, NULL), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_publisher_publish_batch(NULL, &r, 1, NULL), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_subscribe(b, "t", NULL, NULL, NULL, &s), RILL_ERR_NULL_ARGUMENT);
    LAST_ERROR_HAS("handler");
    CHECK_STATUS(rill_subscribe(b, NULL, NULL, record_handler, NULL, &s), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_subscribe(b, "t", NULL, record_handler, NULL, NULL), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_subscription_wait_idle(NULL, 10), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_subscription_get_stats(NULL, &ss), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_consumer_new(b, NULL, "t", NULL, &c), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_consumer_new(b, "g", "t", NULL, NULL), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_consumer_poll(NULL, 1, 0, &msgs, &count), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_consumer_commit(NULL), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_consumer_commit_offset(NULL, 0, 0), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_consumer_seek(NULL, 0, 0), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_consumer_seek_to_beginning(NULL), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_consumer_seek_to_end(NULL), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_consumer_rollback(NULL), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_consumer_position(NULL, 0, &u), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_consumer_committed(NULL, 0, &u), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_message_attribute_at(NULL, 0, NULL, NULL, NULL, NULL), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_message_attribute(NULL, "k", NULL, NULL), RILL_ERR_NULL_ARGUMENT);
    CHECK(rill_message_attribute_count(NULL) == 0);
    CHECK(rill_consumer_partition_count(NULL) == 0);
    CHECK(rill_subscription_name(NULL, NULL, 0) == 0);
    rill_ack_reason(NULL, "ignored");
    CHECK(bp == NULL && s == NULL && c == NULL && p == NULL && msgs == NULL && count == 0);

    OK(rill_consumer_new(b, "g", "t", NULL, &c));
    CHECK_STATUS(rill_consumer_poll(c, 1, 0, NULL, &count), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_consumer_poll(c, 1, 0, &msgs, NULL), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_consumer_position(c, 0, NULL), RILL_ERR_NULL_ARGUMENT);
    rill_consumer_free(c);
    (void)ts;

    /* _free(NULL) and _init(NULL) are no-ops. */
    rill_broker_free(NULL);
    rill_broker_close(NULL);
    rill_subscription_free(NULL);
    rill_consumer_free(NULL);
    rill_publisher_free(NULL);
    rill_broker_options_init(NULL);
    rill_topic_options_init(NULL);
    rill_subscription_options_init(NULL);
    rill_consumer_options_init(NULL);
    rill_broker_free(b);
}

static void test_invalid_names_patterns_filters_and_strings(void) {
    rill_broker *b = new_broker();
    rill_record r = record_of("x");
    rill_subscription *s = NULL;
    OK(rill_topic_create(b, "orders", NULL));

    const char *bad_topics[] = {"", "a//b", "/a", "a/", "a/*", "$dlq/mine"};
    for (size_t i = 0; i < sizeof bad_topics / sizeof *bad_topics; i++) {
        CHECK_STATUS(rill_topic_create(b, bad_topics[i], NULL), RILL_ERR_INVALID_TOPIC);
    }
    CHECK_STATUS(rill_topic_create(b, "orders", NULL), RILL_ERR_TOPIC_EXISTS);
    rill_topic_options to;
    rill_topic_options_init(&to);
    to.partitions = 0;
    CHECK_STATUS(rill_topic_create(b, "zero", &to), RILL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(rill_publish(b, "a/*", &r, NULL), RILL_ERR_INVALID_TOPIC);
    CHECK_STATUS(rill_publish(b, "missing", &r, NULL), RILL_ERR_NO_SUCH_TOPIC);

    CHECK_STATUS(rill_subscribe(b, "a/b*", NULL, record_handler, NULL, &s), RILL_ERR_INVALID_PATTERN);
    LAST_ERROR_HAS("wildcard must be a whole segment");
    CHECK_STATUS(rill_subscribe(b, "missing", NULL, record_handler, NULL, &s), RILL_ERR_NO_SUCH_TOPIC);

    rill_subscription_options o = sub_options();
    o.filter = "attributes.a = \"1\" AND attributes.b = \"2\" OR attributes:c";
    CHECK_STATUS(rill_subscribe(b, "orders", &o, record_handler, NULL, &s), RILL_ERR_INVALID_FILTER);
    LAST_ERROR_HAS("byte 42");
    o.filter = "attributes.region = ";
    CHECK_STATUS(rill_subscribe(b, "orders", &o, record_handler, NULL, &s), RILL_ERR_INVALID_FILTER);

    /* Option values that are not one of their constants. */
    o = sub_options();
    o.delivery = 7;
    CHECK_STATUS(rill_subscribe(b, "orders", &o, record_handler, NULL, &s), RILL_ERR_INVALID_ARGUMENT);
    o = sub_options();
    o.overflow = -1;
    CHECK_STATUS(rill_subscribe(b, "orders", &o, record_handler, NULL, &s), RILL_ERR_INVALID_ARGUMENT);
    o = sub_options();
    o.start = 42;
    CHECK_STATUS(rill_subscribe(b, "orders", &o, record_handler, NULL, &s), RILL_ERR_INVALID_ARGUMENT);
    o = sub_options();
    o.max_attempts = 0;
    CHECK_STATUS(rill_subscribe(b, "orders", &o, record_handler, NULL, &s), RILL_ERR_INVALID_ARGUMENT);
    o = sub_options();
    o.overflow = RILL_OVERFLOW_BLOCK; /* Block needs a lag limit */
    CHECK_STATUS(rill_subscribe(b, "orders", &o, record_handler, NULL, &s), RILL_ERR_INVALID_ARGUMENT);
    /* Names are checked where they are given, and the error says which one
     * (a bad durable name used to be reported as a bad topic "$dlq/..."). */
    o = sub_options();
    o.name = "a//b";
    CHECK_STATUS(rill_subscribe(b, "orders", &o, record_handler, NULL, &s), RILL_ERR_INVALID_ARGUMENT);
    LAST_ERROR_HAS("subscription name \"a//b\" segment 2 is empty");
    char long_name[300];
    memset(long_name, 'n', sizeof long_name - 1);
    long_name[sizeof long_name - 1] = 0;
    o.name = long_name;
    CHECK_STATUS(rill_subscribe(b, "orders", &o, record_handler, NULL, &s), RILL_ERR_INVALID_ARGUMENT);
    LAST_ERROR_HAS("at most 250 are allowed");
    o = sub_options();
    o.dead_letter_topic = "dead//letters";
    CHECK_STATUS(rill_subscribe(b, "orders", &o, record_handler, NULL, &s), RILL_ERR_INVALID_ARGUMENT);
    LAST_ERROR_HAS("dead_letter_topic");
    rill_consumer *g = NULL;
    CHECK_STATUS(rill_consumer_new(b, "g//h", "orders", NULL, &g), RILL_ERR_INVALID_ARGUMENT);
    LAST_ERROR_HAS("consumer group name");
    CHECK(g == NULL);

    rill_consumer_options co;
    rill_consumer_options_init(&co);
    co.start = 9;
    rill_consumer *c = NULL;
    CHECK_STATUS(rill_consumer_new(b, "g", "orders", &co, &c), RILL_ERR_INVALID_ARGUMENT);

    /* Strings that are not UTF-8. */
    const char not_utf8[] = {'o', (char)0xff, 'x', 0};
    CHECK_STATUS(rill_topic_create(b, not_utf8, NULL), RILL_ERR_INVALID_ARGUMENT);
    LAST_ERROR_HAS("not valid UTF-8");
    CHECK_STATUS(rill_publish(b, not_utf8, &r, NULL), RILL_ERR_INVALID_ARGUMENT);
    rill_attribute bad = {"region", not_utf8};
    rill_record with_bad = r;
    with_bad.attributes = &bad;
    with_bad.attribute_count = 1;
    CHECK_STATUS(rill_publish(b, "orders", &with_bad, NULL), RILL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(rill_subscribe(b, not_utf8, NULL, record_handler, NULL, &s), RILL_ERR_INVALID_ARGUMENT);
    o = sub_options();
    o.filter = not_utf8;
    CHECK_STATUS(rill_subscribe(b, "orders", &o, record_handler, NULL, &s), RILL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(rill_consumer_new(b, not_utf8, "orders", NULL, &c), RILL_ERR_INVALID_ARGUMENT);

    /* Oversized messages are refused and nothing is published. */
    size_t big_len = 2u << 20;
    char *big = calloc(1, big_len);
    rill_record huge;
    memset(&huge, 0, sizeof huge);
    huge.payload = big;
    huge.payload_len = big_len;
    CHECK_STATUS(rill_publish(b, "orders", &huge, NULL), RILL_ERR_MESSAGE_TOO_LARGE);
    rill_record batch[2] = {r, huge};
    rill_position out[2] = {{7, 7}, {7, 7}};
    CHECK_STATUS(rill_publish_batch(b, "orders", batch, 2, out), RILL_ERR_MESSAGE_TOO_LARGE);
    CHECK(out[0].partition == 7 && out[0].offset == 7); /* out-params untouched on error */
    free(big);
    rill_topic_stats ts;
    OK(rill_topic_get_stats(b, "orders", &ts));
    CHECK(ts.publish_count == 0);
    CHECK(s == NULL && c == NULL);
    rill_broker_free(b);
}

static void test_publish_subscribe_earliest_latest_and_attributes(void) {
    rill_broker *b = new_broker();
    OK(rill_topic_create(b, "sports/cricket", NULL));
    rill_record r = record_of("before");
    rill_position pos = {99, 99};
    OK(rill_publish(b, "sports/cricket", &r, &pos));
    CHECK(pos.partition == 0 && pos.offset == 0);

    recorder early, late;
    recorder_init(&early);
    recorder_init(&late);
    rill_subscription_options o = sub_options();
    o.start = RILL_START_EARLIEST;
    o.user_data_free = recorder_free;
    rill_subscription *se = NULL, *sl = NULL;
    OK(rill_subscribe(b, "sports/*", &o, record_handler, &early, &se));
    rill_subscription_options lo = sub_options();
    lo.user_data_free = recorder_free;
    OK(rill_subscribe(b, "sports/**", &lo, record_handler, &late, &sl));

    rill_attribute attrs[2] = {{"region", "IN"}, {"tier", "gold"}};
    rill_record after = record_of("after");
    after.key = "user-7";
    after.key_len = 6;
    after.attributes = attrs;
    after.attribute_count = 2;
    OK(rill_try_publish(b, "sports/cricket", &after, &pos));
    CHECK(pos.offset == 1);
    OK(rill_subscription_wait_idle(se, 10000));
    OK(rill_subscription_wait_idle(sl, -1));
    CHECK(early.count == 2 && strcmp(early.payloads[0], "before") == 0 && strcmp(early.payloads[1], "after") == 0);
    CHECK(strcmp(early.topics[1], "sports/cricket") == 0);
    CHECK(strcmp(early.region[1], "IN") == 0 && early.attempts[1] == 1);
    CHECK(late.count == 1 && strcmp(late.payloads[0], "after") == 0);

    rill_subscription_stats st;
    OK(rill_subscription_get_stats(se, &st));
    CHECK(st.delivered == 2 && st.acked == 2 && st.lag == 0 && st.partitions == 1);
    CHECK(st.state == RILL_SUBSCRIPTION_IDLE);
    /* A program built before ack_timeouts was appended asks for rill 0.1's
     * 72-byte layout: the library writes 72 bytes and no more; less than the
     * first layout is refused. */
    unsigned char old_st[sizeof(rill_subscription_stats) + 8];
    memset(old_st, 0xAB, sizeof old_st);
    OK(rill_subscription_get_stats_v1(se, (rill_subscription_stats *)(void *)old_st, 72));
    CHECK(old_st[72] == 0xAB && old_st[sizeof old_st - 1] == 0xAB);
    CHECK(memcmp(old_st, &st, 8) == 0); /* delivered, as above */
    CHECK_STATUS(rill_subscription_get_stats_v1(se, &st, 64), RILL_ERR_INVALID_ARGUMENT);
    char name[64];
    size_t n = rill_subscription_name(se, name, sizeof name);
    CHECK(n > 0 && strncmp(name, "anon-", 5) == 0);
    CHECK(rill_subscription_closed_reason(se, name, sizeof name) == 0);

    rill_subscription_free(se);
    rill_subscription_free(sl);
    CHECK(early.freed == 1 && late.freed == 1); /* destructors ran once, at free */
    rill_broker_free(b);
}

static void test_message_attribute_accessors(void) {
    rill_broker *b = new_broker();
    OK(rill_topic_create(b, "t", NULL));
    rill_attribute attrs[2] = {{"region", "IN"}, {"kind", "order"}};
    rill_record r = record_of("payload");
    r.attributes = attrs;
    r.attribute_count = 2;
    OK(rill_publish(b, "t", &r, NULL));
    rill_consumer *c = NULL;
    OK(rill_consumer_new(b, "reader", "t", NULL, &c));
    const rill_message *msgs = NULL;
    size_t count = 0;
    OK(rill_consumer_poll(c, 10, 1000, &msgs, &count));
    CHECK(count == 1);
    if (count == 1) {
        const rill_message *m = &msgs[0];
        CHECK(rill_message_attribute_count(m) == 2 && m->attribute_count == 2);
        const char *k = NULL, *v = NULL;
        size_t kl = 0, vl = 0;
        OK(rill_message_attribute_at(m, 1, &k, &kl, &v, &vl));
        CHECK(kl == 4 && memcmp(k, "kind", 4) == 0 && vl == 5 && memcmp(v, "order", 5) == 0);
        OK(rill_message_attribute_at(m, 0, NULL, NULL, &v, NULL)); /* any out may be NULL */
        CHECK(memcmp(v, "IN", 2) == 0);
        CHECK_STATUS(rill_message_attribute_at(m, 2, &k, &kl, &v, &vl), RILL_ERR_NOT_FOUND);
        OK(rill_message_attribute(m, "region", &v, &vl));
        CHECK(vl == 2 && memcmp(v, "IN", 2) == 0);
        CHECK_STATUS(rill_message_attribute(m, "missing", &v, &vl), RILL_ERR_NOT_FOUND);
        CHECK(m->key == NULL && m->key_len == 0 && m->attempt == 1 && m->payload_len == 7);
        CHECK(m->timestamp_ns > 0 && strcmp(m->topic, "t") == 0);
        rill_ack_reason(m, "ignored for polled messages");
    }
    rill_consumer_free(c);
    rill_broker_free(b);
}

static void test_filters_and_partitions(void) {
    rill_broker *b = new_broker();
    rill_topic_options to;
    rill_topic_options_init(&to);
    to.partitions = 4;
    OK(rill_topic_create(b, "orders", &to));
    recorder in;
    recorder_init(&in);
    rill_subscription_options o = sub_options();
    o.filter = "attributes.region = \"IN\"";
    rill_subscription *s = NULL;
    OK(rill_subscribe(b, "orders", &o, record_handler, &in, &s));
    const char *regions[] = {"IN", "US", "IN", "EU"};
    for (int i = 0; i < 4; i++) {
        rill_attribute a = {"region", regions[i]};
        rill_record r = record_of(regions[i]);
        r.attributes = &a;
        r.attribute_count = 1;
        r.key = "same-key";
        r.key_len = 8;
        rill_position pos;
        OK(rill_publish(b, "orders", &r, &pos));
        CHECK(pos.offset == (uint64_t)i); /* one key: one partition, dense offsets */
    }
    OK(rill_subscription_wait_idle(s, 10000));
    rill_subscription_stats st;
    OK(rill_subscription_get_stats(s, &st));
    CHECK(in.count == 2 && st.filtered == 2 && st.partitions == 4);
    rill_topic_stats ts;
    OK(rill_topic_get_stats(b, "orders", &ts));
    CHECK(ts.partitions == 4 && ts.publish_count == 4 && ts.retained_bytes > 0);
    rill_subscription_free(s);
    rill_broker_free(b);
}

static void test_batch_publish_and_publisher_handle(void) {
    rill_broker *b = new_broker();
    OK(rill_topic_create(b, "t", NULL));
    rill_record rs[3] = {record_of("a"), record_of("b"), record_of("c")};
    rill_position pos[3];
    OK(rill_publish_batch(b, "t", rs, 3, pos));
    CHECK(pos[0].offset == 0 && pos[2].offset == 2);
    OK(rill_publish_batch(b, "t", NULL, 0, NULL));
    rill_publisher *p = NULL;
    OK(rill_publisher_new(b, "t", &p));
    rill_position one;
    OK(rill_publisher_publish(p, &rs[0], &one));
    CHECK(one.offset == 3);
    OK(rill_publisher_publish_batch(p, rs, 3, NULL));
    /* Plain-argument and packed forms, for bindings. */
    OK(rill_publisher_publish_bytes(p, "plain", 5, "key", 3, &one));
    CHECK(one.offset == 7);
    OK(rill_publisher_publish_bytes(p, NULL, 0, NULL, 0, NULL)); /* empty payload, no key */
    CHECK_STATUS(rill_publisher_publish_bytes(p, NULL, 3, NULL, 0, NULL), RILL_ERR_NULL_ARGUMENT);
    const char packed[] = "onetwothree";
    size_t lens[3] = {3, 3, 5};
    rill_position pp[3];
    OK(rill_publisher_publish_packed(p, packed, lens, 3, pp));
    CHECK(pp[0].offset == 9 && pp[2].offset == 11);
    CHECK_STATUS(rill_publisher_publish_packed(p, packed, NULL, 3, pp), RILL_ERR_NULL_ARGUMENT);
    OK(rill_publisher_publish_packed(p, NULL, NULL, 0, NULL));
    rill_topic_stats ts;
    OK(rill_topic_get_stats(b, "t", &ts));
    CHECK(ts.publish_count == 12);
    rill_consumer *c = NULL;
    OK(rill_consumer_new(b, "check", "t", NULL, &c));
    OK(rill_consumer_seek(c, 0, 7));
    const rill_message *msgs = NULL;
    size_t count = 0;
    OK(rill_consumer_poll(c, 10, 0, &msgs, &count));
    CHECK(count == 5);
    if (count == 5) {
        CHECK(msgs[0].key_len == 3 && memcmp(msgs[0].key, "key", 3) == 0 && msgs[0].payload_len == 5);
        CHECK(msgs[1].payload_len == 0 && msgs[1].key == NULL);
        CHECK(msgs[4].payload_len == 5 && memcmp(msgs[4].payload, "three", 5) == 0);
        CHECK(msgs[4].attribute_count == 0);
    }
    rill_consumer_free(c);
    CHECK_STATUS(rill_publisher_new(b, "nope", &p), RILL_ERR_NO_SUCH_TOPIC);
    rill_broker_close(b);
    CHECK_STATUS(rill_publisher_publish(p, &rs[0], NULL), RILL_ERR_CLOSED);
    rill_publisher_free(p);
    rill_broker_free(b);
}

/* rill_publisher_publish checks a plain record (no attributes) on a path of
 * its own: the same answers as the general path, and nothing published on
 * an error. */
static void test_publisher_record_checks(void) {
    rill_broker *b = new_broker();
    OK(rill_topic_create(b, "t", NULL));
    rill_publisher *p = NULL;
    OK(rill_publisher_new(b, "t", &p));
    /* A NULL key with a length is refused (the caller meant a key), and
     * publishes nothing; NULL with 0 is no key. */
    rill_record null_key = {NULL, 7, "abc", 3, NULL, 0};
    CHECK_STATUS(rill_publisher_publish(p, &null_key, NULL), RILL_ERR_INVALID_ARGUMENT);
    LAST_ERROR_HAS("record key is NULL with length 7");
    CHECK_STATUS(rill_publish(b, "t", &null_key, NULL), RILL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(rill_publisher_publish_batch(p, &null_key, 1, NULL), RILL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(rill_publisher_publish_bytes(p, "abc", 3, NULL, 7, NULL), RILL_ERR_INVALID_ARGUMENT);
    LAST_ERROR_HAS("key is NULL with length 7");
    rill_record r = {NULL, 0, "abc", 3, NULL, 0};
    OK(rill_publisher_publish(p, &r, NULL));
    /* An empty key and an empty payload given as NULL. */
    rill_record empty = {"", 0, NULL, 0, NULL, 0};
    rill_position pos;
    OK(rill_publisher_publish(p, &empty, &pos));
    CHECK(pos.offset == 1);
    rill_record null_payload = {NULL, 0, NULL, 3, NULL, 0};
    CHECK_STATUS(rill_publisher_publish(p, &null_payload, NULL), RILL_ERR_NULL_ARGUMENT);
    LAST_ERROR_HAS("record payload");
    rill_record long_payload = {NULL, 0, "abc", SIZE_MAX, NULL, 0};
    CHECK_STATUS(rill_publisher_publish(p, &long_payload, NULL), RILL_ERR_INVALID_ARGUMENT);
    LAST_ERROR_HAS("record payload length");
    rill_record long_key = {"k", SIZE_MAX, "abc", 3, NULL, 0};
    CHECK_STATUS(rill_publisher_publish(p, &long_key, NULL), RILL_ERR_INVALID_ARGUMENT);
    LAST_ERROR_HAS("record key length");
    rill_record no_attributes = {NULL, 0, "abc", 3, NULL, 2};
    CHECK_STATUS(rill_publisher_publish(p, &no_attributes, NULL), RILL_ERR_NULL_ARGUMENT);
    rill_topic_stats ts;
    OK(rill_topic_get_stats(b, "t", &ts));
    CHECK(ts.publish_count == 2);
    rill_consumer *c = NULL;
    OK(rill_consumer_new(b, "check", "t", NULL, &c));
    OK(rill_consumer_seek(c, 0, 0));
    const rill_message *msgs = NULL;
    size_t count = 0;
    OK(rill_consumer_poll(c, 10, 0, &msgs, &count));
    CHECK(count == 2);
    if (count == 2) {
        CHECK(msgs[0].key == NULL && msgs[0].payload_len == 3 && memcmp(msgs[0].payload, "abc", 3) == 0);
        CHECK(msgs[1].key != NULL && msgs[1].key_len == 0 && msgs[1].payload_len == 0);
    }
    rill_consumer_free(c);
    rill_publisher_free(p);
    rill_broker_free(b);
}

/* A batch is converted on the stack up to 64 records and into one buffer
 * beyond; a record with attributes, or one to refuse, anywhere in it sends
 * the whole batch the general way: the same answers on both sides of 64,
 * each error naming the record, nothing published on an error. */
static void test_publisher_batch_record_checks(void) {
    rill_broker *b = new_broker();
    OK(rill_topic_create(b, "t", NULL));
    rill_publisher *p = NULL;
    OK(rill_publisher_new(b, "t", &p));
    enum { N = 100 };
    rill_record rs[N];
    char payloads[N][16];
    for (int i = 0; i < N; i++) {
        snprintf(payloads[i], sizeof payloads[i], "m%d", i);
        rill_record r = {NULL, 0, payloads[i], strlen(payloads[i]), NULL, 0};
        rs[i] = r;
    }
    size_t sizes[] = {1, 63, 64, 65, N};
    uint64_t published = 0;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        size_t bad = n - 1; /* the last record: every record before it passed */
        rill_record keep = rs[bad];
        rs[bad].payload = NULL;
        CHECK_STATUS(rill_publisher_publish_batch(p, rs, n, NULL), RILL_ERR_NULL_ARGUMENT);
        char want[32];
        snprintf(want, sizeof want, "record %zu payload", bad);
        LAST_ERROR_HAS(want);
        rs[bad] = keep;
        rs[bad].payload_len = SIZE_MAX;
        CHECK_STATUS(rill_publisher_publish_batch(p, rs, n, NULL), RILL_ERR_INVALID_ARGUMENT);
        LAST_ERROR_HAS("length");
        rs[bad] = keep;
        rs[bad].attribute_count = 1; /* attributes NULL with a count */
        CHECK_STATUS(rill_publisher_publish_batch(p, rs, n, NULL), RILL_ERR_NULL_ARGUMENT);
        rs[bad] = keep;
        rill_topic_stats ts;
        OK(rill_topic_get_stats(b, "t", &ts));
        CHECK(ts.publish_count == published);
        /* Plain records, then the same batch with attributes on its last. */
        rill_position pos[N];
        OK(rill_publisher_publish_batch(p, rs, n, pos));
        CHECK(pos[0].offset == published && pos[n - 1].offset == published + n - 1);
        published += n;
        rill_attribute a = {"at", "last"};
        rs[bad].attributes = &a;
        rs[bad].attribute_count = 1;
        OK(rill_publisher_publish_batch(p, rs, n, pos));
        CHECK(pos[n - 1].offset == published + n - 1);
        published += n;
        rs[bad] = keep;
    }
    /* Read back the last batch (N records, attributes on the last). */
    rill_consumer *c = NULL;
    OK(rill_consumer_new(b, "check", "t", NULL, &c));
    OK(rill_consumer_seek(c, 0, published - N));
    const rill_message *msgs = NULL;
    size_t count = 0;
    OK(rill_consumer_poll(c, N, 0, &msgs, &count));
    CHECK(count == N);
    for (size_t i = 0; i < count; i++) {
        CHECK(msgs[i].payload_len == strlen(payloads[i]) && memcmp(msgs[i].payload, payloads[i], msgs[i].payload_len) == 0);
        CHECK(msgs[i].attribute_count == (i == N - 1 ? 1u : 0u));
    }
    rill_consumer_free(c);
    rill_publisher_free(p);
    rill_broker_free(b);
}

/* A batch whose records carry different numbers of attributes: the library
 * gathers every record's attributes into one list and gives each record its
 * run of it; each message must read back its own attributes, on both sides
 * of the 64 records converted on the stack. An attribute fault is reported
 * before a range fault of an earlier record, as it was when each record had
 * a list of its own. */
static void test_publisher_batch_attribute_runs(void) {
    rill_broker *b = new_broker();
    OK(rill_topic_create(b, "t", NULL));
    rill_publisher *p = NULL;
    OK(rill_publisher_new(b, "t", &p));
    enum { N = 100 };
    rill_attribute attrs[3] = {{"a", "x"}, {"bb", "yy"}, {"ccc", "zzz"}};
    rill_record rs[N];
    for (int i = 0; i < N; i++) {
        rill_record r = {NULL, 0, "p", 1, attrs, (size_t)(i % 4 == 3 ? 0 : i % 4 + 1)};
        rs[i] = r;
    }
    rill_consumer *c = NULL;
    OK(rill_consumer_new(b, "check", "t", NULL, &c));
    size_t sizes[] = {3, 64, 65, N};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        OK(rill_publisher_publish_batch(p, rs, n, NULL));
        const rill_message *msgs = NULL;
        size_t count = 0;
        OK(rill_consumer_poll(c, n, 1000, &msgs, &count));
        CHECK(count == n);
        for (size_t i = 0; i < count; i++) {
            CHECK(rill_message_attribute_count(&msgs[i]) == rs[i].attribute_count);
            for (size_t a = 0; a < rs[i].attribute_count && a < rill_message_attribute_count(&msgs[i]); a++) {
                const char *key = NULL, *value = NULL;
                size_t kl = 0, vl = 0;
                OK(rill_message_attribute_at(&msgs[i], a, &key, &kl, &value, &vl));
                CHECK(kl == strlen(attrs[a].key) && memcmp(key, attrs[a].key, kl) == 0);
                CHECK(vl == strlen(attrs[a].value) && memcmp(value, attrs[a].value, vl) == 0);
            }
        }
        OK(rill_consumer_commit(c));
    }
    /* Record 0's payload is NULL with a length, record 1's attribute key is NULL. */
    rill_attribute bad_key = {NULL, "v"};
    rill_record faults[2] = {{NULL, 0, NULL, 4, NULL, 0}, {NULL, 0, "p", 1, &bad_key, 1}};
    CHECK_STATUS(rill_publisher_publish_batch(p, faults, 2, NULL), RILL_ERR_NULL_ARGUMENT);
    LAST_ERROR_HAS("attribute key");
    rill_topic_stats ts;
    OK(rill_topic_get_stats(b, "t", &ts));
    CHECK(ts.publish_count == 3 + 64 + 65 + N);
    rill_consumer_free(c);
    rill_publisher_free(p);
    rill_broker_free(b);
}

static void test_retry_dead_letter_and_reason(void) {
    rill_broker *b = new_broker();
    OK(rill_topic_create(b, "jobs", NULL));
    recorder rec;
    recorder_init(&rec);
    rill_subscription_options o = sub_options();
    o.name = "worker";
    o.max_attempts = 3;
    o.backoff_initial_ms = 1;
    o.backoff_max_ms = 2;
    rill_subscription *s = NULL;
    OK(rill_subscribe(b, "jobs", &o, record_handler, &rec, &s));
    rill_attribute a = {"region", "IN"};
    rill_record poison = record_of("poison");
    poison.attributes = &a;
    poison.attribute_count = 1;
    OK(rill_publish(b, "jobs", &poison, NULL));
    rill_record fine = record_of("fine");
    OK(rill_publish(b, "jobs", &fine, NULL));
    OK(rill_subscription_wait_idle(s, 20000));
    CHECK(rec.count == 4); /* poison x3, then fine */
    CHECK(rec.attempts[0] == 1 && rec.attempts[2] == 3 && strcmp(rec.payloads[3], "fine") == 0);
    rill_subscription_stats st;
    OK(rill_subscription_get_stats(s, &st));
    CHECK(st.retried == 2 && st.dead_lettered == 1 && st.acked == 1);

    /* The dead letter is an ordinary topic: poll it. */
    rill_consumer *c = NULL;
    OK(rill_consumer_new(b, "dlq-reader", "$dlq/worker", NULL, &c));
    const rill_message *msgs = NULL;
    size_t count = 0;
    OK(rill_consumer_poll(c, 10, 5000, &msgs, &count));
    CHECK(count == 1);
    if (count == 1) {
        const char *v = NULL;
        size_t vl = 0;
        OK(rill_message_attribute(&msgs[0], "rill.dlq.reason", &v, &vl));
        CHECK(vl == strlen("cannot parse poison") && memcmp(v, "cannot parse poison", vl) == 0);
        OK(rill_message_attribute(&msgs[0], "rill.dlq.attempts", &v, &vl));
        CHECK(vl == 1 && v[0] == '3');
        OK(rill_message_attribute(&msgs[0], "region", &v, &vl));
        CHECK(vl == 2 && memcmp(v, "IN", 2) == 0);
        CHECK(msgs[0].payload_len == 6 && memcmp(msgs[0].payload, "poison", 6) == 0);
    }
    rill_consumer_free(c);
    rill_subscription_free(s);
    rill_broker_free(b);
}

/* Returns a value that is not a rill_ack: treated as a retry. */
static rill_ack bogus_then_ok(void *user_data, const rill_message *m) {
    int *calls = (int *)user_data;
    (*calls)++;
    return m->attempt == 1 ? 77 : RILL_ACK_SUCCESS;
}

static void test_invalid_ack_is_a_retry(void) {
    rill_broker *b = new_broker();
    OK(rill_topic_create(b, "t", NULL));
    int calls = 0;
    rill_subscription_options o = sub_options();
    o.backoff_initial_ms = 1;
    rill_subscription *s = NULL;
    OK(rill_subscribe(b, "t", &o, bogus_then_ok, &calls, &s));
    rill_record r = record_of("x");
    OK(rill_publish(b, "t", &r, NULL));
    OK(rill_subscription_wait_idle(s, 10000));
    CHECK(calls == 2);
    rill_subscription_free(s);
    rill_broker_free(b);
}

static void test_durable_resume(void) {
    rill_broker *b = new_broker();
    OK(rill_topic_create(b, "events", NULL));
    recorder rec;
    recorder_init(&rec);
    rill_subscription_options o = sub_options();
    o.name = "audit";
    rill_subscription *s = NULL;
    OK(rill_subscribe(b, "events", &o, record_handler, &rec, &s));
    rill_subscription *dup = NULL;
    CHECK_STATUS(rill_subscribe(b, "events", &o, record_handler, &rec, &dup), RILL_ERR_BUSY);
    rill_record r = record_of("one");
    OK(rill_publish(b, "events", &r, NULL));
    OK(rill_subscription_wait_idle(s, 10000));
    rill_subscription_free(s);
    for (int i = 0; i < 100; i++) {
        OK(rill_publish(b, "events", &r, NULL));
    }
    OK(rill_subscribe(b, "events", &o, record_handler, &rec, &s));
    OK(rill_subscription_wait_idle(s, 10000));
    CHECK(rec.count == 101);
    CHECK(rec.offsets[100] == 100);
    rill_subscription_free(s);
    rill_broker_free(b);
}

/* Blocks on a gate for every message. */
typedef struct {
    pthread_mutex_t lock;
    int open;
    int entered;
    int seen;
} gate;

static rill_ack gated_handler(void *user_data, const rill_message *m) {
    gate *g = (gate *)user_data;
    (void)m;
    pthread_mutex_lock(&g->lock);
    g->entered = 1;
    pthread_mutex_unlock(&g->lock);
    for (;;) {
        pthread_mutex_lock(&g->lock);
        int open = g->open;
        pthread_mutex_unlock(&g->lock);
        if (open) break;
        sleep_ms(1);
    }
    pthread_mutex_lock(&g->lock);
    g->seen++;
    pthread_mutex_unlock(&g->lock);
    return RILL_ACK_SUCCESS;
}

static int gate_get(gate *g, int *field) {
    pthread_mutex_lock(&g->lock);
    int v = *field;
    pthread_mutex_unlock(&g->lock);
    return v;
}

static void gate_open(gate *g) {
    pthread_mutex_lock(&g->lock);
    g->open = 1;
    pthread_mutex_unlock(&g->lock);
}

static void test_overflow_policies(void) {
    rill_broker *b = new_broker();
    OK(rill_topic_create(b, "block", NULL));
    OK(rill_topic_create(b, "drop", NULL));
    OK(rill_topic_create(b, "disc", NULL));
    rill_record r = record_of("m");

    /* Block: try_publish says FULL at the limit. */
    gate g;
    memset(&g, 0, sizeof g);
    pthread_mutex_init(&g.lock, NULL);
    rill_subscription_options o = sub_options();
    o.overflow = RILL_OVERFLOW_BLOCK;
    o.lag_limit = 2;
    rill_subscription *s = NULL;
    OK(rill_subscribe(b, "block", &o, gated_handler, &g, &s));
    OK(rill_publish(b, "block", &r, NULL));
    while (!gate_get(&g, &g.entered)) sleep_ms(1);
    int accepted = 1;
    rill_status st = RILL_OK;
    while (accepted < 50 && (st = rill_try_publish(b, "block", &r, NULL)) == RILL_OK) accepted++;
    CHECK(st == RILL_ERR_FULL);
    CHECK(accepted <= 3);
    gate_open(&g);
    OK(rill_subscription_wait_idle(s, 10000));
    CHECK(gate_get(&g, &g.seen) == accepted);
    rill_subscription_free(s);

    /* DropOldest: exact count of what was skipped. */
    gate d;
    memset(&d, 0, sizeof d);
    pthread_mutex_init(&d.lock, NULL);
    o = sub_options();
    o.overflow = RILL_OVERFLOW_DROP_OLDEST;
    o.lag_limit = 5;
    OK(rill_subscribe(b, "drop", &o, gated_handler, &d, &s));
    OK(rill_publish(b, "drop", &r, NULL));
    while (!gate_get(&d, &d.entered)) sleep_ms(1);
    for (int i = 0; i < 50; i++) OK(rill_publish(b, "drop", &r, NULL));
    gate_open(&d);
    OK(rill_subscription_wait_idle(s, 10000));
    rill_subscription_stats ss;
    OK(rill_subscription_get_stats(s, &ss));
    CHECK(ss.dropped == 45 && gate_get(&d, &d.seen) == 6);
    rill_subscription_free(s);

    /* Disconnect: closed, with the reason. */
    gate x;
    memset(&x, 0, sizeof x);
    pthread_mutex_init(&x.lock, NULL);
    o = sub_options();
    o.overflow = RILL_OVERFLOW_DISCONNECT;
    o.lag_limit = 3;
    OK(rill_subscribe(b, "disc", &o, gated_handler, &x, &s));
    OK(rill_publish(b, "disc", &r, NULL));
    while (!gate_get(&x, &x.entered)) sleep_ms(1);
    for (int i = 0; i < 10; i++) OK(rill_publish(b, "disc", &r, NULL));
    gate_open(&x);
    for (int i = 0; i < 10000; i++) {
        OK(rill_subscription_get_stats(s, &ss));
        if (ss.state == RILL_SUBSCRIPTION_CLOSED) break;
        sleep_ms(1);
    }
    CHECK(ss.state == RILL_SUBSCRIPTION_CLOSED);
    char why[256];
    CHECK(rill_subscription_closed_reason(s, why, sizeof why) > 0);
    CHECK(strstr(why, "lag limit 3") != NULL);
    CHECK_STATUS(rill_subscription_wait_idle(s, 10), RILL_ERR_CLOSED);
    rill_subscription_free(s);
    pthread_mutex_destroy(&g.lock);
    pthread_mutex_destroy(&d.lock);
    pthread_mutex_destroy(&x.lock);
    rill_broker_free(b);
}

/* Polls c without waiting until a poll is empty; marks seen[partition][offset]
 * (counting repeats) and checks each message is from a partition c owns. */
static size_t drain_member(rill_consumer *c, int seen[4][16]) {
    uint32_t mine[4];
    size_t owned = 0, total = 0, count = 0;
    OK(rill_consumer_assignment(c, mine, 4, &owned));
    const rill_message *msgs = NULL;
    do {
        OK(rill_consumer_poll(c, 8, 0, &msgs, &count));
        for (size_t i = 0; i < count; i++) {
            int owns = 0;
            for (size_t k = 0; k < owned; k++) owns |= mine[k] == msgs[i].partition;
            CHECK(owns && msgs[i].offset < 16);
            seen[msgs[i].partition][msgs[i].offset]++;
        }
        total += count;
    } while (count > 0);
    return total;
}

/* Issue 12: two members split a 4-partition topic; a close and a session
 * expiry hand partitions over from the committed offsets; the expelled
 * member's commit is RILL_ERR_REASSIGNED. */
static void test_consumer_group_members(void) {
    rill_broker *b = new_broker();
    rill_topic_options to;
    rill_topic_options_init(&to);
    to.partitions = 4;
    OK(rill_topic_create(b, "jobs", &to));
    /* 40 unkeyed messages, round-robin over the partitions; `ends` counts
     * what each partition holds. */
    uint64_t ends[4] = {0, 0, 0, 0};
    for (int i = 0; i < 40; i++) {
        rill_record r = record_of("job");
        rill_position at;
        OK(rill_publish(b, "jobs", &r, &at));
        CHECK(at.partition < 4 && at.offset == ends[at.partition] && at.offset < 16);
        ends[at.partition]++;
    }

    rill_consumer *one = NULL, *two = NULL;
    OK(rill_consumer_new(b, "workers", "jobs", NULL, &one));
    OK(rill_consumer_new(b, "workers", "jobs", NULL, &two));
    uint32_t a1[4] = {9, 9, 9, 9}, a2[4] = {9, 9, 9, 9};
    size_t n1 = 0, n2 = 0;
    OK(rill_consumer_assignment(one, a1, 4, &n1));
    OK(rill_consumer_assignment(two, a2, 4, &n2));
    CHECK(n1 == 2 && n2 == 2);
    CHECK(a1[0] < a1[1] && a2[0] < a2[1]); /* ascending */
    CHECK(a1[2] == 9 && a2[2] == 9);       /* nothing written past the count */
    unsigned owned_mask = (1u << a1[0]) | (1u << a1[1]) | (1u << a2[0]) | (1u << a2[1]);
    CHECK(owned_mask == 0xF); /* disjoint, together all four */
    /* A short array: the count says how many there are. */
    size_t n = 0;
    uint32_t first = 0;
    OK(rill_consumer_assignment(one, &first, 1, &n));
    CHECK(n == 2 && first == a1[0]);
    OK(rill_consumer_assignment(one, NULL, 0, &n));
    CHECK(n == 2);
    CHECK_STATUS(rill_consumer_assignment(one, NULL, 2, &n), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_consumer_assignment(one, a1, 4, NULL), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_consumer_assignment(NULL, a1, 4, &n), RILL_ERR_NULL_ARGUMENT);

    /* Together they poll every message once. */
    int seen[4][16];
    memset(seen, 0, sizeof seen);
    CHECK(drain_member(one, seen) + drain_member(two, seen) == 40);
    for (uint32_t p = 0; p < 4; p++)
        for (uint64_t o = 0; o < 16; o++) CHECK(seen[p][o] == (o < ends[p]));
    OK(rill_consumer_commit(one));
    OK(rill_consumer_commit(two));

    /* `two` polls one more message per partition and is freed without
     * committing: `one` owns all four and gets exactly those again. */
    for (int i = 0; i < 4; i++) {
        rill_record r = record_of("more");
        rill_position at;
        OK(rill_publish(b, "jobs", &r, &at));
        CHECK(at.offset == ends[at.partition]);
        ends[at.partition]++;
    }
    memset(seen, 0, sizeof seen);
    CHECK(drain_member(two, seen) == 2);
    rill_consumer_free(two);
    OK(rill_consumer_assignment(one, a1, 4, &n1));
    CHECK(n1 == 4 && a1[0] == 0 && a1[3] == 3);
    CHECK(drain_member(one, seen) == 4);
    for (uint32_t p = 0; p < 4; p++) {
        int in_two = p == a2[0] || p == a2[1];
        /* two's partitions: seen twice (by two, then again by one). */
        CHECK(seen[p][ends[p] - 1] == (in_two ? 2 : 1));
    }
    OK(rill_consumer_commit(one));

    /* A member with a short session that stops polling is expelled by a
     * member that polls; its commit is then refused, and it has rejoined. */
    rill_consumer_options co;
    rill_consumer_options_init(&co);
    co.session_timeout_ms = 50;
    rill_consumer *stalled = NULL;
    OK(rill_consumer_new(b, "workers", "jobs", &co, &stalled));
    for (int i = 0; i < 4; i++) {
        rill_record r = record_of("last");
        OK(rill_publish(b, "jobs", &r, NULL));
    }
    memset(seen, 0, sizeof seen);
    CHECK(drain_member(stalled, seen) == 2);
    const rill_message *msgs = NULL;
    size_t count = 0, got = 0;
    n1 = 0;
    /* Bounded: 30 s of 5 ms polls; a healthy run takes about 50 ms. */
    for (int i = 0; i < 6000 && n1 < 4; i++) {
        OK(rill_consumer_poll(one, 8, 5, &msgs, &count));
        got += count;
        OK(rill_consumer_assignment(one, a1, 4, &n1));
    }
    CHECK(n1 == 4);
    got += drain_member(one, seen);
    CHECK(got == 4); /* its own two, and the stalled member's two again */
    OK(rill_consumer_commit(one));
    CHECK_STATUS(rill_consumer_commit(stalled), RILL_ERR_REASSIGNED);
    LAST_ERROR_HAS("reassigned");
    OK(rill_consumer_assignment(stalled, a2, 4, &n2));
    CHECK(n2 == 2);
    rill_consumer_stats cs;
    OK(rill_consumer_get_stats(stalled, &cs));
    CHECK(cs.lag == 0 && cs.partitions == 4);
    rill_consumer_free(stalled);
    rill_consumer_free(one);
    rill_broker_free(b);
}

/* Issue 12: nack retries a poison message, then dead-letters it with the
 * rill.dlq.* attributes and skips it. */
static void test_consumer_nack_dead_letters(void) {
    rill_broker *b = new_broker();
    OK(rill_topic_create(b, "jobs", NULL));
    rill_record poison = record_of("poison"), fine = record_of("fine");
    OK(rill_publish(b, "jobs", &poison, NULL));
    OK(rill_publish(b, "jobs", &fine, NULL));
    rill_consumer_options co;
    rill_consumer_options_init(&co);
    CHECK(co.max_attempts == 5 && co.dead_letter_topic == NULL);
    co.max_attempts = 2;
    co.dead_letter_topic = "graveyard";
    rill_consumer *c = NULL;
    OK(rill_consumer_new(b, "workers", "jobs", &co, &c));
    const rill_message *msgs = NULL;
    size_t count = 0;
    bool dead = true;
    CHECK_STATUS(rill_consumer_nack(c, 0, 0, &dead), RILL_ERR_OUT_OF_RANGE); /* not polled yet */
    OK(rill_consumer_poll(c, 10, 0, &msgs, &count));
    CHECK(count == 2);
    OK(rill_consumer_nack(c, 0, 0, &dead));
    CHECK(!dead);
    OK(rill_consumer_poll(c, 10, 0, &msgs, &count));
    CHECK(count == 2 && msgs[0].offset == 0 && msgs[0].attempt == 1); /* again, in order */
    CHECK_STATUS(rill_consumer_nack(c, 3, 0, NULL), RILL_ERR_NOT_FOUND);
    OK(rill_consumer_nack(c, 0, 0, &dead));
    CHECK(dead);
    OK(rill_consumer_poll(c, 10, 0, &msgs, &count));
    CHECK(count == 1 && msgs[0].offset == 1); /* skipped: "fine", after it, comes again */
    rill_consumer *r = NULL;
    OK(rill_consumer_new(b, "reader", "graveyard", NULL, &r));
    OK(rill_consumer_poll(r, 10, 0, &msgs, &count));
    CHECK(count == 1 && msgs[0].payload_len == 6 && memcmp(msgs[0].payload, "poison", 6) == 0);
    const char *v = NULL;
    size_t vlen = 0;
    OK(rill_message_attribute(&msgs[0], "rill.dlq.attempts", &v, &vlen));
    CHECK(vlen == 1 && v[0] == '2');
    OK(rill_message_attribute(&msgs[0], "rill.dlq.group", &v, &vlen));
    CHECK(vlen == 7 && memcmp(v, "workers", 7) == 0);
    OK(rill_message_attribute(&msgs[0], "rill.dlq.reason", &v, &vlen));
    CHECK(vlen > 0);
    rill_consumer_free(r);
    co.max_attempts = 0;
    rill_consumer *bad = NULL;
    CHECK_STATUS(rill_consumer_new(b, "workers", "jobs", &co, &bad), RILL_ERR_INVALID_ARGUMENT);
    CHECK(bad == NULL);
    rill_consumer_free(c);
    rill_broker_free(b);
}

static void test_pull_consumer(void) {
    rill_broker *b = new_broker();
    OK(rill_topic_create(b, "orders", NULL));
    char payload[16];
    for (int i = 0; i < 10; i++) {
        snprintf(payload, sizeof payload, "%d", i);
        rill_record r = record_of(payload);
        OK(rill_publish(b, "orders", &r, NULL));
    }
    rill_consumer *c = NULL, *c2 = NULL;
    OK(rill_consumer_new(b, "billing", "orders", NULL, &c));
    CHECK(rill_consumer_partition_count(c) == 1);
    CHECK_STATUS(rill_consumer_new(b, "billing", "missing", NULL, &c2), RILL_ERR_NO_SUCH_TOPIC);
    const rill_message *msgs = NULL;
    size_t count = 0;
    uint64_t u = 0;
    CHECK_STATUS(rill_consumer_committed(c, 0, &u), RILL_ERR_NOT_FOUND);
    OK(rill_consumer_poll(c, 4, 0, &msgs, &count));
    CHECK(count == 4 && msgs[0].offset == 0 && msgs[3].offset == 3 && msgs[3].payload[0] == '3');
    OK(rill_consumer_commit(c));
    OK(rill_consumer_committed(c, 0, &u));
    CHECK(u == 4);
    OK(rill_consumer_poll(c, 3, 0, &msgs, &count));
    CHECK(count == 3 && msgs[0].offset == 4);
    OK(rill_consumer_position(c, 0, &u));
    CHECK(u == 7);
    OK(rill_consumer_rollback(c));
    OK(rill_consumer_position(c, 0, &u));
    CHECK(u == 4);
    OK(rill_consumer_poll(c, 3, 0, &msgs, &count));
    CHECK(count == 3 && msgs[0].offset == 4); /* replayed */
    OK(rill_consumer_seek(c, 0, 9));
    OK(rill_consumer_poll(c, 10, 0, &msgs, &count));
    CHECK(count == 1 && msgs[0].payload[0] == '9');
    CHECK_STATUS(rill_consumer_seek(c, 0, 11), RILL_ERR_OUT_OF_RANGE);
    CHECK_STATUS(rill_consumer_seek(c, 5, 0), RILL_ERR_NOT_FOUND);
    CHECK_STATUS(rill_consumer_position(c, 5, &u), RILL_ERR_NOT_FOUND);
    OK(rill_consumer_seek_to_beginning(c));
    OK(rill_consumer_poll(c, 100, 0, &msgs, &count));
    CHECK(count == 10);
    OK(rill_consumer_seek_to_end(c));
    OK(rill_consumer_poll(c, 100, 20, &msgs, &count)); /* timeout: OK with nothing */
    CHECK(count == 0);
    OK(rill_consumer_commit_offset(c, 0, 8));
    CHECK_STATUS(rill_consumer_commit_offset(c, 0, 99), RILL_ERR_OUT_OF_RANGE);
    rill_consumer_stats cs;
    OK(rill_consumer_get_stats(c, &cs));
    CHECK(cs.lag == 2 && cs.partitions == 1 && cs.delivered == 21 && cs.missed == 0);
    CHECK_STATUS(rill_consumer_get_stats(c, NULL), RILL_ERR_NULL_ARGUMENT);
    rill_consumer_free(c);

    /* A new consumer of the group resumes at the committed offset. */
    OK(rill_consumer_new(b, "billing", "orders", NULL, &c));
    OK(rill_consumer_poll(c, 100, 0, &msgs, &count));
    CHECK(count == 2 && msgs[0].offset == 8);
    rill_consumer_free(c);
    /* Another group sees everything; a latest one nothing. */
    rill_consumer_options co;
    rill_consumer_options_init(&co);
    OK(rill_consumer_new(b, "shipping", "orders", &co, &c));
    OK(rill_consumer_poll(c, 100, 0, &msgs, &count));
    CHECK(count == 10);
    rill_consumer_free(c);
    co.start = RILL_START_LATEST;
    OK(rill_consumer_new(b, "late", "orders", &co, &c));
    OK(rill_consumer_poll(c, 100, 0, &msgs, &count));
    CHECK(count == 0);
    rill_consumer_free(c);
    co.start = RILL_START_OFFSET;
    co.start_offset = 99;
    CHECK_STATUS(rill_consumer_new(b, "far", "orders", &co, &c), RILL_ERR_OUT_OF_RANGE);
    rill_broker_free(b);
}

/* Re-entrant handler: publishes to another topic and to its own, then
 * frees its own subscription. */
typedef struct {
    rill_broker *broker;
    rill_subscription *self;
    rill_subscription *spawned; /* subscribed from inside the handler */
    pthread_mutex_t lock;
    int calls;
    int done;
} reentrant;

static rill_ack noop_handler(void *user_data, const rill_message *m) {
    (void)user_data;
    (void)m;
    return RILL_ACK_SUCCESS;
}

static rill_ack reentrant_handler(void *user_data, const rill_message *m) {
    reentrant *r = (reentrant *)user_data;
    pthread_mutex_lock(&r->lock);
    r->calls++;
    int calls = r->calls;
    pthread_mutex_unlock(&r->lock);
    rill_record echo = record_of("echo");
    if (rill_publish(r->broker, "pong", &echo, NULL) != RILL_OK) return RILL_ACK_RETRY;
    if (m->payload_len == 4 && memcmp(m->payload, "ping", 4) == 0 && calls < 3) {
        rill_record again = record_of("ping");
        if (rill_publish(r->broker, "ping", &again, NULL) != RILL_OK) return RILL_ACK_RETRY;
    }
    if (calls == 1) {
        /* Subscribe from inside a handler. */
        if (rill_subscribe(r->broker, "pong", NULL, noop_handler, NULL, &r->spawned) != RILL_OK) return RILL_ACK_RETRY;
    }
    if (calls == 3) {
        rill_subscription_free(r->self); /* from inside its own handler */
        pthread_mutex_lock(&r->lock);
        r->done = 1;
        pthread_mutex_unlock(&r->lock);
    }
    return RILL_ACK_SUCCESS;
}

static void test_reentrancy(void) {
    rill_broker *b = new_broker();
    OK(rill_topic_create(b, "ping", NULL));
    OK(rill_topic_create(b, "pong", NULL));
    recorder pongs;
    recorder_init(&pongs);
    rill_subscription *ps = NULL;
    OK(rill_subscribe(b, "pong", NULL, record_handler, &pongs, &ps));
    reentrant r;
    memset(&r, 0, sizeof r);
    pthread_mutex_init(&r.lock, NULL);
    r.broker = b;
    rill_subscription_options o = sub_options();
    o.dedicated_thread = true;
    o.idle_spin_us = 100;
    OK(rill_subscribe(b, "ping", &o, reentrant_handler, &r, &r.self));
    rill_record ping = record_of("ping");
    OK(rill_publish(b, "ping", &ping, NULL));
    for (int i = 0; i < 10000; i++) {
        pthread_mutex_lock(&r.lock);
        int done = r.done;
        pthread_mutex_unlock(&r.lock);
        if (done) break;
        sleep_ms(1);
    }
    OK(rill_subscription_wait_idle(ps, 10000));
    CHECK(r.done == 1 && r.calls == 3 && recorder_count(&pongs) == 3);
    CHECK(r.spawned != NULL);
    rill_subscription_free(r.spawned);
    OK(rill_publish(b, "ping", &ping, NULL));
    sleep_ms(20);
    CHECK(r.calls == 3); /* no call after it freed itself */
    rill_subscription_free(ps);
    pthread_mutex_destroy(&r.lock);
    rill_broker_free(b);
}

static void test_freeing_the_broker_first_closes_everything(void) {
    rill_broker *b = new_broker();
    OK(rill_topic_create(b, "t", NULL));
    recorder rec;
    recorder_init(&rec);
    rill_subscription_options o = sub_options();
    o.user_data_free = recorder_free;
    rill_subscription *s = NULL;
    OK(rill_subscribe(b, "t", &o, record_handler, &rec, &s));
    rill_consumer *c = NULL;
    OK(rill_consumer_new(b, "g", "t", NULL, &c));
    rill_record r = record_of("x");
    OK(rill_publish(b, "t", &r, NULL));
    OK(rill_subscription_wait_idle(s, 10000));
    rill_broker_free(b);
    CHECK(rec.freed == 1); /* the subscription ended with the broker */
    CHECK_STATUS(rill_subscription_wait_idle(s, 10), RILL_ERR_CLOSED);
    rill_subscription_stats st;
    OK(rill_subscription_get_stats(s, &st)); /* final counts stay readable */
    CHECK(st.state == RILL_SUBSCRIPTION_CLOSED && st.delivered == 1);
    char why[128];
    rill_subscription_closed_reason(s, why, sizeof why);
    CHECK(strstr(why, "broker was closed") != NULL);
    const rill_message *msgs = NULL;
    size_t count = 0;
    CHECK_STATUS(rill_consumer_poll(c, 1, 0, &msgs, &count), RILL_ERR_CLOSED);
    CHECK_STATUS(rill_consumer_commit(c), RILL_ERR_CLOSED);
    rill_subscription_free(s);
    rill_consumer_free(c);
    CHECK(rec.freed == 1);

    /* A closed broker refuses everything with RILL_ERR_CLOSED. */
    b = new_broker();
    OK(rill_topic_create(b, "t", NULL));
    rill_broker_close(b);
    rill_broker_close(b); /* idempotent */
    CHECK_STATUS(rill_publish(b, "t", &r, NULL), RILL_ERR_CLOSED);
    CHECK_STATUS(rill_topic_create(b, "u", NULL), RILL_ERR_CLOSED);
    CHECK_STATUS(rill_subscribe(b, "t", NULL, record_handler, &rec, &s), RILL_ERR_CLOSED);
    CHECK_STATUS(rill_consumer_new(b, "g", "t", NULL, &c), RILL_ERR_CLOSED);
    rill_broker_free(b);
}

static void test_user_data_is_released_when_subscribe_fails(void) {
    rill_broker *b = new_broker();
    recorder rec;
    recorder_init(&rec);
    rill_subscription_options o = sub_options();
    o.user_data_free = recorder_free;
    rill_subscription *s = NULL;
    CHECK_STATUS(rill_subscribe(b, "missing", &o, record_handler, &rec, &s), RILL_ERR_NO_SUCH_TOPIC);
    CHECK(rec.freed == 1 && s == NULL);
    rill_broker_free(b);
}

/* Issue 14 #11: a thread the system will not start (EAGAIN, here from
 * RLIMIT_NPROC) is RILL_ERR_RESOURCE_EXHAUSTED, not an invalid argument, and
 * the same call works once threads are available again. Runs in a child
 * process, which drops root first (root ignores RLIMIT_NPROC). */
static void test_thread_exhaustion_is_resource_exhausted(void) {
    CHECK(strcmp(rill_status_name(RILL_ERR_RESOURCE_EXHAUSTED), "RILL_ERR_RESOURCE_EXHAUSTED") == 0);
    fflush(stderr);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        int before = failures;
        struct rlimit back;
        CHECK(getrlimit(RLIMIT_NPROC, &back) == 0);
        struct rlimit none = {0, back.rlim_max};
        CHECK(setrlimit(RLIMIT_NPROC, &none) == 0);
        if (getuid() == 0) {
            CHECK(setgid(65534) == 0);
            CHECK(setuid(65534) == 0);
        }
        rill_broker_options bo;
        rill_broker_options_init(&bo);
        bo.worker_threads = 2;
        rill_broker *b = NULL;
        CHECK_STATUS(rill_broker_new(&bo, &b), RILL_ERR_RESOURCE_EXHAUSTED);
        CHECK(b == NULL);
        LAST_ERROR_HAS("cannot start thread");
        CHECK(setrlimit(RLIMIT_NPROC, &back) == 0);
        OK(rill_broker_new(&bo, &b));
        OK(rill_topic_create(b, "after/exhaustion", NULL));
        rill_broker_free(b);
        fflush(stderr);
        _exit(failures == before ? 0 : 1);
    }
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_broker_options(void) {
    rill_broker_options bo;
    rill_broker_options_init(&bo);
    CHECK(bo.worker_threads == 0 && !bo.auto_create_topics && bo.publish_timeout_ms == 10000);
    bo.worker_threads = 1;
    bo.auto_create_topics = true;
    bo.publish_timeout_ms = 50;
    rill_broker *b = NULL;
    OK(rill_broker_new(&bo, &b));
    rill_record r = record_of("x");
    rill_position pos;
    OK(rill_publish(b, "created/on/demand", &r, &pos));
    rill_topic_stats ts;
    OK(rill_topic_get_stats(b, "created/on/demand", &ts));
    CHECK(ts.publish_count == 1);

    /* publish_timeout_ms bounds a publish waiting on a Block subscriber. */
    gate g;
    memset(&g, 0, sizeof g);
    pthread_mutex_init(&g.lock, NULL);
    rill_subscription_options o = sub_options();
    o.overflow = RILL_OVERFLOW_BLOCK;
    o.lag_limit = 1;
    rill_subscription *s = NULL;
    OK(rill_subscribe(b, "created/on/demand", &o, gated_handler, &g, &s));
    OK(rill_publish(b, "created/on/demand", &r, NULL));
    while (!gate_get(&g, &g.entered)) sleep_ms(1);
    /* One message behind already: the next would exceed lag_limit 1. */
    CHECK_STATUS(rill_publish(b, "created/on/demand", &r, NULL), RILL_ERR_TIMEOUT);
    gate_open(&g);
    OK(rill_subscription_wait_idle(s, 10000));
    rill_subscription_free(s);
    pthread_mutex_destroy(&g.lock);
    rill_broker_free(b);

    rill_topic_options to;
    rill_topic_options_init(&to);
    CHECK(to.partitions == 1 && to.retention_bytes == 268435456u && to.retention_messages == 0);
    rill_consumer_options co;
    rill_consumer_options_init(&co);
    CHECK(co.start == RILL_START_EARLIEST);
    rill_subscription_options so = sub_options();
    CHECK(so.start == RILL_START_LATEST && so.delivery == RILL_DELIVERY_AT_LEAST_ONCE && so.max_attempts == 5);
    CHECK(so.backoff_initial_ms == 10 && so.backoff_max_ms == 10000 && so.overflow == RILL_OVERFLOW_DROP_OLDEST);
}

/* Batch handler: records batch sizes; dead-letters "dead", retries "retry"
 * once (stopping there), handles the rest. */
typedef struct {
    pthread_mutex_t lock;
    int calls;
    int handled;
    int retried_once;
} batch_state;

static size_t batch_handler(void *user_data, const rill_message *msgs, size_t count, rill_ack *acks) {
    batch_state *st = (batch_state *)user_data;
    pthread_mutex_lock(&st->lock);
    st->calls++;
    size_t k = 0;
    for (; k < count; k++) {
        const rill_message *m = &msgs[k];
        if (m->payload_len == 4 && memcmp(m->payload, "dead", 4) == 0) {
            rill_ack_reason(m, "batch says dead");
            acks[k] = RILL_ACK_DEAD_LETTER;
        } else if (m->payload_len == 5 && memcmp(m->payload, "retry", 5) == 0 && m->attempt == 1) {
            acks[k] = RILL_ACK_RETRY;
            st->retried_once = 1;
            st->handled++;
            k++;
            break;
        }
        st->handled++;
    }
    pthread_mutex_unlock(&st->lock);
    return k;
}

static void test_batch_subscription(void) {
    rill_broker *b = new_broker();
    OK(rill_topic_create(b, "t", NULL));
    batch_state st;
    memset(&st, 0, sizeof st);
    pthread_mutex_init(&st.lock, NULL);
    rill_subscription_options o = sub_options();
    o.name = "batcher";
    o.backoff_initial_ms = 1;
    rill_subscription *s = NULL;
    CHECK_STATUS(rill_subscribe_batch(b, "t", &o, NULL, &st, &s), RILL_ERR_NULL_ARGUMENT);
    OK(rill_subscribe_batch(b, "t", &o, batch_handler, &st, &s));
    const char *payloads[] = {"a", "dead", "b", "retry", "c"};
    rill_record rs[5];
    for (int i = 0; i < 5; i++) rs[i] = record_of(payloads[i]);
    OK(rill_publish_batch(b, "t", rs, 5, NULL));
    OK(rill_subscription_wait_idle(s, 10000));
    rill_subscription_stats ss;
    OK(rill_subscription_get_stats(s, &ss));
    CHECK(ss.acked == 4 && ss.dead_lettered == 1 && ss.retried == 1);
    CHECK(st.retried_once && st.calls >= 2);
    rill_consumer *c = NULL;
    OK(rill_consumer_new(b, "r", "$dlq/batcher", NULL, &c));
    const rill_message *msgs = NULL;
    size_t count = 0;
    OK(rill_consumer_poll(c, 10, 1000, &msgs, &count));
    CHECK(count == 1);
    if (count == 1) {
        const char *v = NULL;
        size_t vl = 0;
        OK(rill_message_attribute(&msgs[0], "rill.dlq.reason", &v, &vl));
        CHECK(vl == 15 && memcmp(v, "batch says dead", 15) == 0);
    }
    rill_consumer_free(c);
    rill_subscription_free(s);
    pthread_mutex_destroy(&st.lock);
    rill_broker_free(b);
}

static rill_ack at_most_once_handler(void *user_data, const rill_message *m) {
    int *calls = (int *)user_data;
    (void)m;
    (*calls)++;
    return RILL_ACK_RETRY;
}

static void test_at_most_once(void) {
    rill_broker *b = new_broker();
    OK(rill_topic_create(b, "t", NULL));
    int calls = 0;
    rill_subscription_options o = sub_options();
    o.delivery = RILL_DELIVERY_AT_MOST_ONCE;
    rill_subscription *s = NULL;
    OK(rill_subscribe(b, "t", &o, at_most_once_handler, &calls, &s));
    rill_record r = record_of("x");
    for (int i = 0; i < 5; i++) OK(rill_publish(b, "t", &r, NULL));
    OK(rill_subscription_wait_idle(s, 10000));
    CHECK(calls == 5);
    rill_subscription_stats st;
    OK(rill_subscription_get_stats(s, &st));
    CHECK(st.retried == 0 && st.dropped == 5);
    rill_subscription_free(s);
    rill_broker_free(b);
}

/* What a handler saw of the topic pointers: the first address of each topic,
 * and whether any message's topic disagreed with its payload (the name it was
 * published to) or any topic's address changed. */
typedef struct {
    pthread_mutex_t lock;
    const char *first[3];
    int seen;
    int wrong_name;
    int moved;
} topic_ptrs;

static const char *const ROTATING[3] = {"r/aa", "r/bb", "r/cc"};

static void note_topic(topic_ptrs *t, const rill_message *m) {
    pthread_mutex_lock(&t->lock);
    t->seen++;
    if (strlen(m->topic) != m->payload_len || memcmp(m->topic, m->payload, m->payload_len) != 0) t->wrong_name++;
    for (int k = 0; k < 3; k++) {
        if (strcmp(m->topic, ROTATING[k]) != 0) continue;
        if (t->first[k] == NULL) t->first[k] = m->topic;
        if (t->first[k] != m->topic) t->moved++;
    }
    pthread_mutex_unlock(&t->lock);
}

static rill_ack topic_ptr_handler(void *user_data, const rill_message *m) {
    note_topic((topic_ptrs *)user_data, m);
    return RILL_ACK_SUCCESS;
}

static size_t topic_ptr_batch_handler(void *user_data, const rill_message *msgs, size_t n, rill_ack *acks) {
    (void)acks;
    for (size_t i = 0; i < n; i++) note_topic((topic_ptrs *)user_data, &msgs[i]);
    return n;
}

/* A wildcard subscriber sees messages of several topics in turn; each topic's
 * name must keep one address (bindings cache decoded names by it) and never
 * take an address another topic had. */
static void test_topic_pointers_are_stable(void) {
    rill_broker *b = new_broker();
    for (int k = 0; k < 3; k++) OK(rill_topic_create(b, ROTATING[k], NULL));
    topic_ptrs one, batch;
    memset(&one, 0, sizeof one);
    memset(&batch, 0, sizeof batch);
    pthread_mutex_init(&one.lock, NULL);
    pthread_mutex_init(&batch.lock, NULL);
    rill_subscription_options o = sub_options();
    o.start = RILL_START_EARLIEST;
    rill_subscription *s1 = NULL, *s2 = NULL;
    OK(rill_subscribe(b, "r/*", &o, topic_ptr_handler, &one, &s1));
    OK(rill_subscribe_batch(b, "r/*", &o, topic_ptr_batch_handler, &batch, &s2));
    for (int i = 0; i < 60; i++) {
        rill_record r = record_of(ROTATING[i % 3]);
        OK(rill_publish(b, ROTATING[i % 3], &r, NULL));
        if (i % 7 == 0) OK(rill_subscription_wait_idle(s1, 10000)); /* interleave the topics' deliveries */
    }
    OK(rill_subscription_wait_idle(s1, 10000));
    OK(rill_subscription_wait_idle(s2, 10000));
    topic_ptrs *both[2] = {&one, &batch};
    for (int k = 0; k < 2; k++) {
        topic_ptrs *t = both[k];
        pthread_mutex_lock(&t->lock);
        CHECK(t->seen == 60);
        CHECK(t->wrong_name == 0);
        CHECK(t->moved == 0);
        CHECK(t->first[0] && t->first[1] && t->first[2]);
        CHECK(t->first[0] != t->first[1] && t->first[1] != t->first[2] && t->first[0] != t->first[2]);
        pthread_mutex_unlock(&t->lock);
    }
    rill_subscription_free(s1);
    rill_subscription_free(s2);
    pthread_mutex_destroy(&one.lock);
    pthread_mutex_destroy(&batch.lock);
    rill_broker_free(b);
}

/* Each message's topic pointer and text, in the order the handler saw them. */
typedef struct {
    pthread_mutex_t lock;
    const char *ptr[8];
    char name[8][16];
    int seen;
    int wrong_name;
} topic_log;

static void log_topic(topic_log *t, const rill_message *m) {
    pthread_mutex_lock(&t->lock);
    if (strlen(m->topic) != m->payload_len || memcmp(m->topic, m->payload, m->payload_len) != 0) t->wrong_name++;
    if (t->seen < 8) {
        t->ptr[t->seen] = m->topic;
        snprintf(t->name[t->seen], sizeof t->name[t->seen], "%s", m->topic);
    }
    t->seen++;
    pthread_mutex_unlock(&t->lock);
}

static rill_ack topic_log_handler(void *user_data, const rill_message *m) {
    log_topic((topic_log *)user_data, m);
    return RILL_ACK_SUCCESS;
}

static size_t topic_log_batch_handler(void *user_data, const rill_message *msgs, size_t n, rill_ack *acks) {
    (void)acks;
    for (size_t i = 0; i < n; i++) log_topic((topic_log *)user_data, &msgs[i]);
    return n;
}

/* A wildcard subscription reads a topic that is then deleted, a second topic
 * with a name of the same length created in its place, then the first one
 * created again, and the second again. Every message names its own topic
 * (the library must not take one topic for another because the broker kept
 * their names at the same address: a name freed by the delete may be reused
 * for the next one), the two names never share an address, and a topic
 * created again has the address its name had before. */
static void test_topic_pointers_across_delete_and_recreate(void) {
    rill_broker *b = new_broker();
    topic_log one, batch;
    memset(&one, 0, sizeof one);
    memset(&batch, 0, sizeof batch);
    pthread_mutex_init(&one.lock, NULL);
    pthread_mutex_init(&batch.lock, NULL);
    OK(rill_topic_create(b, "d/aa", NULL));
    rill_subscription_options o = sub_options();
    o.start = RILL_START_EARLIEST;
    rill_subscription *s1 = NULL, *s2 = NULL;
    OK(rill_subscribe(b, "d/*", &o, topic_log_handler, &one, &s1));
    OK(rill_subscribe_batch(b, "d/*", &o, topic_log_batch_handler, &batch, &s2));
    static const char *const steps[4] = {"d/aa", "d/bb", "d/aa", "d/bb"};
    for (int i = 0; i < 4; i++) {
        if (i > 0) {
            OK(rill_topic_delete(b, steps[i - 1]));
            OK(rill_topic_create(b, steps[i], NULL)); /* from i = 2 on, created again */
        }
        rill_record r = record_of(steps[i]);
        OK(rill_publish(b, steps[i], &r, NULL));
        OK(rill_subscription_wait_idle(s1, 10000));
        OK(rill_subscription_wait_idle(s2, 10000));
    }
    topic_log *both[2] = {&one, &batch};
    for (int k = 0; k < 2; k++) {
        topic_log *t = both[k];
        pthread_mutex_lock(&t->lock);
        CHECK(t->seen == 4);
        CHECK(t->wrong_name == 0);
        for (int i = 0; i < 4 && i < t->seen; i++) CHECK(strcmp(t->name[i], steps[i]) == 0);
        CHECK(t->ptr[0] == t->ptr[2] && t->ptr[1] == t->ptr[3]);
        CHECK(t->ptr[0] != t->ptr[1]);
        pthread_mutex_unlock(&t->lock);
    }
    rill_subscription_free(s1);
    rill_subscription_free(s2);
    pthread_mutex_destroy(&one.lock);
    pthread_mutex_destroy(&batch.lock);
    rill_broker_free(b);
}

/* Two handlers, both in flight at once (the barrier), each doing `act` to
 * what the other holds: freeing the other's subscription, closing the
 * other's broker. Neither may wait for the other handler's call. */
typedef struct {
    pthread_barrier_t *barrier;
    pthread_mutex_t lock;
    void *other; /* set before publishing; taken by the handler */
    void (*act)(void *other);
    int done;
} mutual_actor;

static rill_ack act_on_the_other(void *user_data, const rill_message *m) {
    mutual_actor *me = (mutual_actor *)user_data;
    (void)m;
    pthread_mutex_lock(&me->lock);
    void *other = me->other;
    me->other = NULL;
    pthread_mutex_unlock(&me->lock);
    if (other) {
        pthread_barrier_wait(me->barrier);
        me->act(other); /* must not wait for the other handler */
        pthread_mutex_lock(&me->lock);
        me->done = 1;
        pthread_mutex_unlock(&me->lock);
    }
    return RILL_ACK_SUCCESS;
}

static int mutual_done(mutual_actor *f) {
    pthread_mutex_lock(&f->lock);
    int d = f->done;
    pthread_mutex_unlock(&f->lock);
    return d;
}

static void mutual_init(mutual_actor *f, pthread_barrier_t *barrier, void (*act)(void *)) {
    memset(f, 0, sizeof *f);
    f->barrier = barrier;
    f->act = act;
    pthread_mutex_init(&f->lock, NULL);
}

static void mutual_set_other(mutual_actor *f, void *other) {
    pthread_mutex_lock(&f->lock);
    f->other = other;
    pthread_mutex_unlock(&f->lock);
}

/* Waits for both to be done; exits if they are stuck (freeing or closing
 * what they hold would wait on the stuck handlers too). */
static void mutual_wait(mutual_actor *a, mutual_actor *b, const char *what) {
    for (int i = 0; i < 4000 && !(mutual_done(a) && mutual_done(b)); i++) sleep_ms(5);
    if (!(mutual_done(a) && mutual_done(b))) {
        fprintf(stderr, "%s:%d: %s are stuck\n", __FILE__, __LINE__, what);
        exit(1);
    }
}

static void free_subscription(void *s) { rill_subscription_free((rill_subscription *)s); }

static void close_broker(void *b) { rill_broker_close((rill_broker *)b); }

static void test_handlers_that_free_each_other(void) {
    rill_broker_options bo;
    rill_broker_options_init(&bo);
    bo.worker_threads = 2;
    rill_broker *b = NULL;
    OK(rill_broker_new(&bo, &b));
    OK(rill_topic_create(b, "ta", NULL));
    OK(rill_topic_create(b, "tb", NULL));
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, 2);
    mutual_actor fa, fb;
    mutual_init(&fa, &barrier, free_subscription);
    mutual_init(&fb, &barrier, free_subscription);
    rill_subscription_options o = sub_options();
    rill_subscription *sa = NULL, *sb = NULL;
    OK(rill_subscribe(b, "ta", &o, act_on_the_other, &fa, &sa));
    OK(rill_subscribe(b, "tb", &o, act_on_the_other, &fb, &sb));
    mutual_set_other(&fa, sb);
    mutual_set_other(&fb, sa);
    rill_record r = record_of("go");
    OK(rill_publish(b, "ta", &r, NULL));
    OK(rill_publish(b, "tb", &r, NULL));
    mutual_wait(&fa, &fb, "handlers freeing each other");
    rill_broker_free(b); /* both subscriptions were freed by the handlers */
    pthread_barrier_destroy(&barrier);
    pthread_mutex_destroy(&fa.lock);
    pthread_mutex_destroy(&fb.lock);
}

/* Two brokers whose handlers, both in flight at once, close each other's
 * broker. */
static void test_handlers_that_close_each_others_broker(void) {
    rill_broker *b[2] = {NULL, NULL};
    rill_subscription *s[2] = {NULL, NULL};
    mutual_actor c[2];
    pthread_barrier_t barrier;
    pthread_barrier_init(&barrier, NULL, 2);
    rill_subscription_options o = sub_options();
    for (int i = 0; i < 2; i++) {
        OK(rill_broker_new(NULL, &b[i]));
        OK(rill_topic_create(b[i], "t", NULL));
        mutual_init(&c[i], &barrier, close_broker);
        OK(rill_subscribe(b[i], "t", &o, act_on_the_other, &c[i], &s[i]));
    }
    for (int i = 0; i < 2; i++) mutual_set_other(&c[i], b[1 - i]);
    rill_record r = record_of("go");
    OK(rill_publish(b[0], "t", &r, NULL));
    OK(rill_publish(b[1], "t", &r, NULL));
    mutual_wait(&c[0], &c[1], "handlers closing each other's broker");
    for (int i = 0; i < 2; i++) {
        CHECK_STATUS(rill_publish(b[i], "t", &r, NULL), RILL_ERR_CLOSED);
        rill_subscription_free(s[i]);
        rill_broker_free(b[i]);
        pthread_mutex_destroy(&c[i].lock);
    }
    pthread_barrier_destroy(&barrier);
}

/* A subscriber that holds its first message until let go, and hears from
 * on_lagged what retention trimmed meanwhile. */
typedef struct {
    pthread_mutex_t lock;
    int entered, open;
    unsigned long long missed_heard;
    int wrong_topic, calls;
} lag_state;

static rill_ack held_first(void *user_data, const rill_message *m) {
    lag_state *st = (lag_state *)user_data;
    (void)m;
    pthread_mutex_lock(&st->lock);
    st->entered = 1;
    while (!st->open) {
        pthread_mutex_unlock(&st->lock);
        sleep_ms(1);
        pthread_mutex_lock(&st->lock);
    }
    pthread_mutex_unlock(&st->lock);
    return RILL_ACK_SUCCESS;
}

static void heard_lag(void *user_data, const char *topic, uint32_t partition, uint64_t missed) {
    lag_state *st = (lag_state *)user_data;
    pthread_mutex_lock(&st->lock);
    st->calls++;
    st->missed_heard += missed;
    if (strcmp(topic, "firehose") != 0 || partition != 0) st->wrong_topic++;
    pthread_mutex_unlock(&st->lock);
}

static void test_on_lagged_hears_what_retention_trimmed(void) {
    rill_broker *b = new_broker();
    rill_topic_options to;
    rill_topic_options_init(&to);
    to.retention_bytes = 16u << 10;
    OK(rill_topic_create(b, "firehose", &to));
    rill_consumer *c = NULL;
    OK(rill_consumer_new(b, "slow", "firehose", NULL, &c)); /* at offset 0, soon trimmed */
    lag_state st;
    memset(&st, 0, sizeof st);
    pthread_mutex_init(&st.lock, NULL);
    rill_subscription_options o = sub_options();
    o.on_lagged = heard_lag;
    rill_subscription *s = NULL;
    OK(rill_subscribe(b, "firehose", &o, held_first, &st, &s));
    rill_record r = record_of("first");
    OK(rill_publish(b, "firehose", &r, NULL));
    for (int i = 0; i < 4000; i++) {
        pthread_mutex_lock(&st.lock);
        int in = st.entered;
        pthread_mutex_unlock(&st.lock);
        if (in) break;
        sleep_ms(5);
    }
    static rill_record many[1000];
    for (int i = 0; i < 1000; i++) many[i] = r;
    for (int i = 0; i < 5; i++) OK(rill_publish_batch(b, "firehose", many, 1000, NULL));
    pthread_mutex_lock(&st.lock);
    st.open = 1;
    pthread_mutex_unlock(&st.lock);
    OK(rill_subscription_wait_idle(s, 20000));
    rill_subscription_stats ss;
    OK(rill_subscription_get_stats(s, &ss));
    pthread_mutex_lock(&st.lock);
    CHECK(ss.missed > 0 && st.calls >= 1);
    CHECK(st.missed_heard == ss.missed);
    CHECK(st.wrong_topic == 0);
    CHECK(ss.delivered + ss.missed == 5001);
    pthread_mutex_unlock(&st.lock);
    rill_subscription_free(s);
    pthread_mutex_destroy(&st.lock);

    /* A pull consumer left behind counts the same way (issue 12: its waiting
     * poll used to drop the count). */
    const rill_message *msgs = NULL;
    size_t count = 0, polled = 0;
    do {
        OK(rill_consumer_poll(c, 256, 1, &msgs, &count));
        polled += count;
    } while (count > 0);
    rill_consumer_stats cs;
    OK(rill_consumer_get_stats(c, &cs));
    CHECK(cs.missed > 0);
    CHECK(polled + cs.missed == 5001); /* every message polled or counted missed */
    rill_consumer_free(c);
    rill_broker_free(b);
}

/* ---- freeing a subscription returns after its wind-up (issue 14 #9) -------- */

typedef struct {
    int delivered; /* GCC __atomic builtins: the tests are C99 */
    int freed;     /* set at the very end of user_data_free */
} windup;

static rill_ack windup_handler(void *user_data, const rill_message *m) {
    (void)m;
    __atomic_fetch_add(&((windup *)user_data)->delivered, 1, __ATOMIC_SEQ_CST);
    /* A slow handler: the free meets its round in progress, and the drainer,
     * seeing the close after it, may win the wind-up. */
    for (int i = 0; i < 200; i++) {
        sched_yield();
    }
    return RILL_ACK_SUCCESS;
}

static void windup_free(void *user_data) {
    /* Some work first: a free that did not wait for the wind-up would
     * return inside this window. */
    for (int i = 0; i < 50; i++) {
        sched_yield();
    }
    __atomic_store_n(&((windup *)user_data)->freed, 1, __ATOMIC_SEQ_CST);
}

static void test_free_returns_after_user_data_free(void) {
    rill_broker *b = new_broker();
    OK(rill_topic_create(b, "t", NULL));
    rill_record r = record_of("m");
    int early = 0, busy = 0;
    for (int dedicated = 0; dedicated < 2; dedicated++) {
        for (int i = 0; i < 200; i++) {
            windup w;
            w.delivered = 0;
            w.freed = 0;
            rill_subscription_options o = sub_options();
            o.name = "reused";
            o.dedicated_thread = dedicated;
            o.start = RILL_START_EARLIEST;
            o.user_data_free = windup_free;
            rill_subscription *s = NULL;
            /* The same durable name right after the last free: never BUSY. */
            if (rill_subscribe(b, "t", &o, windup_handler, &w, &s) != RILL_OK) {
                busy++;
                continue;
            }
            for (int k = 0; k < 5; k++) { /* messages in flight */
                OK(rill_publish(b, "t", &r, NULL));
            }
            /* Free once the handler has started (watchdog: 30 s). */
            struct timespec t0, now;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            while (__atomic_load_n(&w.delivered, __ATOMIC_SEQ_CST) == 0) {
                clock_gettime(CLOCK_MONOTONIC, &now);
                if (now.tv_sec - t0.tv_sec > 30) {
                    break;
                }
                sched_yield();
            }
            CHECK(__atomic_load_n(&w.delivered, __ATOMIC_SEQ_CST) > 0);
            rill_subscription_free(s);
            if (!__atomic_load_n(&w.freed, __ATOMIC_SEQ_CST)) {
                early++;
            }
        }
    }
    CHECK(early == 0);
    CHECK(busy == 0);
    rill_broker_free(b);
}

/* ---- anonymous subscriptions and their dead letters (issue 14 #8) ---------- */

static rill_ack dead_letter_all(void *user_data, const rill_message *m) {
    (void)m;
    __atomic_fetch_add((int *)user_data, 1, __ATOMIC_SEQ_CST);
    return RILL_ACK_DEAD_LETTER;
}

static void test_anonymous_subscriptions_and_dead_letters(void) {
    rill_broker *b = new_broker();
    OK(rill_topic_create(b, "t", NULL));
    rill_record r = record_of("m");
    /* Many anonymous subscribe/free cycles, some with deliveries. */
    for (int i = 0; i < 500; i++) {
        recorder rec;
        recorder_init(&rec);
        rill_subscription *s = NULL;
        OK(rill_subscribe(b, "t", NULL, record_handler, &rec, &s));
        if (i % 50 == 0) {
            OK(rill_publish(b, "t", &r, NULL));
            OK(rill_subscription_wait_idle(s, 20000));
        }
        rill_subscription_free(s);
    }
    /* An anonymous subscription with a dead-letter topic of its own still
     * dead-letters into it. */
    int calls = 0;
    rill_subscription_options o = sub_options();
    o.dead_letter_topic = "failed";
    rill_subscription *s = NULL;
    OK(rill_subscribe(b, "t", &o, dead_letter_all, &calls, &s));
    rill_record poison = record_of("poison");
    OK(rill_publish(b, "t", &poison, NULL));
    OK(rill_subscription_wait_idle(s, 20000));
    rill_subscription_stats st;
    OK(rill_subscription_get_stats(s, &st));
    CHECK(st.dead_lettered == 1 && __atomic_load_n(&calls, __ATOMIC_SEQ_CST) == 1);
    rill_subscription_free(s);
    rill_consumer *c = NULL;
    OK(rill_consumer_new(b, "dlq-reader", "failed", NULL, &c));
    const rill_message *msgs = NULL;
    size_t count = 0;
    OK(rill_consumer_poll(c, 10, 5000, &msgs, &count));
    CHECK(count == 1 && msgs[0].payload_len == 6 && memcmp(msgs[0].payload, "poison", 6) == 0);
    rill_consumer_free(c);
    rill_broker_free(b);
}

/* ---- calls that would wait for their own handler (issue 14 #4, #5, #6) ----- */

typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    rill_broker *broker;
    rill_subscription *self;
    int done;
    rill_status wait_no_limit, wait_short, publish;
    int accepted;
    char why_wait[512], why_publish[512];
} self_caller;

/* A Block subscriber's handler that waits for its own subscription to be idle,
 * then publishes into its own topic until refused. */
static rill_ack self_calling_handler(void *user_data, const rill_message *m) {
    self_caller *c = (self_caller *)user_data;
    if (m->payload_len != 4 || memcmp(m->payload, "seed", 4) != 0) return RILL_ACK_SUCCESS;
    rill_status no_limit = rill_subscription_wait_idle(c->self, -1);
    char why_wait[512];
    rill_last_error(why_wait, sizeof why_wait);
    rill_status short_wait = rill_subscription_wait_idle(c->self, 50);
    rill_record echo = record_of("echo");
    int accepted = 0;
    rill_status st;
    while ((st = rill_publish(c->broker, "echo", &echo, NULL)) == RILL_OK && accepted < 100) accepted++;
    char why_publish[512];
    rill_last_error(why_publish, sizeof why_publish);
    pthread_mutex_lock(&c->lock);
    c->wait_no_limit = no_limit;
    c->wait_short = short_wait;
    c->publish = st;
    c->accepted = accepted;
    memcpy(c->why_wait, why_wait, sizeof why_wait);
    memcpy(c->why_publish, why_publish, sizeof why_publish);
    c->done = 1;
    pthread_cond_signal(&c->cond);
    pthread_mutex_unlock(&c->lock);
    return RILL_ACK_SUCCESS;
}

/* ---- each failure of rill_publisher_publish: its status and whole text --- */

static void last_error_equals(const char *want, int line) {
    char err[1024];
    rill_last_error(err, sizeof err);
    checks++;
    if (strcmp(err, want) != 0) {
        fprintf(stderr, "%s:%d: last error \"%s\", expected \"%s\"\n", __FILE__, line, err, want);
        failures++;
    }
}
#define LAST_ERROR_IS(s) last_error_equals((s), __LINE__)

/* A Block subscriber's handler that publishes into its own topic through a
 * publisher handle (at its own lag limit: refused at once), then waits on
 * its gate. */
typedef struct {
    gate g;
    rill_publisher *p;
    rill_status st;
    char why[1024];
} own_publisher;

static rill_ack own_publishing_handler(void *user_data, const rill_message *m) {
    own_publisher *o = (own_publisher *)user_data;
    if (m->offset == 0) {
        rill_record r = record_of("own");
        rill_status st = rill_publisher_publish(o->p, &r, NULL);
        pthread_mutex_lock(&o->g.lock);
        o->st = st;
        rill_last_error(o->why, sizeof o->why);
        pthread_mutex_unlock(&o->g.lock);
    }
    return gated_handler(&o->g, m);
}

static void test_publisher_publish_errors_keep_status_and_text(void) {
    rill_broker_options bo;
    rill_broker_options_init(&bo);
    bo.worker_threads = 1;
    bo.publish_timeout_ms = 20;
    rill_broker *b = NULL;
    OK(rill_broker_new(&bo, &b));
    rill_topic_options to;
    rill_topic_options_init(&to);
    to.max_message_bytes = 256;
    OK(rill_topic_create(b, "t", &to));
    rill_publisher *p = NULL;
    OK(rill_publisher_new(b, "t", &p));

    /* Too large: the sizes in the text are the encoded size and the limit. */
    static char big[300];
    memset(big, 'x', sizeof big);
    rill_record r = {NULL, 0, big, sizeof big, NULL, 0};
    CHECK_STATUS(rill_publisher_publish(p, &r, NULL), RILL_ERR_MESSAGE_TOO_LARGE);
    char err[1024];
    rill_last_error(err, sizeof err);
    unsigned long size = 0, max = 0;
    CHECK(sscanf(err, "message of %lu bytes exceeds the limit of %lu bytes", &size, &max) == 2);
    CHECK(size > sizeof big && max == 256);
    char want[256];
    snprintf(want, sizeof want, "message of %lu bytes exceeds the limit of 256 bytes", size);
    LAST_ERROR_IS(want);

    /* A record the core refuses to encode (through the general path, since
     * it has attributes). */
    static char long_key[65537];
    memset(long_key, 'k', 65536);
    long_key[65536] = '\0';
    rill_attribute attr = {long_key, "v"};
    rill_record bad = {NULL, 0, "x", 1, &attr, 1};
    CHECK_STATUS(rill_publisher_publish(p, &bad, NULL), RILL_ERR_INVALID_ARGUMENT);
    LAST_ERROR_IS("invalid argument: attribute key of 65536 bytes is longer than 65535");

    /* A Block subscriber at its limit: a publish from its own handler is
     * refused at once, naming the partition; one from elsewhere times out. */
    OK(rill_topic_create(b, "block", NULL));
    own_publisher o;
    memset(&o, 0, sizeof o);
    pthread_mutex_init(&o.g.lock, NULL);
    OK(rill_publisher_new(b, "block", &o.p));
    rill_subscription_options so = sub_options();
    so.overflow = RILL_OVERFLOW_BLOCK;
    so.lag_limit = 1;
    rill_subscription *s = NULL;
    OK(rill_subscribe(b, "block", &so, own_publishing_handler, &o, &s));
    rill_publisher *bp = NULL;
    OK(rill_publisher_new(b, "block", &bp));
    rill_record m = record_of("m");
    OK(rill_publisher_publish(bp, &m, NULL));
    while (!gate_get(&o.g, &o.g.entered)) sleep_ms(1);
    pthread_mutex_lock(&o.g.lock);
    CHECK_STATUS(o.st, RILL_ERR_FULL);
    CHECK(strcmp(o.why,
                 "full: partition 0 is at the lag limit of the Block subscription whose handler is "
                 "publishing: waiting would wait for that handler itself, so it does not wait (return "
                 "from the handler to make room)") == 0);
    pthread_mutex_unlock(&o.g.lock);
    CHECK_STATUS(rill_publisher_publish(bp, &m, NULL), RILL_ERR_TIMEOUT);
    LAST_ERROR_IS("timed out");
    CHECK_STATUS(rill_try_publish(b, "block", &m, NULL), RILL_ERR_FULL);
    LAST_ERROR_IS("full: a subscriber with the Block policy is at its lag limit");
    gate_open(&o.g);
    OK(rill_subscription_wait_idle(s, 10000));
    rill_subscription_free(s);
    rill_publisher_free(bp);
    rill_publisher_free(o.p);
    pthread_mutex_destroy(&o.g.lock);

    /* A deleted topic, then a closed broker. */
    OK(rill_topic_create(b, "gone", NULL));
    rill_publisher *gp = NULL;
    OK(rill_publisher_new(b, "gone", &gp));
    OK(rill_topic_delete(b, "gone"));
    CHECK_STATUS(rill_publisher_publish(gp, &m, NULL), RILL_ERR_NO_SUCH_TOPIC);
    LAST_ERROR_IS("no such topic: \"gone\"");
    rill_broker_close(b);
    CHECK_STATUS(rill_publisher_publish(p, &m, NULL), RILL_ERR_CLOSED);
    LAST_ERROR_IS("closed: the broker is closed");
    rill_publisher_free(gp);
    rill_publisher_free(p);
    rill_broker_free(b);
}

static void test_calls_that_would_wait_for_their_own_handler_fail_fast(void) {
    rill_broker_options bo;
    rill_broker_options_init(&bo);
    bo.publish_timeout_ms = -1; /* a wait for itself used to last for ever */
    rill_broker *b = NULL;
    OK(rill_broker_new(&bo, &b));
    OK(rill_topic_create(b, "echo", NULL));
    self_caller c;
    memset(&c, 0, sizeof c);
    pthread_mutex_init(&c.lock, NULL);
    pthread_cond_init(&c.cond, NULL);
    c.broker = b;
    rill_subscription_options o = sub_options();
    o.overflow = RILL_OVERFLOW_BLOCK;
    o.lag_limit = 2;
    OK(rill_subscribe(b, "echo", &o, self_calling_handler, &c, &c.self));
    rill_record seed = record_of("seed");
    OK(rill_publish(b, "echo", &seed, NULL));
    /* Watchdog: the handler answers within 20 s or the calls hang. */
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 20;
    pthread_mutex_lock(&c.lock);
    while (!c.done && pthread_cond_timedwait(&c.cond, &c.lock, &deadline) == 0) {
    }
    int done = c.done;
    pthread_mutex_unlock(&c.lock);
    CHECK(done);
    if (!done) {
        /* Freeing would wait for the hung handler: leak it all, fail. */
        fprintf(stderr, "%s:%d: a handler call waiting for itself hangs\n", __FILE__, __LINE__);
        return;
    }
    CHECK_STATUS(c.wait_no_limit, RILL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(c.wait_short, RILL_ERR_INVALID_ARGUMENT);
    CHECK(strstr(c.why_wait, "own handler") != NULL);
    CHECK_STATUS(c.publish, RILL_ERR_FULL);
    CHECK(c.accepted == 1);
    CHECK(strstr(c.why_publish, "handler") != NULL);
    OK(rill_subscription_wait_idle(c.self, 20000)); /* outside: works as ever */
    rill_subscription_free(c.self);

    /* A dead-letter topic that the subscription's own pattern matches. */
    rill_subscription *s = NULL;
    o = sub_options();
    o.dead_letter_topic = "echo";
    CHECK_STATUS(rill_subscribe(b, "echo", &o, noop_handler, NULL, &s), RILL_ERR_INVALID_ARGUMENT);
    LAST_ERROR_HAS("\"echo\"");
    o = sub_options();
    o.name = "watcher"; /* its default dead-letter topic $dlq/watcher matches the pattern */
    CHECK_STATUS(rill_subscribe(b, "$dlq/*", &o, noop_handler, NULL, &s), RILL_ERR_INVALID_ARGUMENT);
    LAST_ERROR_HAS("$dlq/watcher");
    LAST_ERROR_HAS("$dlq/*");
    CHECK(s == NULL);
    o.dead_letter_topic = "dead-watchers";
    OK(rill_subscribe(b, "$dlq/*", &o, noop_handler, NULL, &s));
    rill_subscription_free(s);
    s = NULL;
    OK(rill_subscribe(b, "**", NULL, noop_handler, NULL, &s)); /* ** does not see $dlq */
    rill_subscription_free(s);
    pthread_cond_destroy(&c.cond);
    pthread_mutex_destroy(&c.lock);
    rill_broker_free(b);
}

/* ---- issue 13: listing and describing ---------------------------------------- */

typedef struct {
    int count;
    char names[8][64];
} name_list;

static void collect_topic(void *user_data, const char *name) {
    name_list *l = (name_list *)user_data;
    if (l->count < 8) snprintf(l->names[l->count++], 64, "%s", name);
}

static void collect_group(void *user_data, const char *group, const char *topic) {
    name_list *l = (name_list *)user_data;
    if (l->count < 8) snprintf(l->names[l->count++], 64, "%s@%s", group, topic);
}

typedef struct {
    int count;
    char names[4][64];
    char patterns[4][64];
    char errors[4][256];
    uint64_t delivered[4];
    int state[4];
} sub_list;

static void collect_sub(void *user_data, const rill_subscription_stats *s) {
    sub_list *l = (sub_list *)user_data;
    if (l->count >= 4) return;
    int i = l->count++;
    snprintf(l->names[i], 64, "%s", s->name);
    snprintf(l->patterns[i], 64, "%s", s->pattern);
    snprintf(l->errors[i], 256, "%s", s->last_error ? s->last_error : "(none)");
    l->delivered[i] = s->delivered;
    l->state[i] = s->state;
}

typedef struct {
    int count;
    char topics[8][64];
    uint32_t partition[8];
    uint64_t position[8], end[8], lag[8];
} lag_list;

static void collect_lag(void *user_data, const rill_partition_lag *p) {
    lag_list *l = (lag_list *)user_data;
    if (l->count >= 8) return;
    int i = l->count++;
    snprintf(l->topics[i], 64, "%s", p->topic);
    l->partition[i] = p->partition;
    l->position[i] = p->position;
    l->end[i] = p->end;
    l->lag[i] = p->lag;
}

static rill_ack reject_bad(void *user_data, const rill_message *m) {
    (void)user_data;
    if (m->payload_len == 3 && memcmp(m->payload, "bad", 3) == 0) {
        rill_ack_reason(m, "cannot parse it");
        return RILL_ACK_DEAD_LETTER;
    }
    return RILL_ACK_SUCCESS;
}

static void test_listing_topics_subscriptions_and_groups(void) {
    rill_broker *b = new_broker();
    rill_topic_options to;
    rill_topic_options_init(&to);
    to.partitions = 2;
    OK(rill_topic_create(b, "orders/eu", &to));
    OK(rill_topic_create(b, "orders/us", NULL));
    name_list topics = {0};
    OK(rill_topic_list(b, collect_topic, &topics));
    CHECK(topics.count == 2 && strcmp(topics.names[0], "orders/eu") == 0 && strcmp(topics.names[1], "orders/us") == 0);
    CHECK_STATUS(rill_topic_list(b, NULL, NULL), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_topic_list(NULL, collect_topic, &topics), RILL_ERR_NULL_ARGUMENT);

    rill_subscription_options so;
    rill_subscription_options_init(&so);
    so.name = "billing";
    so.start = RILL_START_EARLIEST;
    rill_subscription *s = NULL;
    OK(rill_subscribe(b, "orders/*", &so, reject_bad, NULL, &s));
    rill_record good = record_of("good"), bad = record_of("bad");
    OK(rill_publish(b, "orders/us", &good, NULL));
    OK(rill_publish(b, "orders/us", &bad, NULL));
    OK(rill_subscription_wait_idle(s, 30000));

    sub_list subs;
    memset(&subs, 0, sizeof subs);
    OK(rill_subscription_list(b, collect_sub, &subs));
    CHECK(subs.count == 1 && strcmp(subs.names[0], "billing") == 0 && strcmp(subs.patterns[0], "orders/*") == 0);
    CHECK(subs.delivered[0] == 2 && subs.state[0] == RILL_SUBSCRIPTION_IDLE);
    CHECK(strstr(subs.errors[0], "cannot parse it") != NULL && strstr(subs.errors[0], "offset 1") != NULL);
    CHECK_STATUS(rill_subscription_list(b, NULL, NULL), RILL_ERR_NULL_ARGUMENT);
    /* get_stats leaves the borrowed strings NULL; the copy function has the text. */
    rill_subscription_stats st;
    OK(rill_subscription_get_stats(s, &st));
    CHECK(st.name == NULL && st.pattern == NULL && st.last_error == NULL && st.delivered == 2);
    char err[256];
    size_t n = rill_subscription_last_error(s, err, sizeof err);
    CHECK(n == strlen(subs.errors[0]) && strcmp(err, subs.errors[0]) == 0);

    lag_list lags;
    memset(&lags, 0, sizeof lags);
    OK(rill_subscription_partitions(s, collect_lag, &lags));
    CHECK(lags.count == 3);
    for (int i = 0; i < lags.count; i++) {
        if (strcmp(lags.topics[i], "orders/us") == 0) CHECK(lags.position[i] == 2 && lags.end[i] == 2 && lags.lag[i] == 0);
    }

    /* Groups: listed with their committed position, live consumer or not. */
    rill_consumer *c = NULL;
    OK(rill_consumer_new(b, "reports", "orders/us", NULL, &c));
    const rill_message *msgs = NULL;
    size_t count = 0;
    OK(rill_consumer_poll(c, 1, 0, &msgs, &count));
    CHECK(count == 1);
    OK(rill_consumer_commit(c));
    rill_consumer_free(c);
    name_list groups = {0};
    OK(rill_group_list(b, collect_group, &groups));
    CHECK(groups.count == 1 && strcmp(groups.names[0], "reports@orders/us") == 0);
    rill_consumer_stats gs;
    OK(rill_group_get_stats(b, "reports", "orders/us", &gs));
    CHECK(gs.lag == 1 && gs.partitions == 1 && gs.delivered == 0);
    memset(&lags, 0, sizeof lags);
    OK(rill_group_partitions(b, "reports", "orders/us", collect_lag, &lags));
    CHECK(lags.count == 1 && strcmp(lags.topics[0], "orders/us") == 0 && lags.position[0] == 1 && lags.end[0] == 2 &&
          lags.lag[0] == 1);
    CHECK_STATUS(rill_group_get_stats(b, "nobody", "orders/us", &gs), RILL_ERR_NOT_FOUND);
    CHECK_STATUS(rill_group_get_stats(b, "reports", "missing", &gs), RILL_ERR_NO_SUCH_TOPIC);
    CHECK_STATUS(rill_group_get_stats(b, "reports", "orders/us", NULL), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_group_partitions(b, "reports", "orders/us", NULL, NULL), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_group_list(b, NULL, NULL), RILL_ERR_NULL_ARGUMENT);

    rill_subscription_free(s);
    memset(&subs, 0, sizeof subs);
    OK(rill_subscription_list(b, collect_sub, &subs));
    CHECK(subs.count == 0);

    /* A closed broker's listings fail as its other calls do, rather than
     * report an empty broker. */
    OK(rill_subscribe(b, "orders/*", &so, reject_bad, NULL, &s));
    rill_broker_close(b);
    memset(&topics, 0, sizeof topics);
    memset(&subs, 0, sizeof subs);
    memset(&groups, 0, sizeof groups);
    CHECK_STATUS(rill_topic_list(b, collect_topic, &topics), RILL_ERR_CLOSED);
    CHECK_STATUS(rill_subscription_list(b, collect_sub, &subs), RILL_ERR_CLOSED);
    CHECK_STATUS(rill_group_list(b, collect_group, &groups), RILL_ERR_CLOSED);
    CHECK(topics.count == 0 && subs.count == 0 && groups.count == 0);
    rill_subscription_free(s);
    rill_broker_free(b);
}

typedef struct {
    rill_consumer *c;
    rill_status status;
} blocked_poll;

static void *poll_until_error(void *arg) {
    blocked_poll *p = (blocked_poll *)arg;
    const rill_message *msgs = NULL;
    size_t count = 0;
    for (;;) {
        rill_status st = rill_consumer_poll(p->c, 16, 30000, &msgs, &count);
        if (st != RILL_OK) {
            p->status = st;
            return NULL;
        }
    }
}

typedef struct {
    rill_publisher *p;
    rill_status status;
    long published;
} busy_publisher;

static void *publish_until_error(void *arg) {
    busy_publisher *p = (busy_publisher *)arg;
    rill_record r = record_of("load");
    for (;;) {
        rill_status st = rill_publisher_publish(p->p, &r, NULL);
        if (st != RILL_OK) {
            p->status = st;
            return NULL;
        }
        p->published++;
    }
}

static void test_deleting_topics_durables_and_groups(void) {
    rill_broker *b = new_broker();
    OK(rill_topic_create(b, "live/a", NULL));
    OK(rill_topic_create(b, "live/b", NULL));
    recorder wild, lit;
    recorder_init(&wild);
    recorder_init(&lit);
    rill_subscription_options so;
    rill_subscription_options_init(&so);
    so.start = RILL_START_EARLIEST;
    rill_subscription *ws = NULL, *ls = NULL;
    OK(rill_subscribe(b, "live/*", &so, record_handler, &wild, &ws));
    so.name = "a-reader";
    OK(rill_subscribe(b, "live/a", &so, record_handler, &lit, &ls));

    rill_consumer *c = NULL;
    OK(rill_consumer_new(b, "pullers", "live/a", NULL, &c));
    busy_publisher pub = {NULL, RILL_OK, 0};
    OK(rill_publisher_new(b, "live/a", &pub.p));
    blocked_poll poller = {c, RILL_OK};
    pthread_t pt, pp;
    pthread_create(&pp, NULL, publish_until_error, &pub);
    pthread_create(&pt, NULL, poll_until_error, &poller);
    rill_topic_stats ts;
    do {
        OK(rill_topic_get_stats(b, "live/a", &ts));
    } while (ts.publish_count < 1000);

    OK(rill_topic_delete(b, "live/a"));
    pthread_join(pp, NULL);
    pthread_join(pt, NULL);
    CHECK(pub.status == RILL_ERR_NO_SUCH_TOPIC && pub.published >= 1000);
    CHECK(poller.status == RILL_ERR_NO_SUCH_TOPIC);
    CHECK_STATUS(rill_topic_delete(b, "live/a"), RILL_ERR_NO_SUCH_TOPIC);
    CHECK_STATUS(rill_topic_delete(b, "never"), RILL_ERR_NO_SUCH_TOPIC);
    CHECK_STATUS(rill_topic_delete(b, "bad//name"), RILL_ERR_INVALID_TOPIC);
    CHECK_STATUS(rill_topic_delete(NULL, "x"), RILL_ERR_NULL_ARGUMENT);
    /* The literal subscription is closed with the reason; the wildcard one goes on. */
    char why[64];
    rill_subscription_closed_reason(ls, why, sizeof why);
    CHECK(strcmp(why, "topic deleted") == 0);
    rill_record r = record_of("on b");
    OK(rill_publish(b, "live/b", &r, NULL));
    OK(rill_subscription_wait_idle(ws, 30000));
    pthread_mutex_lock(&wild.lock);
    CHECK(strcmp(wild.payloads[wild.count - 1], "on b") == 0);
    pthread_mutex_unlock(&wild.lock);
    rill_subscription_stats st;
    OK(rill_subscription_get_stats(ws, &st));
    CHECK(st.partitions == 1 && st.state == RILL_SUBSCRIPTION_IDLE);
    rill_publisher_free(pub.p);
    rill_consumer_free(c);
    rill_subscription_free(ls);

    /* Created again: from offset 0. */
    OK(rill_topic_create(b, "live/a", NULL));
    rill_position pos;
    OK(rill_publish(b, "live/a", &r, &pos));
    CHECK(pos.offset == 0);

    /* Durable positions: BUSY while live, NOT_FOUND when unknown. */
    so.name = "keeper";
    rill_subscription *keeper = NULL;
    OK(rill_subscribe(b, "live/b", &so, noop_handler, NULL, &keeper));
    CHECK_STATUS(rill_durable_delete(b, "keeper"), RILL_ERR_BUSY);
    rill_subscription_free(keeper);
    OK(rill_durable_delete(b, "keeper"));
    CHECK_STATUS(rill_durable_delete(b, "keeper"), RILL_ERR_NOT_FOUND);
    CHECK_STATUS(rill_durable_delete(b, NULL), RILL_ERR_NULL_ARGUMENT);

    /* Group offsets: BUSY while a consumer is live, NOT_FOUND when unknown. */
    OK(rill_consumer_new(b, "g", "live/b", NULL, &c));
    OK(rill_consumer_commit(c));
    CHECK_STATUS(rill_group_delete(b, "g", "live/b"), RILL_ERR_BUSY);
    rill_consumer_free(c);
    OK(rill_group_delete(b, "g", "live/b"));
    CHECK_STATUS(rill_group_delete(b, "g", "live/b"), RILL_ERR_NOT_FOUND);
    CHECK_STATUS(rill_group_delete(b, NULL, "live/b"), RILL_ERR_NULL_ARGUMENT);
    rill_consumer_stats gs;
    CHECK_STATUS(rill_group_get_stats(b, "g", "live/b", &gs), RILL_ERR_NOT_FOUND);

    rill_subscription_free(ws);
    rill_broker_free(b);
}

static void test_seek_and_start_by_time(void) {
    rill_broker *b = new_broker();
    rill_topic_options to;
    rill_topic_options_init(&to);
    OK(rill_topic_create(b, "timed", &to));
    char payload[16];
    for (int i = 0; i < 300; i++) {
        snprintf(payload, sizeof payload, "%d", i);
        rill_record r = record_of(payload);
        OK(rill_publish(b, "timed", &r, NULL));
    }
    rill_consumer *c = NULL;
    OK(rill_consumer_new(b, "stamps", "timed", NULL, &c));
    const rill_message *msgs = NULL;
    size_t count = 0;
    /* A poll stops at the end of a log segment (a new topic's first one is
     * small), so reading all 300 may take several. */
    uint64_t stamps[300] = {0};
    size_t got = 0;
    do {
        OK(rill_consumer_poll(c, 300 - got, 0, &msgs, &count));
        for (size_t i = 0; i < count && got + i < 300; i++) stamps[got + i] = msgs[i].timestamp_ns;
        got += count;
    } while (count > 0 && got < 300);
    CHECK(got == 300);
    uint64_t t = stamps[150], want = 0, pos = 0;
    while (want < 300 && stamps[want] < t) want++;
    OK(rill_consumer_seek_time(c, 0, (int64_t)t));
    OK(rill_consumer_position(c, 0, &pos));
    CHECK(pos == want);
    OK(rill_consumer_seek_time(c, 0, -5)); /* before everything: the oldest */
    OK(rill_consumer_position(c, 0, &pos));
    CHECK(pos == 0);
    OK(rill_consumer_seek_time(c, 0, INT64_MAX)); /* after everything: the end */
    OK(rill_consumer_position(c, 0, &pos));
    CHECK(pos == 300);
    CHECK_STATUS(rill_consumer_seek_time(c, 3, 0), RILL_ERR_NOT_FOUND);
    CHECK_STATUS(rill_consumer_seek_time(NULL, 0, 0), RILL_ERR_NULL_ARGUMENT);

    /* A consumer and a subscription can start at a time. */
    rill_consumer_options co;
    rill_consumer_options_init(&co);
    co.start = RILL_START_TIME;
    co.start_offset = t;
    rill_consumer *from = NULL;
    OK(rill_consumer_new(b, "from-time", "timed", &co, &from));
    OK(rill_consumer_position(from, 0, &pos));
    CHECK(pos == want);
    recorder rec;
    recorder_init(&rec);
    rill_subscription_options so;
    rill_subscription_options_init(&so);
    so.start = RILL_START_TIME;
    so.start_offset = t;
    rill_subscription *s = NULL;
    OK(rill_subscribe(b, "timed", &so, record_handler, &rec, &s));
    OK(rill_subscription_wait_idle(s, 30000));
    CHECK(recorder_count(&rec) == (int)(300 - want) && rec.offsets[0] == want);
    so.start = 9;
    rill_subscription *bad = NULL;
    CHECK_STATUS(rill_subscribe(b, "timed", &so, record_handler, &rec, &bad), RILL_ERR_INVALID_ARGUMENT);
    rill_subscription_free(s);
    rill_consumer_free(from);
    rill_consumer_free(c);
    rill_broker_free(b);
}

static void test_retention_by_age(void) {
    rill_broker *b = new_broker();
    rill_topic_options to;
    rill_topic_options_init(&to);
    CHECK(to.retention_ms == 0);
    to.retention_bytes = 64 << 10; /* 16 KiB segments */
    to.retention_ms = 30;
    OK(rill_topic_create(b, "aging", &to));
    for (int i = 0; i < 100; i++) {
        rill_record r = record_of("old");
        OK(rill_publish(b, "aging", &r, NULL));
    }
    /* Nobody publishes; the broker's timer trims what has expired. The
     * oldest retained offset is where a consumer's seek_to_beginning lands. */
    rill_consumer *c = NULL;
    OK(rill_consumer_new(b, "watch", "aging", NULL, &c));
    uint64_t first = 0;
    for (int waited = 0; waited < 30000 && first < 100; waited++) {
        OK(rill_consumer_seek_to_beginning(c));
        OK(rill_consumer_position(c, 0, &first));
        if (first < 100) sleep_ms(1);
    }
    CHECK(first == 100);
    rill_record r = record_of("new");
    rill_position pos;
    OK(rill_publish(b, "aging", &r, &pos));
    CHECK(pos.offset == 100);
    rill_consumer_free(c);
    rill_broker_free(b);
}

/* ---- logs and alerts ---------------------------------------------------------- */

typedef struct {
    pthread_mutex_t lock;
    int count;
    int warns;
    char last[256];
    char target[64];
    int try_reset;          /* call rill_set_log_callback from inside */
    rill_status reset_status;
} log_sink;

static void log_sink_init(log_sink *l) {
    memset(l, 0, sizeof *l);
    pthread_mutex_init(&l->lock, NULL);
}

static int log_count(log_sink *l) {
    pthread_mutex_lock(&l->lock);
    int n = l->count;
    pthread_mutex_unlock(&l->lock);
    return n;
}

static void log_into(void *user_data, int32_t level, const char *target, const char *message) {
    log_sink *l = (log_sink *)user_data;
    pthread_mutex_lock(&l->lock);
    int try_reset = l->try_reset;
    pthread_mutex_unlock(&l->lock);
    rill_status st = try_reset ? rill_set_log_callback(NULL, NULL) : RILL_OK;
    pthread_mutex_lock(&l->lock);
    if (try_reset) l->reset_status = st;
    l->count++;
    if (level == RILL_LOG_WARN) l->warns++;
    snprintf(l->last, sizeof l->last, "%s", message);
    snprintf(l->target, sizeof l->target, "%s", target);
    pthread_mutex_unlock(&l->lock);
}

typedef struct {
    pthread_mutex_t lock;
    int count;
    char payload[64];
    char reason[128];
    uint64_t offset;
} alert_sink;

static void on_dead_letter_alert(void *user_data, const rill_message *m, const char *reason) {
    alert_sink *a = (alert_sink *)user_data;
    pthread_mutex_lock(&a->lock);
    a->count++;
    size_t n = m->payload_len < 63 ? m->payload_len : 63;
    memcpy(a->payload, m->payload, n);
    a->payload[n] = 0;
    snprintf(a->reason, sizeof a->reason, "%s", reason);
    a->offset = m->offset;
    pthread_mutex_unlock(&a->lock);
}

static rill_ack dead_letter_everything(void *user_data, const rill_message *m) {
    (void)user_data;
    rill_ack_reason(m, "rejected by the test");
    return RILL_ACK_DEAD_LETTER;
}

typedef struct {
    rill_broker *b;
    pthread_mutex_t lock;
    int stop;
    int published;
} poison_pump;

static void *pump_poison(void *arg) {
    poison_pump *p = (poison_pump *)arg;
    rill_record r = record_of("poison");
    for (;;) {
        pthread_mutex_lock(&p->lock);
        int stop = p->stop;
        pthread_mutex_unlock(&p->lock);
        if (stop) return NULL;
        if (rill_publish(p->b, "alerts", &r, NULL) == RILL_OK) p->published++;
        sleep_ms(1);
    }
}

static rill_status reset_status_of(log_sink *l) {
    pthread_mutex_lock(&l->lock);
    rill_status st = l->reset_status;
    pthread_mutex_unlock(&l->lock);
    return st;
}

static void test_log_callback_and_dead_letter_alerts(void) {
    rill_broker *b = new_broker();
    OK(rill_topic_create(b, "alerts", NULL));
    alert_sink alerts;
    memset(&alerts, 0, sizeof alerts);
    pthread_mutex_init(&alerts.lock, NULL);
    rill_subscription_options so;
    rill_subscription_options_init(&so);
    CHECK(so.on_dead_letter == NULL);
    so.name = "alerted";
    so.on_dead_letter = on_dead_letter_alert;
    rill_subscription *s = NULL;
    OK(rill_subscribe(b, "alerts", &so, dead_letter_everything, &alerts, &s));

    log_sink a, bb;
    log_sink_init(&a);
    log_sink_init(&bb);
    OK(rill_set_log_callback(log_into, &a));
    rill_record r = record_of("poison");
    OK(rill_publish(b, "alerts", &r, NULL));
    OK(rill_subscription_wait_idle(s, 30000));
    /* The alert: the message and the reason. */
    pthread_mutex_lock(&alerts.lock);
    CHECK(alerts.count == 1 && strcmp(alerts.payload, "poison") == 0 && alerts.offset == 0);
    CHECK(strcmp(alerts.reason, "rejected by the test") == 0);
    pthread_mutex_unlock(&alerts.lock);
    /* The log: a warning from the subscription part of rill. */
    pthread_mutex_lock(&a.lock);
    CHECK(a.warns >= 1 && strstr(a.last, "dead-lettered alerts partition 0 offset 0") != NULL);
    CHECK(strcmp(a.target, "rill::subscription") == 0);
    pthread_mutex_unlock(&a.lock);

    /* Levels: above the maximum nothing is passed. */
    OK(rill_set_log_level(RILL_LOG_ERROR));
    int before = log_count(&a);
    OK(rill_publish(b, "alerts", &r, NULL));
    OK(rill_subscription_wait_idle(s, 30000));
    CHECK(log_count(&a) == before);
    CHECK_STATUS(rill_set_log_level(6), RILL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(rill_set_log_level(-1), RILL_ERR_INVALID_ARGUMENT);
    OK(rill_set_log_level(RILL_LOG_WARN));

    /* Replacing the callback while another thread logs: once the call
     * returns, the old one is never called again. */
    poison_pump pump;
    memset(&pump, 0, sizeof pump);
    pump.b = b;
    pthread_mutex_init(&pump.lock, NULL);
    pthread_t t;
    pthread_create(&t, NULL, pump_poison, &pump);
    while (log_count(&a) < before + 3) sleep_ms(1);
    OK(rill_set_log_callback(log_into, &bb));
    int a_after = log_count(&a);
    while (log_count(&bb) < 3) sleep_ms(1);
    CHECK(log_count(&a) == a_after);
    /* Setting it from inside the callback is refused (it would wait for itself). */
    pthread_mutex_lock(&bb.lock);
    bb.try_reset = 1;
    pthread_mutex_unlock(&bb.lock);
    while (reset_status_of(&bb) == RILL_OK) sleep_ms(1);
    CHECK(reset_status_of(&bb) == RILL_ERR_INVALID_ARGUMENT);
    pthread_mutex_lock(&pump.lock);
    pump.stop = 1;
    pthread_mutex_unlock(&pump.lock);
    pthread_join(t, NULL);
    OK(rill_subscription_wait_idle(s, 30000));
    /* No callback: nothing is passed. */
    OK(rill_set_log_callback(NULL, NULL));
    int b_after = log_count(&bb);
    OK(rill_publish(b, "alerts", &r, NULL));
    OK(rill_subscription_wait_idle(s, 30000));
    CHECK(log_count(&bb) == b_after);
    pthread_mutex_lock(&alerts.lock);
    CHECK(alerts.count == 3 + pump.published);
    pthread_mutex_unlock(&alerts.lock);
    OK(rill_set_log_level(RILL_LOG_INFO));
    rill_subscription_free(s);
    rill_broker_free(b);
}

/* A shared member's handler: counts the calls per (partition, offset) and
 * notes which member made them. */
typedef struct {
    pthread_mutex_t lock;
    int calls[4][64];
    int by[2];
} shared_log;

typedef struct {
    shared_log *log;
    int member;
} shared_member;

static rill_ack shared_handler(void *user_data, const rill_message *m) {
    shared_member *me = (shared_member *)user_data;
    pthread_mutex_lock(&me->log->lock);
    if (m->partition < 4 && m->offset < 64) me->log->calls[m->partition][m->offset]++;
    me->log->by[me->member]++;
    pthread_mutex_unlock(&me->log->lock);
    return RILL_ACK_SUCCESS;
}

static void test_shared_subscription_members(void) {
    rill_broker *b = new_broker();
    rill_topic_options to;
    rill_topic_options_init(&to);
    to.partitions = 4;
    OK(rill_topic_create(b, "jobs", &to));
    shared_log log;
    memset(&log, 0, sizeof log);
    pthread_mutex_init(&log.lock, NULL);
    shared_member m0 = {&log, 0}, m1 = {&log, 1};
    rill_subscription_options o = sub_options();
    CHECK(!o.shared);
    o.name = "workers";
    o.shared = true;
    o.start = RILL_START_EARLIEST;
    rill_subscription *s0 = NULL, *s1 = NULL, *plain = NULL;
    OK(rill_subscribe(b, "jobs", &o, shared_handler, &m0, &s0));
    OK(rill_subscribe(b, "jobs", &o, shared_handler, &m1, &s1));
    /* A non-shared subscription with the name is refused while they live. */
    rill_subscription_options p = sub_options();
    p.name = "workers";
    CHECK_STATUS(rill_subscribe(b, "jobs", &p, shared_handler, &m0, &plain), RILL_ERR_BUSY);
    CHECK(plain == NULL);
    /* Shared needs a name. */
    rill_subscription_options anon = sub_options();
    anon.shared = true;
    CHECK_STATUS(rill_subscribe(b, "jobs", &anon, shared_handler, &m0, &plain), RILL_ERR_INVALID_ARGUMENT);

    /* The first member gives two partitions to the second before it is
     * idle again. */
    rill_subscription_stats st0, st1;
    OK(rill_subscription_wait_idle(s0, 10000));
    OK(rill_subscription_get_stats(s0, &st0));
    OK(rill_subscription_get_stats(s1, &st1));
    CHECK(st0.partitions == 2 && st1.partitions == 2);
    /* 40 messages round-robin over the partitions: each handled once, 20
     * by each member. */
    for (int i = 0; i < 40; i++) {
        rill_record r = record_of("job");
        OK(rill_publish(b, "jobs", &r, NULL));
    }
    OK(rill_subscription_wait_idle(s0, 10000));
    OK(rill_subscription_wait_idle(s1, 10000));
    OK(rill_subscription_get_stats(s0, &st0));
    OK(rill_subscription_get_stats(s1, &st1));
    CHECK(st0.acked == 20 && st1.acked == 20);
    /* One member closes: the other reads all four, from where it was. */
    rill_subscription_free(s0);
    for (int i = 0; i < 40; i++) {
        rill_record r = record_of("job");
        OK(rill_publish(b, "jobs", &r, NULL));
    }
    OK(rill_subscription_wait_idle(s1, 10000));
    OK(rill_subscription_get_stats(s1, &st1));
    CHECK(st1.partitions == 4);
    pthread_mutex_lock(&log.lock);
    int once = 1;
    for (int part = 0; part < 4; part++)
        for (int off = 0; off < 20; off++) once &= log.calls[part][off] == 1;
    CHECK(once);
    CHECK(log.by[0] + log.by[1] == 80);
    pthread_mutex_unlock(&log.lock);
    rill_subscription_free(s1);
    pthread_mutex_destroy(&log.lock);
    rill_broker_free(b);
}

/* A member stuck on I/O: its handler waits until the test opens the gate. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t opened;
    int open;
    int calls;
} stall_gate;

static rill_ack stalling_handler(void *user_data, const rill_message *m) {
    (void)m;
    stall_gate *g = (stall_gate *)user_data;
    pthread_mutex_lock(&g->lock);
    g->calls++;
    while (!g->open) pthread_cond_wait(&g->opened, &g->lock);
    pthread_mutex_unlock(&g->lock);
    return RILL_ACK_SUCCESS;
}

static void test_ack_timeout_hands_a_stalled_members_partitions_over(void) {
    rill_broker *b = new_broker();
    OK(rill_topic_create(b, "jobs", NULL));
    stall_gate g;
    memset(&g, 0, sizeof g);
    pthread_mutex_init(&g.lock, NULL);
    pthread_cond_init(&g.opened, NULL);
    shared_log log;
    memset(&log, 0, sizeof log);
    pthread_mutex_init(&log.lock, NULL);
    shared_member other = {&log, 1};
    rill_subscription_options o = sub_options();
    CHECK(o.ack_timeout_ms == 0);
    o.name = "workers";
    o.shared = true;
    o.ack_timeout_ms = 100;
    rill_subscription *stalling = NULL, *s1 = NULL;
    /* The first member owns the one partition; the second waits. */
    OK(rill_subscribe(b, "jobs", &o, stalling_handler, &g, &stalling));
    /* Its own deadline is long: a slow run (valgrind) must not stall it. */
    rill_subscription_options o1 = o;
    o1.ack_timeout_ms = 60000;
    OK(rill_subscribe(b, "jobs", &o1, shared_handler, &other, &s1));
    rill_subscription_stats st0, st1;
    OK(rill_subscription_get_stats(s1, &st1));
    CHECK(st1.partitions == 0 && st1.ack_timeouts == 0);
    rill_record r = record_of("job");
    OK(rill_publish(b, "jobs", &r, NULL));
    /* Past the deadline the other member gets the partition and the stuck
     * message (offset 0) again; wait for that, up to 10 s. */
    int delivered = 0;
    for (int i = 0; i < 10000 && !delivered; i++) {
        pthread_mutex_lock(&log.lock);
        delivered = log.calls[0][0];
        pthread_mutex_unlock(&log.lock);
        if (!delivered) sleep_ms(1);
    }
    CHECK(delivered == 1);
    OK(rill_subscription_get_stats(stalling, &st0));
    OK(rill_subscription_get_stats(s1, &st1));
    CHECK(st0.ack_timeouts == 1 && st0.partitions == 0);
    CHECK(st1.partitions == 1 && st1.ack_timeouts == 0);
    /* The late ack is discarded: nothing acked by the stalled member, and
     * the message is not delivered a third time. */
    pthread_mutex_lock(&g.lock);
    g.open = 1;
    pthread_cond_broadcast(&g.opened);
    pthread_mutex_unlock(&g.lock);
    OK(rill_subscription_wait_idle(stalling, 10000));
    OK(rill_subscription_wait_idle(s1, 10000));
    OK(rill_subscription_get_stats(stalling, &st0));
    OK(rill_subscription_get_stats(s1, &st1));
    CHECK(st0.acked == 0 && st1.acked == 1 && g.calls == 1 && log.calls[0][0] == 1);
    char why[256];
    rill_subscription_last_error(stalling, why, sizeof why);
    CHECK(strstr(why, "ack_timeout") != NULL);
    rill_subscription_free(s1);
    rill_subscription_free(stalling);
    pthread_mutex_destroy(&log.lock);
    pthread_cond_destroy(&g.opened);
    pthread_mutex_destroy(&g.lock);
    rill_broker_free(b);
}

int main(void) {
    test_version_status_names_and_last_error();
    test_option_struct_sizes();
    test_panic_boundary();
    test_null_arguments();
    test_invalid_names_patterns_filters_and_strings();
    test_publish_subscribe_earliest_latest_and_attributes();
    test_message_attribute_accessors();
    test_filters_and_partitions();
    test_batch_publish_and_publisher_handle();
    test_publisher_record_checks();
    test_publisher_batch_record_checks();
    test_publisher_batch_attribute_runs();
    test_publisher_publish_errors_keep_status_and_text();
    test_retry_dead_letter_and_reason();
    test_invalid_ack_is_a_retry();
    test_durable_resume();
    test_overflow_policies();
    test_pull_consumer();
    test_consumer_group_members();
    test_consumer_nack_dead_letters();
    test_shared_subscription_members();
    test_ack_timeout_hands_a_stalled_members_partitions_over();
    test_reentrancy();
    test_freeing_the_broker_first_closes_everything();
    test_user_data_is_released_when_subscribe_fails();
    test_broker_options();
    test_thread_exhaustion_is_resource_exhausted();
    test_at_most_once();
    test_batch_subscription();
    test_topic_pointers_are_stable();
    test_topic_pointers_across_delete_and_recreate();
    test_handlers_that_free_each_other();
    test_handlers_that_close_each_others_broker();
    test_on_lagged_hears_what_retention_trimmed();
    test_free_returns_after_user_data_free();
    test_anonymous_subscriptions_and_dead_letters();
    test_calls_that_would_wait_for_their_own_handler_fail_fast();
    test_listing_topics_subscriptions_and_groups();
    test_deleting_topics_durables_and_groups();
    test_seek_and_start_by_time();
    test_retention_by_age();
    test_log_callback_and_dead_letter_alerts();
    return CHECK_VERDICT("C ABI tests");
}
