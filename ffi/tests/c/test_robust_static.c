/*
 * Two Rust static libraries in one program. run.sh links this file with the
 * installed librill.a and with a copy of it whose rill_* symbols are renamed
 * twin_* (objcopy --redefine-syms): the same Rust standard library and
 * dependencies twice over. When librill.a left their symbols global, the link
 * failed with "multiple definition" errors; with only rill_* global, each
 * copy keeps its own and both work side by side.
 */
#include <stdio.h>
#include <string.h>

#include "rill.h"

#include "check.h"

/* The twin's entry points: rill.h's, renamed. */
const char *twin_version(void);
rill_status twin_broker_new_v1(const rill_broker_options *o, rill_broker **out);
rill_status twin_topic_create_v1(rill_broker *b, const char *name, const rill_topic_options *o);
rill_status twin_publish(rill_broker *b, const char *topic, const rill_record *r, rill_position *out);
rill_status twin_consumer_new_v1(rill_broker *b, const char *group, const char *pattern,
                                 const rill_consumer_options *o, rill_consumer **out);
rill_status twin_consumer_poll(rill_consumer *c, size_t max, int64_t timeout_ms, const rill_message **out,
                               size_t *count);
void twin_consumer_free(rill_consumer *c);
void twin_broker_free(rill_broker *b);

/* One library's entry points, so each copy runs the same round trip. */
typedef struct {
    const char *name;
    const char *(*version)(void);
    rill_status (*broker_new)(const rill_broker_options *, rill_broker **);
    rill_status (*topic_create)(rill_broker *, const char *, const rill_topic_options *);
    rill_status (*publish)(rill_broker *, const char *, const rill_record *, rill_position *);
    rill_status (*consumer_new)(rill_broker *, const char *, const char *, const rill_consumer_options *,
                                rill_consumer **);
    rill_status (*consumer_poll)(rill_consumer *, size_t, int64_t, const rill_message **, size_t *);
    void (*consumer_free)(rill_consumer *);
    void (*broker_free)(rill_broker *);
} library;

/* How long a poll may wait for the one record just published. */
#define POLL_TIMEOUT_MS 5000

/* Publishes `body` through `lib` and reads it back; returns the broker, still open. */
static rill_broker *round_trip(const library *lib, const char *body) {
    rill_broker *broker = NULL;
    rill_consumer *consumer = NULL;
    rill_record rec;
    rill_position pos;
    const rill_message *msgs = NULL;
    size_t count = 0;

    printf("%s: rill %s\n", lib->name, lib->version());
    CHECK(strcmp(lib->version(), RILL_VERSION_STRING) == 0);
    OK(lib->broker_new(NULL, &broker));
    if (broker == NULL) return NULL;
    OK(lib->topic_create(broker, "twin/t", NULL));
    memset(&rec, 0, sizeof rec);
    rec.payload = body;
    rec.payload_len = strlen(body);
    OK(lib->publish(broker, "twin/t", &rec, &pos));
    OK(lib->consumer_new(broker, "g", "twin/t", NULL, &consumer));
    OK(lib->consumer_poll(consumer, 10, POLL_TIMEOUT_MS, &msgs, &count));
    CHECK(count == 1);
    if (count == 1) {
        CHECK(msgs[0].payload_len == strlen(body));
        CHECK(memcmp(msgs[0].payload, body, strlen(body)) == 0);
    }
    lib->consumer_free(consumer);
    return broker;
}

int main(void) {
    const library rill = {"librill.a",          rill_version,       rill_broker_new_v1,
                          rill_topic_create_v1, rill_publish,       rill_consumer_new_v1,
                          rill_consumer_poll,   rill_consumer_free, rill_broker_free};
    const library twin = {"its twin",           twin_version,       twin_broker_new_v1,
                          twin_topic_create_v1, twin_publish,       twin_consumer_new_v1,
                          twin_consumer_poll,   twin_consumer_free, twin_broker_free};
    /* Both brokers open at once: each library's threads and globals are its own. */
    rill_broker *a = round_trip(&rill, "from rill");
    rill_broker *b = round_trip(&twin, "from the twin");
    twin.broker_free(b);
    rill.broker_free(a);
    return CHECK_VERDICT("test_robust_static");
}
