/*
 * The NATS JetStream bridge: two brokers, standing for two services on
 * different machines, exchange orders through a JetStream stream.
 *
 *   bash ffi/install.sh --with-nats --prefix "$HOME/.local"
 *   cc nats_bridge.c $(pkg-config --cflags --libs rill) -o nats_bridge
 *   nats-server -js &
 *   nats stream add ORDERS --subjects 'shop.>' --defaults
 *   ./nats_bridge
 *
 * It needs a librill built with the bridge, and a nats-server with
 * JetStream at $RILL_NATS_URL (default nats://127.0.0.1:4222) with a stream
 * ORDERS that captures `shop.>`. (The tests run it beside a server of their
 * own: ffi/tests/run_nats.sh.)
 *
 * The shop's broker exports its order topics (export_pattern below); each
 * message is stored on subject `shop.orders.<region>` and acknowledged to rill only once
 * JetStream has it. The warehouse's broker imports the stream into the same
 * topic names, with key and attributes as they were. The program exits
 * non-zero if the warehouse did not get every order.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <rill_nats.h>

#define ORDERS 3
/* How long the orders may take to cross, in all. */
#define DEADLINE_S 30

static int fail(const char *what, rill_status st) {
    char err[256];
    rill_last_error(err, sizeof err);
    fprintf(stderr, "%s failed: %s: %s\n", what, rill_status_name(st), err);
    return 1;
}

int main(void) {
    const char *url = getenv("RILL_NATS_URL");
    if (url == NULL) url = "nats://127.0.0.1:4222";
    const char *topics[] = {"orders/eu", "orders/us"};
    rill_broker *shop = NULL, *warehouse = NULL;
    rill_nats_bridge *exporter = NULL, *importer = NULL;
    rill_consumer *inbox = NULL;
    rill_status st;

    /* The shop: its orders go out through the stream. */
    if ((st = rill_broker_new(NULL, &shop)) != RILL_OK) return fail("rill_broker_new", st);
    for (int i = 0; i < 2; i++)
        if ((st = rill_topic_create(shop, topics[i], NULL)) != RILL_OK) return fail("rill_topic_create", st);
    rill_nats_options out;
    rill_nats_options_init(&out);
    out.url = url;
    /* Export is a durable subscription on the pattern: a bridge started
     * again on this broker resumes where the last one got to, and while the
     * server is away the orders wait in rill's log. */
    out.export_pattern = "orders/*";
    out.export_stream = "ORDERS";
    out.export_subject_prefix = "shop";
    if ((st = rill_nats_bridge_new(shop, &out, &exporter)) != RILL_OK) return fail("rill_nats_bridge_new (export)", st);

    /* The warehouse: the stream's messages come in as rill messages, here
     * read by a pull consumer. */
    if ((st = rill_broker_new(NULL, &warehouse)) != RILL_OK) return fail("rill_broker_new", st);
    for (int i = 0; i < 2; i++)
        if ((st = rill_topic_create(warehouse, topics[i], NULL)) != RILL_OK) return fail("rill_topic_create", st);
    if ((st = rill_consumer_new(warehouse, "packing", "orders/eu", NULL, &inbox)) != RILL_OK)
        return fail("rill_consumer_new", st);
    rill_nats_options in;
    rill_nats_options_init(&in);
    in.url = url;
    /* A durable JetStream consumer (default "rill-import"): the server
     * remembers what the warehouse acknowledged. */
    in.import_stream = "ORDERS";
    in.import_subject_prefix = "shop";
    if ((st = rill_nats_bridge_new(warehouse, &in, &importer)) != RILL_OK)
        return fail("rill_nats_bridge_new (import)", st);

    const char *ids[ORDERS] = {"order-1", "order-2", "order-3"};
    const char *regions[ORDERS] = {"eu", "us", "eu"};
    for (int i = 0; i < ORDERS; i++) {
        char topic[32];
        snprintf(topic, sizeof topic, "orders/%s", regions[i]);
        rill_attribute region = {"region", regions[i]};
        rill_record r = {ids[i], strlen(ids[i]), ids[i], strlen(ids[i]), &region, 1};
        if ((st = rill_publish(shop, topic, &r, NULL)) != RILL_OK) return fail("rill_publish", st);
    }

    /* The European orders arrive at the warehouse's orders/eu: poll with a
     * deadline (the network takes a moment). */
    int eu = 0, ok = 1;
    time_t give_up = time(NULL) + DEADLINE_S;
    while (eu < 2 && time(NULL) <= give_up) {
        const rill_message *msgs = NULL;
        size_t count = 0;
        if ((st = rill_consumer_poll(inbox, 10, 200, &msgs, &count)) != RILL_OK) return fail("rill_consumer_poll", st);
        for (size_t i = 0; i < count; i++, eu++) {
            const char *seq = "?";
            size_t seq_len = 1;
            /* The import adds the stream sequence as nats.seq. */
            rill_message_attribute(&msgs[i], "nats.seq", &seq, &seq_len);
            printf("warehouse got %s %.*s (key %.*s, stream sequence %.*s)\n", msgs[i].topic, (int)msgs[i].payload_len,
                   (const char *)msgs[i].payload, (int)msgs[i].key_len, (const char *)msgs[i].key, (int)seq_len, seq);
            const char *want = eu == 0 ? "order-1" : "order-3";
            ok = ok && eu < 2 && msgs[i].payload_len == strlen(want) && memcmp(msgs[i].payload, want, strlen(want)) == 0 &&
                 msgs[i].key != NULL && msgs[i].key_len == strlen(want);
        }
    }
    /* And the American one at orders/us: the bridges' counters say how far
     * each side got (export counts a message once JetStream acknowledged
     * it, which may be after the import already handed it on). */
    rill_nats_stats sent, got;
    for (;;) {
        if ((st = rill_nats_bridge_get_stats(exporter, &sent)) != RILL_OK) return fail("rill_nats_bridge_get_stats", st);
        if ((st = rill_nats_bridge_get_stats(importer, &got)) != RILL_OK) return fail("rill_nats_bridge_get_stats", st);
        if ((sent.exported >= ORDERS && got.imported >= ORDERS) || time(NULL) > give_up) break;
        struct timespec pause = {0, 10 * 1000 * 1000};
        nanosleep(&pause, NULL); /* a poll of the counters, under the deadline */
    }
    printf("shop exported %llu, warehouse imported %llu\n", (unsigned long long)sent.exported,
           (unsigned long long)got.imported);
    ok = ok && eu == 2 && sent.exported == ORDERS && got.imported == ORDERS;

    rill_nats_bridge_free(importer); /* stops the bridge first */
    rill_nats_bridge_free(exporter);
    rill_consumer_free(inbox);
    rill_broker_free(warehouse);
    rill_broker_free(shop);
    if (!ok) fprintf(stderr, "expected order-1 and order-3 at orders/eu and %d orders across\n", ORDERS);
    return ok ? 0 : 1;
}
