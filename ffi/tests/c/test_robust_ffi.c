/*
 * Issue 40, items 11 and 12, from C.
 *
 * Fork: a child of fork() that frees what it inherited (a broker on a data
 * directory, a subscription on a dedicated thread, a consumer whose group
 * committed, a publisher) exits 0 with nothing on its stderr (no panic, no
 * backtrace), and the parent's broker keeps working: it still holds its
 * directory's lock, publishes, delivers and polls, and after it closes, a
 * new broker on the directory finds every message and the group's commit.
 *
 * struct_size: every struct the library sizes from the caller (the four
 * option structs' struct_size, the stats calls' size) is placed at the end
 * of a mapping, just before a PROT_NONE guard page. A size of UINT32_MAX,
 * 1 MiB or RILL_STRUCT_SIZE_MAX + 1 is RILL_ERR_INVALID_ARGUMENT (and _init
 * with one writes nothing) without a byte past the struct being touched,
 * which would fault on the guard page; RILL_STRUCT_SIZE_MAX itself, with
 * that many bytes mapped, is accepted.
 *
 * Built with -std=c99 -Wall -Wextra -Wpedantic -Werror, and run plain, under
 * AddressSanitizer + UBSan and under valgrind memcheck by ffi/tests/run.sh.
 */
#define _DEFAULT_SOURCE
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rill.h"

#include "check.h"
#include "dirs.h"

enum {
    BEFORE_FORK = 20, /* published before the fork */
    AFTER_FORK = 5,   /* published by the parent after its child exited */
    COMMITTED = 12,   /* the group commits after polling these */
    ERR_LEN = 512,
    CHILD_ERR_MAX = 4096,
};

static const char *TOPIC = "orders";
static const char *GROUP = "billing";

/* ---- fork ------------------------------------------------------------------ */

static void publish(rill_broker *b, int n) {
    for (int i = 0; i < n; i++) {
        rill_record r = {0};
        r.payload = "m";
        r.payload_len = 1;
        rill_position pos;
        OK(rill_publish(b, TOPIC, &r, &pos));
    }
}

/* Polls until `want` messages came, or a poll finds none within its wait. */
static size_t poll_n(rill_consumer *c, size_t want) {
    size_t got = 0;
    while (got < want) {
        const rill_message *msgs = NULL;
        size_t count = 0;
        OK(rill_consumer_poll(c, want - got, 5000, &msgs, &count));
        if (count == 0) {
            break;
        }
        got += count;
    }
    return got;
}

/* Everything the child wrote to its stderr, until it closed it. */
static size_t read_all(int fd, char *buf, size_t cap) {
    size_t len = 0;
    for (;;) {
        ssize_t n = read(fd, buf + len, cap - 1 - len);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            break;
        }
        len += (size_t)n;
        if (len == cap - 1) {
            break;
        }
    }
    buf[len] = '\0';
    return len;
}

/* True under a leak checker that would check this process's children too:
 * AddressSanitizer (compiled in) or valgrind (which preloads itself). */
static int leak_checked(void) {
#if defined(__SANITIZE_ADDRESS__)
    return 1;
#else
    const char *preload = getenv("LD_PRELOAD");
    return preload != NULL && strstr(preload, "vgpreload") != NULL;
#endif
}

/* The mode a child re-executes this program in to end (see test_fork). */
static const char *EXIT_QUIETLY = "exit-quietly";

/* Counted by the subscription, on its thread. */
static pthread_mutex_t delivered_lock = PTHREAD_MUTEX_INITIALIZER;
static int delivered_count = 0;
static int user_data_freed = 0;

static rill_ack count(void *user_data, const rill_message *m) {
    (void)user_data;
    (void)m;
    pthread_mutex_lock(&delivered_lock);
    delivered_count++;
    pthread_mutex_unlock(&delivered_lock);
    return RILL_ACK_SUCCESS;
}

static int delivered(void) {
    pthread_mutex_lock(&delivered_lock);
    int n = delivered_count;
    pthread_mutex_unlock(&delivered_lock);
    return n;
}

static void count_user_data_free(void *user_data) {
    (void)user_data;
    user_data_freed++;
}

