/*
 * A `Block` subscriber across processes, from C (issue 39): a forked child
 * holds a RILL_OVERFLOW_BLOCK subscription with lag limit 2 on "orders"
 * (one partition) whose handler waits for the parent's 'g' before it
 * handles its first message. The parent's publishes stop at the limit
 * (rill_try_publish gets RILL_ERR_FULL) and resume once the child is let
 * go (a waiting rill_publish goes in). A second child, holding the same
 * kind of subscription, is killed with SIGKILL mid-handler: the parent's
 * waiting rill_publish goes in all the same (a dead subscriber's slot is
 * cleared; see src/broker/partition/blockers.rs).
 *
 * Children report to the parent over a pipe, 16 bytes per write: (JOINED,
 * 0) once subscribed, then (HANDLING, offset) as each message reaches the
 * handler. They wait on a command pipe, never on a sleep.
 *
 * Built with -std=c99 -Wall -Wextra -Wpedantic -Werror, and run plain,
 * under AddressSanitizer + UBSan and under valgrind memcheck (children
 * traced) by ffi/tests/run.sh.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
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
    LIMIT = 2,
    WAIT_MS = PROCS_WAIT_SECONDS * 1000,
};

static const char *TOPIC = "orders";
/* A report's first word once the child subscribed. */
static const uint64_t JOINED = UINT64_MAX;
/* A report's first word when a message reached the handler. */
static const uint64_t HANDLING = 1;

/* What a child's handler needs: its pipes, and whether it was let go
 * (`let_go`, under `lock`: the child's main thread reads the command pipe
 * only after the handler has read its 'g' there). */
struct pipes {
    int cmd, rep;
    int let_go;
    pthread_mutex_t lock;
    pthread_cond_t changed;
};

static rill_ack on_message(void *user_data, const rill_message *m) {
    struct pipes *p = user_data;
    procs_report(p->rep, HANDLING, m->offset);
    pthread_mutex_lock(&p->lock);
    int let_go = p->let_go;
    pthread_mutex_unlock(&p->lock);
    if (!let_go) {
        /* Holds the first message until the parent says 'g'. */
        expect_byte(p->cmd, 'g');
        pthread_mutex_lock(&p->lock);
        p->let_go = 1;
        pthread_cond_broadcast(&p->changed);
        pthread_mutex_unlock(&p->lock);
    }
    return RILL_ACK_SUCCESS;
}

/* A child: subscribes with the Block policy, reports, closes at 'e'. */
static int child(const char *dir, int cmd, int rep) {
    rill_broker *b = NULL;
    OK(open_shared_broker(dir, RILL_SHARING_PROCESSES, RILL_FSYNC_NEVER, &b));
    rill_subscription_options so;
    rill_subscription_options_init(&so);
    so.overflow = RILL_OVERFLOW_BLOCK;
    so.lag_limit = LIMIT;
    struct pipes p = {cmd, rep, 0, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};
    rill_subscription *s = NULL;
    if (b != NULL) {
        OK(rill_subscribe(b, TOPIC, &so, on_message, &p, &s));
    }
    procs_report(rep, JOINED, 0);
    /* The handler reads 'g' first (child 1 is killed waiting here). */
    CHECK(wait_count(&p.lock, &p.changed, &p.let_go, 1) == 1);
    expect_byte(cmd, 'e');
    rill_subscription_free(s);
    rill_broker_free(b);
    close(rep);
    return failures ? 1 : 0;
}

static uint64_t last_a, last_b;
static int reports;

static void on_report(int i, uint64_t a, uint64_t b) {
    (void)i;
    last_a = a;
    last_b = b;
    reports++;
}

/* Waits for the child's next report; checks it is (a, b). */
static void expect_report(int fd, uint64_t a, uint64_t b) {
    int before = reports;
    int64_t deadline = procs_now_ms() + WAIT_MS;
    while (reports == before && procs_now_ms() < deadline) {
        procs_read_reports(&fd, 1, 10, on_report);
    }
    CHECK(reports == before + 1);
    CHECK(last_a == a && last_b == b);
}

/* rill_try_publish until RILL_ERR_FULL; returns how many went in. */
static int publish_until_full(rill_broker *b) {
    rill_record r = {NULL, 0, "o", 1, NULL, 0};
    for (int n = 0; n < 1000; n++) {
        rill_status st = rill_try_publish(b, TOPIC, &r, NULL);
        if (st == RILL_ERR_FULL) {
            return n;
        }
        OK(st);
        if (st != RILL_OK) {
            return -1;
        }
    }
    return 1000;
}

int main(void) {
    char dir[] = "/tmp/rill-c-procs-block-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);

    /* The topic first, then the broker goes before the forks. */
    rill_broker *b = NULL;
    OK(open_shared_broker(dir, RILL_SHARING_PROCESSES, RILL_FSYNC_NEVER, &b));
    rill_topic_options to;
    rill_topic_options_init(&to);
    to.partitions = 1;
    OK(rill_topic_create(b, TOPIC, &to));
    rill_broker_free(b);

    /* Child 0 is let go; child 1 is killed. */
    int fds[2], cmds[2];
    pid_t pid[2];
    procs_fork_members(2, dir, child, pid, fds, cmds);
    OK(open_shared_broker(dir, RILL_SHARING_PROCESSES, RILL_FSYNC_NEVER, &b));
    if (b == NULL) {
        return CHECK_VERDICT("test_robust_procs_block");
    }
    expect_report(fds[0], JOINED, 0);
    expect_report(fds[1], JOINED, 0);

    /* Both hold their first message: LIMIT records fit, then none. */
    CHECK(publish_until_full(b) == LIMIT);
    expect_report(fds[0], HANDLING, 0);
    expect_report(fds[1], HANDLING, 0);

    /* Child 1 dies mid-handler: it holds back no one from now on. */
    CHECK(kill(pid[1], SIGKILL) == 0);
    int status = 0;
    CHECK(waitpid(pid[1], &status, 0) == pid[1]);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    CHECK(rill_try_publish(b, TOPIC, &(rill_record){NULL, 0, "o", 1, NULL, 0}, NULL) == RILL_ERR_FULL);

    /* Child 0 let go: the waiting publish goes in, after what fitted. */
    send_byte(cmds[0], 'g');
    rill_record r = {NULL, 0, "waited", 6, NULL, 0};
    rill_position at = {0, 0};
    OK(rill_publish(b, TOPIC, &r, &at));
    CHECK(at.offset == LIMIT);
    for (uint64_t o = 1; o <= LIMIT; o++) {
        expect_report(fds[0], HANDLING, o);
    }

    send_byte(cmds[0], 'e');
    reap_child(pid[0]);
    for (int i = 0; i < 2; i++) {
        close(fds[i]);
        close(cmds[i]);
    }
    /* Nobody left to hold the publisher back. */
    for (int i = 0; i < 4 * LIMIT; i++) {
        OK(rill_try_publish(b, TOPIC, &r, NULL));
    }
    rill_broker_free(b);
    remove_dir(dir);
    return CHECK_VERDICT("test_robust_procs_block");
}
