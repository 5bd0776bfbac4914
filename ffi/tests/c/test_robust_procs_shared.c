/*
 * A shared subscription across processes, from C (issue 39): three forked
 * member processes, each a RILL_SHARING_PROCESSES broker with one member of
 * the shared subscription "workers" on "jobs" (four partitions), split the
 * partitions. The parent publishes a few messages at a time until every
 * member has had some (they have looked at each other by then), then many
 * more; every message reaches exactly one member (nothing fails, so a
 * partition that moves between members goes from where its reader let go).
 *
 * The children are forked before the parent starts its broker (so no child
 * inherits a broker's threads). Each reports to the parent over its own
 * pipe, 16 bytes per write (whole or not at all): (JOINED, 0) once
 * subscribed, then each message's (partition, offset) from its handler.
 * They close when the parent sends 'e' on their command pipe.
 *
 * Built with -std=c99 -Wall -Wextra -Wpedantic -Werror, and run plain,
 * under AddressSanitizer + UBSan and under valgrind memcheck (children
 * traced) by ffi/tests/run.sh.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <poll.h>
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
    MEMBERS = 3,
    PARTITIONS = 4,
    MAX_OFFSET = 1024, /* per partition, more than the test publishes */
    WAIT_MS = PROCS_WAIT_SECONDS * 1000,
};

static const char *TOPIC = "jobs";
static const char *NAME = "workers";
/* A report's first word once the member subscribed. */
static const uint64_t JOINED = UINT64_MAX;

static rill_ack on_message(void *user_data, const rill_message *m) {
    procs_report(*(int *)user_data, m->partition, m->offset);
    return RILL_ACK_SUCCESS;
}

/* A member: subscribes, reports, closes at the parent's 'e'. */
static int member(const char *dir, int cmd, int rep) {
    rill_broker *b = NULL;
    OK(open_shared_broker(dir, RILL_SHARING_PROCESSES, RILL_FSYNC_NEVER, &b));
    rill_subscription_options so;
    rill_subscription_options_init(&so);
    so.name = NAME;
    so.shared = true;
    so.start = RILL_START_EARLIEST;
    rill_subscription *s = NULL;
    if (b != NULL) {
        OK(rill_subscribe(b, TOPIC, &so, on_message, &rep, &s));
    }
    procs_report(rep, JOINED, 0);
    expect_byte(cmd, 'e');
    rill_subscription_free(s);
    rill_broker_free(b);
    close(rep);
    return failures ? 1 : 0;
}

/* What the parent learned from the members. */
static int joined;
static int seen[PARTITIONS][MAX_OFFSET];
static size_t got[MEMBERS];
static size_t received;

/* One member's report: it joined, or a message it got. */
static void on_report(int i, uint64_t a, uint64_t b) {
    if (a == JOINED) {
        joined++;
        return;
    }
    CHECK(a < PARTITIONS && b < MAX_OFFSET);
    if (a >= PARTITIONS || b >= MAX_OFFSET) {
        return;
    }
    seen[a][b]++;
    got[i]++;
    received++;
}

/* Reads the reports ready within `ms`, one from each member at most. */
static void drain(const int *fds, int ms) {
    procs_read_reports(fds, MEMBERS, ms, on_report);
}

static bool all_got_some(void) {
    for (int i = 0; i < MEMBERS; i++) {
        if (got[i] == 0) {
            return false;
        }
    }
    return true;
}

/* Publishes `n` messages; returns how many went out. */
static size_t publish(rill_broker *b, size_t n) {
    size_t sent = 0;
    for (size_t i = 0; i < n && b != NULL; i++) {
        rill_record r = {NULL, 0, "job", 3, NULL, 0};
        rill_position at = {0, 0};
        OK(rill_publish(b, TOPIC, &r, &at));
        CHECK(at.partition < PARTITIONS && at.offset < MAX_OFFSET);
        sent++;
    }
    return sent;
}

/* Drains until `want` messages were received, or the deadline. */
static void drain_until(const int *fds, size_t want) {
    int64_t deadline = procs_now_ms() + WAIT_MS;
    while (received < want && procs_now_ms() < deadline) {
        drain(fds, 10);
    }
    CHECK(received == want);
}

int main(void) {
    char dir[] = "/tmp/rill-c-procs-shared-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);

    /* The topic first, then the broker goes before the fork. */
    rill_broker *b = NULL;
    OK(open_shared_broker(dir, RILL_SHARING_PROCESSES, RILL_FSYNC_NEVER, &b));
    rill_topic_options to;
    rill_topic_options_init(&to);
    to.partitions = PARTITIONS;
    OK(rill_topic_create(b, TOPIC, &to));
    rill_broker_free(b);

    int fds[MEMBERS], cmds[MEMBERS];
    pid_t pid[MEMBERS];
    procs_fork_members(MEMBERS, dir, member, pid, fds, cmds);

    OK(open_shared_broker(dir, RILL_SHARING_PROCESSES, RILL_FSYNC_NEVER, &b));
    int64_t deadline = procs_now_ms() + WAIT_MS;
    while (joined < MEMBERS && procs_now_ms() < deadline) {
        drain(fds, 10);
    }
    CHECK(joined == MEMBERS);
    /* A few at a time until every member has had some. */
    size_t published = 0;
    deadline = procs_now_ms() + WAIT_MS;
    while (!all_got_some() && procs_now_ms() < deadline && b != NULL) {
        published += publish(b, 8);
        drain_until(fds, published);
    }
    CHECK(all_got_some());
    published += publish(b, 200);
    drain_until(fds, published);
    size_t once = 0;
    for (int p = 0; p < PARTITIONS; p++) {
        for (int o = 0; o < MAX_OFFSET; o++) {
            CHECK(seen[p][o] <= 1); /* never twice */
            once += seen[p][o] == 1;
        }
    }
    CHECK(once == published); /* every message */
    for (int i = 0; i < MEMBERS; i++) {
        send_byte(cmds[i], 'e');
        reap_child(pid[i]);
        close(fds[i]);
        close(cmds[i]);
    }
    rill_broker_free(b);
    remove_dir(dir);
    return CHECK_VERDICT("test_robust_procs_shared");
}
