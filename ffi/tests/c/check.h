/*
 * The checks the C test programs share: CHECK, CHECK_STATUS and OK count
 * every check and report a failed one with the library's last error, without
 * stopping the program. Each program includes this once and ends with
 * `return CHECK_VERDICT(its name);`.
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

/* The program's verdict, as main's exit status: 1 after saying how many
 * checks failed, 0 after saying all passed. `return CHECK_VERDICT("name");` */
#define CHECK_VERDICT(program)                                                       \
    (failures ? (fprintf(stderr, "%s: %d of %d checks failed\n", (program), failures, \
                         checks),                                                    \
                 1)                                                                  \
              : (printf("%s: all %d checks passed\n", (program), checks), 0))

#endif
