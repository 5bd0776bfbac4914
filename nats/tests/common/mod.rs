//! A nats-server for one test: JetStream on a free loopback port and a
//! temporary store, killed (and its store removed) on drop.

#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// Ports tried before giving up on starting a server.
const START_ATTEMPTS: usize = 5;

/// How long a started server may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// Whether tests must fail, rather than skip, without nats-server.
fn required() -> bool {
    std::env::var_os("RILL_REQUIRE_NATS").is_some_and(|v| !v.is_empty() && v != "0")
}

fn binary() -> Option<PathBuf> {
    let name = std::env::var_os("NATS_SERVER").unwrap_or_else(|| "nats-server".into());
    let path = PathBuf::from(&name);
    if path.components().count() > 1 {
        return path.is_file().then_some(path);
    }
    std::env::split_paths(&std::env::var_os("PATH")?).map(|d| d.join(&name)).find(|p| p.is_file())
}

pub struct NatsServer {
    child: Option<Child>,
    bin: PathBuf,
    pub port: u16,
    pub store: PathBuf,
    extra: Vec<String>,
}

impl NatsServer {
    /// Starts a server, or returns `None` (saying why) when nats-server is
    /// not installed and RILL_REQUIRE_NATS is unset.
    pub fn start(test: &str) -> Option<NatsServer> {
        NatsServer::start_with(test, &[])
    }

    /// Like `start`, with more command-line arguments (`--user`, ...).
    pub fn start_with(test: &str, extra: &[&str]) -> Option<NatsServer> {
        let Some(bin) = binary() else {
            assert!(!required(), "RILL_REQUIRE_NATS is set but nats-server is not on PATH");
            eprintln!(
                "SKIPPED {test}: nats-server is not installed (apt-get install nats-server; RILL_REQUIRE_NATS=1 makes this a failure)"
            );
            return None;
        };
        static N: AtomicU32 = AtomicU32::new(0);
        let store = std::env::temp_dir().join(format!(
            "rill-nats-{}-{}-{}",
            std::process::id(),
            test,
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&store).expect("temporary store");
        let port = free_port();
        let mut server =
            NatsServer { child: None, bin, port, store, extra: extra.iter().map(|s| s.to_string()).collect() };
        // A port found free can be taken by another test's server before
        // ours binds it; ours then exits, and is started on another port.
        for _ in 0..START_ATTEMPTS {
            if server.launch() {
                return Some(server);
            }
            server.port = free_port();
        }
        panic!("nats-server could not bind a free port in {START_ATTEMPTS} attempts");
    }

    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// Starts the server and waits until it accepts connections. False if it
    /// exited at start (its port was taken). Ready means its own ports file
    /// (written once its listeners are up) exists and the port answers: a
    /// connection alone could reach another test's server on the same port.
    fn launch(&mut self) -> bool {
        let child = Command::new(&self.bin)
            .args(["-js", "-a", "127.0.0.1", "-p", &self.port.to_string(), "-sd"])
            .arg(&self.store)
            .arg("--ports_file_dir")
            .arg(&self.store)
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start nats-server");
        let ports_file = format!("_{}.ports", child.id());
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let listening = std::fs::read_dir(&self.store)
                .map(|dir| dir.flatten().any(|e| e.file_name().to_string_lossy().ends_with(&ports_file)))
                .unwrap_or(false);
            if listening && TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return true;
            }
            if self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()).is_some() {
                self.child = None;
                return false;
            }
            assert!(Instant::now() < deadline, "nats-server did not accept connections on {}", self.port);
            // Polling a child process's start-up: there is nothing to wait on.
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the server (SIGKILL: no goodbye to clients).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port and store.
    pub fn restart(&mut self) {
        self.kill();
        assert!(self.launch(), "nats-server exited at restart on port {}", self.port);
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.store);
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port()
}

/// A port nothing listens on (bound and released).
pub fn dead_port() -> u16 {
    free_port()
}

/// Creates a file-backed stream with a short duplicate window's default.
pub fn create_stream(url: &str, name: &str, subjects: &[&str]) {
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let client = async_nats::connect(url).await.expect("connect to create a stream");
        let js = async_nats::jetstream::new(client);
        js.create_stream(async_nats::jetstream::stream::Config {
            name: name.to_owned(),
            subjects: subjects.iter().map(|s| s.to_string()).collect(),
            storage: async_nats::jetstream::stream::StorageType::File,
            ..Default::default()
        })
        .await
        .expect("create stream");
    });
}

/// Waits up to `timeout` for `cond`, checking every few milliseconds.
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}