static void test_fork(const char *self, const char *dir) {
    rill_broker *b = open_broker_or_exit(dir, RILL_FSYNC_INTERVAL);
    OK(rill_topic_create(b, TOPIC, NULL));
    publish(b, BEFORE_FORK);
    rill_subscription_options so;
    rill_subscription_options_init(&so);
    so.start = RILL_START_EARLIEST;
    so.dedicated_thread = true;
    so.user_data_free = count_user_data_free;
    rill_subscription *s = NULL;
    OK(rill_subscribe(b, TOPIC, &so, count, NULL, &s));
    rill_publisher *p = NULL;
    OK(rill_publisher_new(b, TOPIC, &p));
    if (s == NULL || p == NULL) {
        exit(2);
    }
    OK(rill_subscription_wait_idle(s, 10000));
    CHECK(delivered() == BEFORE_FORK);
    rill_consumer *c = NULL;
    OK(rill_consumer_new(b, GROUP, TOPIC, NULL, &c));
    if (c == NULL) {
        exit(2);
    }
    CHECK(poll_n(c, COMMITTED) == COMMITTED);
    OK(rill_consumer_commit(c));

    int err[2];
    CHECK(pipe(err) == 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        /* The child: its stderr goes to the pipe, then it frees what it
         * inherited (and closes the broker first, the other call rill.h
         * allows there) and exits normally, running its atexit handlers.
         * Nothing of it may be closed here: the subscription's thread does
         * not exist in the child (joining it used to panic), and its
         * user_data_free must not run. Under a leak checker it ends with exec
         * instead, as a fork-then-exec child does: a checker in a forked
         * child that exits reports what the parent's threads own (their
         * closures, their thread-locals: nothing points to them in the
         * child, where those threads do not exist), whatever the library
         * does, and the inherited broker is leaked there by design. */
        dup2(err[1], STDERR_FILENO);
        close(err[0]);
        close(err[1]);
        rill_subscription_free(s);
        rill_consumer_free(c);
        rill_publisher_free(p);
        rill_broker_close(b);
        rill_broker_free(b);
        if (user_data_freed != 0) {
            fprintf(stderr, "the child ran the inherited subscription's user_data_free\n");
        }
        if (leak_checked()) {
            execl(self, self, EXIT_QUIETLY, (char *)NULL);
            _exit(127);
        }
        exit(0);
    }
    CHECK(pid > 0);
    close(err[1]);
    char child_err[CHILD_ERR_MAX];
    size_t err_len = read_all(err[0], child_err, sizeof child_err);
    close(err[0]);
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(err_len == 0);
    if (err_len != 0) {
        fprintf(stderr, "the child's stderr:\n%s\n", child_err);
    }

    /* The parent's broker is untouched: it still holds the lock... */
    char lock[600];
    snprintf(lock, sizeof lock, "%s/LOCK", dir);
    struct stat st;
    CHECK(stat(lock, &st) == 0);
    rill_broker_options o;
    rill_broker_options_init(&o);
    o.data_dir = dir;
    rill_broker *second = NULL;
    CHECK_STATUS(rill_broker_new(&o, &second), RILL_ERR_BUSY);
    CHECK(second == NULL);
    /* ...publishes, delivers, and its consumer reads on from where it was. */
    publish(b, AFTER_FORK);
    rill_position pos;
    rill_record r = {0};
    OK(rill_publisher_publish(p, &r, &pos));
    OK(rill_subscription_wait_idle(s, 10000));
    CHECK(delivered() == BEFORE_FORK + AFTER_FORK + 1);
    CHECK(poll_n(c, BEFORE_FORK + AFTER_FORK + 1 - COMMITTED) == BEFORE_FORK + AFTER_FORK + 1 - COMMITTED);
    rill_subscription_free(s);
    CHECK(user_data_freed == 1);
    rill_publisher_free(p);
    rill_consumer_free(c);
    rill_broker_free(b);

    /* And the directory has it all. */
    b = open_broker_or_exit(dir, RILL_FSYNC_INTERVAL);
    rill_topic_stats st_topic;
    OK(rill_topic_get_stats(b, TOPIC, &st_topic));
    CHECK(st_topic.publish_count == BEFORE_FORK + AFTER_FORK + 1);
    OK(rill_consumer_new(b, GROUP, TOPIC, NULL, &c));
    uint64_t committed = 0;
    if (c != NULL) {
        OK(rill_consumer_committed(c, 0, &committed));
        CHECK(committed == COMMITTED);
        rill_consumer_free(c);
    }
    rill_broker_free(b);
}

