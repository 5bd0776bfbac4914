/*
 * The cross-core ping-pong probe of ffi/bench/run.sh: two threads, pinned
 * to CPUs 0 and 1 where the system allows, bounce a counter through one
 * atomic for about 10 ms; prints the nanoseconds per round trip. Taken
 * before and after each pair of runs, it says whether the machine changed
 * state under the pair (on a shared VM the two vCPUs move between near and
 * distant cores, and every cross-core number moves with them), as
 * rill-bench's probe does for its pairs.
 *
 *   usage: pingpong
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>

/* Round trips per timed lap, and how long the probe runs. */
#define LAP 4096
#define RUN_NS 10000000.0

static _Atomic unsigned long flag;
static _Atomic int done;

static double now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    /* Best effort: unpinned, the probe still measures something. */
    (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

/* Answers every odd value with the next even one, until told to stop. */
static void *ponger(void *arg) {
    (void)arg;
    pin(1);
    while (!atomic_load_explicit(&done, memory_order_acquire)) {
        unsigned long v = atomic_load_explicit(&flag, memory_order_acquire);
        if (v % 2 == 1) atomic_store_explicit(&flag, v + 1, memory_order_release);
    }
    return NULL;
}

int main(void) {
    pthread_t t;
    if (pthread_create(&t, NULL, ponger, NULL) != 0) {
        fprintf(stderr, "pingpong: cannot start a thread\n");
        return 1;
    }
    pin(0);
    unsigned long v = 0, trips = 0;
    double start = now_ns(), elapsed = 0;
    while (elapsed < RUN_NS) {
        for (int k = 0; k < LAP; k++) {
            atomic_store_explicit(&flag, v + 1, memory_order_release);
            while (atomic_load_explicit(&flag, memory_order_acquire) != v + 2) {
            }
            v += 2;
        }
        trips += LAP;
        elapsed = now_ns() - start;
    }
    atomic_store_explicit(&done, 1, memory_order_release);
    pthread_join(t, NULL);
    printf("%.0f\n", elapsed / (double)trips);
    return 0;
}
