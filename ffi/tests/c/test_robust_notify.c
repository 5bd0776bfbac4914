/*
 * Issue 45, native asyncio, from C: rill_consumer_notify_fd and
 * rill_subscription_notify_fd, the eventfds an event loop waits on instead
 * of blocking in rill_consumer_poll or rill_subscription_wait_idle.
 *
 * - The fd is readable only after a poll that returned nothing, at the
 *   first publish to the consumer's partitions; each poll empties it.
 * - A poll that returns messages disarms it (poll again before waiting).
 * - No wake is lost: two publisher threads race a loop that polls until
 *   empty and then waits in poll(2) on the fd (a hang guard, not a timing
 *   check, bounds that wait), in 300 rounds that each make it wait; every
 *   message arrives.
 * - Closing the broker makes it readable, and the next poll says Closed.
 * - rill_consumer_free closes it; NULL arguments are refused.
 * - rill_subscription_notify_fd: readable after a wait_idle that timed out
 *   (a handler holds a message), when the delivery goes idle; freeing the
 *   subscription closes it.
 * - rill_subscription_close leaves the fd open until rill_subscription_free:
 *   a pipe the program opens after the close gets another number, and
 *   rill_subscription_wait_idle on the closed handle (RILL_ERR_CLOSED) does
 *   not read the pipe's data; rill_subscription_notify_fd still gives the
 *   subscription's own fd.
 *
 * Built with -std=c99 -Wall -Wextra -Wpedantic -Werror, and run plain, under
 * AddressSanitizer + UBSan and under valgrind memcheck by ffi/tests/run.sh.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rill.h"

#include "check.h"

enum {
    /* The racing test: each of PUBLISHERS threads publishes ROUNDS bursts
     * of BURST messages. */
    PUBLISHERS = 2,
    ROUNDS = 300,
    BURST = 5,
    /* A hang guard for a publisher's wait for the next round. */
    SPIN_GUARD = 100 * 1000 * 1000,
    /* A hang guard only: a healthy run never gets near it. */
    WAIT_MS = 60 * 1000,
};

/* True if `fd` is readable now (poll(2) without waiting). */
static int readable(int fd) {
    struct pollfd p = {fd, POLLIN, 0};
    return poll(&p, 1, 0) == 1 && (p.revents & POLLIN);
}

/* Polls without waiting; returns how many messages it got (-1 on error). */
static long poll_now(rill_consumer *c, size_t max) {
    const rill_message *msgs = NULL;
    size_t count = 0;
    rill_status s = rill_consumer_poll(c, max, 0, &msgs, &count);
    return s == RILL_OK ? (long)count : -1;
}

static void publish(rill_broker *b, const char *payload) {
    rill_record r;
    memset(&r, 0, sizeof r);
    r.payload = payload;
    r.payload_len = strlen(payload);
    OK(rill_publish(b, "t", &r, NULL));
}

static void test_readable_after_an_empty_poll_at_the_first_publish(void) {
    rill_broker *b = NULL;
    OK(rill_broker_new(NULL, &b));
    OK(rill_topic_create(b, "t", NULL));
    rill_consumer *c = NULL;
    OK(rill_consumer_new(b, "g", "t", NULL, &c));
    int fd = -1, again = -1;
    OK(rill_consumer_notify_fd(c, &fd));
    CHECK(fd >= 0);
    OK(rill_consumer_notify_fd(c, &again));
    CHECK(again == fd);
    CHECK(!readable(fd));

    CHECK(poll_now(c, 16) == 0); /* nothing: armed */
    CHECK(!readable(fd));
    publish(b, "one");
    CHECK(readable(fd));
    publish(b, "two"); /* rings once per arming; still readable */
    CHECK(readable(fd));
    CHECK(poll_now(c, 1) == 1); /* empties the fd, finds a message: disarmed */
    CHECK(!readable(fd));
    publish(b, "three");
    CHECK(!readable(fd)); /* disarmed: the loop polls again before waiting */
    CHECK(poll_now(c, 16) == 2);
    CHECK(poll_now(c, 16) == 0); /* armed again */
    publish(b, "four");
    CHECK(readable(fd));
    CHECK(poll_now(c, 16) == 1);

    /* Closing the broker rings an armed consumer; its poll says Closed. */
    CHECK(poll_now(c, 16) == 0);
    rill_broker_close(b);
    CHECK(readable(fd));
    const rill_message *msgs = NULL;
    size_t count = 0;
    CHECK_STATUS(rill_consumer_poll(c, 16, 0, &msgs, &count), RILL_ERR_CLOSED);

    CHECK_STATUS(rill_consumer_notify_fd(NULL, &fd), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_consumer_notify_fd(c, NULL), RILL_ERR_NULL_ARGUMENT);
    rill_consumer_free(c);
    /* Freeing the consumer closed its eventfd (nothing in this program
     * opens a descriptor meanwhile that could take its number). */
    errno = 0;
    CHECK(fcntl(fd, F_GETFD) == -1 && errno == EBADF);
    rill_broker_free(b);
}

