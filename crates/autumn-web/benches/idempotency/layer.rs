//! What the idempotency layer costs a real HTTP client: requests per second
//! and per CPU second through the layer (first-time key, replayed key, no
//! key) and through the submit-token layer's minting `GET`, against the same
//! routes with no layer, in rounds; then the ratios against DESIGN's targets.

use std::sync::Arc;
use std::time::{Duration, Instant};

use autumn_web::idempotency::{IdempotencyLayer, MemoryIdempotencyStore};
use http::{HeaderValue, Uri};

use crate::harness::{
    Config, FIRST_TIME_TARGET, HttpClient, LAYER_OFF_TARGET, MINT_TARGET, REPLAY_KEYS,
    REPLAY_TARGET, Sample, build_request, cpu_time, http_client, median, middle_half, orders_uri,
    router, selected, send, serve, verdict,
};
#[cfg(feature = "redis")]
use crate::harness::{REDIS_FIRST_TIME_COMMANDS, REDIS_REPLAY_COMMANDS, at_most};
use crate::submit_mint::{bare_form_router, form_uri, mint_form_router, send_get};

/// Which store the layer in front of the route uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Memory,
    #[cfg(feature = "redis")]
    Redis,
    #[cfg(feature = "postgres")]
    Postgres,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Self::Memory => "memory",
            #[cfg(feature = "redis")]
            Self::Redis => "redis",
            #[cfg(feature = "postgres")]
            Self::Postgres => "postgres",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// `POST /orders` with no layer, sent the same requests as `FirstTime`
    /// (a unique `Idempotency-Key` each, which the route ignores): the
    /// baseline the layer's ratios are taken against.
    Bare,
    FirstTime,
    /// `FirstTime` against a store whose records expire after a second, so
    /// it stops growing: what a first-time request costs once the store has
    /// reached its steady size, without the cost of growing it.
    FirstSteady,
    Replay,
    NoKey,
    /// `GET /form`, no layer.
    FormBare,
    /// `GET /form` behind the submit-token layer, minting a token.
    FormMint,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Scenario {
    kind: Kind,
    /// The layer's store (ignored for `Bare`).
    backend: Backend,
}

impl Scenario {
    const fn new(kind: Kind, backend: Backend) -> Self {
        Self { kind, backend }
    }

    /// The memory-store scenarios, always run, in this order.
    const BASE: [Self; 7] = [
        Self::new(Kind::Bare, Backend::Memory),
        Self::new(Kind::FirstTime, Backend::Memory),
        Self::new(Kind::FirstSteady, Backend::Memory),
        Self::new(Kind::Replay, Backend::Memory),
        Self::new(Kind::NoKey, Backend::Memory),
        Self::new(Kind::FormBare, Backend::Memory),
        Self::new(Kind::FormMint, Backend::Memory),
    ];

    /// Every scenario this build can run, whether or not its store answers.
    fn possible() -> Vec<Self> {
        #[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(unused_mut))]
        let mut all = Self::BASE.to_vec();
        #[cfg(feature = "redis")]
        all.extend([Kind::FirstTime, Kind::Replay].map(|kind| Self::new(kind, Backend::Redis)));
        #[cfg(feature = "postgres")]
        all.extend([Kind::FirstTime, Kind::Replay].map(|kind| Self::new(kind, Backend::Postgres)));
        all
    }

    fn label(self) -> String {
        let store = match self.backend {
            Backend::Memory => "layer",
            #[cfg(feature = "redis")]
            Backend::Redis => "redis layer",
            #[cfg(feature = "postgres")]
            Backend::Postgres => "postgres layer",
        };
        match self.kind {
            Kind::Bare => "bare (no layer, unique keys)".to_owned(),
            Kind::FirstTime => format!("{store}, first-time key"),
            Kind::Replay => format!("{store}, replayed key"),
            Kind::NoKey => format!("{store}, no key"),
            Kind::FirstSteady => "layer, first-time key, 1 s store".to_owned(),
            Kind::FormBare => "bare GET /form (no layer)".to_owned(),
            Kind::FormMint => "submit-token layer, mint GET".to_owned(),
        }
    }

    /// For the per-round lines.
    fn short(self) -> String {
        let kind = match self.kind {
            Kind::Bare => return "bare".to_owned(),
            Kind::FormBare => return "get-bare".to_owned(),
            Kind::FormMint => return "get-mint".to_owned(),
            Kind::FirstTime => "first",
            Kind::Replay => "replay",
            Kind::NoKey => "no-key",
            Kind::FirstSteady => "first-steady",
        };
        if self.backend == Backend::Memory {
            kind.to_owned()
        } else {
            format!("{}-{kind}", self.backend.name())
        }
    }
}

