/*
 * Issue 40, item 2: damage inside an older, sealed segment is
 * RILL_ERR_CORRUPT without `repair` under every fsync policy, and with
 * `repair` keeps exactly the records before the damage.
 *
 * The report, exactly: one partition, retention_bytes of 1 MiB (256 KiB
 * segments), 3 000 records of 200 bytes, the broker freed, one byte flipped
 * in the middle of the second segment file. Under RILL_FSYNC_ALWAYS the
 * segments sealed during the session were never marked complete, so the
 * reopen took the damage for a torn tail: RILL_OK, the partition cut at the
 * damaged record, and publishing went on from there.
 *
 * The same after a kill -9 (no clean close, so no final sync round), under
 * RILL_FSYNC_INTERVAL and RILL_FSYNC_NEVER: a child process publishes the
 * records and waits; once every sealed segment file of the directory has its
 * completion marker (the broker's flusher writes it within an interval), the
 * child is killed and the directory checked as it left it. (Under
 * RILL_FSYNC_ALWAYS the appends mark them; tests/persist.rs kills that
 * case.) Under RILL_FSYNC_NEVER the flusher wrote no marker before a clean
 * close, so the wait for one timed out (and the damage, had the child been
 * killed anyway, read as a torn tail).
 *
 * Built with -std=c99 -Wall -Wextra -Wpedantic -Werror, and run plain, under
 * AddressSanitizer + UBSan and under valgrind memcheck by ffi/tests/run.sh.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rill.h"

#include "check.h"
#include "dirs.h"

enum {
    RECORDS = 3000,     /* published per policy */
    PAYLOAD = 200,      /* bytes of each record's payload */
    RETENTION = 1 << 20, /* 1 MiB: 256 KiB segments */
    MAX_FILES = 64,
    PATH_LEN = 600,
    /* A segment file's completion fields: header bytes 32..52 (src/log/file.rs),
     * all zeros until a sync round writes them. */
    COMPLETE_AT = 32,
    COMPLETE_LEN = 20,
    /* How long the kill test waits for the markers before it fails. */
    MARK_WAIT_SECONDS = 30,
};

/* The payload of record `i`: "record NNNNN " and filler, PAYLOAD bytes. */
static void payload_of(int i, char out[PAYLOAD]) {
    memset(out, 'x', PAYLOAD);
    char head[16];
    int len = snprintf(head, sizeof head, "record %05d ", i);
    memcpy(out, head, (size_t)len);
}

static int compare_names(const void *a, const void *b) {
    return strcmp((const char *)a, (const char *)b);
}

/* The segment files ("*.seg") of the partition directory `part`, sorted by
 * name (that is, by base offset). Returns how many. */
static int segment_files(const char *part, char names[MAX_FILES][PATH_LEN]) {
    DIR *d = opendir(part);
    CHECK(d != NULL);
    if (d == NULL) {
        return 0;
    }
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL && n < MAX_FILES) {
        size_t len = strlen(e->d_name);
        if (len > 4 && strcmp(e->d_name + len - 4, ".seg") == 0) {
            snprintf(names[n++], PATH_LEN, "%s", e->d_name);
        }
    }
    closedir(d);
    qsort(names, (size_t)n, PATH_LEN, compare_names);
    return n;
}

/* Flips one byte of the first record payload at or after the middle of
 * `path`; returns that record's number, or -1. */
static int flip_in_the_middle(const char *path) {
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (f == NULL) {
        return -1;
    }
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    char *bytes = malloc((size_t)len);
    CHECK(bytes != NULL);
    int damaged = -1;
    if (bytes != NULL) {
        fseek(f, 0, SEEK_SET);
        CHECK(fread(bytes, 1, (size_t)len, f) == (size_t)len);
        for (long at = len / 2; at + PAYLOAD <= len; at++) {
            if (memcmp(bytes + at, "record ", 7) == 0) {
                damaged = atoi(bytes + at + 7);
                /* A filler byte: the payload no longer matches its frame. */
                fseek(f, at + PAYLOAD / 2, SEEK_SET);
                fputc(bytes[at + PAYLOAD / 2] ^ 0x01, f);
                break;
            }
        }
    }
    free(bytes);
    fclose(f);
    return damaged;
}

