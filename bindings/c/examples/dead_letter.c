/*
 * Dead letters: a message that keeps failing is retried a few times with a
 * backoff, then set aside on a dead-letter topic with the reason, and the
 * subscription moves on to the messages after it.
 *
 *   cc dead_letter.c $(pkg-config --cflags --libs rill) -o dead_letter && ./dead_letter
 *
 * A payment service cannot process a payment with a malformed amount.
 * Retrying will not help, but it cannot tell that from a passing fault, so
 * it retries; after the last attempt the message goes to `payments/dead`,
 * an alert callback fires, and an operator's tool reads the dead letters
 * with their reasons. The program exits non-zero if the good payments were
 * not all settled or the bad one was not set aside.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rill.h>

struct service {
    int settled;
    int alerts;
};

static int fail(const char *what, rill_status st) {
    char err[256];
    rill_last_error(err, sizeof err);
    fprintf(stderr, "%s failed: %s: %s\n", what, rill_status_name(st), err);
    return 1;
}

static rill_ack on_payment(void *user_data, const rill_message *m) {
    struct service *s = user_data;
    char amount[32] = {0};
    char *end = NULL;
    memcpy(amount, m->payload, m->payload_len < sizeof amount - 1 ? m->payload_len : sizeof amount - 1);
    strtoul(amount, &end, 10);
    if (end == amount || *end != '\0') {
        /* Say why: the reason travels with the dead letter. */
        char reason[64];
        snprintf(reason, sizeof reason, "attempt %u: amount is not a number", m->attempt);
        rill_ack_reason(m, reason);
        return RILL_ACK_RETRY; /* or RILL_ACK_DEAD_LETTER to give up at once */
    }
    s->settled++;
    return RILL_ACK_SUCCESS;
}

/* The alert: called once per dead letter, on the delivering thread. */
static void on_dead_letter(void *user_data, const rill_message *m, const char *reason) {
    struct service *s = user_data;
    s->alerts++;
    fprintf(stderr, "ALERT: payment at offset %llu set aside: %s\n", (unsigned long long)m->offset, reason);
}

/* An attribute as a printable slice ("?" if absent). */
static void attribute(const rill_message *m, const char *key, const char **value, int *len) {
    size_t n = 0;
    if (rill_message_attribute(m, key, value, &n) != RILL_OK) *value = "?", n = 1;
    *len = (int)n;
}

int main(void) {
    rill_broker *broker = NULL;
    rill_status st = rill_broker_new(NULL, &broker);
    if (st != RILL_OK) return fail("rill_broker_new", st);
    if ((st = rill_topic_create(broker, "payments", NULL)) != RILL_OK) return fail("rill_topic_create", st);

    struct service service = {0, 0};
    rill_subscription_options o;
    rill_subscription_options_init(&o);
    o.name = "settlement";
    o.start = RILL_START_EARLIEST;
    /* Three deliveries in all, 1 ms then 2 ms apart; then the message is
     * dead-lettered. */
    o.max_attempts = 3;
    o.backoff_initial_ms = 1;
    o.backoff_max_ms = 50;
    o.dead_letter_topic = "payments/dead"; /* default: $dlq/<name> */
    o.on_dead_letter = on_dead_letter;
    rill_subscription *sub = NULL;
    if ((st = rill_subscribe(broker, "payments", &o, on_payment, &service, &sub)) != RILL_OK)
        return fail("rill_subscribe", st);

    const char *amounts[] = {"120", "75", "12,50", "300"};
    for (int i = 0; i < 4; i++) {
        rill_attribute customer = {"customer", "c-42"};
        rill_record r = {NULL, 0, amounts[i], strlen(amounts[i]), &customer, 1};
        if ((st = rill_publish(broker, "payments", &r, NULL)) != RILL_OK) return fail("rill_publish", st);
    }
    if ((st = rill_subscription_wait_idle(sub, 10000)) != RILL_OK) return fail("rill_subscription_wait_idle", st);
    rill_subscription_stats stats;
    if ((st = rill_subscription_get_stats(sub, &stats)) != RILL_OK) return fail("rill_subscription_get_stats", st);
    printf("settled %d, retried %llu, dead-lettered %llu\n", service.settled, (unsigned long long)stats.retried,
           (unsigned long long)stats.dead_lettered);

    /* The operator's side: dead letters are ordinary messages, with the
     * original payload and attributes plus rill.dlq.* attributes that say
     * where they came from and why. */
    rill_consumer *dead = NULL;
    if ((st = rill_consumer_new(broker, "operator", "payments/dead", NULL, &dead)) != RILL_OK)
        return fail("rill_consumer_new", st);
    const rill_message *letters = NULL;
    size_t count = 0;
    if ((st = rill_consumer_poll(dead, 10, 1000, &letters, &count)) != RILL_OK) return fail("rill_consumer_poll", st);
    int ok = service.settled == 3 && service.alerts == 1 && stats.dead_lettered == 1 && count == 1;
    for (size_t i = 0; i < count; i++) {
        const char *topic, *offset, *attempts, *reason, *customer;
        int topic_len, offset_len, attempts_len, reason_len, customer_len;
        attribute(&letters[i], "rill.dlq.topic", &topic, &topic_len);
        attribute(&letters[i], "rill.dlq.offset", &offset, &offset_len);
        attribute(&letters[i], "rill.dlq.attempts", &attempts, &attempts_len);
        attribute(&letters[i], "rill.dlq.reason", &reason, &reason_len);
        attribute(&letters[i], "customer", &customer, &customer_len);
        printf("dead letter \"%.*s\" of %.*s from %.*s offset %.*s after %.*s attempts: %.*s\n",
               (int)letters[i].payload_len, (const char *)letters[i].payload, customer_len, customer, topic_len, topic,
               offset_len, offset, attempts_len, attempts, reason_len, reason);
        ok = ok && letters[i].payload_len == 5 && memcmp(letters[i].payload, "12,50", 5) == 0 &&
             reason_len == (int)strlen("attempt 3: amount is not a number") &&
             memcmp(reason, "attempt 3: amount is not a number", (size_t)reason_len) == 0 &&
             customer_len == 4 && memcmp(customer, "c-42", 4) == 0;
    }
    rill_consumer_free(dead);
    rill_subscription_free(sub);
    rill_broker_free(broker);
    if (!ok) fprintf(stderr, "expected 3 payments settled and 12,50 dead-lettered after 3 attempts\n");
    return ok ? 0 : 1;
}