/* ---- struct_size ---------------------------------------------------------------- */

/* A struct of `len` bytes (rounded up to 8, the structs' alignment) that
 * ends where a PROT_NONE page begins: any byte read or written past it
 * faults. Unmap it with `unguard(p, len)`. */
static void *guarded(size_t len) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    len = (len + 7) & ~(size_t)7;
    size_t body = (len + page - 1) / page * page;
    unsigned char *base = mmap(NULL, body + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED) {
        perror("mmap");
        exit(2);
    }
    if (mprotect(base + body, page, PROT_NONE) != 0) {
        perror("mprotect");
        exit(2);
    }
    memset(base, 0xAB, body);
    return base + body - len;
}

static void unguard(void *p, size_t len) {
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    len = (len + 7) & ~(size_t)7;
    size_t body = (len + page - 1) / page * page;
    unsigned char *base = (unsigned char *)p + len - body;
    munmap(base, body + page);
}

/* The sizes refused: all larger than RILL_STRUCT_SIZE_MAX. */
static const uint32_t TOO_BIG[] = {UINT32_MAX, 1u << 20, RILL_STRUCT_SIZE_MAX + 1u};
enum { TOO_BIG_COUNT = sizeof TOO_BIG / sizeof TOO_BIG[0] };

/* The last call failed for its size, and said so. */
static void check_size_error(void) {
    char err[ERR_LEN];
    rill_last_error(err, sizeof err);
    CHECK(strstr(err, "RILL_STRUCT_SIZE_MAX") != NULL);
}

/* A struct of `size` bytes from `_init_v1`, placed just before the guard. */
#define INIT_AT_MAX(type, init_v1, p)                                                  \
    do {                                                                               \
        (p) = guarded(RILL_STRUCT_SIZE_MAX);                                           \
        init_v1((type *)(p), RILL_STRUCT_SIZE_MAX);                                    \
        CHECK(((type *)(p))->struct_size == RILL_STRUCT_SIZE_MAX);                     \
        const unsigned char *tail_ = (const unsigned char *)(p) + sizeof(type);        \
        int zero_ = 1;                                                                 \
        for (size_t i_ = 0; i_ < RILL_STRUCT_SIZE_MAX - sizeof(type); i_++) {          \
            zero_ &= tail_[i_] == 0;                                                   \
        }                                                                              \
        CHECK(zero_);                                                                  \
    } while (0)

/* `_init_v1` with a size above the bound writes nothing, even with only the
 * struct itself mapped. */
#define CHECK_INIT_REFUSES(type, init_v1)                                              \
    do {                                                                               \
        for (int k_ = 0; k_ < TOO_BIG_COUNT; k_++) {                                   \
            type *o_ = guarded(sizeof(type));                                          \
            o_->struct_size = 7;                                                       \
            init_v1(o_, TOO_BIG[k_]);                                                  \
            CHECK(o_->struct_size == 7);                                               \
            unguard(o_, sizeof(type));                                                 \
        }                                                                              \
    } while (0)

static void test_broker_options(void) {
    CHECK_INIT_REFUSES(rill_broker_options, rill_broker_options_init_v1);
    for (int k = 0; k < TOO_BIG_COUNT; k++) {
        rill_broker_options *o = guarded(sizeof *o);
        rill_broker_options_init(o);
        o->struct_size = TOO_BIG[k];
        rill_broker *b = NULL;
        CHECK_STATUS(rill_broker_new(o, &b), RILL_ERR_INVALID_ARGUMENT);
        CHECK(b == NULL);
        check_size_error();
        unguard(o, sizeof *o);
    }
    void *p;
    INIT_AT_MAX(rill_broker_options, rill_broker_options_init_v1, p);
    rill_broker *b = NULL;
    OK(rill_broker_new(p, &b));
    rill_broker_free(b);
    unguard(p, RILL_STRUCT_SIZE_MAX);
}