/* The racing test's shared state. Each publisher thread publishes its
 * messages in ROUNDS bursts; a burst starts only once the consumer has
 * announced (`armed`, a round number) that its last poll found nothing
 * and it is about to wait on the fd, so every round makes it wait (the
 * publish lands before, during or after its poll(2)), and the bursts of
 * the two threads race each other and the consumer's next polls. */
struct race {
    rill_broker *b;
    int armed; /* the last round the consumer announced; __atomic builtins */
    int failed; /* a publisher gave up waiting (hang guard) */
};

struct publisher {
    struct race *race;
    int id;
};

static void *publish_rounds(void *arg) {
    struct publisher *p = arg;
    for (int round = 1; round <= ROUNDS; round++) {
        /* A deadline-bounded wait for the consumer's announcement. */
        long spins = 0;
        while (__atomic_load_n(&p->race->armed, __ATOMIC_ACQUIRE) < round) {
            if (++spins > SPIN_GUARD) {
                __atomic_store_n(&p->race->failed, 1, __ATOMIC_RELEASE);
                return NULL;
            }
            sched_yield();
        }
        for (int i = 0; i < BURST; i++) {
            char payload[32];
            snprintf(payload, sizeof payload, "%d:%d:%d", p->id, round, i);
            publish(p->race->b, payload);
        }
    }
    return NULL;
}

static void test_no_wake_is_lost_to_racing_publishers(void) {
    struct race race = {NULL, 0, 0};
    OK(rill_broker_new(NULL, &race.b));
    rill_topic_options to;
    rill_topic_options_init(&to);
    to.partitions = 2;
    OK(rill_topic_create(race.b, "t", &to));
    rill_consumer *c = NULL;
    OK(rill_consumer_new(race.b, "g", "t", NULL, &c));
    int fd = -1;
    OK(rill_consumer_notify_fd(c, &fd));
    pthread_t threads[PUBLISHERS];
    struct publisher args[PUBLISHERS];
    for (int i = 0; i < PUBLISHERS; i++) {
        args[i].race = &race;
        args[i].id = i;
        CHECK(pthread_create(&threads[i], NULL, publish_rounds, &args[i]) == 0);
    }
    const long want = (long)PUBLISHERS * ROUNDS * BURST;
    long got = 0, waits = 0;
    int round = 0;
    while (got < want) {
        long n = poll_now(c, (size_t)want);
        if (n < 0) {
            CHECK(n >= 0);
            break;
        }
        if (n > 0) {
            got += n;
            continue;
        }
        /* Empty: only the fd may say there is more. Announce the next
         * round (while messages are still due) and wait. */
        if (round < ROUNDS && got == (long)PUBLISHERS * round * BURST) {
            __atomic_store_n(&race.armed, ++round, __ATOMIC_RELEASE);
        }
        struct pollfd p = {fd, POLLIN, 0};
        int ready = poll(&p, 1, WAIT_MS);
        waits++;
        if (ready != 1) {
            fprintf(stderr, "no wake after an empty poll: %ld of %ld messages\n", got, want);
            CHECK(ready == 1);
            break;
        }
    }
    /* Release publishers still waiting (only if the loop broke early). */
    __atomic_store_n(&race.armed, ROUNDS, __ATOMIC_RELEASE);
    for (int i = 0; i < PUBLISHERS; i++) {
        pthread_join(threads[i], NULL);
    }
    CHECK(!__atomic_load_n(&race.failed, __ATOMIC_ACQUIRE));
    CHECK(got == want);
    CHECK(poll_now(c, 64) == 0);
    /* Every round waited on the fd at least once. */
    CHECK(waits >= ROUNDS);
    printf("notify fd: %ld messages, %ld waits on the fd\n", got, waits);
    rill_consumer_free(c);
    rill_broker_free(race.b);
}

/* ---- rill_subscription_notify_fd ------------------------------------------ */

