//! Which Redis a URL names: one server (whatever the redis crate accepts:
//! `redis://`, `rediss://` for TLS, `redis+unix://`), or a cluster given as
//! `redis+cluster://[user:password@]host:port,...` (`rediss+cluster://` for
//! TLS to every node).
//!
//! A cluster gets a scheme of its own rather than a separate setting so that
//! one key (`idempotency.redis.url`) says everything, and moving between a
//! single server and a cluster is a change of that one value.

/// The scheme of a cluster URL.
pub(crate) const CLUSTER_SCHEME: &str = "redis+cluster://";
/// The scheme of a cluster URL whose nodes are reached over TLS.
pub(crate) const TLS_CLUSTER_SCHEME: &str = "rediss+cluster://";

/// What a Redis URL names.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum RedisTarget {
    /// One server: the URL is the redis crate's to parse.
    Single,
    /// A cluster: one `redis://` (or, over TLS, `rediss://`) URL per seed
    /// node, each carrying the credentials.
    Cluster(Vec<String>),
}

/// Whether `url` asks for TLS (`rediss://` or `rediss+cluster://`).
pub(crate) fn is_tls(url: &str) -> bool {
    strip_prefix_ignore_case(url, "rediss://").is_some()
        || strip_prefix_ignore_case(url, TLS_CLUSTER_SCHEME).is_some()
}

/// Parses `url`. The error may name the URL's parts, password included:
/// callers redact it.
pub(crate) fn parse(url: &str) -> Result<RedisTarget, String> {
    let (rest, node_scheme) = if let Some(rest) = strip_prefix_ignore_case(url, CLUSTER_SCHEME) {
        (rest, "redis")
    } else if let Some(rest) = strip_prefix_ignore_case(url, TLS_CLUSTER_SCHEME) {
        (rest, "rediss")
    } else {
        return Ok(RedisTarget::Single);
    };
    let (credentials, nodes) = match rest.rsplit_once('@') {
        Some((credentials, nodes)) => (Some(credentials), nodes),
        None => (None, rest),
    };
    // A cluster has one database, 0: a path or a query is a mistake.
    let nodes = nodes.strip_suffix('/').unwrap_or(nodes);
    if let Some(at) = nodes.find(['/', '?', '#']) {
        return Err(format!(
            "a cluster URL lists nodes only (host:port,host:port), found {:?}; a cluster has no database number",
            &nodes[at..]
        ));
    }
    let mut seeds = Vec::new();
    for node in nodes.split(',').map(str::trim) {
        if node.is_empty() {
            continue;
        }
        let (host, port) = node
            .rsplit_once(':')
            .ok_or_else(|| format!("cluster node {node:?} has no port (host:port)"))?;
        if host.is_empty() {
            return Err(format!("cluster node {node:?} has no host (host:port)"));
        }
        if port.parse::<u16>().map_or(true, |port| port == 0) {
            return Err(format!("cluster node {node:?} has an invalid port"));
        }
        seeds.push(match credentials {
            Some(credentials) => format!("{node_scheme}://{credentials}@{host}:{port}"),
            None => format!("{node_scheme}://{host}:{port}"),
        });
    }
    if seeds.is_empty() {
        return Err(
            "a cluster URL names no node; expected redis+cluster://host1:port1,host2:port2"
                .to_owned(),
        );
    }
    Ok(RedisTarget::Cluster(seeds))
}

fn strip_prefix_ignore_case<'a>(url: &'a str, prefix: &str) -> Option<&'a str> {
    url.get(..prefix.len())
        .filter(|scheme| scheme.eq_ignore_ascii_case(prefix))
        .map(|_| &url[prefix.len()..])
}

#[cfg(test)]
mod tests {
    use super::{RedisTarget, is_tls, parse};

    #[test]
    fn a_plain_url_is_one_server() {
        assert_eq!(parse("redis://127.0.0.1:6379/2"), Ok(RedisTarget::Single));
        assert_eq!(parse("redis+unix:///tmp/r.sock"), Ok(RedisTarget::Single));
        assert_eq!(parse("rediss://cache:6380"), Ok(RedisTarget::Single));
    }

    #[test]
    fn a_tls_cluster_url_gives_tls_seed_urls() {
        assert_eq!(
            parse("rediss+cluster://app:pw@10.0.0.1:7000,10.0.0.2:7001"),
            Ok(RedisTarget::Cluster(vec![
                "rediss://app:pw@10.0.0.1:7000".to_owned(),
                "rediss://app:pw@10.0.0.2:7001".to_owned(),
            ]))
        );
        assert!(is_tls("REDISS://cache:6380"));
        assert!(is_tls("rediss+cluster://h:7000"));
        assert!(!is_tls("redis://cache:6379"));
        assert!(!is_tls("redis+cluster://h:7000"));
    }

    #[test]
    fn a_cluster_url_lists_its_seed_nodes_with_the_credentials_on_each() {
        assert_eq!(
            parse("redis+cluster://app:pw@10.0.0.1:7000, 10.0.0.2:7001/"),
            Ok(RedisTarget::Cluster(vec![
                "redis://app:pw@10.0.0.1:7000".to_owned(),
                "redis://app:pw@10.0.0.2:7001".to_owned(),
            ]))
        );
        assert_eq!(
            parse("REDIS+CLUSTER://[::1]:7000"),
            Ok(RedisTarget::Cluster(vec!["redis://[::1]:7000".to_owned()]))
        );
    }

    #[test]
    fn a_malformed_cluster_url_says_what_is_wrong() {
        let error = |url| parse(url).expect_err(url);
        assert!(error("redis+cluster://").contains("names no node"));
        assert!(error("redis+cluster://h1").contains("no port"));
        assert!(error("redis+cluster://h1:0").contains("invalid port"));
        assert!(error("redis+cluster://h1:x").contains("invalid port"));
        assert!(error("redis+cluster://:7000").contains("no host"));
        assert!(error("redis+cluster://h1:7000/3").contains("no database"));
        assert!(error("rediss+cluster://h1:7000/0").contains("no database"));
    }
}
