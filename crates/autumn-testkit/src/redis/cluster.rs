//! A real Redis Cluster of the test's own: six `redis-server` processes on
//! free loopback ports (three masters, three replicas), joined with
//! `redis-cli --cluster create`, torn down when dropped or when the test
//! process exits, whichever comes first. [`RedisCluster::start_tls`] makes
//! one whose nodes speak TLS only, to clients and to each other.
//!
//! Each server runs under a small shell that kills it when its stdin closes:
//! the test process holds the write end, so even a cluster kept in a
//! `static` (never dropped) dies with the process that made it.

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::tls::TestCa;

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
    /// For a TLS-only cluster, its certificate files.
    tls: Option<ClusterTls>,
}

/// The certificate files of a TLS-only cluster: copies the cluster keeps in
/// its own directory, so they last as long as it does.
struct ClusterTls {
    /// The CA's certificate, which clients trust.
    ca: PathBuf,
    /// The one server certificate every node presents (also as a client
    /// on the cluster bus), for `localhost`, `127.0.0.1` and `::1`.
    cert: PathBuf,
    key: PathBuf,
    /// A shell that removes the files when its stdin closes (with the
    /// test process, for a cluster in a `static`), like the nodes' shells
    /// remove their directories.
    keeper: Child,
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

/// A TLS-only cluster ([`RedisCluster::start_tls`], with a CA of its own)
/// that every test of a binary shares, like [`shared_cluster`]. Clients
/// trust [`RedisCluster::ca_file`].
pub fn shared_tls_cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| RedisCluster::start_tls(&TestCa::new()))
}