/* A handler that holds each message until the test releases it. */
struct gate {
    int entered;  /* messages the handler has started; __atomic builtins */
    int released; /* messages the test let it finish */
};

static rill_ack held(void *user_data, const rill_message *message) {
    struct gate *g = user_data;
    (void)message;
    int me = __atomic_add_fetch(&g->entered, 1, __ATOMIC_ACQ_REL);
    long spins = 0;
    while (__atomic_load_n(&g->released, __ATOMIC_ACQUIRE) < me && ++spins < SPIN_GUARD) {
        sched_yield();
    }
    return RILL_ACK_SUCCESS;
}

static void test_subscription_fd_is_readable_when_a_busy_subscription_goes_idle(void) {
    rill_broker *b = NULL;
    OK(rill_broker_new(NULL, &b));
    OK(rill_topic_create(b, "t", NULL));
    struct gate g = {0, 0};
    rill_subscription *s = NULL;
    OK(rill_subscribe(b, "t", NULL, held, &g, &s));
    int fd = -1, again = -1;
    OK(rill_subscription_notify_fd(s, &fd));
    OK(rill_subscription_notify_fd(s, &again));
    CHECK(fd >= 0 && again == fd);
    for (int round = 1; round <= 3; round++) {
        publish(b, "busy");
        long spins = 0;
        while (__atomic_load_n(&g.entered, __ATOMIC_ACQUIRE) < round && ++spins < SPIN_GUARD) {
            sched_yield();
        }
        /* Busy: the look times out and arms the fd. */
        CHECK_STATUS(rill_subscription_wait_idle(s, 0), RILL_ERR_TIMEOUT);
        CHECK(!readable(fd));
        __atomic_store_n(&g.released, round, __ATOMIC_RELEASE);
        struct pollfd p = {fd, POLLIN, 0};
        CHECK(poll(&p, 1, WAIT_MS) == 1); /* the delivery went idle: a wake */
        OK(rill_subscription_wait_idle(s, 0)); /* empties it, finds it idle */
        CHECK(!readable(fd));
    }
    CHECK_STATUS(rill_subscription_notify_fd(NULL, &fd), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_subscription_notify_fd(s, NULL), RILL_ERR_NULL_ARGUMENT);
    rill_subscription_free(s);
    errno = 0;
    CHECK(fcntl(fd, F_GETFD) == -1 && errno == EBADF);
    rill_broker_free(b);
}

static void test_subscription_fd_stays_open_until_free(void) {
    rill_broker *b = NULL;
    OK(rill_broker_new(NULL, &b));
    OK(rill_topic_create(b, "t", NULL));
    struct gate g = {0, 0};
    rill_subscription *s = NULL;
    OK(rill_subscribe(b, "t", NULL, held, &g, &s));
    int fd = -1;
    OK(rill_subscription_notify_fd(s, &fd));
    rill_subscription_close(s);
    /* The handle still owns its fd: a descriptor closed here would be the
     * next one the program opens, and the handle would read and hand out
     * that one as its own. */
    CHECK(fcntl(fd, F_GETFD) != -1);
    int p[2] = {-1, -1};
    CHECK(pipe(p) == 0);
    CHECK(p[0] != fd && p[1] != fd);
    static const char data[] = "the program's own data";
    CHECK(write(p[1], data, sizeof data) == (ssize_t)sizeof data);
    CHECK_STATUS(rill_subscription_wait_idle(s, 0), RILL_ERR_CLOSED);
    int again = -1;
    OK(rill_subscription_notify_fd(s, &again));
    CHECK(again == fd);
    char got[sizeof data] = {0};
    CHECK(read(p[0], got, sizeof got) == (ssize_t)sizeof data && memcmp(got, data, sizeof data) == 0);
    rill_subscription_free(s);
    errno = 0;
    CHECK(fcntl(fd, F_GETFD) == -1 && errno == EBADF);
    CHECK(fcntl(p[0], F_GETFD) != -1 && fcntl(p[1], F_GETFD) != -1);
    close(p[0]);
    close(p[1]);
    rill_broker_free(b);
}

int main(void) {
    test_readable_after_an_empty_poll_at_the_first_publish();
    test_no_wake_is_lost_to_racing_publishers();
    test_subscription_fd_is_readable_when_a_busy_subscription_goes_idle();
    test_subscription_fd_stays_open_until_free();
    return CHECK_VERDICT("test_robust_notify");
}