static void test_topic_options(rill_broker *b) {
    CHECK_INIT_REFUSES(rill_topic_options, rill_topic_options_init_v1);
    for (int k = 0; k < TOO_BIG_COUNT; k++) {
        rill_topic_options *o = guarded(sizeof *o);
        rill_topic_options_init(o);
        o->struct_size = TOO_BIG[k];
        CHECK_STATUS(rill_topic_create(b, "never", o), RILL_ERR_INVALID_ARGUMENT);
        check_size_error();
        unguard(o, sizeof *o);
    }
    void *p;
    INIT_AT_MAX(rill_topic_options, rill_topic_options_init_v1, p);
    OK(rill_topic_create(b, "sized", p));
    unguard(p, RILL_STRUCT_SIZE_MAX);
}

static void test_consumer_options(rill_broker *b) {
    CHECK_INIT_REFUSES(rill_consumer_options, rill_consumer_options_init_v1);
    for (int k = 0; k < TOO_BIG_COUNT; k++) {
        rill_consumer_options *o = guarded(sizeof *o);
        rill_consumer_options_init(o);
        o->struct_size = TOO_BIG[k];
        rill_consumer *c = NULL;
        CHECK_STATUS(rill_consumer_new(b, "g", "sized", o, &c), RILL_ERR_INVALID_ARGUMENT);
        CHECK(c == NULL);
        check_size_error();
        unguard(o, sizeof *o);
    }
    void *p;
    INIT_AT_MAX(rill_consumer_options, rill_consumer_options_init_v1, p);
    rill_consumer *c = NULL;
    OK(rill_consumer_new(b, "g", "sized", p, &c));
    rill_consumer_free(c);
    unguard(p, RILL_STRUCT_SIZE_MAX);
}

static rill_ack ignore(void *user_data, const rill_message *m) {
    (void)user_data;
    (void)m;
    return RILL_ACK_SUCCESS;
}

static int freed = 0;

static void count_free(void *user_data) {
    (void)user_data;
    freed++;
}

static void test_subscription_options_and_stats(rill_broker *b) {
    CHECK_INIT_REFUSES(rill_subscription_options, rill_subscription_options_init_v1);
    for (int k = 0; k < TOO_BIG_COUNT; k++) {
        rill_subscription_options *o = guarded(sizeof *o);
        rill_subscription_options_init(o);
        o->user_data_free = count_free;
        o->struct_size = TOO_BIG[k];
        rill_subscription *s = NULL;
        int before = freed;
        CHECK_STATUS(rill_subscribe(b, "sized", o, ignore, NULL, &s), RILL_ERR_INVALID_ARGUMENT);
        CHECK(s == NULL);
        check_size_error();
        /* The failed call still ran the destructor of user_data. */
        CHECK(freed == before + 1);
        unguard(o, sizeof *o);
    }
    void *p;
    INIT_AT_MAX(rill_subscription_options, rill_subscription_options_init_v1, p);
    rill_subscription *s = NULL;
    OK(rill_subscribe(b, "sized", p, ignore, NULL, &s));
    unguard(p, RILL_STRUCT_SIZE_MAX);
    if (s == NULL) {
        return;
    }

    /* The stats calls: a size above the bound writes nothing. */
    for (int k = 0; k < TOO_BIG_COUNT; k++) {
        rill_subscription_stats *out = guarded(sizeof *out);
        CHECK_STATUS(rill_subscription_get_stats_v1(s, out, TOO_BIG[k]), RILL_ERR_INVALID_ARGUMENT);
        check_size_error();
        CHECK(((const unsigned char *)out)[0] == 0xAB);
        unguard(out, sizeof *out);
        rill_topic_stats *t = guarded(sizeof *t);
        CHECK_STATUS(rill_topic_get_stats_v1(b, "sized", t, TOO_BIG[k]), RILL_ERR_INVALID_ARGUMENT);
        check_size_error();
        CHECK(((const unsigned char *)t)[0] == 0xAB);
        unguard(t, sizeof *t);
    }
    /* The bound itself, all of it mapped: our fields, then zeros. */
    unsigned char *out = guarded(RILL_STRUCT_SIZE_MAX);
    OK(rill_subscription_get_stats_v1(s, (rill_subscription_stats *)out, RILL_STRUCT_SIZE_MAX));
    CHECK(out[RILL_STRUCT_SIZE_MAX - 1] == 0);
    OK(rill_topic_get_stats_v1(b, "sized", (rill_topic_stats *)out, RILL_STRUCT_SIZE_MAX));
    CHECK(((rill_topic_stats *)out)->partitions == 1);
    CHECK(out[sizeof(rill_topic_stats)] == 0 && out[RILL_STRUCT_SIZE_MAX - 1] == 0);
    unguard(out, RILL_STRUCT_SIZE_MAX);
    rill_subscription_free(s);
}

