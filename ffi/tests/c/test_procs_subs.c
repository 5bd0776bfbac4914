/*
 * Every process's subscriptions, from C (issue 39):
 * rill_directory_subscription_list as an operator uses it. A forked child,
 * a RILL_SHARING_PROCESSES broker of its own, has two push subscriptions
 * on "orders": the durable "audit" and an anonymous one; the parent has
 * an anonymous one. The parent lists the child's two with the child's pid
 * and its own with this_broker set, publishes MESSAGES messages, waits
 * for the child to say it handled them all, and then sees the child's
 * counters say so (published at the end of each drain round: the parent
 * waits, with a deadline, for the round to end). Then the child is killed
 * with SIGKILL and its subscriptions are gone from the list at once.
 *
 * Then every process's pull consumers, from rill_directory_consumer_list:
 * a forked child makes a consumer of group "billing" and polls POLLED of
 * the MESSAGES the parent published; the parent, with a consumer of its
 * own, lists the child's with the child's pid, the member id
 * rill_group_member_list gives, and counters saying what the child polled
 * (published at the end of each poll); killed with SIGKILL, it is gone.
 *
 * Then the calls on a broker with RILL_SHARING_EXCLUSIVE (this broker's,
 * as rill_subscription_list gives them) and the NULL arguments.
 *
 * The child is forked before the parent opens its broker (so it inherits
 * no broker's threads); it says 's' on its answer pipe once subscribed,
 * 'd' once both handlers took every message, and waits until it is
 * killed.
 *
 * Built with -std=c99 -Wall -Wextra -Wpedantic -Werror, and run plain,
 * under AddressSanitizer + UBSan and under valgrind memcheck (children
 * traced) by ffi/tests/run.sh.
 */
#define _POSIX_C_SOURCE 200809L
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rill.h"

#include "check.h"
#include "dirs.h"
#include "procs.h"

enum {
    MESSAGES = 10,
    POLLED = 7, /* of MESSAGES, by the consumer child */
    MAX_LISTED = 4, /* more than any listing here holds */
};

static const char *TOPIC = "orders";
static const char *DURABLE = "audit";

/* The child's tallies: one per subscription, and the answer pipe. */
static pthread_mutex_t tally_lock = PTHREAD_MUTEX_INITIALIZER;
static int handled[2];
static int answer_fd = -1;

static rill_ack count(void *user_data, const rill_message *m) {
    (void)m;
    int which = *(const int *)user_data;
    pthread_mutex_lock(&tally_lock);
    handled[which]++;
    if (handled[0] == MESSAGES && handled[1] == MESSAGES) {
        send_byte(answer_fd, 'd');
    }
    pthread_mutex_unlock(&tally_lock);
    return RILL_ACK_SUCCESS;
}

static rill_ack ack(void *user_data, const rill_message *m) {
    (void)user_data;
    (void)m;
    return RILL_ACK_SUCCESS;
}

/* The child: the two subscriptions, 's', then 'd' from a handler, then it
 * waits to be killed (or for the deadline, if the parent is gone). */
static int child(const char *dir, int answer) {
    static const int which[2] = {0, 1};
    answer_fd = answer;
    rill_broker *b = NULL;
    OK(open_shared_broker(dir, RILL_SHARING_PROCESSES, RILL_FSYNC_NEVER, &b));
    rill_subscription *anonymous = NULL, *durable = NULL;
    if (b != NULL) {
        rill_subscription_options so;
        rill_subscription_options_init(&so);
        OK(rill_subscribe(b, TOPIC, &so, count, (void *)&which[0], &anonymous));
        so.name = DURABLE;
        OK(rill_subscribe(b, TOPIC, &so, count, (void *)&which[1], &durable));
    }
    send_byte(answer, 's');
    int64_t deadline = procs_now_ms() + PROCS_WAIT_SECONDS * 1000;
    while (procs_now_ms() < deadline) {
        poll(NULL, 0, 50);
    }
    /* Only a parent that never killed it gets here. */
    rill_subscription_free(durable);
    rill_subscription_free(anonymous);
    rill_broker_free(b);
    return 1;
}

