// The C++ wrapper as a C++ program uses it. Built with -std=c++17 -Wall
// -Wextra -Wpedantic -Werror and run plain, under ASan+UBSan and valgrind by
// ffi/tests/run.sh.
#include <rill.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static int failures = 0;
static int checks = 0;

#define CHECK(cond)                                                                    \
    do {                                                                               \
        checks++;                                                                      \
        if (!(cond)) {                                                                 \
            std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                                \
        }                                                                              \
    } while (0)

template <typename F>
static rill_status status_of(F f) {
    try {
        f();
    } catch (const rill::Error &e) {
        return e.status();
    }
    return RILL_OK;
}

using namespace std::chrono_literals;

static void publish_subscribe_and_attributes() {
    rill::Broker broker;
    broker.create_topic("sports/cricket", {2});
    std::mutex lock;
    std::vector<std::string> seen;
    std::vector<std::string> regions;
    rill::SubscriptionOptions o;
    o.start = RILL_START_EARLIEST;
    auto sub = broker.subscribe(
        "sports/*",
        [&](const rill::Message &m) {
            std::lock_guard<std::mutex> g(lock);
            seen.emplace_back(m.payload());
            regions.emplace_back(m.attribute("region").value_or("none"));
            return rill::Ack::Success;
        },
        o);
    auto pos = broker.publish("sports/cricket", rill::Record{"six", std::string_view("k"), {{"region", "IN"}}});
    CHECK(pos.offset == 0);
    broker.publish("sports/cricket", "four");
    auto batch = broker.publish_batch("sports/cricket", {rill::Record{"a"}, rill::Record{"b"}});
    CHECK(batch.size() == 2);
    CHECK(sub.wait_idle(10s));
    std::lock_guard<std::mutex> g(lock);
    CHECK(seen.size() == 4);
    CHECK(seen[0] == "six" || seen[0] == "four" || seen[0] == "a" || seen[0] == "b");
    CHECK(sub.stats().delivered == 4);
    CHECK(sub.name().rfind("anon-", 0) == 0);
    CHECK(broker.topic_stats("sports/cricket").publish_count == 4);
}

static void errors_carry_status_and_text() {
    rill::Broker broker;
    try {
        broker.publish("missing", "x");
        CHECK(false);
    } catch (const rill::Error &e) {
        CHECK(e.status() == RILL_ERR_NO_SUCH_TOPIC);
        CHECK(std::string(e.what()).find("missing") != std::string::npos);
        CHECK(std::string(e.status_name()) == "RILL_ERR_NO_SUCH_TOPIC");
    }
    CHECK(status_of([&] { broker.create_topic("a//b"); }) == RILL_ERR_INVALID_TOPIC);
    CHECK(status_of([&] { broker.subscribe("a*", [](const rill::Message &) { return rill::Ack::Success; }); }) ==
          RILL_ERR_INVALID_PATTERN);
    broker.create_topic("t");
    rill::SubscriptionOptions bad;
    bad.filter = "attributes.x = ";
    CHECK(status_of([&] { broker.subscribe("t", [](const rill::Message &) { return rill::Ack::Success; }, bad); }) ==
          RILL_ERR_INVALID_FILTER);
    broker.close();
    CHECK(status_of([&] { broker.publish("t", "x"); }) == RILL_ERR_CLOSED);
}

static void a_throwing_handler_is_retried_then_dead_lettered_with_the_text() {
    rill::Broker broker;
    broker.create_topic("jobs");
    std::atomic<int> calls{0};
    rill::SubscriptionOptions o;
    o.name = "cpp-worker";
    o.max_attempts = 2;
    o.backoff_initial = 1ms;
    o.backoff_max = 2ms;
    auto sub = broker.subscribe(
        "jobs",
        [&](const rill::Message &m) -> rill::Ack {
            calls++;
            if (m.payload() == "bad") throw std::runtime_error("bad input from C++");
            if (m.payload() == "int") throw 42;
            return rill::Ack::Success;
        },
        o);
    broker.publish("jobs", "bad");
    broker.publish("jobs", "int");
    broker.publish("jobs", "good");
    CHECK(sub.wait_idle(10s));
    CHECK(calls == 5);
    auto dlq = broker.consumer("reader", "$dlq/cpp-worker");
    auto msgs = dlq.poll(10, 1000ms);
    CHECK(msgs.size() == 2);
    if (msgs.size() == 2) {
        CHECK(msgs[0].attribute("rill.dlq.reason").value_or("") == "bad input from C++");
        CHECK(msgs[1].attribute("rill.dlq.reason").value_or("").find("non-standard") != std::string_view::npos);
        CHECK(msgs[0].attributes().size() >= 6);
    }
}

static void pull_consumer_and_move_semantics() {
    rill::Broker broker;
    broker.create_topic("orders");
    for (int i = 0; i < 5; i++) broker.publish("orders", std::to_string(i));
    rill::Consumer c = broker.consumer("billing", "orders");
    auto first = c.poll(2, 0ms);
    CHECK(first.size() == 2 && first[1].payload() == "1");
    c.commit();
    CHECK(c.committed() == 2u);
    CHECK(c.poll(10, 0ms).size() == 3);
    c.rollback();
    CHECK(c.position() == 2);
    CHECK(status_of([&] { c.seek(0, 99); }) == RILL_ERR_OUT_OF_RANGE);
    rill::Consumer moved = std::move(c);
    CHECK(moved.poll(10, 0ms).size() == 3);
    rill::Broker other = std::move(broker);
    auto p = other.publisher("orders");
    CHECK(p.publish(rill::Record{"via publisher"}).offset == 5);
}

/// Issue 12: members of one group split the partitions; a close hands them
/// over; an expelled member's commit is RILL_ERR_REASSIGNED.
static void consumer_group_members() {
    rill::Broker broker;
    rill::TopicOptions four;
    four.partitions = 4;
    broker.create_topic("jobs", four);
    for (int i = 0; i < 8; i++) broker.publish("jobs", std::to_string(i));
    rill::Consumer one = broker.consumer("workers", "jobs");
    auto stalled = broker.consumer("workers", "jobs", RILL_START_EARLIEST, 0, 50ms);
    auto a1 = one.assignment(), a2 = stalled.assignment();
    CHECK(a1.size() == 2 && a2.size() == 2);
    std::vector<int> owners(4, 0);
    for (auto p : a1) owners[p]++;
    for (auto p : a2) owners[p]++;
    CHECK(owners == std::vector<int>(4, 1));
    size_t by_stalled = stalled.poll(100, 0ms).size();
    CHECK(by_stalled == 4); /* two per partition, round-robin */
    size_t by_one = one.poll(100, 0ms).size();
    CHECK(by_one == 4);
    one.commit();
    // `stalled` stops polling; `one` polls until it has expelled it (bounded).
    for (int i = 0; i < 6000 && one.assignment().size() < 4; i++) by_one += one.poll(100, 5ms).size();
    CHECK(one.assignment() == (std::vector<uint32_t>{0, 1, 2, 3}));
    by_one += one.poll(100, 0ms).size();
    CHECK(by_one == 8); /* the stalled member's four again */
    one.commit();
    CHECK(status_of([&] { stalled.commit(); }) == RILL_ERR_REASSIGNED);
    CHECK(stalled.assignment().size() == 2); /* it rejoined */
    // A poison message: nacked up to max_attempts (5 by default), then
    // dead-lettered to $dlq/workers and skipped.
    auto poison = broker.publish("jobs", "poison");
    auto *owner = poison.partition == stalled.assignment()[0] || poison.partition == stalled.assignment()[1] ? &stalled : &one;
    for (int attempt = 1; attempt <= 5; attempt++) {
        auto got = owner->poll(10, 0ms);
        CHECK(got.size() == 1 && got[0].payload() == "poison");
        CHECK(owner->nack(poison.partition, poison.offset) == (attempt == 5));
    }
    CHECK(owner->poll(10, 0ms).empty());
    auto dlq = broker.consumer("reader", "$dlq/workers");
    auto dead = dlq.poll(10, 0ms);
    CHECK(dead.size() == 1 && dead[0].attribute("rill.dlq.attempts").value_or("") == "5");
    CHECK(status_of([&] { owner->nack(poison.partition, 99); }) == RILL_ERR_OUT_OF_RANGE);
    // A member's own max_attempts and dead-letter topic.
    rill::ConsumerOptions strict;
    strict.max_attempts = 1;
    strict.dead_letter_topic = "rejects";
    auto picky = broker.consumer("picky", "jobs", strict);
    auto first = picky.poll(100, 0ms);
    CHECK(!first.empty());
    if (!first.empty()) CHECK(picky.nack(first[0].partition(), first[0].offset()));
    auto rejects = broker.consumer("reader", "rejects");
    auto rejected = rejects.poll(10, 0ms);
    CHECK(rejected.size() == 1 && rejected[0].attribute("rill.dlq.group").value_or("") == "picky");
    strict.max_attempts = 0;
    CHECK(status_of([&] { broker.consumer("picky2", "jobs", strict); }) == RILL_ERR_INVALID_ARGUMENT);
}

