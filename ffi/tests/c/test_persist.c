/*
 * A broker on a data directory, from C, across two processes: this program
 * runs itself once to write (topics, messages, a group commit, a durable
 * subscription's acks) and once to read it all back after the first process
 * has exited. Then the directory lock (RILL_ERR_BUSY), a data_dir that is a
 * regular file (RILL_ERR_IO), bad fsync options, and the recovery figures in
 * rill_topic_stats after a damaged tail.
 *
 * Built with -std=c99 -Wall -Wextra -Wpedantic -Werror, and run plain, under
 * AddressSanitizer + UBSan and under valgrind memcheck (children traced) by
 * ffi/tests/run.sh.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <dirent.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rill.h"

#include "check.h"
#include "dirs.h"

enum {
    MESSAGES = 60,          /* published by the writer */
    HANDLED_BEFORE_CLOSE = 40, /* the durable subscription acks these, then closes */
    COMMITTED = 25,         /* the group commits after polling these */
    LINE = 256,
    WAIT_SECONDS = 30,
};

static const char *TOPIC = "orders";

/* Counts handled messages and the highest "n" attribute seen; a waiter
 * waits for a count. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int count;
    int seen[MESSAGES];
} counter;

static rill_ack count_message(void *user_data, const rill_message *m) {
    counter *c = user_data;
    const char *v = NULL;
    size_t len = 0;
    int n = -1;
    if (rill_message_attribute(m, "n", &v, &len) == RILL_OK) {
        n = atoi(v);
    }
    pthread_mutex_lock(&c->lock);
    c->count++;
    if (n >= 0 && n < MESSAGES) {
        c->seen[n]++;
    }
    pthread_cond_broadcast(&c->changed);
    pthread_mutex_unlock(&c->lock);
    return RILL_ACK_SUCCESS;
}

static int wait_count(counter *c, int want) {
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += WAIT_SECONDS;
    pthread_mutex_lock(&c->lock);
    while (c->count < want) {
        if (pthread_cond_timedwait(&c->changed, &c->lock, &deadline) != 0) {
            break;
        }
    }
    int got = c->count;
    pthread_mutex_unlock(&c->lock);
    return got;
}

static rill_subscription *subscribe_audit(rill_broker *b, counter *c, rill_start start) {
    rill_subscription_options so;
    rill_subscription_options_init(&so);
    so.name = "audit";
    so.start = start;
    rill_subscription *s = NULL;
    OK(rill_subscribe(b, TOPIC, &so, count_message, c, &s));
    return s;
}

static int compare_lines(const void *a, const void *b) {
    return strcmp((const char *)a, (const char *)b);
}

/* Every message of the topic as sorted lines (partition, offset, timestamp,
 * key, payload, attributes), read by a consumer of `group` that does not
 * commit. `next` gets one past the last offset of each partition. */
static size_t read_all(rill_broker *b, const char *group, char lines[][LINE], size_t cap, uint64_t next[2]) {
    rill_consumer *c = NULL;
    OK(rill_consumer_new(b, group, TOPIC, NULL, &c));
    if (c == NULL) {
        return 0;
    }
    size_t n = 0;
    next[0] = next[1] = 0;
    for (;;) {
        const rill_message *ms = NULL;
        size_t count = 0;
        OK(rill_consumer_poll(c, 100, 200, &ms, &count));
        if (count == 0) {
            break;
        }
        for (size_t i = 0; i < count && n < cap; i++) {
            const rill_message *m = &ms[i];
            char attrs[96] = "";
            for (size_t a = 0; a < rill_message_attribute_count(m); a++) {
                const char *k, *v;
                size_t kl, vl;
                OK(rill_message_attribute_at(m, a, &k, &kl, &v, &vl));
                size_t used = strlen(attrs);
                snprintf(attrs + used, sizeof attrs - used, "%.*s=%.*s;", (int)kl, k, (int)vl, v);
            }
            snprintf(lines[n++], LINE, "%u|%llu|%llu|%.*s|%.*s|%s", (unsigned)m->partition,
                     (unsigned long long)m->offset, (unsigned long long)m->timestamp_ns, (int)m->key_len,
                     (const char *)m->key, (int)m->payload_len, (const char *)m->payload, attrs);
            if (m->partition < 2 && m->offset + 1 > next[m->partition]) {
                next[m->partition] = m->offset + 1;
            }
        }
    }
    rill_consumer_free(c);
    qsort(lines, n, LINE, compare_lines);
    return n;
}

