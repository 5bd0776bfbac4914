// The NATS JetStream bridge: two brokers, standing for two services on
// different machines, exchange orders through a JetStream stream.
//
//   bash ffi/install.sh --with-nats --prefix "$HOME/.local"
//   c++ -std=c++17 nats_bridge.cpp $(pkg-config --cflags --libs rill) -o nats_bridge
//   nats-server -js &
//   nats stream add ORDERS --subjects 'shop.>' --defaults
//   ./nats_bridge
//
// It needs a librill built with the bridge, and a nats-server with
// JetStream at $RILL_NATS_URL (default nats://127.0.0.1:4222) with a stream
// ORDERS that captures `shop.>`. (The tests run it beside a server of their
// own: ffi/tests/run_nats.sh.) rill.hpp has no class for the bridge: the C
// calls of rill_nats.h take the broker's raw() handle, and a unique_ptr
// frees the bridge.
//
// The shop's broker exports its topics `orders/*`; each message is stored
// on subject `shop.orders.<region>` and acknowledged to rill only once
// JetStream has it. The warehouse's broker imports the stream into the same
// topic names, with key and attributes as they were. The program exits
// non-zero if the warehouse did not get every order.
#include <rill.hpp>
#include <rill_nats.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

using namespace std::chrono_literals;

struct FreeBridge {
    void operator()(rill_nats_bridge *b) const noexcept { rill_nats_bridge_free(b); }
};
using Bridge = std::unique_ptr<rill_nats_bridge, FreeBridge>;

// A failed C call as a rill::Error, the way rill.hpp reports its own.
void check(rill_status st) {
    if (st == RILL_OK) return;
    char err[512];
    rill_last_error(err, sizeof err);
    throw rill::Error(st, std::string(rill_status_name(st)) + ": " + err);
}

Bridge start_bridge(rill::Broker &broker, const rill_nats_options &o) {
    rill_nats_bridge *b = nullptr;
    check(rill_nats_bridge_new(broker.raw(), &o, &b));
    return Bridge(b);
}

int main() {
    const char *env = std::getenv("RILL_NATS_URL");
    std::string url = env ? env : "nats://127.0.0.1:4222";

    // The shop: its orders go out through the stream.
    rill::Broker shop;
    shop.create_topic("orders/eu");
    shop.create_topic("orders/us");
    rill_nats_options out;
    rill_nats_options_init(&out);
    out.url = url.c_str();
    // Export is a durable subscription on the pattern: a bridge started
    // again on this broker resumes where the last one got to, and while the
    // server is away the orders wait in rill's log.
    out.export_pattern = "orders/*";
    out.export_stream = "ORDERS";
    out.export_subject_prefix = "shop";
    Bridge exporter = start_bridge(shop, out);

    // The warehouse: the stream's messages come in as rill messages.
    rill::Broker warehouse;
    warehouse.create_topic("orders/eu");
    warehouse.create_topic("orders/us");
    std::mutex lock;
    std::condition_variable arrived;
    std::vector<std::string> got;
    auto sub = warehouse.subscribe("orders/*", [&](const rill::Message &m) {
        std::string line = std::string(m.topic()) + " " + std::string(m.payload()) + " region=" +
                           std::string(m.attribute("region").value_or("?"));
        // The import adds the stream sequence as nats.seq.
        std::printf("warehouse got %s (stream sequence %s)\n", line.c_str(),
                    std::string(m.attribute("nats.seq").value_or("?")).c_str());
        std::lock_guard<std::mutex> g(lock);
        got.push_back(line);
        arrived.notify_all();
        return rill::Ack::Success;
    });
    rill_nats_options in;
    rill_nats_options_init(&in);
    in.url = url.c_str();
    // A durable JetStream consumer (default "rill-import"): the server
    // remembers what the warehouse acknowledged.
    in.import_stream = "ORDERS";
    in.import_subject_prefix = "shop";
    Bridge importer = start_bridge(warehouse, in);

    const std::pair<const char *, const char *> orders[] = {{"eu", "order-1"}, {"us", "order-2"}, {"eu", "order-3"}};
    for (const auto &[region, id] : orders)
        shop.publish(std::string("orders/") + region, rill::Record{id, id, {{"region", region}}});

    // The network takes a moment: wait for the orders, with a deadline.
    std::unique_lock<std::mutex> g(lock);
    arrived.wait_for(g, 30s, [&] { return got.size() >= 3; });
    std::vector<std::string> lines = got;
    g.unlock();
    rill_nats_stats sent, received;
    check(rill_nats_bridge_get_stats(exporter.get(), &sent));
    check(rill_nats_bridge_get_stats(importer.get(), &received));
    std::printf("shop exported %llu, warehouse imported %llu\n", static_cast<unsigned long long>(sent.exported),
                static_cast<unsigned long long>(received.imported));
    importer.reset();  // stop the bridges before their brokers go
    exporter.reset();

    std::sort(lines.begin(), lines.end());
    bool ok = lines == std::vector<std::string>{"orders/eu order-1 region=eu", "orders/eu order-3 region=eu",
                                                "orders/us order-2 region=us"};
    if (!ok) std::fprintf(stderr, "the warehouse did not get every order\n");
    return ok ? 0 : 1;
}
