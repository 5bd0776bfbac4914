/*
 * Named (durable) subscriptions across processes, from C (issue 39): a
 * name held by a subscription in another process is RILL_ERR_BUSY (to
 * rill_subscribe and rill_durable_delete) until that subscription is
 * freed, and the next holder resumes after the last acked message; then a
 * kill -9 loop: a child process holds the name and acks, is killed at a
 * random moment (after it was given a random number of messages, or once
 * idle), and the next child takes the name and resumes: never past a
 * message no holder was given, never before where the last one started,
 * and, after a holder under RILL_FSYNC_ALWAYS was killed idle, exactly
 * after its last ack. RILL_NAMED_KILLS sets the number of kills (50).
 * First, a delete of a name never taken: RILL_ERR_NOT_FOUND, and nothing
 * left on the disk or in rill_named_subscription_list.
 *
 * The parent runs a broker (with its threads), so its children are this
 * program run again (fork, then exec at once), each with a command pipe
 * and a pipe on which it reports every offset it is given, before acking.
 *
 * Built with -std=c99 -Wall -Wextra -Wpedantic -Werror, and run plain,
 * under AddressSanitizer + UBSan and under valgrind memcheck (children
 * traced) by ffi/tests/run.sh.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
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
    PER_ROUND = 20,    /* messages published before each holder starts */
    KILLS = 50,        /* kill -9 iterations, unless RILL_NAMED_KILLS says */
    WAIT_MS = 30000,   /* every wait's deadline */
};

static const char *TOPIC = "orders";
static const char *NAME = "audit";
/* Reported by a child after it freed its subscription. */
static const uint64_t CLOSED = UINT64_MAX;
/* Reported by a child once its subscription is idle. */
static const uint64_t IDLE = UINT64_MAX - 1;

/* Commands to a child, one byte each. */
enum {
    CMD_CLOSE = 'c', /* free the subscription, then report CLOSED */
    CMD_IDLE = 'i',  /* wait until the subscription is idle, then report IDLE */
    CMD_EXIT = 'x',  /* free the broker and exit */
};

static rill_status open_shared(const char *dir, rill_fsync fsync, rill_broker **out) {
    return open_shared_broker(dir, RILL_SHARING_PROCESSES, fsync, out);
}

/* ---- the child ---- */

static rill_ack report(void *user_data, const rill_message *m) {
    int fd = *(int *)user_data;
    uint64_t offset = m->offset;
    /* One write of 8 bytes to a pipe: whole or not at all, even if killed. */
    CHECK(write(fd, &offset, sizeof offset) == (ssize_t)sizeof offset);
    return RILL_ACK_SUCCESS;
}

static rill_status subscribe_named(rill_broker *b, rill_handler cb, void *user, rill_subscription **s) {
    rill_subscription_options so;
    rill_subscription_options_init(&so);
    so.name = NAME;
    so.start = RILL_START_EARLIEST;
    *s = NULL;
    return rill_subscribe(b, TOPIC, &so, cb, user, s);
}

/* `child <dir> <always|never> <cmd fd> <report fd>`: holds the name and
 * reports every offset until told to close (or killed). */
static int child(char **argv) {
    const char *dir = argv[2];
    rill_fsync fsync = strcmp(argv[3], "always") == 0 ? RILL_FSYNC_ALWAYS : RILL_FSYNC_NEVER;
    int cmd = atoi(argv[4]);
    static int rep;
    rep = atoi(argv[5]);
    rill_broker *b = NULL;
    OK(open_shared(dir, fsync, &b));
    rill_subscription *s = NULL;
    if (b != NULL) {
        OK(subscribe_named(b, report, &rep, &s));
    }
    char c;
    ssize_t n;
    while ((n = read(cmd, &c, 1)) == 1 || (n < 0 && errno == EINTR)) {
        if (n == 1 && c == CMD_CLOSE) {
            rill_subscription_free(s);
            s = NULL;
            CHECK(write(rep, &CLOSED, sizeof CLOSED) == (ssize_t)sizeof CLOSED);
        } else if (n == 1 && c == CMD_IDLE) {
            OK(rill_subscription_wait_idle(s, WAIT_MS));
            CHECK(write(rep, &IDLE, sizeof IDLE) == (ssize_t)sizeof IDLE);
        } else if (n == 1 && c == CMD_EXIT) {
            break;
        }
    }
    rill_subscription_free(s);
    rill_broker_free(b);
    return failures ? 1 : 0;
}

/* ---- the parent ---- */

typedef struct {
    pid_t pid;
    int cmd; /* the parent's end of the command pipe */
    int rep; /* the parent's end of the report pipe */
} kid_t;