static void expected_path(const char *dir, char *out, size_t len) {
    snprintf(out, len, "%s.expected", dir);
}

static int writer(const char *dir) {
    rill_broker *b = open_broker_or_exit(dir, RILL_FSYNC_INTERVAL);
    rill_topic_options to;
    rill_topic_options_init(&to);
    to.partitions = 2;
    OK(rill_topic_create(b, TOPIC, &to));

    counter audit_count = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, {0}};
    rill_subscription *audit = subscribe_audit(b, &audit_count, RILL_START_EARLIEST);
    for (int i = 0; i < MESSAGES; i++) {
        char key[32], payload[32], n[16];
        snprintf(key, sizeof key, "k%d", i % 5);
        snprintf(payload, sizeof payload, "order %d", i);
        snprintf(n, sizeof n, "%d", i);
        rill_attribute attrs[2] = {{"n", n}, {"kind", "order"}};
        rill_record r = {key, strlen(key), payload, strlen(payload), attrs, 2};
        OK(rill_publish(b, TOPIC, &r, NULL));
        if (i + 1 == HANDLED_BEFORE_CLOSE) {
            CHECK(wait_count(&audit_count, HANDLED_BEFORE_CLOSE) == HANDLED_BEFORE_CLOSE);
            /* The count moves inside the handler, the ack after it returns:
             * wait until the last ack is settled, or closing now would leave
             * that message to be delivered again (at-least-once). */
            OK(rill_subscription_wait_idle(audit, WAIT_SECONDS * 1000));
            rill_subscription_free(audit);
        }
    }

    rill_consumer *billing = NULL;
    OK(rill_consumer_new(b, "billing", TOPIC, NULL, &billing));
    size_t polled = 0;
    while (billing != NULL && polled < COMMITTED) {
        const rill_message *ms = NULL;
        size_t count = 0;
        OK(rill_consumer_poll(billing, COMMITTED - polled, 1000, &ms, &count));
        polled += count;
    }
    OK(rill_consumer_commit(billing));
    uint64_t committed[2] = {0, 0};
    for (uint32_t p = 0; p < 2; p++) {
        rill_status s = rill_consumer_committed(billing, p, &committed[p]);
        CHECK(s == RILL_OK || s == RILL_ERR_NOT_FOUND);
    }
    rill_consumer_free(billing);

    static char lines[MESSAGES][LINE];
    uint64_t next[2];
    size_t n = read_all(b, "snapshot", lines, MESSAGES, next);
    CHECK(n == MESSAGES);
    char path[512];
    expected_path(dir, path, sizeof path);
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f != NULL) {
        fprintf(f, "%llu %llu\n", (unsigned long long)committed[0], (unsigned long long)committed[1]);
        for (size_t i = 0; i < n; i++) {
            fprintf(f, "%s\n", lines[i]);
        }
        fclose(f);
    }
    rill_broker_free(b);
    return failures != 0;
}

