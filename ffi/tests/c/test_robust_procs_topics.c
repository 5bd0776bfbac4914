/*
 * Topics across processes, from C (issue 39, its fifth step): a wildcard
 * subscription in the parent gets every message of a topic a forked child
 * creates and publishes to at once (it is read from its start when the
 * parent joins it); the parent publishes by name to that topic without
 * creating it; and when the child deletes it, it vanishes in the parent
 * too (publishing to it is RILL_ERR_NO_SUCH_TOPIC, it is no longer listed).
 *
 * The child is forked before the parent starts a broker (so it inherits no
 * broker's threads); it waits on a pipe for each step and answers on
 * another when the step is done. Every wait has a deadline.
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
    MESSAGES = 500, /* the child publishes these to its new topic */
};

/* The parent's commands to the child, one byte each on its pipe. */
enum {
    CMD_CREATE = 'c', /* open, create TOPIC and publish MESSAGES */
    CMD_DELETE = 'x', /* delete TOPIC */
    CMD_DONE = 'd',   /* close and exit */
};

static const char *TOPIC = "orders/eu";
static const char *PATTERN = "orders/*";

/* What the parent's subscriber saw, in delivery order. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int count;
    uint32_t n[MESSAGES + 1];
    uint64_t offset[MESSAGES + 1];
    bool other_topic;
} seen_t;

static rill_ack record(void *user_data, const rill_message *m) {
    seen_t *s = user_data;
    uint32_t n = UINT32_MAX;
    if (m->payload_len == 4) {
        memcpy(&n, m->payload, 4);
    }
    pthread_mutex_lock(&s->lock);
    if (s->count <= MESSAGES) {
        s->n[s->count] = n;
        s->offset[s->count] = m->offset;
    }
    if (m->topic == NULL || strcmp(m->topic, TOPIC) != 0) {
        s->other_topic = true;
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

static rill_status open_shared(const char *dir, rill_broker **out) {
    return open_shared_broker(dir, RILL_SHARING_PROCESSES, RILL_FSYNC_NEVER, out);
}

static rill_status publish(rill_broker *b, uint32_t n) {
    rill_record r = {NULL, 0, &n, sizeof n, NULL, 0};
    return rill_publish(b, TOPIC, &r, NULL);
}

/* The child's part: waits for each command on `cmd`, answers the same byte
 * on `done` when it is carried out (all but CMD_DONE). Exits with its
 * failures. */
static void child(const char *dir, int cmd, int done) {
    rill_broker *b = NULL;
    char c;
    ssize_t n;
    while ((n = read(cmd, &c, 1)) == 1 || (n < 0 && errno == EINTR)) {
        if (n != 1) {
            continue;
        }
        if (c == CMD_CREATE) {
            OK(open_shared(dir, &b));
            if (b == NULL) {
                break;
            }
            OK(rill_topic_create(b, TOPIC, NULL));
            /* At once: the parent has not joined the topic yet. */
            for (uint32_t i = 0; i < MESSAGES; i++) {
                OK(publish(b, i));
            }
        } else if (c == CMD_DELETE && b != NULL) {
            OK(rill_topic_delete(b, TOPIC));
        } else if (c == CMD_DONE) {
            break;
        }
        CHECK(write(done, &c, 1) == 1);
    }
    rill_broker_free(b);
    close(cmd);
    close(done);
    _exit(failures ? 1 : 0);
}

static void count_topic(void *user_data, const char *name) {
    (void)name;
    (*(int *)user_data)++;
}

/* Whether `b` publishes to TOPIC with RILL_ERR_NO_SUCH_TOPIC, within the
 * deadline: the parent's doorbell thread lets go of the topic when it is
 * rung for the child's delete, which the child's answer does not wait for. */
static bool vanishes(rill_broker *b) {
    struct timespec deadline, now;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    deadline.tv_sec += PROCS_WAIT_SECONDS;
    for (;;) {
        if (publish(b, UINT32_MAX) == RILL_ERR_NO_SUCH_TOPIC) {
            return true;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec > deadline.tv_sec || (now.tv_sec == deadline.tv_sec && now.tv_nsec >= deadline.tv_nsec)) {
            return false;
        }
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
}

int main(void) {
    char dir[] = "/tmp/rill-c-procs-topics-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);

    int cmd[2], done[2];
    CHECK(pipe(cmd) == 0 && pipe(done) == 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(cmd[1]);
        close(done[0]);
        child(dir, cmd[0], done[1]);
    }
    close(cmd[0]);
    close(done[1]);

    rill_broker *b = NULL;
    OK(open_shared(dir, &b));
    if (b == NULL) {
        return CHECK_VERDICT("test_robust_procs_topics");
    }
    static seen_t seen = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, {0}, {0}, false};
    rill_subscription_options so;
    rill_subscription_options_init(&so);
    so.start = RILL_START_LATEST; /* a topic it picks up is read from its start anyway */
    rill_subscription *s = NULL;
    OK(rill_subscribe(b, PATTERN, &so, record, &seen, &s));
    CHECK_STATUS(publish(b, 0), RILL_ERR_NO_SUCH_TOPIC);

    send_byte(cmd[1], CMD_CREATE);
    expect_byte(done[0], CMD_CREATE);
    CHECK(wait_seen(&seen, MESSAGES) == MESSAGES);

    /* By name, not created here. */
    rill_record r = {NULL, 0, &(uint32_t){MESSAGES}, 4, NULL, 0};
    rill_position at;
    OK(rill_publish(b, TOPIC, &r, &at));
    CHECK(at.offset == MESSAGES);
    CHECK(wait_seen(&seen, MESSAGES + 1) == MESSAGES + 1);
    OK(rill_subscription_wait_idle(s, PROCS_WAIT_SECONDS * 1000));

    pthread_mutex_lock(&seen.lock);
    CHECK(seen.count == MESSAGES + 1 && !seen.other_topic);
    for (int i = 0; i < seen.count && i <= MESSAGES; i++) {
        CHECK(seen.n[i] == (uint32_t)i && seen.offset[i] == (uint64_t)i); /* in order, none missed */
    }
    pthread_mutex_unlock(&seen.lock);

    send_byte(cmd[1], CMD_DELETE);
    expect_byte(done[0], CMD_DELETE);
    CHECK(vanishes(b));
    int listed = 0;
    OK(rill_topic_list(b, count_topic, &listed));
    CHECK(listed == 0);

    send_byte(cmd[1], CMD_DONE); /* not answered: the child exits */
    close(cmd[1]);
    close(done[0]);
    reap_child(pid);
    rill_subscription_free(s);
    rill_broker_free(b);

    remove_dir(dir);
    return CHECK_VERDICT("test_robust_procs_topics");
}
