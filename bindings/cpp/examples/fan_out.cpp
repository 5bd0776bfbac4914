// Fan-out with filters: every subscription sees every message of its
// topics, and an attribute filter narrows that down without a line of code
// in the handler.
//
//   c++ -std=c++17 fan_out.cpp $(pkg-config --cflags --libs rill) -o fan_out && ./fan_out
//
// Three services read one stream of orders: shipping for Europe only, an
// alerting service for urgent orders in any region, and an audit log of
// everything. Each has its own position, so a slow one holds up no other.
// The program exits non-zero if a service saw the wrong orders.
#include <rill.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

using namespace std::chrono_literals;

// What one service saw. Handlers run on the broker's threads (one call at a
// time per subscription; the three services' calls run side by side).
struct Seen {
    std::mutex lock;
    std::vector<std::string> ids;
    std::vector<std::string> sorted() {
        std::lock_guard<std::mutex> g(lock);
        auto v = ids;
        std::sort(v.begin(), v.end());  // partitions are delivered in parallel
        return v;
    }
};

rill::Subscription subscribe(rill::Broker &broker, const std::string &pattern, std::optional<std::string> filter,
                             Seen &seen) {
    rill::SubscriptionOptions o;
    // Pub/Sub's filter syntax: =, !=, attributes:key (present),
    // hasPrefix(...), NOT, AND, OR and parentheses. nullopt: everything.
    o.filter = std::move(filter);
    return broker.subscribe(
        pattern,
        [&seen](const rill::Message &m) {
            std::lock_guard<std::mutex> g(seen.lock);
            seen.ids.emplace_back(m.payload());
            return rill::Ack::Success;
        },
        o);
}

int main() {
    rill::Broker broker;
    broker.create_topic("shop/orders", rill::TopicOptions{2});
    broker.create_topic("shop/returns");

    Seen eu, urgent, audit;
    auto shipping = subscribe(broker, "shop/orders", "hasPrefix(attributes.region, \"eu-\")", eu);
    auto alerts = subscribe(broker, "shop/*", "attributes.priority = \"high\"", urgent);
    // `**` matches any number of segments: every topic under shop/.
    auto log = subscribe(broker, "shop/**", std::nullopt, audit);

    struct Order {
        const char *topic, *id, *region, *priority;
    };
    const Order orders[] = {
        {"shop/orders", "order-1", "eu-west", "normal"},  {"shop/orders", "order-2", "us-east", "high"},
        {"shop/orders", "order-3", "eu-north", "high"},   {"shop/returns", "return-4", "eu-west", "high"},
        {"shop/orders", "order-5", "ap-south", "normal"},
    };
    for (const Order &o : orders)
        broker.publish(o.topic, rill::Record{o.id, o.id, {{"region", o.region}, {"priority", o.priority}}});

    // Wait until each caught up.
    for (const rill::Subscription *s : {&shipping, &alerts, &log})
        if (!s->wait_idle(10s)) {
            std::fprintf(stderr, "a subscription did not catch up\n");
            return 1;
        }

    auto show = [](const char *who, const std::vector<std::string> &ids) {
        std::printf("%-16s", who);
        for (const auto &id : ids) std::printf(" %s", id.c_str());
        std::printf("\n");
        return ids;
    };
    bool ok = show("shipping (eu-*)", eu.sorted()) == std::vector<std::string>{"order-1", "order-3"};
    ok = show("alerts (high)", urgent.sorted()) == std::vector<std::string>{"order-2", "order-3", "return-4"} && ok;
    ok = show("audit (all)", audit.sorted()) ==
             std::vector<std::string>{"order-1", "order-2", "order-3", "order-5", "return-4"} &&
         ok;
    std::printf("shipping's filter skipped %llu orders\n", static_cast<unsigned long long>(shipping.stats().filtered));
    if (!ok) std::fprintf(stderr, "a service saw the wrong orders\n");
    return ok ? 0 : 1;
}