static int reader(const char *dir) {
    rill_broker *b = open_broker_or_exit(dir, RILL_FSYNC_ALWAYS);
    rill_topic_stats ts;
    OK(rill_topic_get_stats(b, TOPIC, &ts));
    CHECK(ts.partitions == 2);
    CHECK(ts.publish_count == MESSAGES);

    char path[512];
    expected_path(dir, path, sizeof path);
    FILE *f = fopen(path, "r");
    CHECK(f != NULL);
    if (f == NULL) {
        return 1;
    }
    unsigned long long want_committed[2];
    CHECK(fscanf(f, "%llu %llu\n", &want_committed[0], &want_committed[1]) == 2);
    static char want[MESSAGES][LINE];
    size_t nwant = 0;
    while (nwant < MESSAGES && fgets(want[nwant], LINE, f) != NULL) {
        want[nwant][strcspn(want[nwant], "\n")] = '\0';
        nwant++;
    }
    fclose(f);

    /* Every message, with its key, attributes and timestamp. */
    static char got[MESSAGES][LINE];
    uint64_t next[2];
    size_t ngot = read_all(b, "snapshot", got, MESSAGES, next);
    CHECK(ngot == nwant && nwant == MESSAGES);
    for (size_t i = 0; i < ngot && i < nwant; i++) {
        if (strcmp(got[i], want[i]) != 0) {
            fprintf(stderr, "message %zu differs after the restart: %s vs %s\n", i, got[i], want[i]);
            failures++;
            break;
        }
    }

    /* The group's commit came back and it resumes there. */
    rill_consumer *billing = NULL;
    OK(rill_consumer_new(b, "billing", TOPIC, NULL, &billing));
    uint64_t committed_sum = 0;
    for (uint32_t p = 0; p < 2; p++) {
        uint64_t c = 0;
        rill_status s = rill_consumer_committed(billing, p, &c);
        CHECK(s == RILL_OK || s == RILL_ERR_NOT_FOUND);
        CHECK(c == want_committed[p]);
        committed_sum += c;
    }
    CHECK(committed_sum == COMMITTED);
    size_t rest = 0;
    for (;;) {
        const rill_message *ms = NULL;
        size_t count = 0;
        OK(rill_consumer_poll(billing, 100, 200, &ms, &count));
        if (count == 0) {
            break;
        }
        rest += count;
    }
    CHECK(rest == MESSAGES - COMMITTED);
    rill_consumer_free(billing);

    /* The named subscription resumes after its last ack. */
    counter audit_count = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, {0}};
    rill_subscription *audit = subscribe_audit(b, &audit_count, RILL_START_LATEST);
    CHECK(wait_count(&audit_count, MESSAGES - HANDLED_BEFORE_CLOSE) == MESSAGES - HANDLED_BEFORE_CLOSE);
    OK(rill_subscription_wait_idle(audit, 1000));
    pthread_mutex_lock(&audit_count.lock);
    for (int i = 0; i < MESSAGES; i++) {
        CHECK(audit_count.seen[i] == (i >= HANDLED_BEFORE_CLOSE ? 1 : 0));
    }
    pthread_mutex_unlock(&audit_count.lock);
    rill_subscription_free(audit);

    /* New publishes continue the offsets. */
    for (int i = 0; i < 10; i++) {
        char key[32];
        snprintf(key, sizeof key, "again%d", i);
        rill_record r = {key, strlen(key), "after", 5, NULL, 0};
        rill_position pos;
        OK(rill_publish(b, TOPIC, &r, &pos));
        CHECK(pos.partition < 2 && pos.offset == next[pos.partition]);
        next[pos.partition % 2]++;
    }
    rill_broker_free(b);
    return failures != 0;
}

