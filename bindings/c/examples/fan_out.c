/*
 * Fan-out with filters: every subscription sees every message of its
 * topics, and an attribute filter narrows that down without a line of code
 * in the handler.
 *
 *   cc fan_out.c $(pkg-config --cflags --libs rill) -o fan_out && ./fan_out
 *
 * Three services read one stream of orders: shipping for Europe only, an
 * alerting service for urgent orders in any region, and an audit log of
 * everything. Each has its own position, so a slow one holds up no other.
 * The program exits non-zero if a service saw the wrong orders.
 */
#include <stdio.h>
#include <string.h>

#include <rill.h>

/* What one service saw: a bit per order number. A handler is called one
 * message at a time per subscription, so it needs no lock of its own, and
 * rill_subscription_wait_idle makes its writes visible to the caller. */
struct seen {
    const char *name;
    unsigned mask;
};

static int fail(const char *what, rill_status st) {
    char err[256];
    rill_last_error(err, sizeof err);
    fprintf(stderr, "%s failed: %s: %s\n", what, rill_status_name(st), err);
    return 1;
}

static rill_ack on_order(void *user_data, const rill_message *m) {
    struct seen *s = user_data;
    /* Payloads are "<kind>-<n>", n a digit; anything else is not ours. */
    char last = m->payload_len > 0 ? (char)m->payload[m->payload_len - 1] : '?';
    if (last < '0' || last > '9') return RILL_ACK_DEAD_LETTER;
    s->mask |= 1u << (unsigned)(last - '0');
    return RILL_ACK_SUCCESS;
}

static rill_status subscribe(rill_broker *b, const char *pattern, const char *filter, struct seen *s,
                             rill_subscription **out) {
    rill_subscription_options o;
    rill_subscription_options_init(&o);
    /* Pub/Sub's filter syntax: =, !=, attributes:key (present),
     * hasPrefix(...), NOT, AND, OR and parentheses. NULL: everything. */
    o.filter = filter;
    return rill_subscribe(b, pattern, &o, on_order, s, out);
}

int main(void) {
    rill_broker *broker = NULL;
    rill_subscription *subs[3] = {NULL, NULL, NULL};
    struct seen seen[3] = {{"shipping (eu-*)", 0}, {"alerts (high)", 0}, {"audit (all)", 0}};
    rill_status st = rill_broker_new(NULL, &broker);
    if (st != RILL_OK) return fail("rill_broker_new", st);
    rill_topic_options two;
    rill_topic_options_init(&two);
    two.partitions = 2;
    if ((st = rill_topic_create(broker, "shop/orders", &two)) != RILL_OK) return fail("rill_topic_create", st);
    if ((st = rill_topic_create(broker, "shop/returns", NULL)) != RILL_OK) return fail("rill_topic_create", st);

    if ((st = subscribe(broker, "shop/orders", "hasPrefix(attributes.region, \"eu-\")", &seen[0], &subs[0])) ||
        (st = subscribe(broker, "shop/*", "attributes.priority = \"high\"", &seen[1], &subs[1])) ||
        /* `**` matches any number of segments: every topic under shop/. */
        (st = subscribe(broker, "shop/**", NULL, &seen[2], &subs[2])))
        return fail("rill_subscribe", st);

    struct { const char *topic, *id, *region, *priority; } orders[] = {
        {"shop/orders", "order-1", "eu-west", "normal"},
        {"shop/orders", "order-2", "us-east", "high"},
        {"shop/orders", "order-3", "eu-north", "high"},
        {"shop/returns", "return-4", "eu-west", "high"},
        {"shop/orders", "order-5", "ap-south", "normal"},
    };
    for (size_t i = 0; i < sizeof orders / sizeof orders[0]; i++) {
        rill_attribute attrs[2] = {{"region", orders[i].region}, {"priority", orders[i].priority}};
        rill_record r = {orders[i].id, strlen(orders[i].id), orders[i].id, strlen(orders[i].id), attrs, 2};
        if ((st = rill_publish(broker, orders[i].topic, &r, NULL)) != RILL_OK) return fail("rill_publish", st);
    }
    /* Handlers run on the broker's threads: wait until each caught up. */
    for (int i = 0; i < 3; i++)
        if ((st = rill_subscription_wait_idle(subs[i], 10000)) != RILL_OK) return fail("rill_subscription_wait_idle", st);

    unsigned want[3] = {1u << 1 | 1u << 3, 1u << 2 | 1u << 3 | 1u << 4, 1u << 1 | 1u << 2 | 1u << 3 | 1u << 4 | 1u << 5};
    int ok = 1;
    for (int i = 0; i < 3; i++) {
        printf("%-16s saw orders:", seen[i].name);
        for (unsigned n = 0; n < 8; n++)
            if (seen[i].mask & 1u << n) printf(" %u", n);
        printf("\n");
        ok = ok && seen[i].mask == want[i];
    }
    rill_subscription_stats stats;
    if ((st = rill_subscription_get_stats(subs[0], &stats)) != RILL_OK) return fail("rill_subscription_get_stats", st);
    printf("shipping's filter skipped %llu orders\n", (unsigned long long)stats.filtered);
    for (int i = 0; i < 3; i++) rill_subscription_free(subs[i]);
    rill_broker_free(broker);
    if (!ok) fprintf(stderr, "a service saw the wrong orders\n");
    return ok ? 0 : 1;
}
