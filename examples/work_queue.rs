//! A work queue: jobs on a partitioned topic, shared out among the members
//! of a consumer group, each job handled by one member.
//!
//!     cargo run --example work_queue
//!
//! A consumer group divides a topic's partitions among its live members;
//! each member polls only its own partitions and commits what it finished,
//! so adding a member adds a worker. Here two members (threads) share four
//! partitions. The program checks its own result and exits non-zero if a
//! job is lost or handled twice.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rill::{Broker, BrokerConfig, Consumer, ConsumerOptions, Record, TopicOptions};

const JOBS: usize = 100;
const WORKERS: usize = 2;
/// How long the workers may take, in all, before the example gives up.
const DEADLINE: Duration = Duration::from_secs(30);

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let broker = Broker::new(BrokerConfig::default())?;
    // Partitions are the unit of parallelism: a group can keep at most this
    // many members busy.
    broker.create_topic("jobs/resize", &TopicOptions::with_partitions(4))?;

    // Join every worker before the jobs arrive, so the partitions are shared
    // out once. (A member that joins later takes partitions over from the
    // group's committed offsets: a job polled but not yet committed by the
    // member it was taken from is then handled again, at least once.)
    let mut workers: Vec<Consumer> = (0..WORKERS)
        .map(|_| broker.consumer("resizers", "jobs/resize", ConsumerOptions::default()))
        .collect::<Result<_, _>>()?;
    for (i, w) in workers.iter().enumerate() {
        println!("worker {i} owns partitions {:?}", w.assignment());
    }

    for n in 0..JOBS {
        // Unkeyed messages are spread over the partitions round-robin; give
        // jobs a key instead when the jobs of one key must stay in order.
        broker.publish("jobs/resize", &Record::new(format!("image-{n}").as_bytes()))?;
    }

    // Which worker handled each job, to check that none was lost or doubled.
    let handled: Mutex<BTreeMap<String, Vec<usize>>> = Mutex::new(BTreeMap::new());
    let start = Instant::now();
    std::thread::scope(|scope| -> rill::Result<()> {
        let mut threads = Vec::new();
        for (id, worker) in workers.iter_mut().enumerate() {
            let handled = &handled;
            threads.push(scope.spawn(move || -> rill::Result<()> {
                while handled.lock().unwrap().len() < JOBS && start.elapsed() < DEADLINE {
                    // A consumer is used from one thread at a time; poll
                    // waits up to the timeout for the first message.
                    for job in worker.poll(16, Duration::from_millis(50))? {
                        let name = String::from_utf8_lossy(job.payload()).into_owned();
                        handled.lock().unwrap().entry(name).or_default().push(id);
                    }
                    // Done with what it polled: the group moves past it. A
                    // worker that dies before committing leaves its jobs to
                    // be polled again by whoever takes its partitions.
                    worker.commit()?;
                }
                Ok(())
            }));
        }
        // A worker's error (the broker closed, say) is the program's error.
        threads.into_iter().try_for_each(|t| t.join().expect("a worker panicked"))
    })?;

    let handled = handled.into_inner().unwrap();
    let per_worker: Vec<usize> =
        (0..WORKERS).map(|id| handled.values().filter(|by| by.contains(&id)).count()).collect();
    println!("{} jobs handled, per worker {:?}", handled.len(), per_worker);
    let twice: Vec<_> = handled.iter().filter(|(_, by)| by.len() > 1).collect();
    if handled.len() != JOBS || !twice.is_empty() || per_worker.contains(&0) {
        return Err(format!("expected {JOBS} jobs, each once, over {WORKERS} busy workers; twice: {twice:?}").into());
    }
    // The group's committed offsets now cover every job: a new member of
    // "resizers" would find nothing left to do.
    assert_eq!(broker.group_stats("resizers", "jobs/resize")?.lag, 0);
    Ok(())
}