/* Runs this program as `mode dir` and waits for it. */
static void run_self(const char *self, const char *mode, const char *dir) {
    pid_t pid = fork();
    if (pid == 0) {
        execl(self, self, mode, dir, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_lock_and_bad_paths(const char *root, const char *dir) {
    /* One broker per directory. */
    rill_broker *first = open_broker_or_exit(dir, RILL_FSYNC_NEVER);
    rill_broker_options o;
    rill_broker_options_init(&o);
    o.data_dir = dir;
    rill_broker *second = NULL;
    CHECK_STATUS(rill_broker_new(&o, &second), RILL_ERR_BUSY);
    CHECK(second == NULL);
    rill_broker_free(first);
    OK(rill_broker_new(&o, &second));
    rill_broker_free(second);

    /* A regular file: RILL_ERR_IO naming it. */
    char file[512];
    snprintf(file, sizeof file, "%s/a-file", root);
    FILE *f = fopen(file, "w");
    CHECK(f != NULL);
    if (f != NULL) {
        fclose(f);
    }
    o.data_dir = file;
    rill_broker *b = NULL;
    CHECK_STATUS(rill_broker_new(&o, &b), RILL_ERR_IO);
    char err[512];
    rill_last_error(err, sizeof err);
    CHECK(strstr(err, file) != NULL);
    CHECK(strcmp(rill_status_name(RILL_ERR_IO), "RILL_ERR_IO") == 0 && RILL_ERR_IO == 17);
    CHECK(strcmp(rill_status_name(RILL_ERR_CORRUPT), "RILL_ERR_CORRUPT") == 0 && RILL_ERR_CORRUPT == 18);

    /* Options out of range. */
    o.data_dir = dir;
    o.fsync = 7;
    CHECK_STATUS(rill_broker_new(&o, &b), RILL_ERR_INVALID_ARGUMENT);
    o.fsync = RILL_FSYNC_INTERVAL;
    o.fsync_interval_ms = 0;
    CHECK_STATUS(rill_broker_new(&o, &b), RILL_ERR_INVALID_ARGUMENT);
    o.fsync_interval_ms = 100;
    o.data_dir = "";
    CHECK_STATUS(rill_broker_new(&o, &b), RILL_ERR_INVALID_ARGUMENT);

    /* The defaults: in memory, Interval every 100 ms, no repair. */
    rill_broker_options_init(&o);
    CHECK(o.data_dir == NULL && o.fsync == RILL_FSYNC_INTERVAL && o.fsync_interval_ms == 100 && !o.repair);
}

/* Publishes `n` records of about 1000 bytes to `topic`, "record number
 * %03d" first. */
static void publish_numbered_to(rill_broker *b, const char *topic, int n) {
    for (int i = 0; i < n; i++) {
        char payload[1000];
        memset(payload, 'x', sizeof payload);
        int len = snprintf(payload, sizeof payload, "record number %03d", i);
        payload[len] = ' ';
        rill_record r = {NULL, 0, payload, sizeof payload, NULL, 0};
        OK(rill_publish(b, topic, &r, NULL));
    }
}

/* publish_numbered_to the topic "t". */
static void publish_numbered(rill_broker *b, int n) {
    publish_numbered_to(b, "t", n);
}

static rill_broker *open_repairing(const char *dir, bool repair, rill_status *status) {
    rill_broker_options o;
    rill_broker_options_init(&o);
    o.data_dir = dir;
    o.repair = repair;
    rill_broker *b = NULL;
    *status = rill_broker_new(&o, &b);
    return b;
}

/* Flips a byte of `needle` in `dir`'s partition 0 of topic 0; checks that
 * the open is then RILL_ERR_CORRUPT, and returns the broker a repairing
 * open gives (NULL, counted as a failure, if it fails). */
static rill_broker *damaged_then_repaired(const char *dir, const char *needle) {
    char part[600];
    snprintf(part, sizeof part, "%s/topics/0/0", dir);
    CHECK(flip_inside(part, needle) == 1);
    rill_status status;
    rill_broker *b = open_repairing(dir, false, &status);
    CHECK_STATUS(status, RILL_ERR_CORRUPT);
    CHECK(b == NULL);
    b = open_repairing(dir, true, &status);
    OK(status);
    return b;
}

/* Issue 11: what recovery dropped is in rill_topic_stats. */
static void test_recovery_figures(const char *root) {
    /* A damaged last record in the active (newest) file of a process that
     * exited without closing: a torn tail. It goes; the records before it
     * stay. (A damaged record with intact ones after it is a hole, which
     * recovery skips, keeping the ones after it: test_robust_holes.c. After
     * a clean close it is damage: test_damage_after_a_clean_close.) */
    char dir[512];
    snprintf(dir, sizeof dir, "%s/damaged-tail", root);
    fflush(NULL);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child == 0) {
        rill_broker *b = open_broker_or_exit(dir, RILL_FSYNC_ALWAYS);
        if (rill_topic_create(b, "t", NULL) != RILL_OK) {
            _exit(3);
        }
        publish_numbered(b, 10);
        _exit(0); /* without closing anything */
    }
    int wstatus = 0;
    CHECK(waitpid(child, &wstatus, 0) == child && WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0);
    rill_topic_stats ts;
    rill_broker *b;
    char part[600];
    snprintf(part, sizeof part, "%s/topics/0/0", dir);
    CHECK(flip_inside(part, "record number 009") == 1);
    b = open_broker_or_exit(dir, RILL_FSYNC_ALWAYS);
    OK(rill_topic_get_stats(b, "t", &ts));
    CHECK(ts.publish_count == 9);
    /* The damaged record's bytes are cut (the intact records counted are
     * those of whole files after the cut: none). */
    CHECK(ts.recovered_truncated_bytes >= 1000);
    CHECK(ts.recovered_truncated_records == 0);
    CHECK(ts.recovered_repaired_partitions == 0);
    /* The first layout, as a program built before the figures were
     * appended asks for it: the library writes 24 bytes and no more. */
    unsigned char old[48];
    memset(old, 0xAB, sizeof old);
    OK(rill_topic_get_stats_v1(b, "t", (rill_topic_stats *)(void *)old, 24));
    CHECK(old[24] == 0xAB && old[47] == 0xAB);
    CHECK_STATUS(rill_topic_get_stats_v1(b, "t", &ts, 16), RILL_ERR_INVALID_ARGUMENT);
    rill_record r = {NULL, 0, "next", 4, NULL, 0};
    rill_position pos;
    OK(rill_publish(b, "t", &r, &pos));
    CHECK(pos.offset == 9);
    rill_broker_free(b);
    /* A clean reopen has nothing to report. */
    b = open_broker_or_exit(dir, RILL_FSYNC_ALWAYS);
    OK(rill_topic_get_stats(b, "t", &ts));
    CHECK(ts.publish_count == 10 && ts.recovered_truncated_records == 0 && ts.recovered_truncated_bytes == 0);
    rill_broker_free(b);

    /* Damage inside an older, sealed file: RILL_ERR_CORRUPT, or with repair
     * the partition is cut there, the later files' records are counted and
     * the partition is reported repaired. retention_bytes of 256 KiB makes
     * 64 KiB segments: 150 records of 1000 bytes fill three files. */
    snprintf(dir, sizeof dir, "%s/damaged-sealed", root);
    b = open_broker_or_exit(dir, RILL_FSYNC_NEVER);
    rill_topic_options to;
    rill_topic_options_init(&to);
    to.retention_bytes = 256 << 10;
    OK(rill_topic_create(b, "t", &to));
    publish_numbered(b, 150);
    rill_broker_free(b);
    b = damaged_then_repaired(dir, "record number 005");
    if (b != NULL) {
        OK(rill_topic_get_stats(b, "t", &ts));
        CHECK(ts.publish_count == 5);
        CHECK(ts.recovered_truncated_records > 0 && ts.recovered_truncated_records <= 150 - 6);
        CHECK(ts.recovered_truncated_bytes > 0);
        CHECK(ts.recovered_repaired_partitions == 1);
        rill_broker_free(b);
    }
}

/* After a clean close, the newest file's records are as checked as a
 * sealed file's: a damaged one is RILL_ERR_CORRUPT (with repair, the
 * partition is cut there). */
static void test_damage_after_a_clean_close(const char *root) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/damaged-closed", root);
    rill_broker *b = open_broker_or_exit(dir, RILL_FSYNC_ALWAYS);
    OK(rill_topic_create(b, "t", NULL));
    publish_numbered(b, 10);
    rill_broker_free(b);
    b = damaged_then_repaired(dir, "record number 004");
    if (b != NULL) {
        rill_topic_stats ts;
        OK(rill_topic_get_stats(b, "t", &ts));
        CHECK(ts.publish_count == 4 && ts.recovered_repaired_partitions == 1);
        rill_broker_free(b);
    }
}

/* The total size of the segment files in `part` (a partition's folder),
 * and how many there are. */
static long long segment_files(const char *part, int *count) {
    long long total = 0;
    *count = 0;
    DIR *d = opendir(part);
    if (d == NULL) {
        return -1;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n > 4 && strcmp(e->d_name + n - 4, ".seg") == 0) {
            char path[1200];
            snprintf(path, sizeof path, "%s/%s", part, e->d_name);
            FILE *f = fopen(path, "rb");
            if (f != NULL && fseek(f, 0, SEEK_END) == 0) {
                total += ftell(f);
                *count += 1;
            }
            if (f != NULL) {
                fclose(f);
            }
        }
    }
    closedir(d);
    return total;
}