/* Reads the whole topic and checks that it is exactly records 0..count-1. */
static void check_exactly(rill_broker *b, int count) {
    rill_consumer *c = NULL;
    OK(rill_consumer_new(b, "check", "t", NULL, &c));
    if (c == NULL) {
        return;
    }
    int next = 0, wrong = 0;
    for (;;) {
        const rill_message *ms = NULL;
        size_t n = 0;
        OK(rill_consumer_poll(c, 1000, 200, &ms, &n));
        if (n == 0) {
            break;
        }
        for (size_t i = 0; i < n; i++) {
            char want[PAYLOAD];
            payload_of(next, want);
            if (ms[i].offset != (uint64_t)next || ms[i].payload_len != PAYLOAD ||
                memcmp(ms[i].payload, want, PAYLOAD) != 0) {
                wrong++;
            }
            next++;
        }
    }
    CHECK(wrong == 0);
    CHECK(next == count);
    rill_consumer_free(c);
}

/* Opens a broker on `dir`, creates the topic and publishes RECORDS records;
 * returns the broker (NULL on failure). */
static rill_broker *publish_records(const char *dir, rill_fsync fsync) {
    rill_status status;
    rill_broker *b = NULL;
    status = open_data_broker(dir, fsync, false, &b);
    OK(status);
    if (b == NULL) {
        return NULL;
    }
    rill_topic_options to;
    rill_topic_options_init(&to);
    to.retention_bytes = RETENTION;
    OK(rill_topic_create(b, "t", &to));
    for (int i = 0; i < RECORDS; i++) {
        char payload[PAYLOAD];
        payload_of(i, payload);
        rill_record r = {NULL, 0, payload, PAYLOAD, NULL, 0};
        OK(rill_publish(b, "t", &r, NULL));
    }
    return b;
}

/* Whether the file `path` has its completion fields (any of them non-zero:
 * their checksum mixes in a constant, so written fields never are all zeros). */
static bool is_marked(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        return false;
    }
    unsigned char fields[COMPLETE_LEN];
    bool marked = false;
    if (fseek(f, COMPLETE_AT, SEEK_SET) == 0 && fread(fields, 1, sizeof fields, f) == sizeof fields) {
        for (size_t i = 0; i < sizeof fields; i++) {
            marked = marked || fields[i] != 0;
        }
    }
    fclose(f);
    return marked;
}

/* Whether the partition directory `part` holds at least `at_least` segment
 * files and every one but the newest (the active segment) is marked. */
static bool sealed_files_marked(const char *part, int at_least) {
    static char names[MAX_FILES][PATH_LEN];
    int n = segment_files(part, names);
    if (n < at_least) {
        return false;
    }
    for (int i = 0; i + 1 < n; i++) {
        char path[3 * PATH_LEN];
        snprintf(path, sizeof path, "%s/%.*s", part, (int)(PATH_LEN - 1), names[i]);
        if (!is_marked(path)) {
            return false;
        }
    }
    return true;
}

static void check_damage(const char *dir, const char *part, rill_fsync fsync, const char *name);

static void damage_a_sealed_segment(const char *root, rill_fsync fsync, const char *name) {
    char dir[PATH_LEN], part[PATH_LEN + 16];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    snprintf(part, sizeof part, "%s/topics/0/0", dir);
    rill_broker *b = publish_records(dir, fsync);
    if (b == NULL) {
        return;
    }
    rill_broker_free(b);
    check_damage(dir, part, fsync, name);
}

/* The same on the directory a kill -9 left: a child publishes and waits to
 * be killed; the parent kills it once every sealed file is marked (polling
 * the files, with a deadline: the flusher's round comes within an interval). */
static void damage_after_a_kill(const char *root, rill_fsync fsync, const char *name) {
    char dir[PATH_LEN], part[PATH_LEN + 16], label[PATH_LEN];
    snprintf(dir, sizeof dir, "%s/%s-kill", root, name);
    snprintf(part, sizeof part, "%s/topics/0/0", dir);
    snprintf(label, sizeof label, "%s after a kill", name);
    int ready[2];
    CHECK(pipe(ready) == 0);
    fflush(NULL);
    pid_t child = fork();
    CHECK(child >= 0);
    if (child < 0) {
        return;
    }
    if (child == 0) {
        close(ready[0]);
        rill_broker *b = publish_records(dir, fsync);
        if (b == NULL || failures != 0) {
            _exit(3);
        }
        /* Published: wait to be killed (the broker's threads run on). */
        if (write(ready[1], "p", 1) != 1) {
            _exit(3);
        }
        for (;;) {
            pause();
        }
    }
    close(ready[1]);
    char c;
    bool published = read(ready[0], &c, 1) == 1;
    close(ready[0]);
    CHECK(published);
    bool marked = false;
    if (published) {
        time_t deadline = time(NULL) + MARK_WAIT_SECONDS;
        /* 3 000 records of 232 bytes fill more than two 256 KiB segments. */
        while (!(marked = sealed_files_marked(part, 3)) && time(NULL) < deadline) {
            struct timespec poll = {0, 1000000};
            nanosleep(&poll, NULL);
        }
    }
    CHECK(marked);
    CHECK(kill(child, SIGKILL) == 0);
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    if (marked) {
        check_damage(dir, part, fsync, label);
    }
}

