/*
 * The checks the C test programs share: CHECK, CHECK_STATUS and OK count
 * every check and report a failed one with the library's last error, without
 * stopping the program. Each program includes this once and reports
 * `failures` of `checks` at its end.
 */
#ifndef RILL_TEST_CHECK_H
#define RILL_TEST_CHECK_H

#include <stdio.h>

#include "rill.h"

static int failures = 0;
static int checks = 0;

#define CHECK(cond)                                                                  \
    do {                                                                             \
        checks++;                                                                    \
        if (!(cond)) {                                                               \
            char err_[512];                                                          \
            rill_last_error(err_, sizeof err_);                                      \
            fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__,  \
                    __LINE__, #cond, err_);                                          \
            failures++;                                                              \
        }                                                                            \
    } while (0)

#define CHECK_STATUS(call, want)                                                     \
    do {                                                                             \
        rill_status got_ = (call);                                                   \
        checks++;                                                                    \
        if (got_ != (want)) {                                                        \
            char err_[512];                                                          \
            rill_last_error(err_, sizeof err_);                                      \
            fprintf(stderr, "%s:%d: %s returned %s, want %s (last error: %s)\n",     \
                    __FILE__, __LINE__, #call, rill_status_name(got_),               \
                    rill_status_name(want), err_);                                   \
            failures++;                                                              \
        }                                                                            \
    } while (0)

#define OK(call) CHECK_STATUS(call, RILL_OK)

#endif
