/*
 * A consumer group across processes, from C (issue 39): four forked worker
 * processes, each a RILL_SHARING_PROCESSES broker with one consumer of the
 * group "workers", split the four partitions of "jobs", one each. Once they
 * have settled, the parent publishes; every message reaches exactly one
 * worker, each partition's messages all the same one, and the workers'
 * commits are seen by a consumer the parent opens after they exit (it has
 * nothing left to read).
 *
 * The children are forked before the parent starts its broker (so no child
 * inherits a broker's threads). Each reports to the parent over its own
 * pipe, 16 bytes per write (whole or not at all): a message's (partition,
 * offset), or (OWNS, mask) when its assignment changes. They stop when the
 * parent makes the file "end" in the data directory.
 *
 * Built with -std=c99 -Wall -Wextra -Wpedantic -Werror, and run plain,
 * under AddressSanitizer + UBSan and under valgrind memcheck (children
 * traced) by ffi/tests/run.sh.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rill.h"

#include "check.h"
#include "dirs.h"
#include "procs.h"

enum {
    WORKERS = 4,
    PARTITIONS = 4,
    MESSAGES = 400,
    WAIT_MS = PROCS_WAIT_SECONDS * 1000, /* every wait's deadline */
};

static const char *TOPIC = "jobs";
static const char *GROUP = "workers";
/* A report's first word for an assignment (its second is the mask). */
static const uint64_t OWNS = UINT64_MAX;

static rill_status open_shared(const char *dir, rill_broker **out) {
    return open_shared_broker(dir, RILL_SHARING_PROCESSES, RILL_FSYNC_NEVER, out);
}

static bool exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* A worker: polls, reports, commits, until the file "end" exists in `dir`
 * (it has no command pipe: `cmd` is -1). */
static int worker(const char *dir, int cmd, int rep) {
    (void)cmd;
    char end[256];
    CHECK(snprintf(end, sizeof end, "%s/end", dir) < (int)sizeof end);
    rill_broker *b = NULL;
    OK(open_shared(dir, &b));
    rill_consumer_options o;
    rill_consumer_options_init(&o);
    o.session_timeout_ms = 200; /* members look at the group every 50 ms */
    rill_consumer *c = NULL;
    if (b != NULL) {
        OK(rill_consumer_new(b, GROUP, TOPIC, &o, &c));
    }
    uint64_t owned = 0;
    while (c != NULL && !exists(end)) {
        const rill_message *m = NULL;
        size_t n = 0;
        OK(rill_consumer_poll(c, 16, 20, &m, &n));
        for (size_t i = 0; i < n; i++) {
            procs_report(rep, m[i].partition, m[i].offset);
        }
        if (n > 0) {
            rill_status s = rill_consumer_commit(c);
            /* REASSIGNED: partitions it gave up while the workers settled. */
            CHECK(s == RILL_OK || s == RILL_ERR_REASSIGNED);
        }
        uint32_t parts[PARTITIONS];
        size_t count = 0;
        OK(rill_consumer_assignment(c, parts, PARTITIONS, &count));
        uint64_t mask = 0;
        for (size_t i = 0; i < count; i++) {
            mask |= 1u << parts[i];
        }
        if (mask != owned) {
            procs_report(rep, OWNS, mask);
            owned = mask;
        }
    }
    rill_consumer_free(c);
    rill_broker_free(b);
    close(rep);
    return failures ? 1 : 0;
}

/* What the parent learned from the workers. */
static uint64_t owns[WORKERS];
static int seen[PARTITIONS][MESSAGES];
static int reader[PARTITIONS];
static size_t received;

/* One worker's report: an assignment, or a message it polled. */
static void on_report(int i, uint64_t a, uint64_t b) {
    if (a == OWNS) {
        owns[i] = b;
        return;
    }
    CHECK(a < PARTITIONS && b < MESSAGES);
    if (a >= PARTITIONS || b >= MESSAGES) {
        return;
    }
    seen[a][b]++;
    received++;
    if (reader[a] < 0) {
        reader[a] = i;
    }
    CHECK(reader[a] == i); /* one worker per partition */
}

/* Reads the reports ready within `ms`, one from each worker at most. */
static void drain(const int *fds, int ms) {
    procs_read_reports(fds, WORKERS, ms, on_report);
}

static bool settled(void) {
    uint64_t all = 0;
    for (int i = 0; i < WORKERS; i++) {
        /* One partition each (a power of two), none shared. */
        if (owns[i] == 0 || (owns[i] & (owns[i] - 1)) != 0 || (all & owns[i])) {
            return false;
        }
        all |= owns[i];
    }
    return all == (1u << PARTITIONS) - 1;
}

int main(void) {
    char dir[] = "/tmp/rill-c-procs-groups-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    char end[sizeof dir + 8];
    snprintf(end, sizeof end, "%s/end", dir);

    /* The topic first, then the broker goes before the fork. */
    rill_broker *b = NULL;
    OK(open_shared(dir, &b));
    rill_topic_options to;
    rill_topic_options_init(&to);
    to.partitions = PARTITIONS;
    OK(rill_topic_create(b, TOPIC, &to));
    rill_broker_free(b);

    int fds[WORKERS];
    pid_t pid[WORKERS];
    procs_fork_members(WORKERS, dir, worker, pid, fds, NULL);
    for (int p = 0; p < PARTITIONS; p++) {
        reader[p] = -1;
    }

    OK(open_shared(dir, &b));
    int64_t deadline = procs_now_ms() + WAIT_MS;
    while (!settled() && procs_now_ms() < deadline) {
        drain(fds, 10);
    }
    CHECK(settled());
    uint64_t ends[PARTITIONS] = {0};
    for (int i = 0; i < MESSAGES && b != NULL; i++) {
        rill_record r = {NULL, 0, "job", 3, NULL, 0};
        rill_position at = {0, 0};
        OK(rill_publish(b, TOPIC, &r, &at));
        if (at.partition < PARTITIONS && at.offset + 1 > ends[at.partition]) {
            ends[at.partition] = at.offset + 1;
        }
    }
    deadline = procs_now_ms() + WAIT_MS;
    while (received < MESSAGES && procs_now_ms() < deadline) {
        drain(fds, 10);
    }
    CHECK(received == MESSAGES);
    for (int p = 0; p < PARTITIONS; p++) {
        for (uint64_t o = 0; o < ends[p]; o++) {
            CHECK(seen[p][o] == 1); /* exactly once */
        }
    }
    int fd = open(end, O_CREAT | O_WRONLY, 0644);
    CHECK(fd >= 0);
    close(fd);
    for (int i = 0; i < WORKERS; i++) {
        reap_child(pid[i]);
        close(fds[i]);
    }

    /* The workers' commits, seen from here: nothing left to read. */
    rill_consumer *late = NULL;
    OK(rill_consumer_new(b, GROUP, TOPIC, NULL, &late));
    const rill_message *m = NULL;
    size_t n = 1;
    OK(rill_consumer_poll(late, 100, 10, &m, &n));
    CHECK(n == 0);
    for (uint32_t p = 0; p < PARTITIONS; p++) {
        uint64_t committed = 0;
        if (ends[p] > 0) {
            OK(rill_consumer_committed(late, p, &committed));
            CHECK(committed == ends[p]);
        }
    }
    rill_consumer_free(late);
    rill_broker_free(b);
    remove_dir(dir);
    return CHECK_VERDICT("test_robust_procs_groups");
}
