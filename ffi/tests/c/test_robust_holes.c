/*
 * Issue 40, item 1, from C: a kill -9 while several threads publish to one
 * partition must lose no acknowledged message. A publish returns once its
 * own record is committed, while another thread may still be copying an
 * earlier offset; the kill leaves that one unwritten (a hole) with
 * acknowledged records after it. Recovery keeps every complete record at
 * its offset and passes over the hole (skip records no reader is handed).
 *
 * Each cycle forks a child that opens the broker on one data directory
 * (RILL_FSYNC_NEVER), and whose THREADS threads publish 4 KiB messages to
 * one partition, singly and in batches, writing each acknowledged offset
 * and the message's identity to a pipe. The parent kills it (SIGKILL) after
 * a number of acknowledgements, reopens the directory, and checks that
 * every acknowledged offset, of this cycle and the earlier ones, holds its
 * message, that every message delivered is one of ours (no damaged or skip
 * record), and that no offset was handed out twice.
 *
 * Built with -std=c99 -Wall -Wextra -Wpedantic -Werror, and run plain, under
 * AddressSanitizer + UBSan and under valgrind memcheck (children traced) by
 * ffi/tests/run.sh.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rill.h"

#include "check.h"
#include "dirs.h"

enum {
    CYCLES = 16,           /* kills, on one data directory */
    THREADS = 16,          /* publisher threads in the child */
    PER_THREAD = 24,       /* messages each thread publishes at most */
    PAYLOAD = 4096,        /* bytes of every message */
    MAX_OFFSETS = CYCLES * THREADS * PER_THREAD,
    LINE = 64,
};

static const char *TOPIC = "holes";

/* Who published an offset: cycle, thread, index (cycle -1: nobody known). */
typedef struct {
    int cycle, thread, index;
} ident;

/* The payload of message `index` of thread `thread` in cycle `cycle`:
 * its identity, repeated to PAYLOAD bytes. */
static void make_payload(char *out, int cycle, int thread, int index) {
    char head[LINE];
    int n = snprintf(head, sizeof head, "c%d-t%d-i%d:", cycle, thread, index);
    for (int i = 0; i < PAYLOAD; i++) {
        out[i] = head[i % n];
    }
}

/* The identity of a payload, if it is exactly one of ours. */
static int parse_payload(const void *p, size_t len, ident *out) {
    static char want[PAYLOAD];
    char head[LINE];
    if (len != PAYLOAD) {
        return 0;
    }
    memcpy(head, p, sizeof head - 1);
    head[sizeof head - 1] = '\0';
    if (sscanf(head, "c%d-t%d-i%d:", &out->cycle, &out->thread, &out->index) != 3) {
        return 0;
    }
    make_payload(want, out->cycle, out->thread, out->index);
    return memcmp(want, p, PAYLOAD) == 0;
}

typedef struct {
    rill_broker *b;
    int cycle, thread, fd;
} publisher_args;

/* Reports one acknowledged message on the pipe: one write(2) of less than
 * PIPE_BUF bytes, so lines of different threads never interleave. */
static void report(int fd, uint64_t offset, int cycle, int thread, int index) {
    char line[LINE];
    int n = snprintf(line, sizeof line, "%llu %d %d %d\n", (unsigned long long)offset, cycle, thread, index);
    if (write(fd, line, (size_t)n) != n) {
        _exit(3);
    }
}

static void *publish_thread(void *arg) {
    publisher_args *a = arg;
    static char bufs[THREADS][4][PAYLOAD];
    char(*mine)[PAYLOAD] = bufs[a->thread];
    int i = 0;
    while (i < PER_THREAD) {
        /* Every third publish a batch of two to four. */
        int n = (i + a->thread) % 3 == 0 ? 2 + (i + a->thread) % 3 : 1;
        if (n > PER_THREAD - i) {
            n = PER_THREAD - i;
        }
        rill_record rs[4];
        rill_position pos[4];
        memset(rs, 0, sizeof rs);
        for (int k = 0; k < n; k++) {
            make_payload(mine[k], a->cycle, a->thread, i + k);
            rs[k].payload = mine[k];
            rs[k].payload_len = PAYLOAD;
        }
        rill_status s = n == 1 ? rill_publish(a->b, TOPIC, &rs[0], &pos[0])
                               : rill_publish_batch(a->b, TOPIC, rs, (size_t)n, pos);
        if (s != RILL_OK) {
            _exit(4);
        }
        for (int k = 0; k < n; k++) {
            report(a->fd, pos[k].offset, a->cycle, a->thread, i + k);
        }
        i += n;
    }
    return NULL;
}

/* The child: publishes from THREADS threads, then waits to be killed. */
static void child(const char *dir, int cycle, int fd) {
    rill_broker *b = open_broker_or_exit(dir, RILL_FSYNC_NEVER);
    rill_topic_options t;
    rill_topic_options_init(&t);
    t.partitions = 1;
    t.retention_bytes = 0;
    rill_status s = rill_topic_create(b, TOPIC, &t);
    if (s != RILL_OK && s != RILL_ERR_TOPIC_EXISTS) {
        _exit(5);
    }
    pthread_t threads[THREADS];
    publisher_args args[THREADS];
    for (int i = 0; i < THREADS; i++) {
        args[i] = (publisher_args){b, cycle, i, fd};
        pthread_create(&threads[i], NULL, publish_thread, &args[i]);
    }
    for (int i = 0; i < THREADS; i++) {
        pthread_join(threads[i], NULL);
    }
    report(fd, UINT64_MAX, -1, -1, -1);
    for (;;) {
        pause();
    }
}

