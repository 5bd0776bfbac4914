/*
 * What the C test programs that work on data directories share: opening a
 * broker on one (alone or shared by processes), removing one, and damaging
 * a record in a partition's segment files on purpose. Include after
 * check.h.
 */
#ifndef RILL_TEST_DIRS_H
#define RILL_TEST_DIRS_H

#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rill.h"

enum {
    /* flip_inside looks this far into each file: the tests' records sit at
     * the start of their (preallocated) segment. */
    FLIP_SCAN_BYTES = 65536,
};

/* Opens a broker on `dir`; the status is the caller's to check. */
static inline rill_status open_data_broker(const char *dir, rill_fsync fsync, bool repair, rill_broker **out) {
    rill_broker_options o;
    rill_broker_options_init(&o);
    o.data_dir = dir;
    o.fsync = fsync;
    o.repair = repair;
    *out = NULL;
    return rill_broker_new(&o, out);
}

/* Opens a broker on `dir` with `sharing` (RILL_SHARING_PROCESSES: shared
 * with other processes' brokers); the status is the caller's to check. */
static inline rill_status open_shared_broker(const char *dir, rill_sharing sharing, rill_fsync fsync,
                                             rill_broker **out) {
    rill_broker_options o;
    rill_broker_options_init(&o);
    o.data_dir = dir;
    o.fsync = fsync;
    o.sharing = sharing;
    *out = NULL;
    return rill_broker_new(&o, out);
}

/* Removes the directory `dir` (made by mkdtemp) and all in it. */
static inline void remove_dir(const char *dir) {
    char rm[1100];
    snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
    CHECK(system(rm) == 0);
}

/* Opens a broker on `dir`, or counts the failure and ends the program
 * (nothing after it could run without a broker). */
static inline rill_broker *open_broker_or_exit(const char *dir, rill_fsync fsync) {
    rill_broker *b = NULL;
    OK(open_data_broker(dir, fsync, false, &b));
    if (b == NULL) {
        exit(2);
    }
    return b;
}

/* Flips one bit inside `needle` in the one file of `part_dir` holding it
 * (within its first FLIP_SCAN_BYTES); returns how many files held it. */
static inline int flip_inside(const char *part_dir, const char *needle) {
    int hits = 0;
    size_t nlen = strlen(needle);
    DIR *d = opendir(part_dir);
    CHECK(d != NULL);
    if (d == NULL) {
        return 0;
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') {
            continue;
        }
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", part_dir, e->d_name);
        FILE *f = fopen(path, "r+b");
        if (f == NULL) {
            continue;
        }
        char *bytes = malloc(FLIP_SCAN_BYTES);
        if (bytes != NULL) {
            long len = (long)fread(bytes, 1, FLIP_SCAN_BYTES, f);
            for (long at = 0; at + (long)nlen <= len; at++) {
                if (memcmp(bytes + at, needle, nlen) == 0) {
                    fseek(f, at + 4, SEEK_SET);
                    fputc(bytes[at + 4] ^ 0x20, f);
                    hits++;
                    break;
                }
            }
        }
        free(bytes);
        fclose(f);
    }
    closedir(d);
    return hits;
}

#endif
