/*
 * What the C test programs that fork processes onto one data directory
 * share: a command byte to a child and its answer over pipes, a child's
 * exit collected, and a count waited for with a deadline (never a sleep
 * standing in for it); and, for the programs whose member children report
 * what they get (test_robust_procs_groups.c, test_robust_procs_shared.c),
 * the children forked with their pipes, their two-word reports, and the
 * parent's read of them. Include after check.h and dirs.h, with
 * _POSIX_C_SOURCE 200809L defined before any system header.
 */
#ifndef RILL_TEST_PROCS_H
#define RILL_TEST_PROCS_H

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rill.h"

enum {
    /* The longest any wait of these programs lasts: only a hang gets near it. */
    PROCS_WAIT_SECONDS = 30,
    /* The most member children procs_fork_members forks. */
    PROCS_MAX_MEMBERS = 8,
};

/* Sends the command byte `c` on `fd` (a child's command pipe). */
static inline void send_byte(int fd, char c) {
    CHECK(write(fd, &c, 1) == 1);
}

/* Reads one byte from `fd` and checks it is `c` (the child's answer to
 * the command `c`). */
static inline void expect_byte(int fd, char c) {
    char got = 0;
    ssize_t n;
    while ((n = read(fd, &got, 1)) < 0 && errno == EINTR) {
    }
    CHECK(n == 1 && got == c);
}

/* Waits for the child `pid` and checks it exited with status 0. */
static inline void reap_child(pid_t pid) {
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Waits, for PROCS_WAIT_SECONDS at the most, until `*count` (guarded by
 * `lock`, `changed` broadcast whenever it grows) reaches `want`; returns
 * the count then. */
static inline int wait_count(pthread_mutex_t *lock, pthread_cond_t *changed, const int *count, int want) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += PROCS_WAIT_SECONDS;
    pthread_mutex_lock(lock);
    while (*count < want) {
        if (pthread_cond_timedwait(changed, lock, &deadline) != 0) {
            break;
        }
    }
    int got = *count;
    pthread_mutex_unlock(lock);
    return got;
}

/* Milliseconds on the monotonic clock, for deadlines. */
static inline int64_t procs_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A member child's report to the parent on its pipe `fd`: two words, 16
 * bytes in one write (less than PIPE_BUF: whole or not at all). */
static inline void procs_report(int fd, uint64_t a, uint64_t b) {
    uint64_t r[2] = {a, b};
    CHECK(write(fd, r, sizeof r) == (ssize_t)sizeof r);
}

/* Forks `n` (at most PROCS_MAX_MEMBERS) member children. Child `i` runs
 * `member(dir, cmd, rep)` and exits with what it returns: `rep` is the
 * write end of its report pipe, whose read end the parent gets in
 * `fds[i]`; `cmd` the read end of its command pipe, whose write end the
 * parent gets in `cmds[i]` (with `cmds` NULL there is none and `cmd` is
 * -1). A child closes the parent's ends of the pipes of the children
 * forked before it. */
static inline void procs_fork_members(int n, const char *dir, int (*member)(const char *dir, int cmd, int rep),
                                      pid_t *pid, int *fds, int *cmds) {
    CHECK(n <= PROCS_MAX_MEMBERS);
    for (int i = 0; i < n && i < PROCS_MAX_MEMBERS; i++) {
        int p[2], c[2] = {-1, -1};
        CHECK(pipe(p) == 0);
        if (cmds != NULL) {
            CHECK(pipe(c) == 0);
        }
        fflush(NULL);
        pid[i] = fork();
        CHECK(pid[i] >= 0);
        if (pid[i] == 0) {
            close(p[0]);
            if (cmds != NULL) {
                close(c[1]);
            }
            for (int j = 0; j < i; j++) {
                close(fds[j]);
                if (cmds != NULL) {
                    close(cmds[j]);
                }
            }
            _exit(member(dir, c[0], p[1]));
        }
        close(p[1]);
        fds[i] = p[0];
        if (cmds != NULL) {
            close(c[0]);
            cmds[i] = c[1];
        }
    }
}

/* Waits up to `ms` for reports on the `n` pipes `fds` and passes each one
 * read (one from each child at most) to `on_report(i, a, b)`, `i` the
 * child's index. */
static inline void procs_read_reports(const int *fds, int n, int ms, void (*on_report)(int i, uint64_t a, uint64_t b)) {
    struct pollfd p[PROCS_MAX_MEMBERS];
    CHECK(n <= PROCS_MAX_MEMBERS);
    if (n > PROCS_MAX_MEMBERS) {
        n = PROCS_MAX_MEMBERS;
    }
    for (int i = 0; i < n; i++) {
        p[i].fd = fds[i];
        p[i].events = POLLIN;
    }
    if (poll(p, (nfds_t)n, ms) <= 0) {
        return;
    }
    for (int i = 0; i < n; i++) {
        if (!(p[i].revents & POLLIN)) {
            continue;
        }
        uint64_t r[2];
        if (read(fds[i], r, sizeof r) == (ssize_t)sizeof r) {
            on_report(i, r[0], r[1]);
        }
    }
}

#endif