/// The server each scenario's requests go to.
struct Servers {
    bare: Uri,
    /// `GET /form` without and with the submit-token layer.
    form_bare: Uri,
    form_mint: Uri,
    /// The layer over a store that keeps records for one second.
    steady: Uri,
    /// One server per store, each with the layer over that store.
    layers: Vec<(Backend, Uri)>,
}

impl Servers {
    fn uri(&self, scenario: Scenario) -> Uri {
        match scenario.kind {
            Kind::Bare => return self.bare.clone(),
            Kind::FormBare => return self.form_bare.clone(),
            Kind::FormMint => return self.form_mint.clone(),
            Kind::FirstSteady => return self.steady.clone(),
            Kind::FirstTime | Kind::Replay | Kind::NoKey => {}
        }
        self.layers
            .iter()
            .find(|(backend, _)| *backend == scenario.backend)
            .map(|(_, uri)| uri.clone())
            .expect("a server for every scenario's store")
    }
}

/// Runs one scenario with `concurrency` keep-alive connections: `warmup`,
/// then `measure` during which completed requests are counted.
async fn run_scenario(
    client: &HttpClient,
    servers: &Servers,
    scenario: Scenario,
    run: usize,
    config: &Config,
) -> Sample {
    let uri = servers.uri(scenario);
    let kind = scenario.kind;
    let start = Instant::now() + config.warmup;
    let end = start + config.measure;
    let tasks: Vec<_> = (0..config.concurrency)
        .map(|task| {
            let client = client.clone();
            let uri = uri.clone();
            tokio::spawn(async move {
                let expect_replayed = kind == Kind::Replay;
                let mut counted = 0u64;
                let mut n = 0usize;
                while Instant::now() < end {
                    let key = match kind {
                        Kind::NoKey | Kind::FormBare | Kind::FormMint => None,
                        // The bare route gets the very requests the layer
                        // gets (it ignores the key), so the client's work
                        // and the bytes on the wire are the same in both.
                        Kind::Bare | Kind::FirstTime | Kind::FirstSteady => Some(
                            HeaderValue::try_from(format!("bench-{run}-{task}-{n}"))
                                .expect("valid key"),
                        ),
                        Kind::Replay => Some(HeaderValue::from_static(
                            REPLAY_KEYS[(task + n) % REPLAY_KEYS.len()],
                        )),
                    };
                    match kind {
                        Kind::FormBare | Kind::FormMint => {
                            send_get(&client, &uri, kind == Kind::FormMint).await;
                        }
                        _ => send(&client, build_request(&uri, key), expect_replayed).await,
                    }
                    let done = Instant::now();
                    if done >= start && done < end {
                        counted += 1;
                    }
                    n += 1;
                }
                counted
            })
        })
        .collect();
    tokio::time::sleep_until(start.into()).await;
    let cpu_start = cpu_time();
    tokio::time::sleep_until(end.into()).await;
    let cpu_used = cpu_time()
        .zip(cpu_start)
        .map(|(end, start)| end.saturating_sub(start));
    let mut total = 0u64;
    for task in tasks {
        total += task.await.expect("client task completes");
    }
    let total = total as f64;
    Sample {
        per_sec: total / config.measure.as_secs_f64(),
        per_cpu_sec: cpu_used
            .filter(|cpu| !cpu.is_zero())
            .map_or(f64::NAN, |cpu| total / cpu.as_secs_f64()),
    }
}