static ident acked[MAX_OFFSETS];

/* Records one acknowledged line; fails a check if the offset was handed
 * out before to another message. */
static void record_line(const char *line) {
    unsigned long long offset;
    ident id;
    if (sscanf(line, "%llu %d %d %d", &offset, &id.cycle, &id.thread, &id.index) != 4) {
        CHECK(!"a well-formed line from the child");
        return;
    }
    if (offset == UINT64_MAX) {
        return; /* the child finished before the kill */
    }
    CHECK(offset < MAX_OFFSETS);
    if (offset >= MAX_OFFSETS) {
        return;
    }
    ident *slot = &acked[offset];
    CHECK(slot->cycle == -1 || (slot->cycle == id.cycle && slot->thread == id.thread && slot->index == id.index));
    *slot = id;
}

/* Reads the pipe until `want` acknowledgements (or its end); returns how
 * many it saw. `buf` keeps a partial line between calls. */
static int read_acks(int fd, int want, char *buf, size_t *have) {
    int seen = 0;
    while (seen < want) {
        ssize_t n = read(fd, buf + *have, 4096 - *have);
        if (n <= 0) {
            break;
        }
        *have += (size_t)n;
        char *start = buf, *nl;
        while ((nl = memchr(start, '\n', (size_t)(buf + *have - start))) != NULL) {
            *nl = '\0';
            record_line(start);
            seen++;
            start = nl + 1;
        }
        *have = (size_t)(buf + *have - start);
        memmove(buf, start, *have);
    }
    return seen;
}

/* Reopens `dir` and checks every acknowledged offset holds its message and
 * nothing else is delivered; then adds what it read to `acked` (published
 * before the kill but not reported: the next cycle must not reuse them). */
static void verify(const char *dir, int cycle) {
    rill_broker *b = open_broker_or_exit(dir, RILL_FSYNC_NEVER);
    static ident seen[MAX_OFFSETS];
    for (int i = 0; i < MAX_OFFSETS; i++) {
        seen[i].cycle = -1;
    }
    char group[LINE];
    snprintf(group, sizeof group, "verify-%d", cycle);
    rill_consumer *c = NULL;
    OK(rill_consumer_new(b, group, TOPIC, NULL, &c));
    int64_t last = -1;
    for (;;) {
        const rill_message *ms = NULL;
        size_t count = 0;
        OK(rill_consumer_poll(c, 256, 50, &ms, &count));
        if (count == 0) {
            break;
        }
        for (size_t i = 0; i < count; i++) {
            const rill_message *m = &ms[i];
            ident id;
            CHECK(parse_payload(m->payload, m->payload_len, &id)); /* no skip or damaged record */
            CHECK((int64_t)m->offset > last);
            last = (int64_t)m->offset;
            if (m->offset < MAX_OFFSETS) {
                seen[m->offset] = id;
            }
        }
    }
    rill_consumer_free(c);
    rill_broker_free(b);
    int lost = 0;
    for (int o = 0; o < MAX_OFFSETS; o++) {
        if (acked[o].cycle == -1) {
            if (seen[o].cycle != -1) {
                acked[o] = seen[o];
            }
            continue;
        }
        if (seen[o].cycle != acked[o].cycle || seen[o].thread != acked[o].thread || seen[o].index != acked[o].index) {
            fprintf(stderr, "cycle %d: acknowledged offset %d (c%d-t%d-i%d) lost or changed\n", cycle, o,
                    acked[o].cycle, acked[o].thread, acked[o].index);
            lost++;
        }
    }
    CHECK(lost == 0);
}

int main(void) {
    char dir[] = "/tmp/rill-c-holes-XXXXXX";
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 2;
    }
    for (int i = 0; i < MAX_OFFSETS; i++) {
        acked[i].cycle = -1;
    }
    for (int cycle = 0; cycle < CYCLES; cycle++) {
        int fds[2];
        if (pipe(fds) != 0) {
            perror("pipe");
            return 2;
        }
        pid_t pid = fork();
        if (pid == 0) {
            close(fds[0]);
            child(dir, cycle, fds[1]);
        }
        close(fds[1]);
        /* Kill while all threads publish: after 8 to 168 acknowledgements. */
        int kill_after = 8 + (cycle * 37) % 161;
        char buf[4096];
        size_t have = 0;
        read_acks(fds[0], kill_after, buf, &have);
        kill(pid, SIGKILL);
        int status = 0;
        waitpid(pid, &status, 0);
        CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
        /* What the child wrote before it died was acknowledged too. */
        read_acks(fds[0], MAX_OFFSETS, buf, &have);
        close(fds[0]);
        verify(dir, cycle);
    }
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0) {
        fprintf(stderr, "could not remove %s\n", dir);
    }
    return CHECK_VERDICT("test_robust_holes");
}
