/*
 * Durable replay from a point in time: a broker on a data directory keeps
 * its messages across restarts, and a consumer can go back to the first
 * message published at or after a given time.
 *
 *   cc replay.c $(pkg-config --cflags --libs rill) -o replay && ./replay
 *
 * A sensor feed is written by one run of the broker; the broker is freed
 * (a restart); a second run reopens the directory, finds the moment an
 * incident began and replays everything from then on. The program exits
 * non-zero if the replay is not exactly the readings from that moment.
 */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rill.h>

static const char *readings[] = {"21.0", "21.2", "21.1", "48.9", "49.5", "22.0"};
#define READINGS 6
/* The reading at which the incident began (in a real program: a time an
 * operator gives, such as "09:40 UTC", as nanoseconds since the epoch). */
#define INCIDENT 3

static int fail(const char *what, rill_status st) {
    char err[256];
    rill_last_error(err, sizeof err);
    fprintf(stderr, "%s failed: %s: %s\n", what, rill_status_name(st), err);
    return 1;
}

static rill_status open_broker(const char *dir, rill_broker **out) {
    rill_broker_options o;
    rill_broker_options_init(&o);
    o.data_dir = dir; /* copied: it need not outlive the call */
    /* INTERVAL (the default) syncs every fsync_interval_ms; ALWAYS returns
     * from a publish only once the record is on stable storage. */
    o.fsync = RILL_FSYNC_ALWAYS;
    return rill_broker_new(&o, out);
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(path);
}

int main(void) {
    char dir[] = "/tmp/rill-replay-example-XXXXXX";
    if (mkdtemp(dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    rill_broker *broker = NULL;
    rill_status st;

    /* The first run: publish the feed, then free the broker (which closes
     * it: the data directory is complete and unlocked). */
    if ((st = open_broker(dir, &broker)) != RILL_OK) return fail("rill_broker_new", st);
    if ((st = rill_topic_create(broker, "sensors/boiler", NULL)) != RILL_OK) return fail("rill_topic_create", st);
    for (int i = 0; i < READINGS; i++) {
        rill_record r = {NULL, 0, readings[i], strlen(readings[i]), NULL, 0};
        if ((st = rill_publish(broker, "sensors/boiler", &r, NULL)) != RILL_OK) return fail("rill_publish", st);
    }
    rill_broker_free(broker);

    /* The second run: topics, messages and their publish times are back. */
    if ((st = open_broker(dir, &broker)) != RILL_OK) return fail("rill_broker_new", st);
    rill_consumer *reader = NULL;
    if ((st = rill_consumer_new(broker, "incident-review", "sensors/boiler", NULL, &reader)) != RILL_OK)
        return fail("rill_consumer_new", st);
    const rill_message *msgs = NULL;
    size_t count = 0;
    if ((st = rill_consumer_poll(reader, 100, 1000, &msgs, &count)) != RILL_OK) return fail("rill_consumer_poll", st);
    printf("after the restart: %zu readings\n", count);
    if (count != READINGS) {
        fprintf(stderr, "expected %d readings after the restart\n", READINGS);
        return 1;
    }
    /* Every message carries its publish time in nanoseconds since the Unix
     * epoch; here the incident's start is the time of its first reading. */
    int64_t incident_began = (int64_t)msgs[INCIDENT].timestamp_ns;

    /* Go back to the first message published at or after that time, in
     * partition 0 (the only one here). A new group can start there too:
     * rill_consumer_options.start = RILL_START_TIME with the time in
     * start_offset, as can a subscription (rill_subscription_options). */
    if ((st = rill_consumer_seek_time(reader, 0, incident_began)) != RILL_OK) return fail("rill_consumer_seek_time", st);
    if ((st = rill_consumer_poll(reader, 100, 1000, &msgs, &count)) != RILL_OK) return fail("rill_consumer_poll", st);
    int ok = count == READINGS - INCIDENT;
    printf("replayed from the incident:");
    for (size_t i = 0; i < count; i++) {
        printf(" %.*s", (int)msgs[i].payload_len, (const char *)msgs[i].payload);
        ok = ok && i + INCIDENT < READINGS && msgs[i].payload_len == strlen(readings[i + INCIDENT]) &&
             memcmp(msgs[i].payload, readings[i + INCIDENT], msgs[i].payload_len) == 0;
    }
    printf("\n");

    rill_consumer_free(reader);
    rill_broker_free(broker);
    nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
    if (!ok) fprintf(stderr, "expected the readings from the incident on\n");
    return ok ? 0 : 1;
}