/* What the listing hands its callback, copied. */
struct sub {
    char name[64];
    char pattern[32];
    uint32_t pid;
    bool this_broker, durable, shared;
    uint64_t delivered, acked, lag;
};
struct listed {
    int count;
    struct sub subs[MAX_LISTED];
};

static void each_sub(void *user_data, const rill_directory_subscription *s) {
    struct listed *l = user_data;
    const rill_subscription_stats *st = s->stats;
    CHECK(st != NULL && st->name != NULL && st->pattern != NULL);
    if (st == NULL || st->name == NULL || st->pattern == NULL) {
        return;
    }
    bool fits = l->count < MAX_LISTED && strlen(st->name) < sizeof l->subs[0].name &&
                strlen(st->pattern) < sizeof l->subs[0].pattern;
    CHECK(fits);
    if (fits) {
        struct sub *out = &l->subs[l->count++];
        strcpy(out->name, st->name);
        strcpy(out->pattern, st->pattern);
        out->pid = s->pid;
        out->this_broker = s->this_broker;
        out->durable = s->durable;
        out->shared = s->shared;
        out->delivered = st->delivered;
        out->acked = st->acked;
        out->lag = st->lag;
    }
}

static struct listed list(rill_broker *b) {
    struct listed l;
    memset(&l, 0, sizeof l);
    OK(rill_directory_subscription_list(b, each_sub, &l));
    return l;
}

/* How many of `l` live in process `pid`. */
static int of_pid(const struct listed *l, uint32_t pid) {
    int n = 0;
    for (int i = 0; i < l->count; i++) {
        n += l->subs[i].pid == pid;
    }
    return n;
}

/* True once both of the child's subscriptions say they delivered and
 * acked every message and have no lag. */
static bool child_caught_up(const struct listed *l, uint32_t pid) {
    int done = 0;
    for (int i = 0; i < l->count; i++) {
        const struct sub *s = &l->subs[i];
        done += s->pid == pid && s->delivered == MESSAGES && s->acked == MESSAGES && s->lag == 0;
    }
    return done == 2;
}

static void across_processes(void) {
    char dir[] = "/tmp/rill-c-subs-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    rill_broker *b = NULL;
    OK(open_shared_broker(dir, RILL_SHARING_PROCESSES, RILL_FSYNC_NEVER, &b));
    if (b == NULL) {
        return;
    }
    OK(rill_topic_create(b, TOPIC, NULL));
    rill_broker_free(b);

    int p[2];
    CHECK(pipe(p) == 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        _exit(child(dir, p[1]));
    }
    close(p[1]);
    expect_byte(p[0], 's');

    OK(open_shared_broker(dir, RILL_SHARING_PROCESSES, RILL_FSYNC_NEVER, &b));
    rill_subscription *mine = NULL;
    rill_subscription_options so;
    rill_subscription_options_init(&so);
    OK(rill_subscribe(b, TOPIC, &so, ack, NULL, &mine));
    uint32_t me = (uint32_t)getpid(), them = (uint32_t)pid;

    struct listed l = list(b);
    CHECK(l.count == 3);
    CHECK(of_pid(&l, them) == 2 && of_pid(&l, me) == 1);
    for (int i = 0; i < l.count; i++) {
        const struct sub *s = &l.subs[i];
        CHECK(strcmp(s->pattern, TOPIC) == 0 && !s->shared);
        CHECK(s->this_broker == (s->pid == me));
        CHECK(s->durable == (strcmp(s->name, DURABLE) == 0));
    }

    for (int i = 0; i < MESSAGES; i++) {
        rill_record r = {0};
        r.payload = "o";
        r.payload_len = 1;
        OK(rill_publish(b, TOPIC, &r, NULL));
    }
    expect_byte(p[0], 'd');
    /* Published at the end of each drain round: wait for it to end. */
    int64_t deadline = procs_now_ms() + PROCS_WAIT_SECONDS * 1000;
    for (l = list(b); !child_caught_up(&l, them) && procs_now_ms() < deadline; l = list(b)) {
        poll(NULL, 0, 1);
    }
    CHECK(child_caught_up(&l, them));

    CHECK(kill(pid, SIGKILL) == 0);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    close(p[0]);

    /* The dead process's lock went with it: nothing to wait for. */
    l = list(b);
    CHECK(l.count == 1 && l.subs[0].pid == me && l.subs[0].this_broker);

    rill_subscription_free(mine);
    rill_broker_free(b);
    remove_dir(dir);
}

