/*
 * Who holds what across processes, from C (issue 39):
 * rill_named_subscription_list and rill_group_member_list as an operator
 * uses them. A forked child, a RILL_SHARING_PROCESSES broker of its own,
 * holds the durable subscription "audit" and is the one member of the
 * group "billing" on the two partitions of "orders"; the parent holds the
 * durable name "ledger". The parent lists: "audit" held by the child's
 * pid, "ledger" by its own, and one member of the group, in the child's
 * process, owning partitions 0 and 1. Then the child is killed with
 * SIGKILL: "audit" reads as not held (pid 0) and the group has no member,
 * at once (the kernel lets go of a dead process's locks as it dies).
 *
 * Then the same calls on a broker with RILL_SHARING_EXCLUSIVE (this
 * broker's names and members, all this process's), the NULL arguments and
 * an unknown topic.
 *
 * The child is forked before the parent opens its broker (so it inherits
 * no broker's threads); it says 'h' on its answer pipe once it holds the
 * name and owns both partitions, and polls until it is killed.
 *
 * Built with -std=c99 -Wall -Wextra -Wpedantic -Werror, and run plain,
 * under AddressSanitizer + UBSan and under valgrind memcheck (children
 * traced) by ffi/tests/run.sh.
 */
#define _POSIX_C_SOURCE 200809L
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
    PARTITIONS = 2,
    MAX_LISTED = 4, /* more than any listing here holds */
};

static const char *TOPIC = "orders";
static const char *GROUP = "billing";
static const char *CHILD_NAME = "audit";
static const char *PARENT_NAME = "ledger";

static rill_ack ack(void *user_data, const rill_message *m) {
    (void)user_data;
    (void)m;
    return RILL_ACK_SUCCESS;
}

static rill_status subscribe_named(rill_broker *b, const char *name, rill_subscription **out) {
    rill_subscription_options so;
    rill_subscription_options_init(&so);
    so.name = name;
    *out = NULL;
    return rill_subscribe(b, TOPIC, &so, ack, NULL, out);
}

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The child: holds CHILD_NAME and a member of GROUP, says 'h' once it owns
 * every partition, then polls until it is killed (or the parent is gone). */
static int child(const char *dir, int answer) {
    rill_broker *b = NULL;
    OK(open_shared_broker(dir, RILL_SHARING_PROCESSES, RILL_FSYNC_NEVER, &b));
    rill_subscription *s = NULL;
    rill_consumer *c = NULL;
    if (b != NULL) {
        OK(subscribe_named(b, CHILD_NAME, &s));
        OK(rill_consumer_new(b, GROUP, TOPIC, NULL, &c));
    }
    int64_t deadline = now_ms() + PROCS_WAIT_SECONDS * 1000;
    bool said = false;
    while (c != NULL && now_ms() < deadline) {
        const rill_message *m = NULL;
        size_t n = 0;
        OK(rill_consumer_poll(c, 16, 20, &m, &n));
        uint32_t parts[PARTITIONS];
        size_t count = 0;
        OK(rill_consumer_assignment(c, parts, PARTITIONS, &count));
        if (!said && count == PARTITIONS) {
            send_byte(answer, 'h');
            said = true;
        }
    }
    /* Only a parent that never killed it gets here. */
    rill_consumer_free(c);
    rill_subscription_free(s);
    rill_broker_free(b);
    return 1;
}

/* What the listings hand their callbacks, copied. */
struct named {
    char name[32];
    bool held;
    uint32_t pid;
};
struct member {
    uint32_t pid;
    uint64_t id;
    size_t count;
    uint32_t partitions[PARTITIONS];
};
struct listed {
    int count;
    struct named names[MAX_LISTED];
    struct member members[MAX_LISTED];
};

static void each_named(void *user_data, const rill_named_subscription *n) {
    struct listed *l = user_data;
    CHECK(l->count < MAX_LISTED && n->name != NULL && strlen(n->name) < sizeof l->names[0].name);
    if (l->count < MAX_LISTED && n->name != NULL && strlen(n->name) < sizeof l->names[0].name) {
        struct named *out = &l->names[l->count++];
        strcpy(out->name, n->name);
        out->held = n->held;
        out->pid = n->holder_pid;
    }
}

static void each_member(void *user_data, const rill_group_member *m) {
    struct listed *l = user_data;
    CHECK(l->count < MAX_LISTED && m->partition_count <= PARTITIONS);
    CHECK((m->partitions == NULL) == (m->partition_count == 0));
    if (l->count < MAX_LISTED && m->partition_count <= PARTITIONS) {
        struct member *out = &l->members[l->count++];
        out->pid = m->pid;
        out->id = m->id;
        out->count = m->partition_count;
        if (m->partition_count > 0) {
            memcpy(out->partitions, m->partitions, m->partition_count * sizeof m->partitions[0]);
        }
    }
}

