/*
 * What the C test programs that fork processes onto one data directory
 * share: a command byte to a child and its answer over pipes, a child's
 * exit collected, and a count waited for with a deadline (never a sleep
 * standing in for it). Include after check.h and dirs.h, with
 * _POSIX_C_SOURCE 200809L defined before any system header.
 */
#ifndef RILL_TEST_PROCS_H
#define RILL_TEST_PROCS_H

#include <errno.h>
#include <pthread.h>
#include <time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rill.h"

enum {
    /* The longest any wait of these programs lasts: only a hang gets near it. */
    PROCS_WAIT_SECONDS = 30,
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

#endif
