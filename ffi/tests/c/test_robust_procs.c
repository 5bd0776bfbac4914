/*
 * Several processes on one data directory, from C (issue 39):
 * RILL_SHARING_PROCESSES brokers in forked processes publish into one topic
 * and a subscriber in the parent gets every message once, each publisher's
 * in its order, at dense offsets; then, idle, it is woken by a single
 * publish in a child that stays open (so only that publish's wake can
 * deliver it). Also: RILL_ERR_BUSY for mismatched modes,
 * RILL_ERR_INVALID_ARGUMENT without a data_dir, for a sharing value that
 * is not a RILL_SHARING_* constant, and for what processes do not share
 * yet (shared subscriptions), with rill_last_error saying so. Named
 * subscriptions across processes are test_robust_named.c's, consumer
 * groups test_robust_procs_groups.c's.
 *
 * The children are forked before the parent starts a broker (so no child
 * inherits a broker's threads) and wait on a pipe for each step.
 *
 * Built with -std=c99 -Wall -Wextra -Wpedantic -Werror, and run plain,
 * under AddressSanitizer + UBSan and under valgrind memcheck (children
 * traced) by ffi/tests/run.sh.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rill.h"

#include "check.h"
#include "dirs.h"
#include "procs.h"

enum {
    PUBLISHERS = 2,    /* child processes that publish */
    EACH = 300,        /* messages each publishes in the first step */
    TOTAL = PUBLISHERS * EACH + 1, /* and child 0's one more */
};

/* The parent's commands to a child, one byte each on its pipe. */
enum {
    CMD_GO = 'g',   /* open the directory and publish EACH messages */
    CMD_ONE = 'o',  /* publish one more */
    CMD_DONE = 'd', /* close and exit */
};

static const char *TOPIC = "orders";

/* What the parent's subscriber saw, in delivery order. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int count;
    uint32_t who[TOTAL];
    uint32_t seq[TOTAL];
    uint64_t offset[TOTAL];
} seen_t;

static rill_ack record(void *user_data, const rill_message *m) {
    seen_t *s = user_data;
    uint32_t who = UINT32_MAX, seq = UINT32_MAX;
    if (m->payload_len == 8) {
        memcpy(&who, m->payload, 4);
        memcpy(&seq, (const char *)m->payload + 4, 4);
    }
    pthread_mutex_lock(&s->lock);
    if (s->count < TOTAL) {
        s->who[s->count] = who;
        s->seq[s->count] = seq;
        s->offset[s->count] = m->offset;
    }
    s->count++;
    pthread_cond_broadcast(&s->changed);
    pthread_mutex_unlock(&s->lock);
    return RILL_ACK_SUCCESS;
}

/* Waits (with a deadline) until `want` messages were seen; returns the count. */
static int wait_seen(seen_t *s, int want) {
    return wait_count(&s->lock, &s->changed, &s->count, want);
}

static rill_status open_shared(const char *dir, rill_sharing sharing, rill_broker **out) {
    return open_shared_broker(dir, sharing, RILL_FSYNC_NEVER, out);
}

static void publish(rill_broker *b, uint32_t who, uint32_t seq) {
    char payload[8];
    memcpy(payload, &who, 4);
    memcpy(payload + 4, &seq, 4);
    rill_record r = {NULL, 0, payload, sizeof payload, NULL, 0};
    OK(rill_publish(b, TOPIC, &r, NULL));
}

/* A child's part: waits for each command on `cmd`, opens its own broker on
 * `dir` and publishes as publisher `who`. Exits with its failures. */
static void child(const char *dir, uint32_t who, int cmd) {
    rill_broker *b = NULL;
    char c;
    ssize_t n;
    while ((n = read(cmd, &c, 1)) == 1 || (n < 0 && errno == EINTR)) {
        if (n != 1) {
            continue;
        }
        if (c == CMD_GO) {
            OK(open_shared(dir, RILL_SHARING_PROCESSES, &b));
            if (b == NULL) {
                break;
            }
            /* The topic was on disk when this broker opened: it is its own. */
            CHECK_STATUS(rill_topic_create(b, TOPIC, NULL), RILL_ERR_TOPIC_EXISTS);
            for (uint32_t seq = 0; seq < EACH; seq++) {
                publish(b, who, seq);
            }
        } else if (c == CMD_ONE && b != NULL) {
            publish(b, who, EACH);
        } else if (c == CMD_DONE) {
            break;
        }
    }
    rill_broker_free(b);
    close(cmd);
    _exit(failures ? 1 : 0);
}

static bool last_error_says(const char *what) {
    char err[512];
    rill_last_error(err, sizeof err);
    return strstr(err, what) != NULL;
}