static struct listed names_of(rill_broker *b) {
    struct listed l;
    memset(&l, 0, sizeof l);
    OK(rill_named_subscription_list(b, each_named, &l));
    return l;
}

static struct listed members_of(rill_broker *b) {
    struct listed l;
    memset(&l, 0, sizeof l);
    OK(rill_group_member_list(b, GROUP, TOPIC, each_member, &l));
    return l;
}

static void check_name(const struct named *n, const char *name, bool held, uint32_t pid) {
    CHECK(strcmp(n->name, name) == 0);
    CHECK(n->held == held);
    CHECK(n->pid == pid);
}

/* The one member, in process `pid`, owning both partitions. */
static void check_sole_member(const struct listed *l, uint32_t pid) {
    CHECK(l->count == 1);
    CHECK(l->members[0].pid == pid);
    CHECK(l->members[0].count == PARTITIONS);
    CHECK(l->members[0].partitions[0] == 0 && l->members[0].partitions[1] == 1);
}

static void create_topic(rill_broker *b) {
    rill_topic_options to;
    rill_topic_options_init(&to);
    to.partitions = PARTITIONS;
    OK(rill_topic_create(b, TOPIC, &to));
}

static void across_processes(void) {
    char dir[] = "/tmp/rill-c-holders-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    rill_broker *b = NULL;
    OK(open_shared_broker(dir, RILL_SHARING_PROCESSES, RILL_FSYNC_NEVER, &b));
    if (b == NULL) {
        return;
    }
    create_topic(b);
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
    expect_byte(p[0], 'h');

    OK(open_shared_broker(dir, RILL_SHARING_PROCESSES, RILL_FSYNC_NEVER, &b));
    rill_subscription *mine = NULL;
    OK(subscribe_named(b, PARENT_NAME, &mine));
    uint32_t me = (uint32_t)getpid();

    struct listed names = names_of(b);
    CHECK(names.count == 2);
    check_name(&names.names[0], CHILD_NAME, true, (uint32_t)pid);
    check_name(&names.names[1], PARENT_NAME, true, me);
    struct listed members = members_of(b);
    check_sole_member(&members, (uint32_t)pid);

    CHECK(kill(pid, SIGKILL) == 0);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    close(p[0]);

    /* The dead process's locks went with it: nothing to wait for. */
    names = names_of(b);
    CHECK(names.count == 2);
    check_name(&names.names[0], CHILD_NAME, false, 0);
    check_name(&names.names[1], PARENT_NAME, true, me);
    CHECK(members_of(b).count == 0);

    rill_subscription_free(mine);
    rill_broker_free(b);
    remove_dir(dir);
}

static void exclusive_and_arguments(void) {
    char dir[] = "/tmp/rill-c-holders-x-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    rill_broker *b = NULL;
    OK(open_shared_broker(dir, RILL_SHARING_EXCLUSIVE, RILL_FSYNC_NEVER, &b));
    if (b == NULL) {
        return;
    }
    create_topic(b);
    uint32_t me = (uint32_t)getpid();
    CHECK(names_of(b).count == 0);
    CHECK(members_of(b).count == 0);

    rill_subscription *anonymous = NULL, *mine = NULL;
    rill_subscription_options so;
    rill_subscription_options_init(&so);
    OK(rill_subscribe(b, TOPIC, &so, ack, NULL, &anonymous));
    OK(subscribe_named(b, PARENT_NAME, &mine));
    rill_consumer *c = NULL;
    OK(rill_consumer_new(b, GROUP, TOPIC, NULL, &c));

    struct listed names = names_of(b);
    CHECK(names.count == 1); /* the anonymous one is not a durable name */
    check_name(&names.names[0], PARENT_NAME, true, me);
    struct listed members = members_of(b);
    check_sole_member(&members, me);

    struct listed l;
    memset(&l, 0, sizeof l);
    CHECK_STATUS(rill_named_subscription_list(NULL, each_named, &l), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_named_subscription_list(b, NULL, &l), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_group_member_list(NULL, GROUP, TOPIC, each_member, &l), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_group_member_list(b, NULL, TOPIC, each_member, &l), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_group_member_list(b, GROUP, NULL, each_member, &l), RILL_ERR_NULL_ARGUMENT);
    CHECK_STATUS(rill_group_member_list(b, GROUP, TOPIC, NULL, &l), RILL_ERR_NULL_ARGUMENT);
    char err[256];
    rill_last_error(err, sizeof err);
    CHECK(strstr(err, "each") != NULL);
    CHECK_STATUS(rill_group_member_list(b, GROUP, "no-such-topic", each_member, &l), RILL_ERR_NO_SUCH_TOPIC);
    CHECK(l.count == 0);

    rill_consumer_free(c);
    rill_subscription_free(mine);
    rill_subscription_free(anonymous);
    rill_broker_free(b);
    remove_dir(dir);
}

int main(void) {
    across_processes();
    exclusive_and_arguments();
    return CHECK_VERDICT("test_procs_holders");
}
