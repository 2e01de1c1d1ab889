//! A real Redis Cluster of the test's own: six `redis-server` processes on
//! free loopback ports (three masters, three replicas), joined with
//! `redis-cli --cluster create`, torn down when dropped or when the test
//! process exits, whichever comes first.
//!
//! Each server runs under a small shell that kills it when its stdin closes:
//! the test process holds the write end, so even a cluster kept in a
//! `static` (never dropped) dies with the process that made it.

use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const HOW_TO_INSTALL: &str = "install Redis 7 (`apt-get install redis-server`, which also \
    brings redis-cli) so that both are on PATH";

/// How long the cluster may take to form, or a replica to take over.
const READY_WITHIN: Duration = Duration::from_secs(30);

/// How long one node may take to answer its first PING (it takes
/// milliseconds; one that has not by then lost its port).
const NODE_UP_WITHIN: Duration = Duration::from_secs(5);

/// One cluster node: its server, under the shell that kills it.
struct Node {
    port: u16,
    /// The `redis-server` process id, to kill it like a crash.
    pid: u32,
    shell: Option<Child>,
    /// Closing it makes the shell kill the server.
    lifeline: Option<ChildStdin>,
}

/// Six nodes forming one cluster: three masters, each with one replica.
pub struct RedisCluster {
    nodes: Vec<Node>,
    dir: PathBuf,
    /// The server program: `redis-server`, or Valkey's.
    program: PathBuf,
}

/// The cluster every test of a binary shares (tests isolate themselves by
/// key prefix). Made on first use, gone when the test process exits.
pub fn shared_cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(RedisCluster::start)
}

/// A cluster of six Valkey servers (joined by `redis-cli`, which speaks
/// the same protocol) that every test of a binary shares, like
/// [`shared_cluster`]. Panics saying how to install Valkey when it is
/// missing.
#[track_caller]
pub fn shared_valkey_cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| RedisCluster::start_with(super::valkey::valkey_server().0))
}

impl RedisCluster {
    /// Starts six servers and joins them into a cluster; returns once every
    /// node reports `cluster_state:ok` and knows all 16384 slots. Panics
    /// saying what to install or what failed.
    pub fn start() -> Self {
        Self::start_with(PathBuf::from("redis-server"))
    }

    /// [`start`](Self::start) with the server program `program`
    /// (`valkey-server`, say).
    pub fn start_with(program: PathBuf) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "autumn-redis-cluster-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).expect("a directory for the cluster");
        let mut cluster = Self {
            nodes: Vec::new(),
            dir,
            program,
        };
        for index in 0..6 {
            let node = cluster.spawn_answering_node(index);
            cluster.nodes.push(node);
        }
        let mut create = Command::new("redis-cli");
        create.args(["--cluster", "create"]);
        for node in &cluster.nodes {
            create.arg(format!("127.0.0.1:{}", node.port));
        }
        let created = create
            .args(["--cluster-replicas", "1", "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|error| panic!("cannot run redis-cli ({error}): {HOW_TO_INSTALL}"));
        assert!(
            created.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&created.stdout),
            String::from_utf8_lossy(&created.stderr)
        );
        for node in &cluster.nodes {
            crate::eventually(
                &format!("node {} to see the cluster ok", node.port),
                READY_WITHIN,
                || node_ready(node.port),
            );
        }
        cluster
    }