static void shared_subscription_members() {
    rill::Broker broker;
    rill::TopicOptions four;
    four.partitions = 4;
    broker.create_topic("jobs", four);
    std::mutex lock;
    std::vector<std::vector<int>> calls(4, std::vector<int>(20, 0));
    auto record = [&](const rill::Message &m) {
        std::lock_guard<std::mutex> g(lock);
        if (m.partition() < 4 && m.offset() < 20) calls[m.partition()][m.offset()]++;
        return rill::Ack::Success;
    };
    rill::SubscriptionOptions o;
    o.name = "workers";
    o.shared = true;
    o.start = RILL_START_EARLIEST;
    auto one = broker.subscribe("jobs", record, o);
    auto two = broker.subscribe("jobs", record, o);
    // The first member hands two partitions over before it is idle again.
    CHECK(one.wait_idle(10s));
    CHECK(one.stats().partitions == 2 && two.stats().partitions == 2);
    rill::SubscriptionOptions plain;
    plain.name = "workers";
    CHECK(status_of([&] { broker.subscribe("jobs", record, plain); }) == RILL_ERR_BUSY);
    for (int i = 0; i < 40; i++) broker.publish("jobs", std::to_string(i));
    CHECK(one.wait_idle(10s) && two.wait_idle(10s));
    CHECK(one.stats().acked == 20 && two.stats().acked == 20);
    one = rill::Subscription(nullptr);  // closes: the other takes over
    for (int i = 0; i < 40; i++) broker.publish("jobs", std::to_string(i));
    CHECK(two.wait_idle(10s));
    CHECK(two.stats().partitions == 4 && two.stats().acked == 60);
    std::lock_guard<std::mutex> g(lock);
    bool once = true;
    for (auto &p : calls)
        for (int n : p) once = once && n == 1;
    CHECK(once);
}

// Waits (up to 10 s, checking every millisecond) until `done()` holds.
template <class F> static bool eventually(F done) {
    auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!done()) {
        if (std::chrono::steady_clock::now() > deadline) return false;
        std::this_thread::sleep_for(1ms);
    }
    return true;
}

static void a_stalled_shared_member_hands_over_after_ack_timeout() {
    rill::Broker broker;
    broker.create_topic("jobs");
    std::promise<void> release;
    std::shared_future<void> gate = release.get_future().share();
    std::atomic<int> stuck_calls{0}, other_calls{0};
    rill::SubscriptionOptions o;
    o.name = "workers";
    o.shared = true;
    o.ack_timeout = 100ms;
    // The first member owns the one partition and gets stuck on its message.
    auto stalling = broker.subscribe("jobs", [&](const rill::Message &) {
        stuck_calls++;
        gate.wait();
        return rill::Ack::Success;
    }, o);
    // Its own deadline is long: a slow run (valgrind) must not stall it.
    rill::SubscriptionOptions patient = o;
    patient.ack_timeout = 60s;
    auto other = broker.subscribe("jobs", [&](const rill::Message &m) {
        if (m.offset() == 0) other_calls++;
        return rill::Ack::Success;
    }, patient);
    CHECK(other.stats().partitions == 0);
    broker.publish("jobs", "job");
    // Past the deadline the other member gets the partition from offset 0.
    CHECK(eventually([&] { return other_calls.load() == 1; }));
    CHECK(stalling.stats().ack_timeouts == 1 && stalling.stats().partitions == 0);
    CHECK(other.stats().partitions == 1 && other.stats().ack_timeouts == 0);
    release.set_value();
    // The late ack is discarded: nothing acked, nothing delivered again.
    CHECK(stalling.wait_idle(10s) && other.wait_idle(10s));
    CHECK(stalling.stats().acked == 0 && other.stats().acked == 1);
    CHECK(stuck_calls == 1 && other_calls == 1);
    rill::SubscriptionOptions bad = o;
    bad.ack_timeout = -1ms;
    CHECK(status_of([&] { broker.subscribe("jobs", [](const rill::Message &) { return rill::Ack::Success; }, bad); }) ==
          RILL_ERR_INVALID_ARGUMENT);
    // Negative durations are refused, not cast to huge unsigned ones (an
    // idle_spin of -1us made a dedicated thread that never parked).
    for (int field = 0; field < 3; field++) {
        rill::SubscriptionOptions negative;
        negative.dedicated_thread = true;
        if (field == 0) negative.backoff_initial = -5ms;
        if (field == 1) negative.backoff_max = -1ms;
        if (field == 2) negative.idle_spin = -1us;
        std::string what;
        try {
            broker.subscribe("jobs", [](const rill::Message &) { return rill::Ack::Success; }, negative);
        } catch (const rill::Error &e) {
            CHECK(e.status() == RILL_ERR_INVALID_ARGUMENT);
            what = e.what();
        }
        CHECK(what.find("must not be negative") != std::string::npos);
    }
}

static rill::Ack spin_work(const rill::Message &) {
    volatile unsigned long x = 0;
    for (unsigned long i = 0; i < 20000; i++) x = x * 31 + i;
    return rill::Ack::Success;
}

