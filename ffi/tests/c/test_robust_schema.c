/*
 * Topic schemas from C (issue 42): a JSON Schema document
 * (rill_topic_set_schema_json) or a validator function with a user pointer
 * (rill_topic_set_validator); invalid payloads refused with RILL_ERR_SCHEMA
 * (the reason in rill_last_error) or dead-lettered to $dlq/<topic>
 * (RILL_PUBLISHED_DEAD_LETTERED, the reason in rill.dlq.reason). A batch
 * with one bad record, a validator that fills its whole reason buffer,
 * versions on delivered messages, replacement while threads publish, a
 * validator removing the schema whose call it runs inside, a durable
 * topic's schema after a restart, and, first (forked before any broker
 * runs), a validator set in one process of a shared data directory: the
 * other process checks nothing but reads the validator's version.
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
#include <time.h>
#include <unistd.h>

#include "rill.h"

#include "check.h"
#include "dirs.h"
#include "procs.h"

enum {
    THREADS = 4,
    PER_THREAD = 400,
    REPLACEMENTS = 30,
    PATH_LEN = 256,
    ERR_LEN = 1024,
};

static const char *ORDER_SCHEMA =
    "{\"type\":\"object\",\"required\":[\"id\",\"status\"],"
    "\"properties\":{\"id\":{\"type\":\"integer\"},\"status\":{\"enum\":[\"new\",\"paid\"]}}}";

static rill_record record(const char *payload) {
    rill_record r;
    memset(&r, 0, sizeof r);
    r.payload = payload;
    r.payload_len = strlen(payload);
    return r;
}

static uint64_t published(rill_broker *b, const char *topic) {
    rill_topic_stats s;
    memset(&s, 0, sizeof s);
    OK(rill_topic_get_stats(b, topic, &s));
    return s.publish_count;
}

static int last_error_has(const char *needle) {
    char err[ERR_LEN];
    rill_last_error(err, sizeof err);
    return strstr(err, needle) != NULL;
}

/* Reads `n` messages of `topic` with a fresh consumer, calling `see` on each. */
static void read_n(rill_broker *b, const char *topic, size_t n, void (*see)(const rill_message *, void *), void *arg) {
    rill_consumer *c = NULL;
    OK(rill_consumer_new(b, "reader", topic, NULL, &c));
    if (c == NULL) {
        return;
    }
    size_t seen = 0;
    for (int round = 0; round < 1000 && seen < n; round++) {
        const rill_message *ms = NULL;
        size_t count = 0;
        OK(rill_consumer_poll(c, 256, 100, &ms, &count));
        for (size_t i = 0; i < count; i++) {
            see(&ms[i], arg);
        }
        seen += count;
    }
    CHECK(seen == n);
    rill_consumer_free(c);
    OK(rill_group_delete(b, "reader", topic));
}

static void see_dead_letter(const rill_message *m, void *arg) {
    const char *value = NULL;
    size_t len = 0;
    OK(rill_message_attribute(m, "rill.dlq.reason", &value, &len));
    CHECK(value != NULL && strstr(value, (const char *)arg) != NULL);
    OK(rill_message_attribute(m, "rill.dlq.topic", &value, &len));
    CHECK(len == 6 && memcmp(value, "orders", 6) == 0);
    CHECK(rill_message_schema_version(m) == 0);
}