static void test_segment_bytes(const char *root) {
    /* A durable topic that stays small: 16 KiB segments make its first file
     * a few tens of KiB where the default is 4 MiB and more; its records
     * roll through several files and all come back after a reopen. */
    char dir[512];
    snprintf(dir, sizeof dir, "%s/small-segments", root);
    rill_broker *b = open_broker_or_exit(dir, RILL_FSYNC_NEVER);
    rill_topic_options to;
    rill_topic_options_init(&to);
    CHECK(to.segment_bytes == 0);
    to.segment_bytes = 100;
    CHECK_STATUS(rill_topic_create(b, "tiny", &to), RILL_ERR_INVALID_ARGUMENT);
    to.segment_bytes = (uint64_t)1 << 31;
    CHECK_STATUS(rill_topic_create(b, "tiny", &to), RILL_ERR_INVALID_ARGUMENT);
    to.segment_bytes = 16 << 10;
    OK(rill_topic_create(b, "small", &to));
    OK(rill_topic_create(b, "default", NULL));
    rill_record r = {NULL, 0, "x", 1, NULL, 0};
    rill_position pos;
    OK(rill_publish(b, "small", &r, &pos));
    OK(rill_publish(b, "default", &r, &pos));
    char part[600];
    int files = 0;
    /* Directory numbers in order of creation, from 0. */
    snprintf(part, sizeof part, "%s/topics/0/0", dir);
    long long small = segment_files(part, &files);
    snprintf(part, sizeof part, "%s/topics/1/0", dir);
    long long dflt = segment_files(part, &files);
    CHECK(small > 0 && small < (64 << 10));
    CHECK(dflt >= (4 << 20));
    /* 100 records of 1000 bytes: about six 16 KiB segments. */
    publish_numbered_to(b, "small", 100);
    rill_broker_free(b);
    snprintf(part, sizeof part, "%s/topics/0/0", dir);
    CHECK(segment_files(part, &files) > 0 && files >= 4);
    b = open_broker_or_exit(dir, RILL_FSYNC_NEVER);
    rill_topic_stats ts;
    OK(rill_topic_get_stats(b, "small", &ts));
    CHECK(ts.publish_count == 101);
    rill_broker_free(b);
}

