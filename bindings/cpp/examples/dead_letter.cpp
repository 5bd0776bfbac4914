// Dead letters: a message that keeps failing is retried a few times with a
// backoff, then set aside on a dead-letter topic with the reason, and the
// subscription moves on to the messages after it.
//
//   c++ -std=c++17 dead_letter.cpp $(pkg-config --cflags --libs rill) -o dead_letter && ./dead_letter
//
// A payment service cannot process a payment with a malformed amount.
// Retrying will not help, but it cannot tell that from a passing fault, so
// it retries; after the last attempt the message goes to `payments/dead`,
// an alert callback fires, and an operator's tool reads the dead letters
// with their reasons. The program exits non-zero if the good payments were
// not all settled or the bad one was not set aside.
#include <rill.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>

using namespace std::chrono_literals;

int main() {
    rill::Broker broker;
    broker.create_topic("payments");

    std::atomic<int> settled{0}, alerts{0};
    rill::SubscriptionOptions o;
    o.name = "settlement";
    o.start = RILL_START_EARLIEST;
    // Three deliveries in all, 1 ms then 2 ms apart; then the message is
    // dead-lettered.
    o.max_attempts = 3;
    o.backoff_initial = 1ms;
    o.backoff_max = 50ms;
    o.dead_letter_topic = "payments/dead";  // default: $dlq/<name>
    // The alert: called once per dead letter, on the delivering thread.
    o.on_dead_letter = [&](const rill::Message &m, std::string_view reason) {
        alerts++;
        std::fprintf(stderr, "ALERT: payment at offset %llu set aside: %.*s\n",
                     static_cast<unsigned long long>(m.offset()), static_cast<int>(reason.size()), reason.data());
    };
    auto sub = broker.subscribe(
        "payments",
        [&](const rill::Message &m) {
            std::string amount(m.payload());
            if (amount.empty() || amount.find_first_not_of("0123456789") != std::string::npos) {
                // Say why: the reason travels with the dead letter. (An
                // exception thrown here is a Retry too, its text the reason.)
                m.set_reason("attempt " + std::to_string(m.attempt()) + ": amount is not a number");
                return rill::Ack::Retry;  // or Ack::DeadLetter to give up at once
            }
            settled++;
            return rill::Ack::Success;
        },
        o);

    for (const char *amount : {"120", "75", "12,50", "300"})
        broker.publish("payments", rill::Record{amount, std::nullopt, {{"customer", "c-42"}}});
    if (!sub.wait_idle(10s)) {
        std::fprintf(stderr, "the subscription did not catch up\n");
        return 1;
    }
    auto stats = sub.stats();
    std::printf("settled %d, retried %llu, dead-lettered %llu\n", settled.load(),
                static_cast<unsigned long long>(stats.retried), static_cast<unsigned long long>(stats.dead_lettered));

    // The operator's side: dead letters are ordinary messages, with the
    // original payload and attributes plus rill.dlq.* attributes that say
    // where they came from and why.
    rill::Consumer dead = broker.consumer("operator", "payments/dead");
    auto letters = dead.poll(10, 1s);
    bool ok = settled == 3 && alerts == 1 && stats.dead_lettered == 1 && letters.size() == 1;
    for (const rill::Message &l : letters) {
        auto attr = [&](const char *k) { return std::string(l.attribute(k).value_or("?")); };
        std::printf("dead letter \"%s\" of %s from %s offset %s after %s attempts: %s\n", std::string(l.payload()).c_str(),
                    attr("customer").c_str(), attr("rill.dlq.topic").c_str(), attr("rill.dlq.offset").c_str(),
                    attr("rill.dlq.attempts").c_str(), attr("rill.dlq.reason").c_str());
        ok = ok && l.payload() == "12,50" && attr("customer") == "c-42" &&
             attr("rill.dlq.reason") == "attempt 3: amount is not a number";
    }
    if (!ok) std::fprintf(stderr, "expected 3 payments settled and 12,50 dead-lettered after 3 attempts\n");
    return ok ? 0 : 1;
}