static void test_struct_sizes(void) {
    test_broker_options();
    rill_broker *b = NULL;
    OK(rill_broker_new(NULL, &b));
    if (b == NULL) {
        exit(2);
    }
    test_topic_options(b);
    test_consumer_options(b);
    test_subscription_options_and_stats(b);
    rill_broker_free(b);
}

/* ---- closing while another thread waits ---------------------------------- */

/* A handler that holds its first call until `gate_open` is set. */
static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_changed = PTHREAD_COND_INITIALIZER;
static bool gate_open = false;
static bool gate_entered = false;

static rill_ack gated(void *user_data, const rill_message *m) {
    (void)user_data;
    (void)m;
    pthread_mutex_lock(&gate_lock);
    gate_entered = true;
    pthread_cond_broadcast(&gate_changed);
    while (!gate_open) {
        pthread_cond_wait(&gate_changed, &gate_lock);
    }
    pthread_mutex_unlock(&gate_lock);
    return RILL_ACK_SUCCESS;
}

static void *wait_idle_long(void *arg) {
    rill_subscription *s = arg;
    /* Busy in its handler until the close: returns once the close lands. */
    static rill_status status;
    status = rill_subscription_wait_idle(s, 30000);
    return &status;
}

/* rill_subscription_close while another thread waits in
 * rill_subscription_wait_idle: the waiter returns (idle once the handler
 * ended, or CLOSED), and the handle is freed only after it did. With
 * rill_subscription_free in place of the close, the waiter used freed
 * memory (ASan and valgrind runs of this program would say so). */
static void test_close_while_waiting(void) {
    rill_broker *b = NULL;
    OK(rill_broker_new(NULL, &b));
    if (b == NULL) {
        exit(2);
    }
    OK(rill_topic_create(b, "gated", NULL));
    rill_subscription *s = NULL;
    OK(rill_subscribe(b, "gated", NULL, gated, NULL, &s));
    if (s == NULL) {
        exit(2);
    }
    rill_record r = {0};
    r.payload = "x";
    r.payload_len = 1;
    rill_position pos;
    OK(rill_publish(b, "gated", &r, &pos));
    pthread_mutex_lock(&gate_lock);
    while (!gate_entered) {
        pthread_cond_wait(&gate_changed, &gate_lock);
    }
    pthread_mutex_unlock(&gate_lock);
    pthread_t waiter;
    CHECK(pthread_create(&waiter, NULL, wait_idle_long, s) == 0);
    pthread_mutex_lock(&gate_lock);
    gate_open = true;
    pthread_cond_broadcast(&gate_changed);
    pthread_mutex_unlock(&gate_lock);
    rill_subscription_close(s);
    rill_subscription_close(s); /* idempotent */
    void *out = NULL;
    CHECK(pthread_join(waiter, &out) == 0);
    rill_status got = *(rill_status *)out;
    CHECK(got == RILL_OK || got == RILL_ERR_CLOSED);
    CHECK_STATUS(rill_subscription_wait_idle(s, 0), RILL_ERR_CLOSED);
    rill_subscription_free(s);
    rill_subscription_close(NULL);
    rill_broker_free(b);
}

int main(int argc, char **argv) {
    if (argc == 2 && strcmp(argv[1], EXIT_QUIETLY) == 0) {
        return 0;
    }
    char root[] = "/tmp/rill-c-robust-XXXXXX";
    if (mkdtemp(root) == NULL) {
        perror("mkdtemp");
        return 2;
    }
    char dir[512];
    snprintf(dir, sizeof dir, "%s/data", root);
    test_fork(argv[0], dir);
    test_struct_sizes();
    test_close_while_waiting();

    char rm[600];
    snprintf(rm, sizeof rm, "rm -rf '%s'", root);
    CHECK(system(rm) == 0);
    return CHECK_VERDICT("test_robust_ffi");
}