/* The consumer child: a consumer of "billing" that polls POLLED messages,
 * then 'p', then it waits to be killed (or for the deadline). */
static int consumer_child(const char *dir, int answer) {
    rill_broker *b = NULL;
    OK(open_shared_broker(dir, RILL_SHARING_PROCESSES, RILL_FSYNC_NEVER, &b));
    rill_consumer *c = NULL;
    if (b != NULL) {
        OK(rill_consumer_new(b, "billing", TOPIC, NULL, &c));
    }
    size_t polled = 0;
    while (c != NULL && polled < POLLED) {
        const rill_message *m = NULL;
        size_t n = 0;
        OK(rill_consumer_poll(c, POLLED - polled, PROCS_WAIT_SECONDS * 1000, &m, &n));
        CHECK(n > 0);
        if (n == 0) {
            break;
        }
        polled += n;
    }
    send_byte(answer, 'p');
    int64_t deadline = procs_now_ms() + PROCS_WAIT_SECONDS * 1000;
    while (procs_now_ms() < deadline) {
        poll(NULL, 0, 50);
    }
    rill_consumer_free(c);
    rill_broker_free(b);
    return 1;
}

/* What the consumer listing hands its callback, copied. */
struct cons {
    char group[32];
    char topic[32];
    uint32_t pid;
    bool this_broker;
    uint64_t id, delivered, missed, lag;
};
struct cons_listed {
    int count;
    struct cons cons[MAX_LISTED];
};

static void each_consumer(void *user_data, const rill_directory_consumer *c) {
    struct cons_listed *l = user_data;
    CHECK(c->group != NULL && c->topic != NULL);
    if (c->group == NULL || c->topic == NULL) {
        return;
    }
    bool fits = l->count < MAX_LISTED && strlen(c->group) < sizeof l->cons[0].group &&
                strlen(c->topic) < sizeof l->cons[0].topic;
    CHECK(fits);
    if (fits) {
        struct cons *out = &l->cons[l->count++];
        strcpy(out->group, c->group);
        strcpy(out->topic, c->topic);
        out->pid = c->pid;
        out->this_broker = c->this_broker;
        out->id = c->id;
        out->delivered = c->delivered;
        out->missed = c->missed;
        out->lag = c->lag;
    }
}

static struct cons_listed list_consumers(rill_broker *b) {
    struct cons_listed l;
    memset(&l, 0, sizeof l);
    OK(rill_directory_consumer_list(b, each_consumer, &l));
    return l;
}

static void member_id(void *user_data, const rill_group_member *m) {
    *(uint64_t *)user_data = m->id;
}