/// A TLS-only cluster of six Valkey servers ([`RedisCluster::start_tls_with`],
/// with a CA of its own) that every test of a binary shares, like
/// [`shared_cluster`]. Panics saying how to install Valkey when it is
/// missing.
#[track_caller]
pub fn shared_valkey_tls_cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| {
        RedisCluster::start_tls_with(super::valkey::valkey_server().0, &TestCa::new())
    })
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
        Self::launch(program, None)
    }

    /// [`start`](Self::start) with nodes that speak TLS only: each one's
    /// plaintext port is off (`--port 0`), its clients, its replication and
    /// the cluster bus use TLS, with a server certificate `ca` signs for
    /// `localhost`, `127.0.0.1` and `::1` (the cluster announces its nodes
    /// by IP address). Clients need no certificate of their own. Reach it at
    /// [`url`](Self::url), `rediss+cluster://127.0.0.1:{port},...`,
    /// trusting [`ca_file`](Self::ca_file). The cluster keeps copies of the
    /// files: `ca` may be dropped.
    pub fn start_tls(ca: &TestCa) -> Self {
        Self::start_tls_with(PathBuf::from("redis-server"), ca)
    }

    /// [`start_tls`](Self::start_tls) with the server program `program`
    /// (`valkey-server`, say).
    pub fn start_tls_with(program: PathBuf, ca: &TestCa) -> Self {
        let server = ca.server_cert(&["localhost", "127.0.0.1", "::1"]);
        Self::launch(
            program,
            Some((ca.ca_file().to_owned(), server.cert, server.key)),
        )
    }

    /// Starts the six nodes (with TLS when `tls` gives the CA, certificate
    /// and key files to copy) and joins them.
    fn launch(program: PathBuf, tls: Option<(PathBuf, PathBuf, PathBuf)>) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "autumn-redis-cluster-{}",
            uuid::Uuid::new_v4().simple()
        ));
        std::fs::create_dir_all(&dir).expect("a directory for the cluster");
        let tls = tls.map(|(ca, cert, key)| {
            let tls_dir = dir.join("tls");
            std::fs::create_dir_all(&tls_dir).expect("a directory for the cluster's certificates");
            // Whichever of it and the nodes' shells is last finds the
            // cluster's directory empty and removes it.
            let keeper = Command::new("sh")
                .args([
                    "-c",
                    &format!(
                        "cat >/dev/null; rm -rf '{tls}'; rmdir '{parent}' 2>/dev/null",
                        tls = tls_dir.display(),
                        parent = dir.display(),
                    ),
                ])
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("sh to keep the cluster's certificates under");
            let copy = |from: &Path, name: &str| {
                let to = tls_dir.join(name);
                std::fs::copy(from, &to)
                    .unwrap_or_else(|error| panic!("cannot copy {}: {error}", from.display()));
                to
            };
            ClusterTls {
                ca: copy(&ca, "ca.pem"),
                cert: copy(&cert, "node.pem"),
                key: copy(&key, "node.key"),
                keeper,
            }
        });
        let mut cluster = Self {
            nodes: Vec::new(),
            dir,
            program,
            tls,
        };
        for index in 0..6 {
            let node = cluster.spawn_answering_node(index);
            cluster.nodes.push(node);
        }
        let mut create = Command::new("redis-cli");
        if let Some(tls) = &cluster.tls {
            create.arg("--tls").arg("--cacert").arg(&tls.ca);
        }
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
                || cluster.node_ready(node.port),
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
                if self
                    .query_node(node.port, &["INFO", "server"])
                    .is_ok_and(|info| info.contains(&ours))
                {
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
        // TLS only: the plaintext port off, the TLS port for clients,
        // replication over TLS, and TLS on the cluster bus too.
        let ports = match &self.tls {
            Some(tls) => format!(
                "--port 0 --tls-port {port} --tls-cluster yes --tls-replication yes \
                 --tls-cert-file '{cert}' --tls-key-file '{key}' --tls-ca-cert-file '{ca}' \
                 --tls-auth-clients no",
                cert = tls.cert.display(),
                key = tls.key.display(),
                ca = tls.ca.display(),
            ),
            None => format!("--port {port}"),
        };
        // `exec` is not used: the shell stays to kill the server when the
        // test process (which holds its stdin) goes away.
        let script = format!(
            "'{program}' {ports} --cluster-port {bus_port} --bind 127.0.0.1 \
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

    /// `redis+cluster://` with every node as a seed; for a TLS cluster
    /// `rediss+cluster://`.
    pub fn url(&self) -> String {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port))
            .collect();
        format!("{}{}", self.scheme(), nodes.join(","))
    }

    /// [`url`](Self::url) with one seed node only: the client must learn
    /// the others from it.
    pub fn url_with_one_seed(&self) -> String {
        format!("{}127.0.0.1:{}", self.scheme(), self.nodes[0].port)
    }

    fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "rediss+cluster://"
        } else {
            "redis+cluster://"
        }
    }

    /// For a TLS cluster, the file of the CA that signed its certificate
    /// (PEM), for clients to trust; `None` for a plaintext one.
    pub fn ca_file(&self) -> Option<&Path> {
        self.tls.as_ref().map(|tls| tls.ca.as_path())
    }

    /// The ports of the nodes, masters and replicas, in the order they
    /// started (killed ones included).
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|node| node.port).collect()
    }

    /// [`query`] for this cluster's nodes: over TLS, trusting
    /// [`ca_file`](Self::ca_file), when the cluster speaks TLS.
    pub fn query_node(&self, port: u16, args: &[&str]) -> Result<String, String> {
        query_over(self.ca_file(), port, args)
    }

    /// The ports of the nodes that are masters now.
    pub fn master_ports(&self) -> Vec<u16> {
        let nodes = self
            .query_node(self.live_port(), &["CLUSTER", "NODES"])
            .expect("CLUSTER NODES");
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
        let slot: u16 = self
            .query_node(live, &["CLUSTER", "KEYSLOT", key])
            .expect("CLUSTER KEYSLOT")
            .parse()
            .expect("a slot number");
        let nodes = self
            .query_node(live, &["CLUSTER", "NODES"])
            .expect("CLUSTER NODES");
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
            .iter()
            .find(|node| node.port == port)
            .unwrap_or_else(|| panic!("no cluster node on port {port}"));
        let status = Command::new("kill")
            .args(["-9", &node.pid.to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -9 {} failed", node.pid);
        crate::eventually(&format!("node {port} to die"), READY_WITHIN, || {
            self.query_node(port, &["PING"]).is_err()
        });
    }

    /// Makes the replica on `port` take its master's slots at once
    /// (`CLUSTER FAILOVER TAKEOVER`: no agreement from the other masters
    /// needed, so the test need not wait out the node timeout), and waits
    /// until it serves them.
    pub fn promote(&self, port: u16) {
        self.query_node(port, &["CLUSTER", "FAILOVER", "TAKEOVER"])
            .expect("CLUSTER FAILOVER TAKEOVER");
        crate::eventually(
            &format!("node {port} to become a master"),
            READY_WITHIN,
            || {
                self.query_node(port, &["ROLE"])
                    .is_ok_and(|role| role.starts_with("master"))
                    && self
                        .query_node(port, &["CLUSTER", "INFO"])
                        .is_ok_and(|info| info.contains("cluster_state:ok"))
            },
        );
    }

    fn live_port(&self) -> u16 {
        self.nodes
            .iter()
            .map(|node| node.port)
            .find(|&port| self.query_node(port, &["PING"]).is_ok())
            .expect("a live cluster node")
    }

    /// Whether the node on `port` sees the cluster ok, with every slot
    /// served and every replica attached to its master (replicas join after
    /// the slots are assigned, and the news spreads by gossip).
    fn node_ready(&self, port: u16) -> bool {
        let info_ok = self
            .query_node(port, &["CLUSTER", "INFO"])
            .is_ok_and(|info| {
                info.contains("cluster_state:ok")
                    && info.contains("cluster_slots_ok:16384")
                    && info.contains("cluster_known_nodes:6")
            });
        info_ok
            && self
                .query_node(port, &["CLUSTER", "NODES"])
                .is_ok_and(|nodes| nodes.lines().filter(|line| line.contains("slave")).count() == 3)
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
        if let Some(tls) = &mut self.tls {
            drop(tls.keeper.stdin.take());
            let _ = tls.keeper.wait();
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

/// One command to the node on `port` over a fresh plaintext connection
/// (never through the cluster client: these talk to one node on purpose);
/// bulk and status answers as text. For a TLS cluster's nodes see
/// [`RedisCluster::query_node`].
pub fn query(port: u16, args: &[&str]) -> Result<String, String> {
    query_over(None, port, args)
}

/// [`query`], over TLS to `rediss://127.0.0.1:{port}` trusting the CA in
/// `ca_file` when given (so the node's certificate must name 127.0.0.1).
fn query_over(ca_file: Option<&Path>, port: u16, args: &[&str]) -> Result<String, String> {
    let client = match ca_file {
        Some(ca_file) => {
            super::install_crypto_provider();
            ::redis::Client::build_with_tls(
                format!("rediss://127.0.0.1:{port}"),
                ::redis::TlsCertificates {
                    client_tls: None,
                    root_cert: Some(std::fs::read(ca_file).map_err(|error| error.to_string())?),
                },
            )
        }
        None => ::redis::Client::open(format!("redis://127.0.0.1:{port}")),
    }
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