/* Mismatched modes, a missing data_dir, a bad value, what is refused. */
static void options_and_refusals(const char *dir) {
    rill_broker *b = NULL, *other = NULL;
    CHECK_STATUS(open_shared(NULL, RILL_SHARING_PROCESSES, &b), RILL_ERR_INVALID_ARGUMENT);
    CHECK(b == NULL && last_error_says("data_dir"));
    CHECK_STATUS(open_shared(dir, (rill_sharing)7, &b), RILL_ERR_INVALID_ARGUMENT);
    CHECK(last_error_says("RILL_SHARING_"));

    OK(open_shared(dir, RILL_SHARING_EXCLUSIVE, &b));
    CHECK_STATUS(open_shared(dir, RILL_SHARING_PROCESSES, &other), RILL_ERR_BUSY);
    rill_broker_free(b);
    OK(open_shared(dir, RILL_SHARING_PROCESSES, &b));
    OK(open_shared(dir, RILL_SHARING_PROCESSES, &other));
    rill_broker *excl = NULL;
    CHECK_STATUS(open_shared(dir, RILL_SHARING_EXCLUSIVE, &excl), RILL_ERR_BUSY);
    CHECK(excl == NULL);

    OK(rill_topic_create(b, "refused", NULL));
    rill_subscription_options so;
    rill_subscription_options_init(&so);
    so.name = "audit";
    so.shared = true;
    rill_subscription *s = NULL;
    /* Shared across processes too (test_robust_procs_shared.c). */
    OK(rill_subscribe(b, "refused", &so, record, NULL, &s));
    rill_subscription_free(s);
    rill_broker_free(other);
    rill_broker_free(b);
}

int main(void) {
    char dir[] = "/tmp/rill-c-procs-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char refusals[sizeof dir + 16];
    snprintf(refusals, sizeof refusals, "%s/modes", dir);

    int cmd[PUBLISHERS];
    pid_t pid[PUBLISHERS];
    for (uint32_t i = 0; i < PUBLISHERS; i++) {
        int fds[2];
        CHECK(pipe(fds) == 0);
        fflush(NULL);
        pid[i] = fork();
        if (pid[i] == 0) {
            close(fds[1]);
            for (uint32_t j = 0; j < i; j++) {
                close(cmd[j]);
            }
            child(dir, i, fds[0]);
        }
        close(fds[0]);
        cmd[i] = fds[1];
    }

    options_and_refusals(refusals);

    rill_broker *b = NULL;
    OK(open_shared(dir, RILL_SHARING_PROCESSES, &b));
    if (b == NULL) {
        return CHECK_VERDICT("test_robust_procs");
    }
    OK(rill_topic_create(b, TOPIC, NULL));
    static seen_t seen = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, {0}, {0}, {0}};
    rill_subscription_options so;
    rill_subscription_options_init(&so);
    so.start = RILL_START_EARLIEST;
    rill_subscription *s = NULL;
    OK(rill_subscribe(b, TOPIC, &so, record, &seen, &s));

    for (int i = 0; i < PUBLISHERS; i++) {
        send_byte(cmd[i], CMD_GO);
    }
    CHECK(wait_seen(&seen, PUBLISHERS * EACH) == PUBLISHERS * EACH);
    OK(rill_subscription_wait_idle(s, PROCS_WAIT_SECONDS * 1000));
    /* Idle now; the children are open and publish nothing more until told. */
    send_byte(cmd[0], CMD_ONE);
    CHECK(wait_seen(&seen, TOTAL) == TOTAL);
    OK(rill_subscription_wait_idle(s, PROCS_WAIT_SECONDS * 1000));

    pthread_mutex_lock(&seen.lock);
    CHECK(seen.count == TOTAL);
    uint32_t next[PUBLISHERS] = {0};
    static bool offset_seen[TOTAL];
    for (int i = 0; i < seen.count && i < TOTAL; i++) {
        uint32_t who = seen.who[i];
        CHECK(who < PUBLISHERS);
        if (who < PUBLISHERS) {
            CHECK(seen.seq[i] == next[who]); /* in its order, none lost or doubled */
            next[who]++;
        }
        CHECK(seen.offset[i] < TOTAL && !offset_seen[seen.offset[i]]);
        if (seen.offset[i] < TOTAL) {
            offset_seen[seen.offset[i]] = true; /* dense: TOTAL distinct offsets below TOTAL */
        }
    }
    CHECK(next[0] == EACH + 1 && next[1] == EACH);
    pthread_mutex_unlock(&seen.lock);

    for (int i = 0; i < PUBLISHERS; i++) {
        send_byte(cmd[i], CMD_DONE);
        close(cmd[i]);
        reap_child(pid[i]);
    }
    rill_subscription_free(s);
    rill_broker_free(b);

    remove_dir(dir);
    return CHECK_VERDICT("test_robust_procs");
}