static void priorities_reorder_the_pool_and_starve_nobody() {
    rill::Broker broker;
    rill::TopicOptions urgent;
    urgent.priority = 6;
    broker.create_topic("urgent", urgent);
    broker.create_topic("plain");
    auto none = [](const rill::Message &) { return rill::Ack::Success; };
    rill::SubscriptionOptions o;
    CHECK(broker.subscribe("urgent", none, o).stats().priority == 6);
    CHECK(broker.subscribe("plain", none, o).stats().priority == RILL_PRIORITY_DEFAULT);
    o.priority = 1;
    CHECK(broker.subscribe("urgent", none, o).stats().priority == 1);
    for (int bad : {-1, 8, 1000}) {
        o.priority = bad;
        CHECK(status_of([&] { broker.subscribe("plain", none, o); }) == RILL_ERR_INVALID_ARGUMENT);
        rill::TopicOptions t;
        t.priority = bad;
        CHECK(status_of([&] { broker.create_topic("bad", t); }) == RILL_ERR_INVALID_ARGUMENT);
    }

    // Overload: two workers, two priority-7 and four priority-0
    // subscriptions, all with more work than the run lasts. Each low one
    // gets turns within the aging bound, and the high one's median wait is
    // far below every low median (waits of one run compared).
    rill::BrokerOptions bo;
    bo.worker_threads = 2;
    rill::Broker busy(bo);
    std::vector<rill::Subscription> subs;
    std::vector<rill::Record> work(5000, rill::Record{"w"});
    for (int i = 0; i < 6; i++) {
        std::string topic = "busy/" + std::to_string(i);
        busy.create_topic(topic);
        for (int n = 0; n < (i < 2 ? 4 : 1); n++) busy.publish_batch(topic, work);
        rill::SubscriptionOptions so;
        so.start = RILL_START_EARLIEST;
        so.priority = i < 2 ? RILL_PRIORITY_MAX : RILL_PRIORITY_MIN;
        subs.push_back(busy.subscribe(topic, spin_work, so));
    }
    uint64_t waits[6] = {0}, max_takes[6] = {0}, fastest_low = UINT64_MAX;
    // Polled up to a deadline long enough for valgrind.
    auto deadline = std::chrono::steady_clock::now() + 120s;
    auto low_turns = [&] {
        bool done = true;
        for (int i = 2; i < 6; i++) {
            rill_subscription_stats st = subs[i].stats();
            waits[i] += st.queue_waits;
            max_takes[i] = std::max(max_takes[i], st.queue_wait_max_takes);
            if (st.queue_waits > 0) fastest_low = std::min(fastest_low, st.queue_wait_p50_ns);
            done = done && waits[i] >= 3;
        }
        return done;
    };
    bool done = false;
    while (!(done = low_turns()) && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(1ms);
    CHECK(done);
    for (int i = 0; i < 2; i++) {
        rill_subscription_stats st = subs[i].stats();
        CHECK(st.priority == RILL_PRIORITY_MAX && st.queue_waits > 0 && st.lag > 0);
        CHECK(st.queue_wait_p50_ns * 8 < fastest_low);
    }
    for (int i = 2; i < 6; i++) CHECK(max_takes[i] <= RILL_PRIORITY_AGING_TAKES + 5);
}

static void destroying_the_broker_first_is_safe() {
    std::atomic<int> calls{0};
    rill::Subscription sub(nullptr);
    {
        rill::Broker broker;
        broker.create_topic("t");
        sub = broker.subscribe("t", [&](const rill::Message &) {
            calls++;
            return rill::Ack::Success;
        });
        broker.publish("t", "x");
        CHECK(sub.wait_idle(10s));
    }
    CHECK(status_of([&] { sub.wait_idle(10ms); }) == RILL_ERR_CLOSED);
    CHECK(sub.stats().state == RILL_SUBSCRIPTION_CLOSED);
    CHECK(sub.closed_reason().find("broker was closed") != std::string::npos);
    CHECK(calls == 1);
}

static void on_lagged_hears_what_retention_trimmed() {
    rill::Broker broker;
    rill::TopicOptions t;
    t.retention_bytes = 16u << 10;
    broker.create_topic("firehose", t);
    std::atomic<bool> entered{false}, open{false};
    std::mutex lock;
    uint64_t heard = 0;
    int wrong = 0;
    rill::SubscriptionOptions o;
    o.on_lagged = [&](std::string_view topic, uint32_t partition, uint64_t missed) {
        std::lock_guard<std::mutex> g(lock);
        heard += missed;
        if (topic != "firehose" || partition != 0) wrong++;
        if (heard > 1000000) throw std::runtime_error("a throwing on_lagged is swallowed");
    };
    auto sub = broker.subscribe(
        "firehose",
        [&](const rill::Message &) {
            entered = true;
            while (!open) std::this_thread::sleep_for(1ms);
            return rill::Ack::Success;
        },
        o);
    broker.publish("firehose", "first");
    while (!entered) std::this_thread::sleep_for(1ms);
    std::vector<rill::Record> many(1000, rill::Record{"sixteen bytes..."});
    for (int i = 0; i < 5; i++) broker.publish_batch("firehose", many);
    open = true;
    CHECK(sub.wait_idle(20s));
    auto st = sub.stats();
    std::lock_guard<std::mutex> g(lock);
    CHECK(st.missed > 0);
    CHECK(heard == st.missed);
    CHECK(wrong == 0);
    CHECK(st.delivered + st.missed == 5001);
}

static void broker_options_are_a_cpp_struct() {
    rill::BrokerOptions o;
    CHECK(o.worker_threads == 0 && !o.auto_create_topics && o.publish_timeout == 10000ms);
    o.worker_threads = 2;
    o.auto_create_topics = true;
    o.publish_timeout = std::nullopt;
    rill::Broker broker(o);
    // auto_create_topics reached the library: an unknown topic is created.
    broker.publish("made/on/publish", "x");
    CHECK(broker.topic_stats("made/on/publish").publish_count == 1);

    rill::Broker strict(rill::BrokerOptions{});
    CHECK(status_of([&] { strict.publish("nowhere", "x"); }) == RILL_ERR_NO_SUCH_TOPIC);
}

static void a_broker_on_a_data_directory_keeps_its_topics() {
    namespace fs = std::filesystem;
    fs::path dir = fs::temp_directory_path() / ("rill-cpp-persist-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    rill::BrokerOptions o;
    CHECK(!o.data_dir && o.fsync == rill::Fsync::Interval && o.fsync_interval == 100ms && !o.repair);
    o.data_dir = dir.string();
    o.fsync = rill::Fsync::Always;
    {
        rill::Broker broker(o);
        broker.create_topic("kept");
        broker.publish("kept", "one");
        broker.publish("kept", "two");
        // One broker per directory.
        CHECK(status_of([&] { rill::Broker second(o); }) == RILL_ERR_BUSY);
        auto c = broker.consumer("g", "kept");
        CHECK(c.poll(1, 1s).size() == 1);
        c.commit();
        // A durable topic that stays small: 16 KiB segment files, where the
        // default's are 4 MiB and more.
        rill::TopicOptions small;
        small.segment_bytes = 100;
        CHECK(status_of([&] { broker.create_topic("small", small); }) == RILL_ERR_INVALID_ARGUMENT);
        small.segment_bytes = 16 << 10;
        broker.create_topic("small", small);
        broker.publish("small", "x");
        std::uintmax_t bytes = 0;
        for (const auto &f : fs::directory_iterator(dir / "topics" / "1" / "0")) {
            if (f.path().extension() == ".seg") bytes += f.file_size();
        }
        CHECK(bytes > 0 && bytes < (64u << 10));
    }
    {
        rill::Broker broker(o);
        CHECK(broker.topic_stats("kept").publish_count == 2);
        auto c = broker.consumer("g", "kept");
        CHECK(c.committed(0) == 1);
        auto ms = c.poll(10, 1s);
        CHECK(ms.size() == 1 && ms[0].payload() == "two");
    }
    o.fsync_interval = 0ms;
    o.fsync = rill::Fsync::Interval;
    CHECK(status_of([&] { rill::Broker bad(o); }) == RILL_ERR_INVALID_ARGUMENT);
    try {
        rill::Broker bad(o);
        CHECK(false);
    } catch (const rill::Error &e) {
        // Worded as every other refusal: the status's name, then the option.
        CHECK(std::string(e.what()).rfind("RILL_ERR_INVALID_ARGUMENT: fsync_interval", 0) == 0);
    }
    o.fsync_interval = 100ms;
    o.data_dir = (dir / "kept-file").string();
    { std::FILE *f = std::fopen(o.data_dir->c_str(), "w"); if (f) std::fclose(f); }
    CHECK(status_of([&] { rill::Broker bad(o); }) == RILL_ERR_IO);
    fs::remove_all(dir);
}

// Issue 39: brokers sharing a data directory (two in this process here; the
// C test test_robust_procs.c runs them in forked processes).
static void brokers_share_a_data_directory_with_sharing_processes() {
    namespace fs = std::filesystem;
    fs::path dir = fs::temp_directory_path() / ("rill-cpp-sharing-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    rill::BrokerOptions o;
    CHECK(o.sharing == rill::Sharing::Exclusive);
    o.sharing = rill::Sharing::Processes;
    CHECK(status_of([&] { rill::Broker no_dir(o); }) == RILL_ERR_INVALID_ARGUMENT);
    o.data_dir = dir.string();
    o.fsync = rill::Fsync::Never;
    {
        rill::BrokerOptions exclusive = o;
        exclusive.sharing = rill::Sharing::Exclusive;
        rill::Broker alone(exclusive);
        CHECK(status_of([&] { rill::Broker shared(o); }) == RILL_ERR_BUSY);
    }
    {
        // The brokers, subscriptions and their threads are gone at the end of
        // this block, before the directory is removed under them.
        rill::Broker a(o);
        a.create_topic("orders");
        rill::Broker b(o);
        {
            rill::BrokerOptions exclusive = o;
            exclusive.sharing = rill::Sharing::Exclusive;
            CHECK(status_of([&] { rill::Broker alone(exclusive); }) == RILL_ERR_BUSY);
        }
        std::mutex lock;
        std::vector<std::string> seen;
        rill::SubscriptionOptions so;
        so.start = RILL_START_EARLIEST;
        auto sub = b.subscribe("orders", [&](const rill::Message &m) {
            std::lock_guard<std::mutex> g(lock);
            seen.emplace_back(m.payload());
            return rill::Ack::Success;
        }, so);
        CHECK(sub.wait_idle(20000ms));
        a.publish("orders", "from a");  // b's subscriber is woken across brokers
        auto deadline = std::chrono::steady_clock::now() + 20s;
        for (;;) {
            {
                std::lock_guard<std::mutex> g(lock);
                if (!seen.empty() || std::chrono::steady_clock::now() > deadline) break;
            }
            std::this_thread::sleep_for(1ms);
        }
        {
            std::lock_guard<std::mutex> g(lock);
            CHECK(seen.size() == 1 && seen[0] == "from a");
        }
        rill::SubscriptionOptions named;
        named.name = "audit";
        // A named subscription's name is held by one broker (and process) at a time.
        auto held = b.subscribe("orders", [](const rill::Message &) { return rill::Ack::Success; }, named);
        CHECK(status_of([&] { a.subscribe("orders", [](const rill::Message &) { return rill::Ack::Success; }, named); }) ==
              RILL_ERR_BUSY);
        // Consumer groups span processes too (test_robust_procs_groups.c).
        CHECK(status_of([&] { b.consumer("billing", "orders"); }) == RILL_OK);
    }
    fs::remove_all(dir);
}

// Issue 39: who holds what, across processes. A forked child holds the
// durable name "audit" and is the one member of group "billing" on both
// partitions; the parent sees its pid, and after a kill -9 the name not
// held and no member. Run first in main, before any broker (and its
// threads) exists to be forked. Then the same calls in Exclusive mode.
static void who_holds_what_across_processes() {
    namespace fs = std::filesystem;
    fs::path dir = fs::temp_directory_path() / ("rill-cpp-holders-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    rill::BrokerOptions o;
    o.data_dir = dir.string();
    o.fsync = rill::Fsync::Never;
    o.sharing = rill::Sharing::Processes;
    auto ack = [](const rill::Message &) { return rill::Ack::Success; };
    rill::SubscriptionOptions audit;
    audit.name = "audit";
    { rill::Broker(o).create_topic("orders", {2}); }
    int answer[2];
    CHECK(::pipe(answer) == 0);
    std::fflush(nullptr);
    pid_t child = ::fork();
    CHECK(child >= 0);
    if (child == 0) {
        ::close(answer[0]);
        try {
            rill::Broker b(o);
            auto sub = b.subscribe("orders", ack, audit);
            auto c = b.consumer("billing", "orders");
            bool said = false;
            for (auto end = std::chrono::steady_clock::now() + 30s; std::chrono::steady_clock::now() < end;) {
                c.poll(16, 20ms);
                if (!said && c.assignment().size() == 2) said = ::write(answer[1], "h", 1) == 1;
            }
        } catch (...) {
        }
        ::_exit(1);  // only when never killed
    }
    ::close(answer[1]);
    char got = 0;
    CHECK(::read(answer[0], &got, 1) == 1 && got == 'h');
    ::close(answer[0]);
    {
        rill::Broker b(o);
        rill::SubscriptionOptions ledger;
        ledger.name = "ledger";
        auto mine = b.subscribe("orders", ack, ledger);
        auto me = static_cast<uint32_t>(::getpid());
        auto names = b.named_subscriptions();
        CHECK(names.size() == 2);
        CHECK(names.size() == 2 && names[0].name == "audit" && names[0].holder_pid == static_cast<uint32_t>(child));
        CHECK(names.size() == 2 && names[1].name == "ledger" && names[1].holder_pid == me);
        auto members = b.group_members("billing", "orders");
        CHECK(members.size() == 1);
        CHECK(members.size() == 1 && members[0].pid == static_cast<uint32_t>(child));
        CHECK(members.size() == 1 && (members[0].partitions == std::vector<uint32_t>{0, 1}));
        // Issue 39: every process's subscriptions, with their pids.
        auto subs = b.directory_subscriptions();
        CHECK(subs.size() == 2);
        CHECK(subs.size() == 2 && subs[0].info.name == (child < static_cast<pid_t>(me) ? "audit" : "ledger"));
        for (const auto &s : subs) {
            bool theirs = s.info.name == "audit";
            CHECK(s.pid == (theirs ? static_cast<uint32_t>(child) : me) && s.this_broker == !theirs);
            CHECK(s.durable && !s.shared && s.info.pattern == "orders" && s.info.counters.name == nullptr);
        }
        // And its pull consumers: the child's member, which polled nothing.
        auto consumers = b.directory_consumers();
        CHECK(consumers.size() == 1);
        CHECK(consumers.size() == 1 && consumers[0].pid == static_cast<uint32_t>(child) && !consumers[0].this_broker);
        CHECK(consumers.size() == 1 && consumers[0].group == "billing" && consumers[0].topic == "orders");
        CHECK(consumers.size() == 1 && members.size() == 1 && consumers[0].id == members[0].id);
        CHECK(consumers.size() == 1 && consumers[0].delivered == 0 && consumers[0].lag == 0);

        CHECK(::kill(child, SIGKILL) == 0);
        int status = 0;
        CHECK(::waitpid(child, &status, 0) == child && WIFSIGNALED(status));
        names = b.named_subscriptions();
        CHECK(names.size() == 2 && names[0].name == "audit" && !names[0].holder_pid);
        CHECK(names.size() == 2 && names[1].holder_pid == me);
        CHECK(b.group_members("billing", "orders").empty());
        CHECK(status_of([&] { b.group_members("billing", "no-such-topic"); }) == RILL_ERR_NO_SUCH_TOPIC);
        subs = b.directory_subscriptions();
        CHECK(subs.size() == 1 && subs[0].info.name == "ledger" && subs[0].this_broker);
        CHECK(b.directory_consumers().empty());
    }
    fs::remove_all(dir);

    rill::BrokerOptions exclusive;
    exclusive.data_dir = dir.string();
    {
        rill::Broker b(exclusive);
        b.create_topic("orders", {2});
        auto sub = b.subscribe("orders", ack, audit);
        auto anonymous = b.subscribe("orders", ack);
        auto c = b.consumer("billing", "orders");
        auto names = b.named_subscriptions();
        CHECK(names.size() == 1 && names[0].name == "audit" && names[0].holder_pid == static_cast<uint32_t>(::getpid()));
        auto members = b.group_members("billing", "orders");
        CHECK(members.size() == 1 && members[0].pid == static_cast<uint32_t>(::getpid()) &&
              (members[0].partitions == std::vector<uint32_t>{0, 1}));
        auto subs = b.directory_subscriptions();
        CHECK(subs.size() == 2 && subs[0].this_broker && subs[1].this_broker);
        auto consumers = b.directory_consumers();
        CHECK(consumers.size() == 1 && consumers[0].this_broker && consumers[0].group == "billing");
    }
    fs::remove_all(dir);
}

// Issue 41: a record's id and a topic's dedupe window.
static void publishing_without_duplicates() {
    rill::Broker broker;
    rill::TopicOptions o;
    CHECK(o.dedupe_window_ms == 120000);
    o.partitions = 4;
    broker.create_topic("orders", o);
    rill::Record r{"o-1"};
    r.id = "order-1";
    auto first = broker.publish("orders", r);
    CHECK(!first.duplicate);
    auto again = broker.publish("orders", r);
    CHECK(again.duplicate && again == first);
    CHECK(broker.try_publish("orders", r).duplicate);
    auto publisher = broker.publisher("orders");
    CHECK(publisher.publish(r).duplicate);
    // The id as the attribute is the same id.
    CHECK(broker.publish("orders", rill::Record{"x", std::nullopt, {{RILL_ATTR_ID, "order-1"}}}).duplicate);
    rill::Record other{"o-2"};
    other.id = "order-2";
    auto batch = broker.publish_batch("orders", {other, r, rill::Record{"no id"}, other});
    CHECK(!batch[0].duplicate && batch[1].duplicate && !batch[2].duplicate && batch[3].duplicate);
    CHECK(batch[1] == first && batch[3] == batch[0]);
    auto stats = broker.topic_stats("orders");
    CHECK(stats.publish_count == 3 && stats.dedupe_ids == 2 && stats.dedupe_duplicates == 6);
    // Too long: refused, nothing published.
    r.id = std::string(RILL_ID_MAX_LEN + 1, 'i');
    CHECK(status_of([&] { broker.publish("orders", r); }) == RILL_ERR_INVALID_ARGUMENT);
    CHECK(broker.topic_stats("orders").publish_count == 3);
    // A window of 0: no dedupe.
    o.dedupe_window_ms = 0;
    broker.create_topic("off", o);
    r.id = "a";
    CHECK(!broker.publish("off", r).duplicate && !broker.publish("off", r).duplicate);
    CHECK(broker.topic_stats("off").publish_count == 2);
}

static void batch_subscribe_acks_per_message() {
    rill::Broker broker;
    broker.create_topic("jobs");
    for (int i = 0; i < 20; i++) broker.publish("jobs", std::to_string(i));
    std::mutex lock;
    std::vector<std::string> seen;
    std::atomic<int> calls{0};
    rill::SubscriptionOptions o;
    o.start = RILL_START_EARLIEST;
    o.max_attempts = 1;  // a dead-letter on the first failure
    auto sub = broker.subscribe_batch(
        "jobs",
        [&](rill::Batch &batch) {
            calls++;
            std::lock_guard<std::mutex> g(lock);
            for (size_t i = 0; i < batch.size(); i++) {
                seen.emplace_back(batch[i].payload());
                if (batch[i].payload() == "7") batch.ack(i, rill::Ack::DeadLetter);
            }
        },
        o);
    CHECK(sub.wait_idle(10s));
    auto st = sub.stats();
    std::lock_guard<std::mutex> g(lock);
    CHECK(seen.size() == 20);
    CHECK(!seen.empty() && seen.front() == "0" && seen.back() == "19");
    CHECK(calls > 0 && calls < 20);  // runs, not one call per message
    CHECK(st.acked == 19 && st.dead_lettered == 1);

    // A handler that throws retries the first message of its batch, with the reason.
    std::atomic<int> tries{0};
    rill::SubscriptionOptions once;
    once.start = RILL_START_EARLIEST;
    once.max_attempts = 2;
    once.backoff_initial = 1ms;
    once.dead_letter_topic = "jobs-dlq";
    auto failing = broker.subscribe_batch(
        "jobs",
        [&](rill::Batch &) {
            tries++;
            throw std::runtime_error("batch went wrong");
        },
        once);
    CHECK(failing.wait_idle(10s));
    CHECK(tries == 40);  // each message: one try, one retry, then dead-lettered
    auto dlq = broker.consumer("g", "jobs-dlq");
    auto msgs = dlq.poll(100, 5s);
    CHECK(!msgs.empty() && msgs[0].attribute("rill.dlq.reason").value_or("") == "batch went wrong");
    // A poll stops at the end of a log segment (a new topic's first one is
    // small): the rest of the 20 in the next polls.
    size_t dead = msgs.size();
    while (!msgs.empty() && dead < 20) {
        msgs = dlq.poll(100, 0ms);
        dead += msgs.size();
    }
    CHECK(dead == 20);
}

// Issue 14 #13: a std::string with a NUL inside used to be cut short at it
// ("ab\0cd" created topic "ab"). Every string argument refuses it instead.
static void strings_with_embedded_nuls_are_refused() {
    using namespace std::string_literals;
    rill::Broker broker;
    broker.create_topic("t");
    auto invalid = [](auto f) { return status_of(f) == RILL_ERR_INVALID_ARGUMENT; };
    CHECK(invalid([&] { broker.create_topic("ab\0cd"s); }));
    CHECK(status_of([&] { broker.publish("ab", "x"); }) == RILL_ERR_NO_SUCH_TOPIC);  // "ab" was not created
    CHECK(invalid([&] { broker.publish("t\0x"s, "x"); }));
    CHECK(invalid([&] { broker.try_publish("t\0x"s, rill::Record{"x"}); }));
    CHECK(invalid([&] { broker.publish_batch("t\0x"s, {rill::Record{"x"}}); }));
    CHECK(invalid([&] { broker.publisher("t\0x"s); }));
    CHECK(invalid([&] { broker.topic_stats("t\0x"s); }));
    CHECK(invalid([&] { broker.consumer("g\0h"s, "t"); }));
    CHECK(invalid([&] { broker.consumer("g", "t\0x"s); }));
    rill::Record with_key{"x"};
    with_key.attributes = {{"key\0x"s, "v"}};
    CHECK(invalid([&] { broker.publish("t", with_key); }));
    with_key.attributes = {{"key", "v\0w"s}};
    CHECK(invalid([&] { broker.publish("t", with_key); }));
    auto handler = [](const rill::Message &) { return rill::Ack::Success; };
    CHECK(invalid([&] { broker.subscribe("t\0*"s, handler); }));
    CHECK(invalid([&] { broker.subscribe_batch("t\0*"s, [](rill::Batch &) {}); }));
    rill::SubscriptionOptions o;
    o.name = "dur\0able"s;
    CHECK(invalid([&] { broker.subscribe("t", handler, o); }));
    o = {};
    o.filter = "attributes:a\0"s;
    CHECK(invalid([&] { broker.subscribe("t", handler, o); }));
    o = {};
    o.dead_letter_topic = "dead\0letters"s;
    CHECK(invalid([&] { broker.subscribe("t", handler, o); }));
    // The text names the argument and where the NUL is.
    try {
        broker.create_topic("ab\0cd"s);
        CHECK(false);
    } catch (const rill::Error &e) {
        CHECK(std::string(e.what()).find("topic name contains a NUL byte at position 2") != std::string::npos);
    }
    // Nothing was published by the refused calls.
    CHECK(broker.topic_stats("t").publish_count == 0);

    // Issue 40 #4: the deleting and group calls and the broker's data_dir
    // too, each leaving what the cut-short name names alone.
    {
        auto c = broker.consumer("g", "t");
        broker.publish("t", "x");
        CHECK(c.poll(1, 5s).size() == 1);
        c.commit();
    }
    {
        rill::SubscriptionOptions durable;
        durable.name = "d";
        durable.start = RILL_START_EARLIEST;
        auto s = broker.subscribe("t", handler, durable);
        CHECK(s.wait_idle(5s));
    }
    CHECK(invalid([&] { broker.delete_topic("t\0x"s); }));
    CHECK(invalid([&] { broker.delete_durable("d\0x"s); }));
    CHECK(invalid([&] { broker.delete_group("g\0x"s, "t"); }));
    CHECK(invalid([&] { broker.delete_group("g", "t\0x"s); }));
    CHECK(invalid([&] { (void)broker.group_stats("g\0x"s, "t"); }));
    CHECK(invalid([&] { (void)broker.group_partitions("g", "t\0x"s); }));
    CHECK(broker.topic_stats("t").publish_count == 1);  // "t" is still there, message and all
    CHECK((broker.groups() == std::vector<std::pair<std::string, std::string>>{{"g", "t"}}));
    broker.delete_durable("d");  // still saved, so still there to delete
    rill::BrokerOptions with_dir;
    with_dir.data_dir = "/tmp/rill-cpp-nul\0dir"s;
    CHECK(invalid([&] { rill::Broker b(with_dir); }));

    // Inside a handler: an attribute name and an ack reason.
    std::atomic<int> refused{0};
    auto in_handler = broker.subscribe(
        "t",
        [&](const rill::Message &m) {
            refused += invalid([&] { (void)m.attribute("a\0b"s); });
            refused += invalid([&] { m.set_reason("why\0not"s); });
            return rill::Ack::Success;
        },
        [] {
            rill::SubscriptionOptions o;
            o.start = RILL_START_EARLIEST;
            return o;
        }());
    CHECK(in_handler.wait_idle(5s));
    CHECK(refused == 2);  // one message, two refused calls
}

static void listing_topics_subscriptions_and_groups() {
    rill::Broker broker;
    broker.create_topic("orders/eu", {2});
    broker.create_topic("orders/us");
    CHECK((broker.topics() == std::vector<std::string>{"orders/eu", "orders/us"}));
    rill::SubscriptionOptions o;
    o.name = "billing";
    o.start = RILL_START_EARLIEST;
    o.max_attempts = 1;
    auto sub = broker.subscribe(
        "orders/*",
        [](const rill::Message &m) -> rill::Ack {
            if (m.payload() == "bad") throw std::runtime_error("unparseable order");
            return rill::Ack::Success;
        },
        o);
    broker.publish("orders/us", "good");
    broker.publish("orders/us", "bad");
    CHECK(sub.wait_idle(10s));
    auto subs = broker.subscriptions();
    CHECK(subs.size() == 1);
    if (subs.size() == 1) {
        CHECK(subs[0].name == "billing" && subs[0].pattern == "orders/*");
        CHECK(subs[0].counters.delivered == 2 && subs[0].counters.name == nullptr);
        CHECK(subs[0].last_error && subs[0].last_error->find("unparseable order") != std::string::npos);
        CHECK(subs[0].last_error && *subs[0].last_error == sub.last_error());
    }
    auto lags = sub.partitions();
    CHECK(lags.size() == 3);
    for (const auto &l : lags) CHECK(l.lag == 0 && (l.topic != "orders/us" || l.position == 2));

    auto c = broker.consumer("reports", "orders/us");
    CHECK(c.poll(1, 0ms).size() == 1);
    c.commit();
    CHECK((broker.groups() == std::vector<std::pair<std::string, std::string>>{{"reports", "orders/us"}}));
    CHECK(broker.group_stats("reports", "orders/us").lag == 1);
    auto g = broker.group_partitions("reports", "orders/us");
    CHECK(g.size() == 1 && g[0].position == 1 && g[0].end == 2 && g[0].topic == "orders/us");
    CHECK(status_of([&] { broker.group_stats("nobody", "orders/us"); }) == RILL_ERR_NOT_FOUND);
    CHECK(status_of([&] { broker.group_partitions("reports", "missing"); }) == RILL_ERR_NO_SUCH_TOPIC);
}

static void deleting_topics_durables_and_groups() {
    rill::Broker broker;
    broker.create_topic("a");
    broker.create_topic("b");
    rill::SubscriptionOptions o;
    o.name = "a-reader";
    auto literal = broker.subscribe("a", [](const rill::Message &) { return rill::Ack::Success; }, o);
    auto publisher = broker.publisher("a");
    auto consumer = broker.consumer("g", "a");
    broker.delete_topic("a");
    CHECK(literal.closed_reason() == "topic deleted");
    CHECK(status_of([&] { publisher.publish(rill::Record{"x"}); }) == RILL_ERR_NO_SUCH_TOPIC);
    CHECK(status_of([&] { consumer.poll(1, 0ms); }) == RILL_ERR_NO_SUCH_TOPIC);
    CHECK(status_of([&] { broker.delete_topic("a"); }) == RILL_ERR_NO_SUCH_TOPIC);
    broker.create_topic("a");
    CHECK(broker.publish("a", "again").offset == 0);

    CHECK(status_of([&] { broker.delete_durable("nobody"); }) == RILL_ERR_NOT_FOUND);
    o.name = "keeper";
    auto keeper = broker.subscribe("b", [](const rill::Message &) { return rill::Ack::Success; }, o);
    CHECK(status_of([&] { broker.delete_durable("keeper"); }) == RILL_ERR_BUSY);
    keeper.close();
    broker.delete_durable("keeper");

    {
        auto c = broker.consumer("g2", "b");
        c.commit();
        CHECK(status_of([&] { broker.delete_group("g2", "b"); }) == RILL_ERR_BUSY);
    }
    broker.delete_group("g2", "b");
    CHECK(status_of([&] { broker.delete_group("g2", "b"); }) == RILL_ERR_NOT_FOUND);
}

static void seeking_by_time() {
    rill::Broker broker;
    broker.create_topic("timed");
    for (int i = 0; i < 50; i++) broker.publish("timed", std::to_string(i));
    auto c = broker.consumer("stamps", "timed");
    // A poll stops at the end of a log segment (a new topic's first one is
    // small), so reading all 50 may take several; messages live until the
    // next poll, so their stamps are copied.
    std::vector<uint64_t> all;
    for (auto batch = c.poll(50, 0ms); !batch.empty() && all.size() < 50; batch = c.poll(50 - all.size(), 0ms)) {
        for (auto &m : batch) all.push_back(m.timestamp_ns());
    }
    CHECK(all.size() == 50);
    uint64_t t = all.size() == 50 ? all[25] : 0;
    uint64_t want = 0;
    while (want < all.size() && all[want] < t) want++;
    c.seek_to_time(0, static_cast<int64_t>(t));
    CHECK(c.position() == want);
    c.seek_to_time(0, std::chrono::system_clock::now() + std::chrono::hours(1));
    CHECK(c.position() == 50);
    c.seek_to_time(0, std::chrono::system_clock::time_point{});
    CHECK(c.position() == 0);
    CHECK(status_of([&] { c.seek_to_time(4, 0); }) == RILL_ERR_NOT_FOUND);
}

static void retention_by_age() {
    rill::Broker broker;
    rill::TopicOptions o;
    o.retention_bytes = 64 << 10;
    o.retention_ms = 30;
    broker.create_topic("aging", o);
    for (int i = 0; i < 100; i++) broker.publish("aging", "old");
    auto c = broker.consumer("watch", "aging");
    uint64_t first = 0;
    auto deadline = std::chrono::steady_clock::now() + 30s;
    while (first < 100 && std::chrono::steady_clock::now() < deadline) {
        c.seek_to_beginning();
        first = c.position();
        if (first < 100) std::this_thread::sleep_for(1ms);
    }
    CHECK(first == 100);
}

static void logs_and_dead_letter_alerts() {
    std::mutex lock;
    std::vector<std::string> warnings;
    rill::set_log_callback([&](rill::LogLevel level, std::string_view target, std::string_view message) {
        std::lock_guard<std::mutex> g(lock);
        if (level == rill::LogLevel::Warn && target == "rill::subscription") warnings.emplace_back(message);
    });
    rill::set_log_level(rill::LogLevel::Warn);
    rill::Broker broker;
    broker.create_topic("jobs");
    std::vector<std::string> alerts;
    rill::SubscriptionOptions o;
    o.name = "cpp-alerts";
    o.on_dead_letter = [&](const rill::Message &m, std::string_view reason) {
        std::lock_guard<std::mutex> g(lock);
        alerts.push_back(std::string(m.payload()) + ": " + std::string(reason));
    };
    auto sub = broker.subscribe("jobs", [](const rill::Message &m) {
        m.set_reason("no good");
        return rill::Ack::DeadLetter;
    }, o);
    broker.publish("jobs", "bad");
    CHECK(sub.wait_idle(10s));
    rill::set_log_callback(nullptr);
    rill::set_log_level(rill::LogLevel::Info);
    std::lock_guard<std::mutex> g(lock);
    CHECK(alerts.size() == 1 && alerts[0] == "bad: no good");
    CHECK(warnings.size() == 1 && warnings[0].find("dead-lettered jobs partition 0 offset 0: no good") != std::string::npos);
}

// Issue 45: the notify fds an event loop waits on (poll(2) here).
static void notify_fds_wake_an_event_loop() {
    auto readable = [](int fd, int wait_ms) {
        pollfd p{fd, POLLIN, 0};
        return ::poll(&p, 1, wait_ms) == 1 && (p.revents & POLLIN);
    };
    rill::Broker broker;
    broker.create_topic("t");
    rill::Consumer c = broker.consumer("g", "t");
    int fd = c.notify_fd();
    CHECK(fd >= 0 && c.notify_fd() == fd);
    CHECK(c.poll(8, 0ms).empty());  // armed
    CHECK(!readable(fd, 0));
    std::thread([&] { broker.publish("t", "x"); }).join();
    CHECK(readable(fd, 20000));
    CHECK(c.poll(8, 0ms).size() == 1);  // empties it
    CHECK(!readable(fd, 0));

    std::atomic<bool> release{false};
    auto sub = broker.subscribe("t", [&](const rill::Message &) {
        while (!release.load()) std::this_thread::yield();
        return rill::Ack::Success;
    });
    int idle_fd = sub.notify_fd();
    broker.publish("t", "y");
    CHECK(!sub.wait_idle(0ms));  // busy: armed
    release = true;
    CHECK(readable(idle_fd, 20000));
    CHECK(sub.wait_idle(0ms));
}

/// Issue 41: a compacted topic keeps the newest message of every key,
/// refuses keyless publishes, and keeps offsets across the gaps it leaves.
static void a_compacted_topic_keeps_the_newest_value_of_every_key() {
    rill::Broker broker;
    rill::TopicOptions o;
    o.cleanup = rill::Cleanup::Compact;
    broker.create_topic("prices", o);
    CHECK(status_of([&] { broker.publish("prices", "no key"); }) == RILL_ERR_INVALID_ARGUMENT);
    // More than a 4 MiB segment of data over ten keys, then as much filler
    // again, so that every data message is in a sealed segment.
    const int keys = 10, data = 1200, filler = 1100;
    std::string payload(4000, '.');
    for (int i = 0; i < data; i++) {
        std::string key = "k" + std::to_string(i % keys);
        std::string value = "v" + std::to_string(i) + payload;
        CHECK(broker.publish("prices", rill::Record{value, key}).offset == uint64_t(i));
    }
    for (int i = 0; i < filler; i++) broker.publish("prices", rill::Record{payload, std::string_view("~")});
    // The compactor is a background thread: a deadline around the condition.
    auto newest_only = [&](int round) {
        rill::Consumer c = broker.consumer("probe-" + std::to_string(round), "prices");
        std::vector<uint64_t> offsets;
        for (;;) {
            auto batch = c.poll(1000, 20ms);
            if (batch.empty()) break;
            for (auto &m : batch)
                if (m.key() && m.key()->substr(0, 1) == "k") offsets.push_back(m.offset());
        }
        std::vector<uint64_t> want;
        for (int k = 0; k < keys; k++) want.push_back(uint64_t(data - keys + k));
        return offsets == want;
    };
    auto deadline = std::chrono::steady_clock::now() + 60s;
    bool done = false;
    for (int round = 0; !done && std::chrono::steady_clock::now() < deadline; round++) done = newest_only(round);
    CHECK(done);
    auto stats = broker.topic_stats("prices");
    CHECK(stats.compaction_passes >= 1 && stats.compacted_messages >= uint64_t(data - keys));
    CHECK(stats.compaction_keys >= uint64_t(keys));
    rill::Consumer c = broker.consumer("readers", "prices");
    c.seek(0, 5);  // a removed offset: starts at the next kept one
    auto first = c.poll(1, 5000ms);
    CHECK(first.size() == 1 && first[0].offset() == uint64_t(data - keys));
    c.commit();
    CHECK(c.committed() == uint64_t(data - keys + 1));
}

/// Issue 41: a compacted topic on a data directory. The compactor rewrites
/// the sealed segment files; a broker opened again on the directory reads
/// the newest value of each key, under its offset, and refuses keyless
/// publishes still.
static void a_durable_compacted_topic_keeps_the_newest_value_of_every_key_across_a_restart() {
    namespace fs = std::filesystem;
    fs::path dir = fs::temp_directory_path() / ("rill-cpp-compact-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    rill::BrokerOptions bo;
    bo.data_dir = dir.string();
    bo.fsync = rill::Fsync::Never;
    const int keys = 10, data = 1200, filler = 1100;
    {
        rill::Broker broker(bo);
        rill::TopicOptions o;
        o.cleanup = rill::Cleanup::Compact;
        broker.create_topic("prices", o);
        std::string payload(4000, '.');
        for (int i = 0; i < data; i++) {
            std::string key = "k" + std::to_string(i % keys);
            std::string value = "v" + std::to_string(i) + payload;
            CHECK(broker.publish("prices", rill::Record{value, key}).offset == uint64_t(i));
        }
        for (int i = 0; i < filler; i++) broker.publish("prices", rill::Record{payload, std::string_view("~")});
        // The compactor is a background thread: a deadline around the condition.
        auto deadline = std::chrono::steady_clock::now() + 120s;
        while (broker.topic_stats("prices").compacted_messages < uint64_t(data - keys) &&
               std::chrono::steady_clock::now() < deadline)
            std::this_thread::sleep_for(10ms);
        CHECK(broker.topic_stats("prices").compacted_messages >= uint64_t(data - keys));
    }
    {
        rill::Broker broker(bo);
        CHECK(status_of([&] { broker.publish("prices", "no key"); }) == RILL_ERR_INVALID_ARGUMENT);
        rill::Consumer c = broker.consumer("after-restart", "prices");
        std::vector<std::pair<uint64_t, std::string>> read;
        for (;;) {
            auto batch = c.poll(1000, 20ms);
            if (batch.empty()) break;
            for (auto &m : batch)
                if (m.key() && m.key()->substr(0, 1) == "k")
                    read.emplace_back(m.offset(), std::string(m.payload().substr(0, 5)));
        }
        std::vector<std::pair<uint64_t, std::string>> want;
        for (int k = 0; k < keys; k++)
            want.emplace_back(uint64_t(data - keys + k), ("v" + std::to_string(data - keys + k) + ".").substr(0, 5));
        CHECK(read == want);
    }
    fs::remove_all(dir);
}

/// Issue 42: topic schemas. A JSON schema rejects (SchemaError, nothing
/// published) or dead-letters (Position::dead_lettered, the reason in
/// rill.dlq.reason); a std::function validator, one that throws; versions
/// on messages; replacement while threads publish; a durable schema after a
/// restart.
static void topic_schemas() {
    rill::Broker broker;
    broker.create_topic("orders");
    broker.publish("orders", "before");
    const std::string order = R"({"type":"object","required":["id"],"properties":{"id":{"type":"integer"}}})";
    CHECK(broker.set_schema_json("orders", order) == 1);
    CHECK(broker.publish("orders", R"({"id":1})").offset == 1);
    bool thrown = false;
    try {
        broker.publish("orders", R"({"id":"x"})");
    } catch (const rill::SchemaError &e) {
        thrown = e.status() == RILL_ERR_SCHEMA && std::string(e.what()).find("/id") != std::string::npos;
    }
    CHECK(thrown);
    CHECK(status_of([&] { broker.publish_batch("orders", {rill::Record{"{}"}, rill::Record{"[]"}}); }) ==
          RILL_ERR_SCHEMA);
    CHECK(status_of([&] { broker.set_schema_json("orders", R"({"type":5})"); }) == RILL_ERR_INVALID_ARGUMENT);

    CHECK(broker.set_schema_json("orders", order, rill::OnInvalid::DeadLetter) == 2);
    auto dead = broker.publish("orders", R"({"id":"x"})");
    CHECK(dead.dead_lettered && dead.offset == 0);
    auto batch = broker.publish_batch("orders", {rill::Record{R"({"id":2})"}, rill::Record{"[]"}});
    CHECK(!batch[0].dead_lettered && batch[1].dead_lettered && batch[1].offset == 1);
    CHECK(broker.publisher("orders").publish(rill::Record{"{}"}).dead_lettered);
    {
        rill::Consumer c = broker.consumer("reader", "$dlq/orders");
        auto msgs = c.poll(10, 1000ms);
        CHECK(msgs.size() == 3);
        CHECK(msgs.size() == 3 && msgs[0].attribute("rill.dlq.reason").value_or("").find("/id") != std::string_view::npos);
    }

    CHECK(broker.set_validator("orders", [](std::string_view p) -> std::optional<std::string> {
        if (p == "throw") throw std::runtime_error("cannot parse");
        if (p.size() > 8) return std::to_string(p.size()) + " bytes; at most 8";
        return std::nullopt;
    }) == 3);
    broker.publish("orders", "short");
    std::string why;
    try {
        broker.publish("orders", "much too long");
    } catch (const rill::SchemaError &e) {
        why = e.what();
    }
    CHECK(why.find("13 bytes; at most 8") != std::string::npos);
    why.clear();
    try {
        broker.publish("orders", "throw");
    } catch (const rill::SchemaError &e) {
        why = e.what();
    }
    CHECK(why.find("validator threw: cannot parse") != std::string::npos);
    {
        rill::Consumer c = broker.consumer("versions", "orders");
        std::vector<uint64_t> versions;
        for (const auto &m : c.poll(10, 1000ms)) versions.push_back(m.schema_version());
        CHECK((versions == std::vector<uint64_t>{0, 1, 2, 3}));
    }
    broker.remove_schema("orders");
    CHECK(broker.schema_version("orders") == 0);
    broker.publish("orders", "anything at all");

    // Replacement while threads publish: odd versions take only "a", even
    // ones only "b"; each appended message fits the version it carries.
    broker.create_topic("race");
    auto only = [](char want) {
        return [want](std::string_view p) -> std::optional<std::string> {
            if (p.size() == 1 && p[0] == want) return std::nullopt;
            return std::string("wrong letter");
        };
    };
    CHECK(broker.set_validator("race", only('a')) == 1);
    std::vector<std::thread> threads;
    std::atomic<int> wrong{0};
    for (int t = 0; t < 4; t++) {
        threads.emplace_back([&, t] {
            for (int i = 0; i < 300; i++) {
                try {
                    broker.publish("race", (i + t) % 2 ? "a" : "b");
                } catch (const rill::SchemaError &) {
                } catch (...) {
                    wrong++;
                }
            }
        });
    }
    for (uint64_t v = 2; v <= 20; v++) CHECK(broker.set_validator("race", only(v % 2 ? 'a' : 'b')) == v);
    for (auto &t : threads) t.join();
    CHECK(wrong == 0);
    rill::Consumer c = broker.consumer("check", "race");
    size_t seen = 0;
    for (auto msgs = c.poll(1024, 1000ms); !msgs.empty(); msgs = c.poll(1024, 200ms)) {
        for (const auto &m : msgs) {
            uint64_t v = m.schema_version();
            wrong += v == 0 || m.payload() != (v % 2 ? "a" : "b");
            seen++;
        }
    }
    CHECK(seen > 0 && wrong == 0);

    namespace fs = std::filesystem;
    fs::path dir = fs::temp_directory_path() / ("rill-cpp-schema-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    rill::BrokerOptions o;
    o.data_dir = dir.string();
    {
        rill::Broker durable(o);
        durable.create_topic("orders");
        durable.set_schema_json("orders", order, rill::OnInvalid::DeadLetter);
    }
    {
        rill::Broker durable(o);
        CHECK(durable.schema_version("orders") == 1);
        CHECK(durable.publish("orders", "{}").dead_lettered);
    }
    fs::remove_all(dir);
}

int main() {
    who_holds_what_across_processes();
    strings_with_embedded_nuls_are_refused();
    broker_options_are_a_cpp_struct();
    a_broker_on_a_data_directory_keeps_its_topics();
    brokers_share_a_data_directory_with_sharing_processes();
    batch_subscribe_acks_per_message();
    publishing_without_duplicates();
    publish_subscribe_and_attributes();
    errors_carry_status_and_text();
    a_throwing_handler_is_retried_then_dead_lettered_with_the_text();
    pull_consumer_and_move_semantics();
    consumer_group_members();
    shared_subscription_members();
    a_stalled_shared_member_hands_over_after_ack_timeout();
    destroying_the_broker_first_is_safe();
    priorities_reorder_the_pool_and_starve_nobody();
    on_lagged_hears_what_retention_trimmed();
    listing_topics_subscriptions_and_groups();
    deleting_topics_durables_and_groups();
    seeking_by_time();
    retention_by_age();
    logs_and_dead_letter_alerts();
    notify_fds_wake_an_event_loop();
    a_compacted_topic_keeps_the_newest_value_of_every_key();
    a_durable_compacted_topic_keeps_the_newest_value_of_every_key_across_a_restart();
    topic_schemas();
    if (failures) {
        std::fprintf(stderr, "C++ wrapper tests: %d of %d checks failed\n", failures, checks);
        return 1;
    }
    std::printf("C++ wrapper tests: all %d checks passed\n", checks);
    return 0;
}