static void json_schemas_reject_and_dead_letter(void) {
    rill_broker *b = NULL;
    OK(rill_broker_new(NULL, &b));
    OK(rill_topic_create(b, "orders", NULL));
    uint64_t version = 99;
    OK(rill_topic_schema_version(b, "orders", &version));
    CHECK(version == 0);

    /* Bad documents and bad arguments. */
    CHECK_STATUS(rill_topic_set_schema_json(b, "orders", "{\"type\": 5}", RILL_ON_INVALID_REJECT),
                 RILL_ERR_INVALID_ARGUMENT);
    CHECK(last_error_has("JSON schema"));
    CHECK_STATUS(rill_topic_set_schema_json(b, "orders", "{nope", RILL_ON_INVALID_REJECT), RILL_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(rill_topic_set_schema_json(b, "orders", "true", 7), RILL_ERR_INVALID_ARGUMENT);
    CHECK(last_error_has("on_invalid"));
    CHECK_STATUS(rill_topic_set_schema_json(b, "orders", NULL, RILL_ON_INVALID_REJECT), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_topic_set_schema_json(b, "missing", "true", RILL_ON_INVALID_REJECT), RILL_ERR_NO_SUCH_TOPIC);
    CHECK_STATUS(rill_topic_set_validator(b, "orders", NULL, NULL, RILL_ON_INVALID_REJECT), RILL_ERR_NULL_ARGUMENT);
    OK(rill_topic_schema_version(b, "orders", &version));
    CHECK(version == 0);

    /* Reject: the reason names the path and keyword; nothing is appended. */
    OK(rill_topic_set_schema_json(b, "orders", ORDER_SCHEMA, RILL_ON_INVALID_REJECT));
    OK(rill_topic_schema_version(b, "orders", &version));
    CHECK(version == 1);
    rill_record good = record("{\"id\":1,\"status\":\"new\"}");
    rill_record bad = record("{\"id\":1,\"status\":\"lost\"}");
    rill_record not_json = record("not json");
    rill_position at;
    uint32_t flags = 99;
    OK(rill_publish_outcome(b, "orders", &good, &at, &flags));
    CHECK(flags == 0 && at.offset == 0);
    CHECK_STATUS(rill_publish(b, "orders", &bad, &at), RILL_ERR_SCHEMA);
    CHECK(last_error_has("/status") && last_error_has("enum"));
    CHECK_STATUS(rill_publish(b, "orders", &not_json, &at), RILL_ERR_SCHEMA);
    CHECK(last_error_has("not JSON"));
    rill_publisher *p = NULL;
    OK(rill_publisher_new(b, "orders", &p));
    CHECK_STATUS(rill_publisher_publish(p, &bad, &at), RILL_ERR_SCHEMA);
    /* A batch with one bad record: refused whole, naming its index. */
    rill_record batch[3] = {good, good, bad};
    CHECK_STATUS(rill_publish_batch(b, "orders", batch, 3, NULL), RILL_ERR_SCHEMA);
    CHECK(last_error_has("record 2"));
    CHECK(published(b, "orders") == 1);

    /* Dead letter: flagged, positioned in $dlq/orders, reason attached. */
    OK(rill_topic_set_schema_json(b, "orders", ORDER_SCHEMA, RILL_ON_INVALID_DEAD_LETTER));
    OK(rill_publish_outcome(b, "orders", &bad, &at, &flags));
    CHECK(flags == RILL_PUBLISHED_DEAD_LETTERED && at.offset == 0);
    OK(rill_publisher_publish_outcome(p, &bad, &at, &flags));
    CHECK(flags == RILL_PUBLISHED_DEAD_LETTERED && at.offset == 1);
    uint32_t fl[3] = {9, 9, 9};
    rill_position pos[3];
    OK(rill_publish_batch_outcome(b, "orders", batch, 3, pos, fl));
    CHECK(fl[0] == 0 && fl[1] == 0 && fl[2] == RILL_PUBLISHED_DEAD_LETTERED);
    CHECK(pos[0].offset == 1 && pos[1].offset == 2 && pos[2].offset == 2);
    /* The bindings' plain-argument calls say it too, with the same flags:
     * one message, then two packed (the second with a status the schema
     * does not list). */
    const char *bad_text = "{\"id\":1,\"status\":\"lost\"}";
    flags = 99;
    OK(rill_publisher_publish_bytes_outcome(p, bad_text, strlen(bad_text), NULL, 0, &at, &flags));
    CHECK(flags == RILL_PUBLISHED_DEAD_LETTERED && at.offset == 3);
    const char *packed = "{\"id\":2,\"status\":\"paid\"}{\"id\":3,\"status\":\"gone\"}";
    size_t lens[2] = {strlen(packed) / 2, strlen(packed) / 2};
    uint32_t fl2[2] = {9, 9};
    OK(rill_publisher_publish_packed_outcome(p, packed, lens, 2, pos, fl2));
    CHECK(fl2[0] == 0 && fl2[1] == RILL_PUBLISHED_DEAD_LETTERED);
    CHECK(pos[0].offset == 3 && pos[1].offset == 4);
    CHECK_STATUS(rill_publisher_publish_packed_outcome(p, packed, NULL, 2, pos, fl2), RILL_ERR_NULL_ARGUMENT);
    rill_publisher_free(p);
    CHECK(published(b, "orders") == 4);
    CHECK(published(b, "$dlq/orders") == 5);
    read_n(b, "$dlq/orders", 5, see_dead_letter, (void *)"/status");

    OK(rill_topic_remove_schema(b, "orders"));
    OK(rill_topic_schema_version(b, "orders", &version));
    CHECK(version == 0);
    OK(rill_publish(b, "orders", &not_json, &at));
    rill_broker_free(b);
}

/* A validator: payloads of at most `*(size_t *)user` bytes; "fill" writes
 * a reason that fills the whole buffer without a NUL. */
static int max_len_validator(void *user, const uint8_t *payload, size_t len, char *reason, size_t reason_len) {
    size_t max = *(const size_t *)user;
    if (len == 4 && memcmp(payload, "fill", 4) == 0) {
        memset(reason, 'x', reason_len);
        return 1;
    }
    if (len > max) {
        snprintf(reason, reason_len, "%zu bytes; at most %zu", len, max);
        return 2;
    }
    return 0;
}

/* Returns non-zero and writes no reason. */
static int silent_validator(void *user, const uint8_t *payload, size_t len, char *reason, size_t reason_len) {
    (void)user;
    (void)payload;
    (void)reason;
    (void)reason_len;
    return len == 0 ? 0 : -3;
}

static void see_version(const rill_message *m, void *arg) {
    uint64_t *versions = arg;
    versions[m->offset] = rill_message_schema_version(m);
}

static void validator_functions(void) {
    rill_broker *b = NULL;
    OK(rill_broker_new(NULL, &b));
    OK(rill_topic_create(b, "orders", NULL));
    rill_record before = record("before the schema");
    OK(rill_publish(b, "orders", &before, NULL));
    size_t max = 8;
    OK(rill_topic_set_validator(b, "orders", max_len_validator, &max, RILL_ON_INVALID_REJECT));
    rill_record fine = record("short");
    rill_record big = record("much too long");
    rill_record fill = record("fill");
    rill_position at;
    OK(rill_publish(b, "orders", &fine, &at));
    CHECK_STATUS(rill_publish(b, "orders", &big, &at), RILL_ERR_SCHEMA);
    CHECK(last_error_has("13 bytes; at most 8"));
    /* A reason filling the buffer without a NUL is cut at its end. */
    CHECK_STATUS(rill_publish(b, "orders", &fill, &at), RILL_ERR_SCHEMA);
    char err[ERR_LEN];
    size_t n = rill_last_error(err, sizeof err);
    CHECK(n == strlen("schema: ") + RILL_SCHEMA_REASON_MAX);
    /* The user pointer is the caller's: changing what it points to counts. */
    max = 64;
    OK(rill_publish(b, "orders", &big, &at));
    OK(rill_topic_set_validator(b, "orders", silent_validator, NULL, RILL_ON_INVALID_REJECT));
    CHECK_STATUS(rill_publish(b, "orders", &fine, &at), RILL_ERR_SCHEMA);
    CHECK(last_error_has("the validator returned -3"));
    uint64_t version = 0;
    OK(rill_topic_schema_version(b, "orders", &version));
    CHECK(version == 2);
    uint64_t versions[3] = {9, 9, 9};
    read_n(b, "orders", 3, see_version, versions);
    CHECK(versions[0] == 0 && versions[1] == 1 && versions[2] == 1);
    CHECK(rill_message_schema_version(NULL) == 0);
    rill_broker_free(b);
}

/* Replacement while threads publish: odd versions accept only "a", even
 * ones only "b"; every appended record must fit the version it carries. */
static int only_a(void *user, const uint8_t *payload, size_t len, char *reason, size_t reason_len) {
    (void)user;
    (void)reason;
    (void)reason_len;
    return !(len == 1 && payload[0] == 'a');
}

static int only_b(void *user, const uint8_t *payload, size_t len, char *reason, size_t reason_len) {
    (void)user;
    (void)reason;
    (void)reason_len;
    return !(len == 1 && payload[0] == 'b');
}

typedef struct {
    rill_broker *b;
    int id;
    int wrong;
} publisher_arg;

static void *publish_both(void *arg) {
    publisher_arg *a = arg;
    rill_publisher *p = NULL;
    if (rill_publisher_new(a->b, "race", &p) != RILL_OK) {
        a->wrong++;
        return NULL;
    }
    for (int i = 0; i < PER_THREAD; i++) {
        rill_record r = record((i + a->id) % 2 ? "a" : "b");
        rill_status s = rill_publisher_publish(p, &r, NULL);
        a->wrong += s != RILL_OK && s != RILL_ERR_SCHEMA;
    }
    rill_publisher_free(p);
    return NULL;
}

static void see_fits(const rill_message *m, void *arg) {
    int *wrong = arg;
    uint64_t v = rill_message_schema_version(m);
    char want = v % 2 ? 'a' : 'b';
    *wrong += v == 0 || m->payload_len != 1 || m->payload[0] != want;
}

static void replaced_while_threads_publish(void) {
    rill_broker *b = NULL;
    OK(rill_broker_new(NULL, &b));
    OK(rill_topic_create(b, "race", NULL));
    OK(rill_topic_set_validator(b, "race", only_a, NULL, RILL_ON_INVALID_REJECT));
    pthread_t threads[THREADS];
    publisher_arg args[THREADS];
    for (int t = 0; t < THREADS; t++) {
        args[t].b = b;
        args[t].id = t;
        args[t].wrong = 0;
        CHECK(pthread_create(&threads[t], NULL, publish_both, &args[t]) == 0);
    }
    for (int v = 2; v <= REPLACEMENTS; v++) {
        OK(rill_topic_set_validator(b, "race", v % 2 ? only_a : only_b, NULL, RILL_ON_INVALID_REJECT));
    }
    for (int t = 0; t < THREADS; t++) {
        pthread_join(threads[t], NULL);
        CHECK(args[t].wrong == 0);
    }
    int wrong = 0;
    uint64_t n = published(b, "race");
    CHECK(n > 0);
    read_n(b, "race", (size_t)n, see_fits, &wrong);
    CHECK(wrong == 0);
    rill_broker_free(b);
}

static void a_durable_schema_survives_a_restart(void) {
    char root[] = "/tmp/rill-c-robust-schema-XXXXXX";
    if (mkdtemp(root) == NULL) {
        perror("mkdtemp");
        exit(2);
    }
    rill_broker *b = open_broker_or_exit(root, RILL_FSYNC_INTERVAL);
    OK(rill_topic_create(b, "orders", NULL));
    OK(rill_topic_set_schema_json(b, "orders", ORDER_SCHEMA, RILL_ON_INVALID_DEAD_LETTER));
    rill_broker_free(b);

    b = open_broker_or_exit(root, RILL_FSYNC_INTERVAL);
    uint64_t version = 0;
    OK(rill_topic_schema_version(b, "orders", &version));
    CHECK(version == 1);
    rill_record bad = record("{\"id\":\"x\",\"status\":\"new\"}");
    uint32_t flags = 0;
    OK(rill_publish_outcome(b, "orders", &bad, NULL, &flags));
    CHECK(flags == RILL_PUBLISHED_DEAD_LETTERED);
    CHECK(published(b, "orders") == 0);
    rill_broker_free(b);

    char rm[PATH_LEN];
    snprintf(rm, sizeof rm, "rm -rf '%s'", root);
    CHECK(system(rm) == 0);
}

/* A validator removing the schema whose call it runs inside (topic A's
 * validator publishes to B, whose validator removes A's schema): the
 * removal returns without waiting for that call, its own caller, and A's
 * user_free runs once that call is over, not before. */
struct nested {
    rill_broker *b;
    int a_freed;        /* set by A's user_free */
    rill_status inner;  /* what A's validator's publish to B returned */
    rill_status remove; /* what B's validator's removal of A's schema returned */
    int freed_inside;   /* a_freed as B's validator saw it, after the removal */
    int done;           /* the scenario returned */
    rill_status outer;  /* the outer publish to A */
};

static void free_a(void *user) {
    __atomic_store_n(&((struct nested *)user)->a_freed, 1, __ATOMIC_SEQ_CST);
}

static int validator_a(void *user, const uint8_t *payload, size_t len, char *reason, size_t reason_len) {
    struct nested *n = user;
    (void)payload, (void)len, (void)reason, (void)reason_len;
    rill_record r = record("inner");
    n->inner = rill_publish(n->b, "B", &r, NULL);
    return 0;
}

static int validator_b(void *user, const uint8_t *payload, size_t len, char *reason, size_t reason_len) {
    struct nested *n = user;
    (void)payload, (void)len, (void)reason, (void)reason_len;
    n->remove = rill_topic_remove_schema(n->b, "A");
    n->freed_inside = __atomic_load_n(&n->a_freed, __ATOMIC_SEQ_CST);
    return 0;
}

static void *nested_scenario(void *arg) {
    struct nested *n = arg;
    rill_record r = record("outer");
    n->outer = rill_publish(n->b, "A", &r, NULL);
    __atomic_store_n(&n->done, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static void a_validator_removes_the_schema_it_runs_inside(void) {
    static struct nested n; /* outlives a hung scenario thread */
    OK(rill_broker_new(NULL, &n.b));
    OK(rill_topic_create(n.b, "A", NULL));
    OK(rill_topic_create(n.b, "B", NULL));
    OK(rill_topic_set_validator_with_free(n.b, "A", validator_a, &n, free_a, RILL_ON_INVALID_REJECT));
    OK(rill_topic_set_validator(n.b, "B", validator_b, &n, RILL_ON_INVALID_REJECT));
    pthread_t t;
    CHECK(pthread_create(&t, NULL, nested_scenario, &n) == 0);
    /* Watchdog: a removal waiting for its own caller never returns. */
    struct timespec start, now, pause = {0, 1000000};
    clock_gettime(CLOCK_MONOTONIC, &start);
    while (!__atomic_load_n(&n.done, __ATOMIC_SEQ_CST)) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - start.tv_sec > 60) {
            fprintf(stderr, "test_robust_schema: rill_topic_remove_schema from inside the validator call "
                            "it removes has not returned in 60 s: it hangs\n");
            _exit(1);
        }
        nanosleep(&pause, NULL);
    }
    CHECK(pthread_join(t, NULL) == 0);
    OK(n.outer);
    OK(n.inner);
    OK(n.remove);
    CHECK(n.freed_inside == 0); /* A's call was still in flight */
    CHECK(__atomic_load_n(&n.a_freed, __ATOMIC_SEQ_CST) == 1);
    uint64_t v = 99;
    OK(rill_topic_schema_version(n.b, "A", &v));
    CHECK(v == 0);
    /* A failed set frees the user pointer too. */
    n.a_freed = 0;
    CHECK_STATUS(rill_topic_set_validator_with_free(n.b, "nope", validator_a, &n, free_a, RILL_ON_INVALID_REJECT),
                 RILL_ERR_NO_SUCH_TOPIC);
    CHECK(n.a_freed == 1);
    rill_broker_free(n.b);
}

/* Waits, for PROCS_WAIT_SECONDS at the most, until `b` reads the schema
 * version `want` for `topic` (NO_SUCH_TOPIC until its doorbell has joined a
 * topic another process created); returns the last version read. */
static uint64_t wait_version(rill_broker *b, const char *topic, uint64_t want) {
    int64_t deadline = procs_now_ms() + (int64_t)PROCS_WAIT_SECONDS * 1000;
    uint64_t v = UINT64_MAX;
    for (;;) {
        if (rill_topic_schema_version(b, topic, &v) != RILL_OK) {
            v = UINT64_MAX;
        }
        if (v == want || procs_now_ms() >= deadline) {
            return v;
        }
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
}

/* A handler noting each message's schema version, as see_version. */
static rill_ack push_version(void *user_data, const rill_message *m) {
    see_version(m, user_data);
    return RILL_ACK_SUCCESS;
}

/* The other process of validator_in_another_process: it follows the
 * parent's schemas on its commands, and says when it has. */
static int schema_follower(const char *dir, int cmd, int rep) {
    rill_broker *b = NULL;
    OK(open_shared_broker(dir, RILL_SHARING_PROCESSES, RILL_FSYNC_NEVER, &b));
    if (b == NULL) {
        return 1;
    }
    expect_byte(cmd, 's');
    CHECK(wait_version(b, "t", 1) == 1);
    send_byte(rep, 's');
    expect_byte(cmd, 'v');
    /* The validators' versions, the directory's: what to wait on. */
    CHECK(wait_version(b, "t", 2) == 2);
    CHECK(wait_version(b, "u", 1) == 1);
    /* Checked by nothing here: only the parent's broker runs them. */
    rill_record long_text = record("not JSON, and long");
    OK(rill_publish(b, "t", &long_text, NULL));
    OK(rill_publish(b, "u", &long_text, NULL));
    rill_broker_free(b);
    send_byte(rep, 'v');
    return failures ? 1 : 0;
}

/* A validator set through one process's broker on a data directory shared
 * by processes: the other process drops the JSON schema it replaced and
 * checks nothing, but reads the validator's version (the directory's) from
 * rill_topic_schema_version, on a topic that had a JSON schema and on one
 * that had none; its records carry 0 (checked by no schema). Once every
 * process has let go of the directory, the function is gone with its
 * broker: the next opener reads 0. */
static void validator_in_another_process(void) {
    char dir[] = "/tmp/rill-c-schema-procs-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    pid_t pid;
    int rep, cmd;
    procs_fork_members(1, dir, schema_follower, &pid, &rep, &cmd);
    rill_broker *a = NULL;
    OK(open_shared_broker(dir, RILL_SHARING_PROCESSES, RILL_FSYNC_NEVER, &a));
    if (a == NULL) {
        return;
    }
    OK(rill_topic_create(a, "t", NULL));
    OK(rill_topic_create(a, "u", NULL));
    OK(rill_topic_set_schema_json(a, "t", "{\"type\":\"object\"}", RILL_ON_INVALID_REJECT));
    send_byte(cmd, 's');
    expect_byte(rep, 's');
    size_t max = 4;
    OK(rill_topic_set_validator(a, "t", max_len_validator, &max, RILL_ON_INVALID_REJECT));
    OK(rill_topic_set_validator(a, "u", max_len_validator, &max, RILL_ON_INVALID_REJECT));
    uint64_t version = 0;
    OK(rill_topic_schema_version(a, "t", &version));
    CHECK(version == 2);
    send_byte(cmd, 'v');
    expect_byte(rep, 'v');
    reap_child(pid);
    /* The child's record, the topic's only one, was checked by none. */
    uint64_t versions[1] = {9};
    rill_subscription_options so;
    rill_subscription_options_init(&so);
    so.start = RILL_START_EARLIEST;
    rill_subscription *sub = NULL;
    OK(rill_subscribe(a, "t", &so, push_version, versions, &sub));
    OK(rill_subscription_wait_idle(sub, 30000));
    rill_subscription_free(sub);
    CHECK(versions[0] == 0);
    rill_record long_text = record("not JSON, and long");
    CHECK_STATUS(rill_publish(a, "u", &long_text, NULL), RILL_ERR_SCHEMA);
    rill_broker_free(a);
    OK(open_shared_broker(dir, RILL_SHARING_PROCESSES, RILL_FSYNC_NEVER, &a));
    if (a != NULL) {
        OK(rill_topic_schema_version(a, "u", &version));
        CHECK(version == 0);
        OK(rill_publish(a, "u", &long_text, NULL));
        rill_broker_free(a);
    }
    close(rep);
    close(cmd);
    remove_dir(dir);
}

/* Found from outside: dead-letter mode on a topic whose `$dlq/<topic>` is
 * no valid name was accepted (every invalid publish then failed), and an
 * invalid record at the size limit did not fit `$dlq/<topic>` (its publish
 * failed with RILL_ERR_MESSAGE_TOO_LARGE). */
static void dead_letters_of_long_names_and_large_records(void) {
    rill_broker *b = NULL;
    OK(rill_broker_new(NULL, &b));
    char name[256];
    memset(name, 't', 255);
    name[255] = '\0';
    OK(rill_topic_create(b, name, NULL));
    CHECK_STATUS(rill_topic_set_schema_json(b, name, "{}", RILL_ON_INVALID_DEAD_LETTER), RILL_ERR_INVALID_ARGUMENT);
    OK(rill_topic_set_schema_json(b, name, "{}", RILL_ON_INVALID_REJECT));

    OK(rill_topic_create(b, "big", NULL));
    OK(rill_topic_set_schema_json(b, "big", "{\"type\":\"object\"}", RILL_ON_INVALID_DEAD_LETTER));
    /* The largest payload the default limit (1 MiB) takes: 24 bytes of
     * record header, the payload padded to 8. */
    size_t len = ((size_t)1 << 20) - 24;
    char *payload = malloc(len);
    CHECK(payload != NULL);
    memset(payload, 'x', len);
    rill_record r = {NULL, 0, payload, len, NULL, 0};
    rill_position pos;
    uint32_t flags = 0;
    OK(rill_publish_outcome(b, "big", &r, &pos, &flags));
    CHECK(flags == RILL_PUBLISHED_DEAD_LETTERED);
    CHECK(published(b, "$dlq/big") == 1);
    free(payload);
    rill_broker_free(b);
}

int main(void) {
    dead_letters_of_long_names_and_large_records();
    validator_in_another_process();
    json_schemas_reject_and_dead_letter();
    a_validator_removes_the_schema_it_runs_inside();
    validator_functions();
    replaced_while_threads_publish();
    a_durable_schema_survives_a_restart();
    return CHECK_VERDICT("test_robust_schema");
}
