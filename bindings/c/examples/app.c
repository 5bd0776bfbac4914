/*
 * A small C program using an installed rill:
 *
 *   bash ffi/install.sh --prefix "$HOME/.local"
 *   PKG_CONFIG_PATH=$HOME/.local/lib/pkgconfig cc app.c $(pkg-config --cflags --libs rill) -o app
 *
 * It publishes a few orders, receives the Indian ones through a filtered
 * push subscription, and reads all of them back with a pull consumer.
 */
#include <stdio.h>
#include <string.h>

#include <rill.h>

static int fail(const char *what, rill_status st) {
    char err[256];
    rill_last_error(err, sizeof err);
    fprintf(stderr, "%s failed: %s: %s\n", what, rill_status_name(st), err);
    return 1;
}

static rill_ack on_order(void *user_data, const rill_message *m) {
    int *count = (int *)user_data;
    const char *region = NULL;
    size_t region_len = 0;
    rill_message_attribute(m, "region", &region, &region_len);
    printf("handler: %s[%u]@%llu %.*s (region %.*s)\n", m->topic, m->partition, (unsigned long long)m->offset,
           (int)m->payload_len, (const char *)m->payload, (int)region_len, region);
    (*count)++;
    return RILL_ACK_SUCCESS;
}

int main(void) {
    rill_broker *broker = NULL;
    rill_status st = rill_broker_new(NULL, &broker);
    if (st != RILL_OK) return fail("rill_broker_new", st);
    if ((st = rill_topic_create(broker, "shop/orders", NULL)) != RILL_OK) return fail("rill_topic_create", st);

    int received = 0;
    rill_subscription_options so;
    rill_subscription_options_init(&so);
    so.filter = "attributes.region = \"IN\"";
    rill_subscription *sub = NULL;
    st = rill_subscribe(broker, "shop/*", &so, on_order, &received, &sub);
    if (st != RILL_OK) return fail("rill_subscribe", st);

    const char *regions[] = {"IN", "US", "IN"};
    for (int i = 0; i < 3; i++) {
        char body[32];
        snprintf(body, sizeof body, "order-%d", i);
        rill_attribute attr = {"region", regions[i]};
        rill_record rec = {NULL, 0, body, strlen(body), &attr, 1};
        rill_position pos;
        if ((st = rill_publish(broker, "shop/orders", &rec, &pos)) != RILL_OK) return fail("rill_publish", st);
    }
    if ((st = rill_subscription_wait_idle(sub, 5000)) != RILL_OK) return fail("rill_subscription_wait_idle", st);

    rill_consumer *consumer = NULL;
    if ((st = rill_consumer_new(broker, "audit", "shop/orders", NULL, &consumer)) != RILL_OK)
        return fail("rill_consumer_new", st);
    const rill_message *msgs = NULL;
    size_t count = 0;
    if ((st = rill_consumer_poll(consumer, 10, 1000, &msgs, &count)) != RILL_OK) return fail("rill_consumer_poll", st);
    printf("polled %zu messages; the handler saw %d; rill %s\n", count, received, rill_version());

    rill_consumer_free(consumer);
    rill_subscription_free(sub);
    rill_broker_free(broker);
    return (count == 3 && received == 2) ? 0 : 1;
}
