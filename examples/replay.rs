//! Durable replay from a point in time: a broker on a data directory keeps
//! its messages across restarts, and a consumer can go back to the first
//! message published at or after a given time.
//!
//!     cargo run --example replay
//!
//! A sensor feed is written by one run of the broker; the broker is closed
//! (a restart); a second run reopens the directory, finds the moment an
//! incident began and replays everything from then on. The program exits
//! non-zero if the replay is not exactly the readings from that moment.

use std::path::Path;
use std::time::Duration;

use rill::{Broker, BrokerConfig, ConsumerOptions, Fsync, Record, StartPosition, TopicOptions};

const READINGS: [&str; 6] = ["21.0", "21.2", "21.1", "48.9", "49.5", "22.0"];
/// The reading at which the incident began (in a real program: a time an
/// operator gives, such as "09:40 UTC", as nanoseconds since the epoch).
const INCIDENT: usize = 3;

fn open(dir: &Path) -> rill::Result<Broker> {
    Broker::new(BrokerConfig {
        data_dir: Some(dir.to_path_buf()),
        // Interval (the default) syncs every 100 ms; Always returns from a
        // publish only once the record is on stable storage.
        fsync: Fsync::Always,
        ..Default::default()
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = std::env::temp_dir().join(format!("rill-replay-example-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);

    // The first run: publish the feed, then close the broker.
    {
        let broker = open(&dir)?;
        broker.create_topic("sensors/boiler", &TopicOptions::default())?;
        for reading in READINGS {
            broker.publish("sensors/boiler", &Record::new(reading.as_bytes()))?;
        }
        broker.close();
    }

    // The second run: topics, messages and their publish times are back.
    let broker = open(&dir)?;
    let mut reader = broker.consumer("incident-review", "sensors/boiler", ConsumerOptions::default())?;
    let all: Vec<(u64, String)> = reader
        .poll(100, Duration::from_secs(1))?
        .iter()
        .map(|m| (m.timestamp_ns(), String::from_utf8_lossy(m.payload()).into_owned()))
        .collect();
    println!("after the restart: {} readings", all.len());
    if all.len() != READINGS.len() {
        return Err(format!("expected {} readings after the restart, found {}", READINGS.len(), all.len()).into());
    }
    // Every message carries its publish time in nanoseconds since the Unix
    // epoch; here the incident's start is the time of its first reading.
    let incident_began = all[INCIDENT].0;

    // Go back to the first message published at or after that time (a
    // binary search over segments, then within one; one partition here, so
    // partition 0). `ConsumerOptions { start: StartPosition::Time(ns), .. }`
    // starts a new group there, and a push subscription takes the same
    // `StartPosition` in its options.
    reader.seek_to_time(0, incident_began)?;
    let replayed: Vec<String> = reader
        .poll(100, Duration::from_secs(1))?
        .iter()
        .map(|m| String::from_utf8_lossy(m.payload()).into_owned())
        .collect();
    println!("replayed from the incident: {replayed:?}");

    // The same from a new group, with the time as its start.
    let options = ConsumerOptions { start: StartPosition::Time(incident_began), ..Default::default() };
    let mut fresh = broker.consumer("incident-report", "sensors/boiler", options)?;
    let from_start = fresh.poll(100, Duration::from_secs(1))?.len();

    drop((reader, fresh));
    broker.close();
    drop(broker);
    std::fs::remove_dir_all(&dir)?;
    if replayed != READINGS[INCIDENT..] || from_start != READINGS.len() - INCIDENT {
        return Err(format!("expected {:?} from the incident on", &READINGS[INCIDENT..]).into());
    }
    Ok(())
}