static void test_reopens_keep_the_files(const char *root) {
    /* Each open goes on in the partition's newest file ("Resuming the last
     * file" in src/log/recovery.rs): ten opens that publish a little and
     * close leave the one file of the first, of the same size, and every
     * record comes back. */
    char dir[512];
    snprintf(dir, sizeof dir, "%s/reopened", root);
    char part[600];
    snprintf(part, sizeof part, "%s/topics/0/0", dir);
    long long first = -1;
    int files = 0;
    for (int round = 0; round < 10; round++) {
        rill_broker *b = open_broker_or_exit(dir, RILL_FSYNC_NEVER);
        if (round == 0) {
            OK(rill_topic_create(b, "audit", NULL));
        }
        publish_numbered_to(b, "audit", 3);
        rill_broker_free(b);
        long long bytes = segment_files(part, &files);
        if (round == 0) {
            first = bytes;
        }
        CHECK(files == 1 && bytes == first);
    }
    rill_broker *b = open_broker_or_exit(dir, RILL_FSYNC_NEVER);
    rill_topic_stats ts;
    OK(rill_topic_get_stats(b, "audit", &ts));
    CHECK(ts.publish_count == 30);
    rill_broker_free(b);
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "write") == 0) {
        return writer(argv[2]);
    }
    if (argc == 3 && strcmp(argv[1], "read") == 0) {
        return reader(argv[2]);
    }
    char root[] = "/tmp/rill-c-persist-XXXXXX";
    if (mkdtemp(root) == NULL) {
        perror("mkdtemp");
        return 2;
    }
    char dir[512];
    snprintf(dir, sizeof dir, "%s/data", root);
    run_self(argv[0], "write", dir);
    run_self(argv[0], "read", dir);
    test_lock_and_bad_paths(root, dir);
    test_recovery_figures(root);
    test_damage_after_a_clean_close(root);
    test_segment_bytes(root);
    test_reopens_keep_the_files(root);

    char rm[600];
    snprintf(rm, sizeof rm, "rm -rf '%s'", root);
    CHECK(system(rm) == 0);
    return CHECK_VERDICT("test_persist");
}
