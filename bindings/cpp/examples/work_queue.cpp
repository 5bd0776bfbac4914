// A work queue: jobs on a partitioned topic, shared out among the members
// of a consumer group, each job handled by one member.
//
//   c++ -std=c++17 work_queue.cpp $(pkg-config --cflags --libs rill) -pthread -o work_queue && ./work_queue
//
// A consumer group divides a topic's partitions among its live members;
// each member polls only its own partitions and commits what it finished,
// so adding a member adds a worker. Here two members, each on a thread of
// its own, share four partitions. The program exits non-zero if a job is
// lost or handled twice (a failed call throws rill::Error).
#include <rill.hpp>

#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;

constexpr int kJobs = 100;
constexpr int kWorkers = 2;
// How long the workers may take, in all, before the example gives up.
constexpr auto kDeadline = 30s;

int main() {
    rill::Broker broker;
    // Partitions are the unit of parallelism: a group can keep at most this
    // many members busy.
    broker.create_topic("jobs/resize", rill::TopicOptions{4});

    // Join every worker before the jobs arrive, so the partitions are
    // shared out once. (A member that joins later takes partitions over
    // from the group's committed offsets: a job polled but not yet
    // committed by the member it was taken from is then handled again.)
    std::vector<rill::Consumer> workers;
    for (int i = 0; i < kWorkers; i++) workers.push_back(broker.consumer("resizers", "jobs/resize"));

    for (int n = 0; n < kJobs; n++) {
        // Unkeyed: spread over the partitions round-robin. Give jobs a key
        // when the jobs of one key must stay in order.
        broker.publish("jobs/resize", "job-" + std::to_string(n));
    }

    std::mutex lock;
    std::map<std::string, std::vector<int>> handled;  // job -> the workers that handled it
    std::vector<std::string> errors;
    auto give_up = std::chrono::steady_clock::now() + kDeadline;
    auto done = [&] {
        std::lock_guard<std::mutex> g(lock);
        return handled.size() == static_cast<size_t>(kJobs);
    };
    std::vector<std::thread> threads;
    for (int id = 0; id < kWorkers; id++) {
        threads.emplace_back([&, id] {
            rill::Consumer &worker = workers[id];  // used from this thread only
            try {
                while (!done() && std::chrono::steady_clock::now() < give_up) {
                    // Messages stay valid until this consumer's next poll.
                    for (const rill::Message &job : worker.poll(16, 50ms)) {
                        std::lock_guard<std::mutex> g(lock);
                        handled[std::string(job.payload())].push_back(id);
                    }
                    // Done with what it polled: the group moves past it. A
                    // worker that dies before committing leaves its jobs to
                    // be polled again by whoever takes its partitions.
                    worker.commit();
                }
            } catch (const rill::Error &e) {
                std::lock_guard<std::mutex> g(lock);
                errors.push_back(e.what());
            }
        });
    }
    for (auto &t : threads) t.join();

    bool ok = handled.size() == static_cast<size_t>(kJobs) && errors.empty();
    for (const auto &[job, by] : handled) ok = ok && by.size() == 1;
    for (int id = 0; id < kWorkers; id++) {
        int count = 0;
        for (const auto &[job, by] : handled) count += by[0] == id;
        std::printf("worker %d handled %d jobs\n", id, count);
        ok = ok && count > 0;
    }
    for (const auto &e : errors) std::fprintf(stderr, "worker failed: %s\n", e.c_str());
    if (!ok) std::fprintf(stderr, "expected %d jobs, each handled once, over %d busy workers\n", kJobs, kWorkers);
    return ok ? 0 : 1;
}