    /// A node that answers, as itself. A port found free can be taken by another
    /// test process before `redis-server` binds it, and the server then
    /// exits: a node that does not come up is replaced on fresh ports, in a
    /// directory of its own (the failed one's shell removes its own).
    fn spawn_answering_node(&self, index: usize) -> Node {
        const ATTEMPTS: usize = 5;
        let mut logs = String::new();
        for attempt in 1..=ATTEMPTS {
            let node_dir = self.dir.join(format!("{index}-{attempt}"));
            let mut node = self.spawn_node(&node_dir);
            let start = Instant::now();
            while start.elapsed() < NODE_UP_WITHIN {
                // Ours, not another test's server that took the port.
                let ours = format!("process_id:{}\r\n", node.pid);
                if query(node.port, &["INFO", "server"]).is_ok_and(|info| info.contains(&ours)) {
                    return node;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let log = std::fs::read_to_string(node_dir.join("log")).unwrap_or_default();
            logs.push_str(&format!("attempt {attempt}, port {}:\n{log}\n", node.port));
            drop(node.lifeline.take());
            if let Some(mut shell) = node.shell.take() {
                let _ = shell.wait();
            }
        }
        panic!(
            "no redis-server of the cluster answered within {NODE_UP_WITHIN:?}, {ATTEMPTS} times on fresh ports; their logs:\n{logs}"
        )
    }

    fn spawn_node(&self, node_dir: &std::path::Path) -> Node {
        std::fs::create_dir_all(node_dir).expect("a directory for a cluster node");
        let port = crate::free_port();
        // The cluster bus needs a port of its own.
        let bus_port = loop {
            let bus_port = crate::free_port();
            if bus_port != port {
                break bus_port;
            }
        };
        // `exec` is not used: the shell stays to kill the server when the
        // test process (which holds its stdin) goes away.
        let script = format!(
            "'{program}' --port {port} --cluster-port {bus_port} --bind 127.0.0.1 \
             --cluster-enabled yes --cluster-config-file nodes.conf \
             --cluster-node-timeout 2000 --save '' --appendonly no --dir '{dir}' \
             >'{dir}/log' 2>&1 & pid=$!; echo $pid; cat >/dev/null; kill -9 $pid 2>/dev/null; \
             wait $pid; rm -rf '{dir}'; rmdir '{parent}' 2>/dev/null",
            program = self.program.display(),
            dir = node_dir.display(),
            parent = self.dir.display(),
        );
        let mut shell = Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("sh to run redis-server under");
        let mut line = String::new();
        BufReader::new(shell.stdout.take().expect("the shell's stdout"))
            .read_line(&mut line)
            .expect("the redis-server pid");
        let pid = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("no redis-server pid from the shell: {line:?}"));
        Node {
            port,
            pid,
            lifeline: shell.stdin.take(),
            shell: Some(shell),
        }
    }

    /// `redis+cluster://` with every node as a seed.
    pub fn url(&self) -> String {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port))
            .collect();
        format!("redis+cluster://{}", nodes.join(","))
    }

    /// `redis+cluster://` with one seed node only: the client must learn the
    /// others from it.
    pub fn url_with_one_seed(&self) -> String {
        format!("redis+cluster://127.0.0.1:{}", self.nodes[0].port)
    }

    /// The ports of the nodes that are masters now.
    pub fn master_ports(&self) -> Vec<u16> {
        let nodes = query(self.live_port(), &["CLUSTER", "NODES"]).expect("CLUSTER NODES");
        nodes
            .lines()
            .map(|line| line.split_whitespace().collect::<Vec<_>>())
            .filter(|fields| {
                // A master serves slots (listed from the ninth field on).
                fields.len() > 8 && fields[2].contains("master") && !fields[2].contains("fail")
            })
            .map(|fields| port_of(fields[1]))
            .collect()
    }

    /// The ports of the master that owns `key`'s slot and of its replica.
    pub fn master_and_replica_of(&self, key: &str) -> (u16, u16) {
        let live = self.live_port();
        let slot: u16 = query(live, &["CLUSTER", "KEYSLOT", key])
            .expect("CLUSTER KEYSLOT")
            .parse()
            .expect("a slot number");
        let nodes = query(live, &["CLUSTER", "NODES"]).expect("CLUSTER NODES");
        let lines: Vec<Vec<&str>> = nodes
            .lines()
            .map(|line| line.split_whitespace().collect())
            .collect();
        let master = lines
            .iter()
            .find(|fields| {
                fields.len() > 8
                    && fields[2].contains("master")
                    && fields[8..].iter().any(|range| owns(range, slot))
            })
            .unwrap_or_else(|| panic!("no master owns slot {slot}:\n{nodes}"));
        let replica = lines
            .iter()
            .find(|fields| fields.len() > 3 && fields[3] == master[0])
            .unwrap_or_else(|| panic!("the master of slot {slot} has no replica:\n{nodes}"));
        (port_of(master[1]), port_of(replica[1]))
    }

    /// Kills the server on `port` with SIGKILL (a crash: nothing flushed,
    /// no goodbye to the cluster) and waits for it to be gone.
    pub fn kill(&mut self, port: u16) {
        let node = self
            .nodes
            .iter_mut()
            .find(|node| node.port == port)
            .unwrap_or_else(|| panic!("no cluster node on port {port}"));
        let status = Command::new("kill")
            .args(["-9", &node.pid.to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -9 {} failed", node.pid);
        crate::eventually(&format!("node {port} to die"), READY_WITHIN, || {
            query(port, &["PING"]).is_err()
        });
    }

    /// Makes the replica on `port` take its master's slots at once
    /// (`CLUSTER FAILOVER TAKEOVER`: no agreement from the other masters
    /// needed, so the test need not wait out the node timeout), and waits
    /// until it serves them.
    pub fn promote(&self, port: u16) {
        query(port, &["CLUSTER", "FAILOVER", "TAKEOVER"]).expect("CLUSTER FAILOVER TAKEOVER");
        crate::eventually(
            &format!("node {port} to become a master"),
            READY_WITHIN,
            || {
                query(port, &["ROLE"]).is_ok_and(|role| role.starts_with("master"))
                    && query(port, &["CLUSTER", "INFO"])
                        .is_ok_and(|info| info.contains("cluster_state:ok"))
            },
        );
    }

    fn live_port(&self) -> u16 {
        self.nodes
            .iter()
            .map(|node| node.port)
            .find(|&port| query(port, &["PING"]).is_ok())
            .expect("a live cluster node")
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            // Closing the shell's stdin makes it kill its server.
            drop(node.lifeline.take());
            if let Some(mut shell) = node.shell.take() {
                let _ = shell.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The node ports of a test cluster's `redis+cluster://127.0.0.1:p1,...`
/// URL; `None` for any other URL.
pub fn node_ports(url: &str) -> Option<Vec<u16>> {
    let nodes = url.strip_prefix("redis+cluster://")?;
    Some(
        nodes
            .split(',')
            .filter_map(|node| node.rsplit_once(':'))
            .filter_map(|(_, port)| port.parse().ok())
            .collect(),
    )
}

/// Whether slot range `range` (`5461-10922` or `42`; not `[..]` migrating
/// markers) holds `slot`.
fn owns(range: &str, slot: u16) -> bool {
    let (low, high) = range.split_once('-').unwrap_or((range, range));
    match (low.parse::<u16>(), high.parse::<u16>()) {
        (Ok(low), Ok(high)) => (low..=high).contains(&slot),
        _ => false,
    }
}

/// The port of a `CLUSTER NODES` address, `127.0.0.1:7000@17000`.
fn port_of(address: &str) -> u16 {
    address
        .split('@')
        .next()
        .and_then(|host_port| host_port.rsplit_once(':'))
        .and_then(|(_, port)| port.parse().ok())
        .unwrap_or_else(|| panic!("no port in cluster node address {address:?}"))
}

/// Whether the node on `port` sees the cluster ok, with every slot served
/// and every replica attached to its master (replicas join after the slots
/// are assigned, and the news spreads by gossip).
fn node_ready(port: u16) -> bool {
    let info_ok = query(port, &["CLUSTER", "INFO"]).is_ok_and(|info| {
        info.contains("cluster_state:ok")
            && info.contains("cluster_slots_ok:16384")
            && info.contains("cluster_known_nodes:6")
    });
    info_ok
        && query(port, &["CLUSTER", "NODES"])
            .is_ok_and(|nodes| nodes.lines().filter(|line| line.contains("slave")).count() == 3)
}

/// One command to the node on `port` over a fresh connection (never through
/// the cluster client: these talk to one node on purpose); bulk and status
/// answers as text.
pub fn query(port: u16, args: &[&str]) -> Result<String, String> {
    let client = ::redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .map_err(|error| error.to_string())?;
    let mut connection = client
        .get_connection_with_timeout(Duration::from_secs(1))
        .map_err(|error| error.to_string())?;
    let mut command = ::redis::cmd(args[0]);
    for arg in &args[1..] {
        command.arg(*arg);
    }
    let value: ::redis::Value = command
        .query(&mut connection)
        .map_err(|error| error.to_string())?;
    Ok(match value {
        ::redis::Value::SimpleString(text) => text,
        ::redis::Value::Int(number) => number.to_string(),
        ::redis::Value::BulkString(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        ::redis::Value::VerbatimString { text, .. } => text,
        ::redis::Value::Array(items) => items
            .into_iter()
            .map(|item| match item {
                ::redis::Value::BulkString(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
                ::redis::Value::SimpleString(text) => text,
                other => format!("{other:?}"),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        other => format!("{other:?}"),
    })
}