pub(crate) async fn http_bench(config: &Config) {
    // `AUTUMN_BENCH_ONLY` naming only other parts' scenarios: nothing to set
    // up (the external stores print lines of their own).
    if !Scenario::possible().iter().any(|s| selected(&s.short())) {
        return;
    }
    // A run stores millions of keys: lift the default cap (500,000), which
    // would answer 503 part way through and measure nothing.
    let store = Arc::new(
        MemoryIdempotencyStore::new(Duration::from_secs(3600))
            .with_max_entries(usize::MAX)
            .with_max_bytes(usize::MAX),
    );
    let bare = serve(router()).await;
    let layered = serve(router().layer(IdempotencyLayer::new(store.clone()))).await;
    // Only the store features add servers.
    #[cfg_attr(not(any(feature = "redis", feature = "postgres")), allow(unused_mut))]
    let mut servers = Servers {
        bare: orders_uri(bare),
        form_bare: form_uri(serve(bare_form_router()).await),
        form_mint: form_uri(serve(mint_form_router()).await),
        steady: orders_uri(
            serve(router().layer(IdempotencyLayer::new(Arc::new(
                MemoryIdempotencyStore::new(Duration::from_secs(1)),
            ))))
            .await,
        ),
        layers: vec![(Backend::Memory, orders_uri(layered))],
    };
    let mut scenarios = Scenario::BASE.to_vec();

    // The external stores, each skipped (with a line saying so) when its
    // service does not answer. Dropping them deletes what they stored.
    #[cfg(feature = "redis")]
    let redis = crate::redis::RedisBench::setup().await;
    #[cfg(feature = "redis")]
    if let Some(redis) = &redis {
        let addr = serve(router().layer(redis.layer())).await;
        servers.layers.push((Backend::Redis, orders_uri(addr)));
    }
    #[cfg(feature = "postgres")]
    let postgres = crate::postgres::PgBench::setup(config.concurrency).await;
    #[cfg(feature = "postgres")]
    if let Some(postgres) = &postgres {
        let addr = serve(router().layer(postgres.layer())).await;
        servers.layers.push((Backend::Postgres, orders_uri(addr)));
    }
    for &(backend, _) in &servers.layers[1..] {
        scenarios.push(Scenario::new(Kind::FirstTime, backend));
        scenarios.push(Scenario::new(Kind::Replay, backend));
    }
    scenarios.retain(|s| selected(&s.short()));

    let client = http_client(config);

    // Record the keys the replay scenarios hammer, on every store: the first
    // request with each runs the handler, so it must not be marked as a replay.
    for (_, uri) in &servers.layers {
        for key in REPLAY_KEYS {
            let request = build_request(uri, Some(HeaderValue::from_static(key)));
            send(&client, request, false).await;
        }
    }

    let workers = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "\n== HTTP/1.1 keep-alive, {} connections, {} rounds x {} scenarios, {:.1}s measured \
         (+{:.1}s warm-up) each; server and client share one {workers}-worker runtime",
        config.concurrency,
        config.rounds,
        scenarios.len(),
        config.measure.as_secs_f64(),
        config.warmup.as_secs_f64(),
    );
    // samples[scenario][round]
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); scenarios.len()];
    let mut run = 0;
    // Two phases: the form GETs first, on a heap the stores have not grown
    // yet, then the POSTs. Interleaved, the GETs would run inside a heap
    // holding a million recorded responses, and measure that more than the
    // minting.
    let is_form = |scenario: &Scenario| matches!(scenario.kind, Kind::FormBare | Kind::FormMint);
    for forms in [true, false] {
        let phase: Vec<usize> = (0..scenarios.len())
            .filter(|&index| is_form(&scenarios[index]) == forms)
            .collect();
        if phase.is_empty() {
            continue;
        }
        for round in 1..=config.rounds {
            let mut line = format!("round {round}:");
            for (position, &index) in phase.iter().enumerate() {
                let scenario = scenarios[index];
                let sample = run_scenario(&client, &servers, scenario, run, config).await;
                run += 1;
                samples[index].push(sample);
                if position > 0 && position % 4 == 0 {
                    line.push_str("\n        ");
                }
                line.push_str(&format!(
                    "  {} {:.0}/s ({:.0}/cpu-s)",
                    scenario.short(),
                    sample.per_sec,
                    sample.per_cpu_sec
                ));
            }
            println!("{line}");
        }
    }

    println!(
        "\n{:<32} {:>10} {:>12}",
        "median of rounds", "req/s", "req/cpu-s"
    );
    for (index, scenario) in scenarios.iter().enumerate() {
        println!(
            "{:<32} {:>10.0} {:>12.0}",
            scenario.label(),
            median(samples[index].iter().map(|s| s.per_sec)),
            median(samples[index].iter().map(|s| s.per_cpu_sec)),
        );
    }
    if scenarios.len() < Scenario::BASE.len() {
        // A profiling run of some scenarios only: no ratios to compare.
        return;
    }
    // Each ratio is taken within a round (runs seconds apart), then the
    // median over rounds: drift between rounds cancels out.
    let index_of = |kind: Kind, backend: Backend| {
        scenarios
            .iter()
            .position(|s| s.kind == kind && (kind == Kind::Bare || s.backend == backend))
            .expect("scenario runs")
    };
    let per_round = |index: usize, to: usize, metric: fn(&Sample) -> f64| -> Vec<f64> {
        samples[index]
            .iter()
            .zip(&samples[to])
            .map(|(s, base)| metric(s) / metric(base))
            .collect()
    };
    let ratio =
        |index: usize, to: usize, metric: fn(&Sample) -> f64| median(per_round(index, to, metric));
    // How far the rounds spread: the middle half of the per-round ratios.
    let spread = |index: usize, to: usize| {
        let (low, high) = middle_half(per_round(index, to, |s| s.per_cpu_sec));
        format!("{low:.2}-{high:.2}")
    };
    let bare_index = index_of(Kind::Bare, Backend::Memory);
    println!(
        "\n{:<26} {:>10} {:>12} {:>11}   target",
        "ratio to bare", "req/s", "req/cpu-s", "cpu spread"
    );
    // DESIGN's order: the layer off, then first-time and replay.
    for (kind, name, target) in [
        (
            Kind::NoKey,
            "layer off (no key) / bare",
            Some(LAYER_OFF_TARGET),
        ),
        (
            Kind::FirstTime,
            "first-time / bare",
            Some(FIRST_TIME_TARGET),
        ),
        (Kind::Replay, "replay / bare", Some(REPLAY_TARGET)),
        (Kind::FirstSteady, "first-time, 1 s store", None),
    ] {
        let index = index_of(kind, Backend::Memory);
        let wall = ratio(index, bare_index, |s| s.per_sec);
        let cpu = ratio(index, bare_index, |s| s.per_cpu_sec);
        let verdict = match target {
            Some(target) => verdict(target, wall, cpu),
            None => "(store not growing)".to_owned(),
        };
        let spread = spread(index, bare_index);
        println!("{name:<26} {wall:>9.3}x {cpu:>11.3}x {spread:>11}   {verdict}");
    }
    let form_bare = index_of(Kind::FormBare, Backend::Memory);
    let form_mint = index_of(Kind::FormMint, Backend::Memory);
    let wall = ratio(form_mint, form_bare, |s| s.per_sec);
    let cpu = ratio(form_mint, form_bare, |s| s.per_cpu_sec);
    println!(
        "{:<26} {wall:>9.3}x {cpu:>11.3}x {:>11}   {}",
        "mint GET / bare GET",
        spread(form_mint, form_bare),
        verdict(MINT_TARGET, wall, cpu)
    );
    println!(
        "(ratios: median over rounds of the ratio within each round; spread: \
         the middle half of the rounds' req/cpu-s ratios)"
    );
    if servers.layers.len() > 1 {
        println!(
            "\n{:<24} {:>10} {:>12} {:>10} {:>12}",
            "store ratios", "/memory", "/memory cpu", "/bare", "/bare cpu"
        );
        for &(backend, _) in &servers.layers[1..] {
            for (kind, what) in [(Kind::FirstTime, "first-time"), (Kind::Replay, "replay")] {
                let index = index_of(kind, backend);
                let memory = index_of(kind, Backend::Memory);
                println!(
                    "{:<24} {:>9.3}x {:>11.3}x {:>9.3}x {:>11.3}x",
                    format!("{} {what}", backend.name()),
                    ratio(index, memory, |s| s.per_sec),
                    ratio(index, memory, |s| s.per_cpu_sec),
                    ratio(index, bare_index, |s| s.per_sec),
                    ratio(index, bare_index, |s| s.per_cpu_sec),
                );
            }
        }
        println!(
            "(/memory: against the memory-store layer on the same kind of request; same \
             rounds, median of per-round ratios. cpu counts this process only, not \
             redis-server's or postgres's work: read req/s for these stores)"
        );
    }
    println!("memory store entries after the run: {}", store.len());

    #[cfg(any(feature = "redis", feature = "postgres"))]
    {
        println!(
            "\n== store round trips per request, counted from what the server receives \
             ({} sequential requests per batch, one store connection)",
            config.count
        );
        let mut summary = Vec::new();
        #[cfg(feature = "redis")]
        if let Some(redis) = &redis
            && let Some((first, replay)) = redis.count(&client, config.count).await
        {
            summary.push(format!(
                "redis: {first:.2} commands per first-time request ({}), {replay:.2} per \
                 replay ({})",
                at_most(REDIS_FIRST_TIME_COMMANDS, first),
                at_most(REDIS_REPLAY_COMMANDS, replay),
            ));
        }
        #[cfg(feature = "postgres")]
        if let Some(postgres) = &postgres
            && let Some((first, replay)) = postgres.count(&client, config.count).await
        {
            summary.push(format!(
                "postgres: {first:.2} statements per first-time request, {replay:.2} per replay"
            ));
        }
        if summary.is_empty() {
            println!("(no store counted)");
        } else {
            println!("{}", summary.join("; "));
        }
        println!();
    }
    // Deletes the Redis keys and drops the PostgreSQL schema, printing so.
    #[cfg(feature = "redis")]
    drop(redis);
    #[cfg(feature = "postgres")]
    drop(postgres);
}
