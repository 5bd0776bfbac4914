/*
 * Issue 41, compacted topics, from C: rill_topic_options.cleanup with
 * RILL_CLEANUP_COMPACT keeps the newest message of every key. A keyless
 * publish is RILL_ERR_INVALID_ARGUMENT and appends nothing; an unknown
 * cleanup value is refused; the broker's compactor (a background thread)
 * removes superseded messages from sealed segments while offsets stay what
 * they were, so a consumer from the beginning reads the newest value of each
 * key in offset order, a seek to a removed offset starts at the next kept
 * one, and commits across gaps work; rill_topic_stats counts what was
 * removed. On a data directory shared by processes, a forked child
 * publishes and the parent reads the compacted log, whichever process
 * compacted; on one broker's own data directory see test_durable_compact.c.
 *
 * The wait for the compactor is a deadline around a condition (the reader
 * sees only newest values), never a sleep standing in for it.
 *
 * Built with -std=c99 -Wall -Wextra -Wpedantic -Werror, and run plain, under
 * AddressSanitizer + UBSan and under valgrind memcheck by ffi/tests/run.sh.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sched.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rill.h"

#include "check.h"
#include "dirs.h"
#include "compact.h"

enum {
    DEADLINE_S = 60, /* longest wait for the compactor */
};

/* Reads the topic from the beginning with a new group; true if the data
 * keys' messages are exactly the newest of each, in offset order. */
static bool reads_newest_only(rill_broker *b, int round) {
    char group[LINE];
    snprintf(group, sizeof group, "probe-%d", round);
    newest_t read = read_newest(b, group, NO_TOMBSTONE);
    return read.other == 0 && read.newest == KEYS;
}

/* Makes the marker file `path` (a step done, for the other process). */
static bool touch(const char *path) {
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        return false;
    }
    fclose(f);
    return true;
}

int main(void) {
    rill_broker *b = NULL;
    OK(rill_broker_new(NULL, &b));
    if (!b) {
        return CHECK_VERDICT("test_robust_compact");
    }
    rill_topic_options o;
    rill_topic_options_init(&o);
    CHECK(o.cleanup == RILL_CLEANUP_DELETE);
    CHECK(o.delete_retention_ms == 86400000u);
    CHECK(o.min_compaction_lag_ms == 0);
    o.cleanup = 7;
    CHECK_STATUS(rill_topic_create(b, TOPIC, &o), RILL_ERR_INVALID_ARGUMENT);
    o.cleanup = RILL_CLEANUP_COMPACT;
    OK(rill_topic_create(b, TOPIC, &o));

    /* No key: refused, nothing appended. */
    rill_position at = {0, 0};
    CHECK_STATUS(publish(b, NULL, "x", 1, &at), RILL_ERR_INVALID_ARGUMENT);

    /* The refused publish took no offset: the data's start at 0. */
    publish_data(b, NO_TOMBSTONE);
    rill_topic_stats now;

    double deadline = now_s() + DEADLINE_S;
    int round = 0;
    bool done = false;
    while (!done && now_s() < deadline) {
        done = reads_newest_only(b, round++);
    }
    CHECK(done);

    OK(rill_topic_get_stats(b, TOPIC, &now));
    CHECK(now.compaction_passes >= 1);
    CHECK(now.compacted_messages >= DATA - KEYS);
    CHECK(now.compacted_bytes >= (uint64_t)(DATA - KEYS) * PAYLOAD);
    CHECK(now.compaction_keys >= KEYS);

    /* Seek into a gap, poll, commit across it. */
    rill_consumer *c = NULL;
    OK(rill_consumer_new(b, "readers", TOPIC, NULL, &c));
    if (c) {
        OK(rill_consumer_seek(c, 0, 5));
        const rill_message *ms = NULL;
        size_t n = 0;
        OK(rill_consumer_poll(c, 1, 5000, &ms, &n));
        CHECK(n == 1);
        if (n == 1) {
            CHECK(ms[0].offset == DATA - KEYS); /* the first kept data message */
        }
        OK(rill_consumer_commit(c));
        uint64_t committed = 0;
        OK(rill_consumer_committed(c, 0, &committed));
        CHECK(committed == DATA - KEYS + 1);
        rill_consumer_free(c);
    }
    /* Offsets never change: the next message continues after the last. */
    OK(publish(b, "k0", "next", 4, &at));
    CHECK(at.offset == now.publish_count);
    rill_broker_free(b);

    /* On a data directory shared by processes: a forked child publishes the
     * data into the topic the parent created, and the parent's reader sees
     * the compacted log, whichever process compacted (the holder of the
     * partition's compact.lock; the other maps the rebuilt files). The
     * child is forked before the parent opens its broker (the memory one
     * is freed), so it inherits no broker's threads. */
    char dir[] = "/tmp/rill-compact-XXXXXX";
    if (mkdtemp(dir)) {
        char created[sizeof dir + 16], written[sizeof dir + 16], read_all[sizeof dir + 16];
        snprintf(created, sizeof created, "%s/created", dir);
        snprintf(written, sizeof written, "%s/written", dir);
        snprintf(read_all, sizeof read_all, "%s/read", dir);
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            /* The child: joins the directory once the topic exists. */
            double until = now_s() + DEADLINE_S;
            while (access(created, F_OK) != 0 && now_s() < until) {
                sched_yield();
            }
            rill_broker *w = NULL;
            OK(open_shared_broker(dir, RILL_SHARING_PROCESSES, RILL_FSYNC_NEVER, &w));
            if (w) {
                publish_data(w, NO_TOMBSTONE);
                CHECK(touch(written));
                /* Its compactor runs (or follows) until the parent has read. */
                until = now_s() + DEADLINE_S;
                while (access(read_all, F_OK) != 0 && now_s() < until) {
                    sched_yield();
                }
                rill_broker_free(w);
            }
            int verdict = CHECK_VERDICT("test_robust_compact (child)");
            fflush(stdout);
            _exit(verdict);
        }
        CHECK(pid > 0);
        rill_broker *d = NULL;
        OK(open_shared_broker(dir, RILL_SHARING_PROCESSES, RILL_FSYNC_NEVER, &d));
        if (d) {
            OK(rill_topic_create(d, TOPIC, &o));
            CHECK_STATUS(publish(d, NULL, "x", 1, &at), RILL_ERR_INVALID_ARGUMENT);
            CHECK(touch(created));
            deadline = now_s() + DEADLINE_S;
            while (access(written, F_OK) != 0 && now_s() < deadline) {
                sched_yield();
            }
            CHECK(access(written, F_OK) == 0);
            done = false;
            deadline = now_s() + DEADLINE_S;
            while (!done && now_s() < deadline) {
                done = reads_newest_only(d, round++);
            }
            CHECK(done);
        }
        CHECK(touch(read_all));
        if (pid > 0) {
            int status = 0;
            CHECK(waitpid(pid, &status, 0) == pid);
            CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        }
        if (d) {
            rill_broker_free(d);
        }
        remove_dir(dir);
    }
    return CHECK_VERDICT("test_robust_compact");
}