/* Flips a byte in the second segment file of `dir` (sealed, and marked) and
 * checks the reopen: RILL_ERR_CORRUPT without repair, exactly the records
 * before the damaged one with it. */
static void check_damage(const char *dir, const char *part, rill_fsync fsync, const char *name) {
    rill_status status;
    rill_broker *b;
    static char files[MAX_FILES][PATH_LEN];
    int n = segment_files(part, files);
    /* 3 000 records of 232 bytes (frame, header, payload) fill more than
     * two 256 KiB segments: the second file is sealed. */
    CHECK(n >= 3);
    if (n < 3) {
        return;
    }
    char second[3 * PATH_LEN];
    snprintf(second, sizeof second, "%s/%s", part, files[1]);
    int damaged = flip_in_the_middle(second);
    CHECK(damaged > 0 && damaged < RECORDS);
    if (damaged <= 0) {
        return;
    }

    /* Without repair: RILL_ERR_CORRUPT, no broker, nothing changed on disk
     * (the same answer again). */
    status = open_data_broker(dir, fsync, false, &b);
    CHECK_STATUS(status, RILL_ERR_CORRUPT);
    CHECK(b == NULL);
    if (b != NULL) {
        /* The damage was taken for a torn tail (the bug): this open cut the
         * partition, so there is nothing more to check. */
        rill_broker_free(b);
        return;
    }
    char err[512];
    rill_last_error(err, sizeof err);
    CHECK(strstr(err, files[1]) != NULL);
    status = open_data_broker(dir, fsync, false, &b);
    CHECK_STATUS(status, RILL_ERR_CORRUPT);
    CHECK(b == NULL);

    /* With repair: exactly the records before the damaged one. */
    status = open_data_broker(dir, fsync, true, &b);
    OK(status);
    if (b == NULL) {
        return;
    }
    rill_topic_stats ts;
    OK(rill_topic_get_stats(b, "t", &ts));
    CHECK(ts.publish_count == (uint64_t)damaged);
    CHECK(ts.recovered_repaired_partitions == 1);
    CHECK(ts.recovered_truncated_records > 0 && ts.recovered_truncated_records <= (uint64_t)(RECORDS - damaged - 1));
    check_exactly(b, damaged);
    /* Publishing continues right after them. */
    char payload[PAYLOAD];
    payload_of(damaged, payload);
    rill_record r = {NULL, 0, payload, PAYLOAD, NULL, 0};
    rill_position pos;
    OK(rill_publish(b, "t", &r, &pos));
    CHECK(pos.offset == (uint64_t)damaged);
    rill_broker_free(b);
    printf("  %s: record %d damaged in %s: corrupt without repair, %d records kept with it\n", name, damaged,
           files[1], damaged);
}

int main(void) {
    char root[] = "/tmp/rill-c-robust-sealed-XXXXXX";
    if (mkdtemp(root) == NULL) {
        perror("mkdtemp");
        return 2;
    }
    damage_a_sealed_segment(root, RILL_FSYNC_ALWAYS, "always");
    damage_a_sealed_segment(root, RILL_FSYNC_INTERVAL, "interval");
    damage_a_sealed_segment(root, RILL_FSYNC_NEVER, "never");
    damage_after_a_kill(root, RILL_FSYNC_INTERVAL, "interval");
    damage_after_a_kill(root, RILL_FSYNC_NEVER, "never");

    char rm[PATH_LEN + 16];
    snprintf(rm, sizeof rm, "rm -rf '%s'", root);
    CHECK(system(rm) == 0);
    return CHECK_VERDICT("test_robust_sealed");
}