/* Runs this program again as a child (see `child`). */
static kid_t spawn(const char *self, const char *dir, const char *fsync) {
    kid_t k = {-1, -1, -1};
    int cmd[2], rep[2];
    CHECK(pipe2(cmd, O_CLOEXEC) == 0 && pipe2(rep, O_CLOEXEC) == 0);
    char cmd_fd[16], rep_fd[16];
    snprintf(cmd_fd, sizeof cmd_fd, "%d", cmd[0]);
    snprintf(rep_fd, sizeof rep_fd, "%d", rep[1]);
    char *args[] = {(char *)self, "child", (char *)dir, (char *)fsync, cmd_fd, rep_fd, NULL};
    fflush(NULL);
    k.pid = fork();
    if (k.pid == 0) {
        /* Only async-signal-safe calls before the exec: the child's two
         * ends survive it, the parent's close. */
        fcntl(cmd[0], F_SETFD, 0);
        fcntl(rep[1], F_SETFD, 0);
        execv(self, args);
        _exit(127);
    }
    CHECK(k.pid > 0);
    close(cmd[0]);
    close(rep[1]);
    k.cmd = cmd[1];
    k.rep = rep[0];
    return k;
}

/* Reads the child's next report into `*v`, waiting at most WAIT_MS: false
 * at the end of its reports (it exited) or at the deadline. */
static bool next_report(kid_t *k, uint64_t *v) {
    size_t got = 0;
    while (got < sizeof *v) {
        struct pollfd p = {k->rep, POLLIN, 0};
        int r = poll(&p, 1, WAIT_MS);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            return false;
        }
        ssize_t n = read(k->rep, (char *)v + got, sizeof *v - got);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return false;
        }
        got += (size_t)n;
    }
    return true;
}

static void send_cmd(kid_t *k, char c) {
    send_byte(k->cmd, c);
}

/* Tells a child to exit and checks that it did, cleanly. */
static void finish(kid_t *k) {
    send_cmd(k, CMD_EXIT);
    close(k->cmd);
    close(k->rep);
    reap_child(k->pid);
}

static void publish(rill_broker *b, int n) {
    for (int i = 0; i < n; i++) {
        rill_record r = {NULL, 0, "m", 1, NULL, 0};
        OK(rill_publish(b, TOPIC, &r, NULL));
    }
}

/* What the parent's own subscription saw. */
typedef struct {
    int count;
    uint64_t offset[16];
} seen_t;

static rill_ack record(void *user_data, const rill_message *m) {
    seen_t *s = user_data;
    if (s->count < 16) {
        s->offset[s->count] = m->offset;
    }
    __atomic_add_fetch(&s->count, 1, __ATOMIC_RELEASE);
    return RILL_ACK_SUCCESS;
}

/* Busy while another process holds the name; resumed after it lets go. */
static void busy_until_let_go(const char *self, const char *dir, rill_broker *b) {
    publish(b, 10);
    kid_t k = spawn(self, dir, "never");
    uint64_t v = 0;
    for (uint64_t want = 0; want < 10; want++) {
        CHECK(next_report(&k, &v) && v == want);
    }
    rill_subscription *s = NULL;
    static seen_t seen;
    CHECK_STATUS(subscribe_named(b, record, &seen, &s), RILL_ERR_BUSY);
    CHECK(s == NULL);
    CHECK_STATUS(rill_durable_delete(b, NAME), RILL_ERR_BUSY);
    /* Settled before the close: a report is written inside the handler,
     * before it returns its ack, so a close sent on the tenth report can
     * overtake the settling of the tenth message (delivered again). */
    send_cmd(&k, CMD_IDLE);
    CHECK(next_report(&k, &v) && v == IDLE);
    send_cmd(&k, CMD_CLOSE);
    CHECK(next_report(&k, &v) && v == CLOSED);
    OK(subscribe_named(b, record, &seen, &s));
    publish(b, 3);
    OK(rill_subscription_wait_idle(s, WAIT_MS));
    CHECK(__atomic_load_n(&seen.count, __ATOMIC_ACQUIRE) == 3);
    CHECK(seen.offset[0] == 10 && seen.offset[1] == 11 && seen.offset[2] == 12);
    rill_subscription_free(s);
    OK(rill_durable_delete(b, NAME));
    CHECK_STATUS(rill_durable_delete(b, NAME), RILL_ERR_NOT_FOUND);
    /* Forgotten: taken again, it starts from its start option (earliest). */
    static seen_t again;
    OK(subscribe_named(b, record, &again, &s));
    OK(rill_subscription_wait_idle(s, WAIT_MS));
    CHECK(__atomic_load_n(&again.count, __ATOMIC_ACQUIRE) == 13 && again.offset[0] == 0);
    rill_subscription_free(s);
    finish(&k);
}

/* Counts the names rill_named_subscription_list hands to its callback. */
static void count_named(void *user_data, const rill_named_subscription *named) {
    (void)named;
    (*(int *)user_data)++;
}

/* The lock files under `dir`/named (none if the folder is missing). */
static int lock_files(const char *dir) {
    char path[1100];
    snprintf(path, sizeof path, "%s/named", dir);
    DIR *d = opendir(path);
    if (d == NULL) {
        return 0;
    }
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t len = strlen(e->d_name);
        n += len > 5 && strcmp(e->d_name + len - 5, ".lock") == 0;
    }
    closedir(d);
    return n;
}

