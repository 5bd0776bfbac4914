/*
 * rill.h as a C89 program sees it. run.sh builds this file with
 * -std=c89 -pedantic-errors: a header that uses anything C89 lacks (a comma
 * after the last enumerator, a // comment on an #endif line) fails the build.
 * It then checks RILL_VERSION_NUMBER, the integer a program compares in #if,
 * against the other version macros and against the library it runs with, and
 * makes one round trip through a broker with every declaration at the top of
 * its block, as C89 wants.
 */
#include <stdio.h>
#include <string.h>

#include "rill.h"
/* rill_nats.h only declares (this library has no bridge): it must parse too. */
#include "rill_nats.h"

#include "check.h"

#ifndef RILL_VERSION_NUMBER
#error "rill.h defines no RILL_VERSION_NUMBER"
#endif
/* The number must be usable by the preprocessor, and newer than rill 0.1's. */
#if RILL_VERSION_NUMBER <= 100
#error "RILL_VERSION_NUMBER must be above rill 0.1's 100"
#endif

/* How the number is made from its parts (see rill.h). */
#define MAJOR_SCALE 10000L
#define MINOR_SCALE 100L

static void test_version_number(void) {
    int major = -1, minor = -1, patch = -1;
    CHECK(RILL_VERSION_NUMBER ==
          RILL_VERSION_MAJOR * MAJOR_SCALE + RILL_VERSION_MINOR * MINOR_SCALE + RILL_VERSION_PATCH);
    CHECK(RILL_VERSION_MINOR < MINOR_SCALE && RILL_VERSION_PATCH < MINOR_SCALE);
    /* The library this program runs with is the one its header describes:
     * run.sh links it with the library built from the same tree. */
    CHECK(sscanf(rill_version(), "%d.%d.%d", &major, &minor, &patch) == 3);
    CHECK(major * MAJOR_SCALE + minor * MINOR_SCALE + patch == RILL_VERSION_NUMBER);
    CHECK(strcmp(rill_version(), RILL_VERSION_STRING) == 0);
}

static void test_round_trip(void) {
    rill_broker *broker = NULL;
    rill_topic_options to;
    rill_consumer *consumer = NULL;
    rill_record rec;
    rill_position pos;
    const rill_message *msgs = NULL;
    size_t count = 0;
    const char body[] = "c89";

    OK(rill_broker_new(NULL, &broker));
    if (broker == NULL) return;
    rill_topic_options_init(&to);
    to.partitions = 1;
    OK(rill_topic_create(broker, "c89/t", &to));
    memset(&rec, 0, sizeof rec);
    rec.payload = body;
    rec.payload_len = strlen(body);
    OK(rill_publish(broker, "c89/t", &rec, &pos));
    OK(rill_consumer_new(broker, "g", "c89/t", NULL, &consumer));
    OK(rill_consumer_poll(consumer, 10, 1000, &msgs, &count));
    CHECK(count == 1);
    if (count == 1) {
        CHECK(msgs[0].payload_len == strlen(body));
        CHECK(memcmp(msgs[0].payload, body, strlen(body)) == 0);
    }
    rill_consumer_free(consumer);
    rill_broker_free(broker);
}

int main(void) {
    test_version_number();
    test_round_trip();
    return CHECK_VERDICT("test_robust_c89");
}
