// Durable replay from a point in time: a broker on a data directory keeps
// its messages across restarts, and a consumer can go back to the first
// message published at or after a given time.
//
//   c++ -std=c++17 replay.cpp $(pkg-config --cflags --libs rill) -o replay && ./replay
//
// A sensor feed is written by one run of the broker; the broker is
// destroyed (a restart); a second run reopens the directory, finds the
// moment an incident began and replays everything from then on. The
// program exits non-zero if the replay is not exactly the readings from
// that moment.
#include <rill.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include <unistd.h>

using namespace std::chrono_literals;

const std::vector<std::string> kReadings = {"21.0", "21.2", "21.1", "48.9", "49.5", "22.0"};
// The reading at which the incident began (in a real program: a time an
// operator gives, such as "09:40 UTC"; seek_to_time also takes a
// std::chrono::system_clock::time_point).
constexpr size_t kIncident = 3;

rill::Broker open(const std::string &dir) {
    rill::BrokerOptions o;
    o.data_dir = dir;
    // Interval (the default) syncs every fsync_interval; Always returns
    // from a publish only once the record is on stable storage.
    o.fsync = rill::Fsync::Always;
    return rill::Broker(o);
}

int main() {
    namespace fs = std::filesystem;
    fs::path dir = fs::temp_directory_path() / ("rill-replay-example-" + std::to_string(getpid()));
    fs::remove_all(dir);

    // The first run: publish the feed; the broker's destructor closes it.
    {
        rill::Broker broker = open(dir);
        broker.create_topic("sensors/boiler");
        for (const auto &r : kReadings) broker.publish("sensors/boiler", r);
    }

    bool ok;
    {
        // The second run: topics, messages and their publish times are back.
        rill::Broker broker = open(dir);
        rill::Consumer reader = broker.consumer("incident-review", "sensors/boiler");
        auto all = reader.poll(100, 1s);
        std::printf("after the restart: %zu readings\n", all.size());
        if (all.size() != kReadings.size()) return 1;
        // Every message carries its publish time in nanoseconds since the
        // Unix epoch; here the incident's start is its first reading's.
        auto incident_began = static_cast<int64_t>(all[kIncident].timestamp_ns());

        // Go back to the first message published at or after that time, in
        // partition 0 (the only one here). A new group or a subscription
        // can start there too: start = RILL_START_TIME, start_offset = the
        // time.
        reader.seek_to_time(0, incident_began);
        std::vector<std::string> replayed;
        for (const rill::Message &m : reader.poll(100, 1s)) replayed.emplace_back(m.payload());
        std::printf("replayed from the incident:");
        for (const auto &r : replayed) std::printf(" %s", r.c_str());
        std::printf("\n");
        ok = replayed == std::vector<std::string>(kReadings.begin() + kIncident, kReadings.end());
    }
    fs::remove_all(dir);
    if (!ok) std::fprintf(stderr, "expected the readings from the incident on\n");
    return ok ? 0 : 1;
}
