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
 * Built with -std=c99 -Wall -Wextra -Wpedantic -Werror, and run plain, under
 * AddressSanitizer + UBSan and under valgrind memcheck by ffi/tests/run.sh.
 */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rill.h"

#include "check.h"

enum {
    RECORDS = 3000,     /* published per policy */
    PAYLOAD = 200,      /* bytes of each record's payload */
    RETENTION = 1 << 20, /* 1 MiB: 256 KiB segments */
    MAX_FILES = 64,
    PATH_LEN = 600,
};

/* The payload of record `i`: "record NNNNN " and filler, PAYLOAD bytes. */
static void payload_of(int i, char out[PAYLOAD]) {
    memset(out, 'x', PAYLOAD);
    char head[16];
    int len = snprintf(head, sizeof head, "record %05d ", i);
    memcpy(out, head, (size_t)len);
}

static rill_broker *open_broker(const char *dir, rill_fsync fsync, bool repair, rill_status *status) {
    rill_broker_options o;
    rill_broker_options_init(&o);
    o.data_dir = dir;
    o.fsync = fsync;
    o.repair = repair;
    rill_broker *b = NULL;
    *status = rill_broker_new(&o, &b);
    return b;
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

static void damage_a_sealed_segment(const char *root, rill_fsync fsync, const char *name) {
    char dir[PATH_LEN], part[PATH_LEN + 16];
    snprintf(dir, sizeof dir, "%s/%s", root, name);
    snprintf(part, sizeof part, "%s/topics/0/0", dir);
    rill_status status;
    rill_broker *b = open_broker(dir, fsync, false, &status);
    OK(status);
    if (b == NULL) {
        return;
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
    rill_broker_free(b);

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
    b = open_broker(dir, fsync, false, &status);
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
    b = open_broker(dir, fsync, false, &status);
    CHECK_STATUS(status, RILL_ERR_CORRUPT);
    CHECK(b == NULL);

    /* With repair: exactly the records before the damaged one. */
    b = open_broker(dir, fsync, true, &status);
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

    char rm[PATH_LEN + 16];
    snprintf(rm, sizeof rm, "rm -rf '%s'", root);
    CHECK(system(rm) == 0);
    if (failures) {
        fprintf(stderr, "%d of %d checks failed\n", failures, checks);
        return 1;
    }
    printf("test_robust_sealed: all %d checks passed\n", checks);
    return 0;
}