/* A delete of a name no subscription ever took is RILL_ERR_NOT_FOUND and
 * leaves nothing on the disk, so the name is never listed (a lock file
 * left there would list it for good: a Processes broker removes none). */
static void unknown_names_leave_nothing(void) {
    char dir[] = "/tmp/rill-c-named-unknown-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    rill_broker *b = NULL;
    OK(open_shared(dir, RILL_FSYNC_NEVER, &b));
    if (b == NULL) {
        return;
    }
    char name[32];
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof name, "never-used-%d", i);
        CHECK_STATUS(rill_durable_delete(b, name), RILL_ERR_NOT_FOUND);
    }
    CHECK(lock_files(dir) == 0);
    int listed = 0;
    OK(rill_named_subscription_list(b, count_named, &listed));
    CHECK(listed == 0);
    rill_broker_free(b);
    OK(open_shared(dir, RILL_FSYNC_NEVER, &b));
    listed = 0;
    OK(rill_named_subscription_list(b, count_named, &listed));
    CHECK(listed == 0);
    rill_broker_free(b);
    remove_dir(dir);
}

/* The kill -9 loop (see the top of the file). */
static void kill_loop(const char *self, const char *dir, rill_broker *b) {
    const char *env = getenv("RILL_NAMED_KILLS");
    int kills = env != NULL ? atoi(env) : KILLS;
    const char *seed_env = getenv("RILL_NAMED_SEED");
    unsigned seed = seed_env != NULL ? (unsigned)strtoul(seed_env, NULL, 10) : (unsigned)time(NULL) ^ (unsigned)getpid();
    printf("test_robust_named: %d kills, RILL_NAMED_SEED=%u\n", kills, seed);
    /* Offsets start after busy_until_let_go's 13. */
    uint64_t published = 13, next = 13, floor = 13;
    bool exact = true; /* busy_until_let_go's last holder closed after offset 12 */
    for (int i = 0; i <= kills; i++) {
        bool last = i == kills;
        publish(b, PER_ROUND);
        published += PER_ROUND;
        bool always = i % 2 == 1 && !last;
        kid_t k = spawn(self, dir, always ? "always" : "never");
        bool idle = last || rand_r(&seed) % 4 == 0;
        int r = (int)(rand_r(&seed) % (PER_ROUND + 1));
        int got = 0;
        uint64_t first = 0, prev = 0, v = 0;
        bool ordered = true;
        /* Idle: every message given, then the subscription idle (its last
         * round ended: under ALWAYS its acks are synced). Else: after `r`
         * of them. */
        while ((idle ? prev + 1 < published || got == 0 : got < r) && next_report(&k, &v)) {
            if (got == 0) {
                first = v;
            } else if (v != prev + 1) {
                ordered = false;
            }
            prev = v;
            got++;
        }
        if (idle && !last) {
            send_cmd(&k, CMD_IDLE);
            CHECK(next_report(&k, &v) && v == IDLE);
        }
        if (last) {
            send_cmd(&k, CMD_CLOSE);
        } else {
            kill(k.pid, SIGKILL);
        }
        /* Whatever it reported before it died (or closed). */
        while (next_report(&k, &v) && v != CLOSED) {
            if (got == 0) {
                first = v;
            } else if (v != prev + 1) {
                ordered = false;
            }
            prev = v;
            got++;
        }
        if (last) {
            finish(&k);
        } else {
            close(k.cmd);
            close(k.rep);
            int status = 0;
            CHECK(waitpid(k.pid, &status, 0) == k.pid);
            CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        }
        CHECK(ordered);
        if (got > 0) {
            CHECK(first <= next);              /* nothing skipped */
            CHECK(first >= floor);             /* positions never went back */
            CHECK(!exact || first == next);    /* acks written before idle kept */
            if (first > next || first < floor || (exact && first != next)) {
                fprintf(stderr, "holder %d started at %llu (next %llu, floor %llu, seed %u)\n", i,
                        (unsigned long long)first, (unsigned long long)next, (unsigned long long)floor, seed);
            }
            floor = first;
            if (prev + 1 > next) {
                next = prev + 1;
            }
        }
        exact = (exact && got == 0) || (idle && always);
    }
    CHECK(next == published); /* every message was given to some holder */
}

int main(int argc, char **argv) {
    if (argc == 6 && strcmp(argv[1], "child") == 0) {
        return child(argv);
    }
    unknown_names_leave_nothing();
    char dir[] = "/tmp/rill-c-named-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    rill_broker *b = NULL;
    OK(open_shared(dir, RILL_FSYNC_NEVER, &b));
    if (b == NULL) {
        return CHECK_VERDICT("test_robust_named");
    }
    OK(rill_topic_create(b, TOPIC, NULL));
    busy_until_let_go(argv[0], dir, b);
    kill_loop(argv[0], dir, b);
    rill_broker_free(b);

    remove_dir(dir);
    return CHECK_VERDICT("test_robust_named");
}