static void consumers_across_processes(void) {
    char dir[] = "/tmp/rill-c-cons-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    rill_broker *b = NULL;
    OK(open_shared_broker(dir, RILL_SHARING_PROCESSES, RILL_FSYNC_NEVER, &b));
    if (b == NULL) {
        return;
    }
    OK(rill_topic_create(b, TOPIC, NULL));
    for (int i = 0; i < MESSAGES; i++) {
        rill_record r = {0};
        r.payload = "o";
        r.payload_len = 1;
        OK(rill_publish(b, TOPIC, &r, NULL));
    }
    rill_broker_free(b);

    int p[2];
    CHECK(pipe(p) == 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        _exit(consumer_child(dir, p[1]));
    }
    close(p[1]);
    expect_byte(p[0], 'p');

    OK(open_shared_broker(dir, RILL_SHARING_PROCESSES, RILL_FSYNC_NEVER, &b));
    rill_consumer *mine = NULL;
    OK(rill_consumer_new(b, "audit", TOPIC, NULL, &mine));
    uint32_t me = (uint32_t)getpid(), them = (uint32_t)pid;

    /* Published at the end of the child's last poll, before its 'p'. */
    struct cons_listed l = list_consumers(b);
    CHECK(l.count == 2);
    for (int i = 0; i < l.count; i++) {
        const struct cons *c = &l.cons[i];
        CHECK(strcmp(c->topic, TOPIC) == 0 && c->this_broker == (c->pid == me));
        if (c->pid == them) {
            CHECK(strcmp(c->group, "billing") == 0);
            CHECK(c->delivered == POLLED && c->missed == 0 && c->lag == MESSAGES - POLLED);
            uint64_t id = 0;
            OK(rill_group_member_list(b, "billing", TOPIC, member_id, &id));
            CHECK(id == c->id);
        } else {
            CHECK(c->pid == me && strcmp(c->group, "audit") == 0 && c->delivered == 0);
        }
    }
    /* Pull consumers are not push subscriptions. */
    CHECK(list(b).count == 0);

    CHECK(kill(pid, SIGKILL) == 0);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    close(p[0]);

    l = list_consumers(b);
    CHECK(l.count == 1 && l.cons[0].pid == me && l.cons[0].this_broker);
    rill_consumer_free(mine);
    CHECK(list_consumers(b).count == 0);

    rill_broker_free(b);
    remove_dir(dir);
}

static void exclusive_and_arguments(void) {
    char dir[] = "/tmp/rill-c-subs-x-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    rill_broker *b = NULL;
    OK(open_shared_broker(dir, RILL_SHARING_EXCLUSIVE, RILL_FSYNC_NEVER, &b));
    if (b == NULL) {
        return;
    }
    OK(rill_topic_create(b, TOPIC, NULL));
    CHECK(list(b).count == 0);
    rill_subscription *anonymous = NULL, *durable = NULL;
    rill_subscription_options so;
    rill_subscription_options_init(&so);
    OK(rill_subscribe(b, TOPIC, &so, ack, NULL, &anonymous));
    so.name = DURABLE;
    OK(rill_subscribe(b, TOPIC, &so, ack, NULL, &durable));
    struct listed l = list(b);
    CHECK(l.count == 2 && of_pid(&l, (uint32_t)getpid()) == 2);
    CHECK(l.subs[0].this_broker && l.subs[1].this_broker);

    memset(&l, 0, sizeof l);
    CHECK_STATUS(rill_directory_subscription_list(NULL, each_sub, &l), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_directory_subscription_list(b, NULL, &l), RILL_ERR_NULL_ARGUMENT);
    CHECK(l.count == 0);

    rill_consumer *c = NULL;
    OK(rill_consumer_new(b, "billing", TOPIC, NULL, &c));
    struct cons_listed cl = list_consumers(b);
    CHECK(cl.count == 1 && cl.cons[0].this_broker && cl.cons[0].pid == (uint32_t)getpid());
    memset(&cl, 0, sizeof cl);
    CHECK_STATUS(rill_directory_consumer_list(NULL, each_consumer, &cl), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_directory_consumer_list(b, NULL, &cl), RILL_ERR_NULL_ARGUMENT);
    CHECK(cl.count == 0);
    rill_consumer_free(c);

    rill_subscription_free(durable);
    rill_subscription_free(anonymous);
    rill_broker_free(b);
    remove_dir(dir);
}

int main(void) {
    across_processes();
    consumers_across_processes();
    exclusive_and_arguments();
    return CHECK_VERDICT("test_procs_subs");
}
