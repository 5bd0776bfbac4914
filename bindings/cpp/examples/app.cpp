// A small C++ program using rill through rill.hpp: a broker with options, a
// topic with two partitions, a subscription with a filter, a batch
// subscription, and a pull consumer. Built and run by ffi/tests/run.sh
// against the installed library, with pkg-config:
//
//   c++ -std=c++17 app.cpp $(pkg-config --cflags --libs rill)
#include <rill.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>

using namespace std::chrono_literals;

int main() {
    rill::BrokerOptions options;
    options.worker_threads = 2;
    rill::Broker broker(options);
    broker.create_topic("orders", rill::TopicOptions{2});

    // Only orders from the EU, one at a time.
    std::atomic<int> eu{0};
    rill::SubscriptionOptions only_eu;
    only_eu.filter = "attributes.region = \"eu\"";
    auto audit = broker.subscribe(
        "orders",
        [&](const rill::Message &m) {
            std::printf("EU order %.*s (partition %u)\n", static_cast<int>(m.payload().size()),
                        m.payload().data(), m.partition());
            eu++;
            return rill::Ack::Success;
        },
        only_eu);

    // Every order, in runs: one handler call for many messages.
    std::atomic<size_t> counted{0};
    auto totals = broker.subscribe_batch("orders", [&](rill::Batch &batch) { counted += batch.size(); });

    for (int i = 0; i < 10; i++) {
        const char *region = i % 3 == 0 ? "eu" : "us";
        std::string id = "order-" + std::to_string(i);
        broker.publish("orders", rill::Record{id, std::string_view(id), {{"region", region}}});
    }
    if (!audit.wait_idle(10s) || !totals.wait_idle(10s)) {
        std::fprintf(stderr, "subscriptions did not catch up\n");
        return 1;
    }

    // A consumer group reads the same log at its own pace.
    auto reader = broker.consumer("billing", "orders");
    size_t pulled = 0;
    for (auto batch = reader.poll(100, 1s); !batch.empty(); batch = reader.poll(100, 0ms)) pulled += batch.size();
    reader.commit();

    std::printf("%d EU orders, %zu in batches, %zu pulled\n", eu.load(), counted.load(), pulled);
    return eu == 4 && counted == 10 && pulled == 10 ? 0 : 1;
}
