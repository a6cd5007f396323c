//! What the federation controller costs, measured from outside (DESIGN.md §10, issue 12), never
//! asserted. The controller is the `comb run` binary of this workspace, a process of its own:
//! its requests are counted by the API servers' request logs (the sandbox's test controls, in
//! front of the emulator or of a real kube-apiserver), its memory read from /proc/PID/status.
//! Nothing here looks inside the controller, so the figures stay comparable as it changes.
//!
//! Every phase runs on fresh clusters of the same shape: prod and dev, and staging, a namespace
//! of prod's server. Three layers: prod (`platform` on prod), staging (`staging` on prod,
//! borrowing from prod) and dev (`platform` on dev, borrowing from staging). Each Comb is the
//! kit's web Comb (a Deployment and a Service, endpoint `http` published as 192.0.2.10:80), so a
//! borrowing Comb deploys a bridge (a selector-less Service and an EndpointSlice).
//!
//! 1. **Edit.** `COMB_BENCH_EDIT_COMBS` Combs per layer, resync 1 h (so that nothing else runs);
//!    `COMB_BENCH_EDITS` times an image of a prod Comb is edited: the time until a watch sees
//!    the Deployment with the new image (reaction), and every request along the three layers
//!    until the chain is quiet again. After each edit a plain client makes the two writes a
//!    reaction holds, each timed until its watch sees it: the same edit of a Comb in a namespace
//!    no layer watches, and an apply of the edited Deployment under a name no Comb selects. The
//!    reaction less those two is comb's part.
//! 2. **Convergence.** `COMB_BENCH_COMBS` Combs per layer created, then the controller started
//!    (resync `COMB_BENCH_RESYNC`): requests and time until every Comb is Running.
//! 3. **Settled resync.** `COMB_BENCH_SETTLE` later, one resync period of the same controller:
//!    requests per Comb, and the burst factor (the busiest 1 s of the period against its mean).
//! 4. **Plain client.** On fresh clusters, the objects comb deployed in phase 2 (read back from
//!    the Combs' `managedResources`) created once each by a plain client, `COMB_BENCH_WORKERS`
//!    at a time per layer as the controller steps Combs, until the Deployments are ready.
//! 5. **Floor client.** On fresh clusters with the same Combs created, the convergence's floor
//!    writes made by a client with no work of its own and comb's request shapes: each object
//!    once, each Comb's finalizer, and a status write and an Event per transition comb recorded
//!    in phase 2, `COMB_BENCH_WORKERS` at a time per layer, until the Deployments are ready. What
//!    any truthful controller costs the server at least, beside the plain client and comb.
//! 6. **Memory.** For each size of `COMB_BENCH_RSS` (Combs in all, a third per layer): Combs
//!    created up to that size, a fresh controller started, and `COMB_BENCH_SETTLE` after all
//!    are Running, its VmRSS and VmHWM; first with no Comb at all.
//!
//! 7. **Growth** (not in the default phases). For each size of `COMB_BENCH_GROWTH` (Combs in
//!    all, a third per layer; default `3000,10000` / `150,450`), phase 2's convergence and
//!    phase 4's plain client on fresh clusters, and how each time grew from the smallest size:
//!    comb's growth beside the server's own.
//!
//! 8. **Layers on demand** (issue 34; not in the default phases). Clusters of the same shape,
//!    the CombLayer CRD on prod, and a configuration of staging alone with a template `dev`
//!    (contexts `[dev]`, namespaces `dev-*`, borrowing from staging, `createNamespaces`):
//!    `COMB_BENCH_LAYER_COMBS` (20) Combs in staging, `comb run` started, then
//!    `COMB_BENCH_LAYERS` (200) CombLayers created one after another, each once the one
//!    before is Ready and the servers have seen no read or write of the controller for 1 s,
//!    each borrowing every Comb of staging into its own namespace `dev-lNNNN` of dev: the time
//!    from each create until the observer sees it Ready; `comb run`'s VmRSS with 0, 1 and every
//!    layer settled; the requests creating the first layer and all of them; one resync period
//!    settled with every layer; the watches open per cluster and kind with 0, 1 and every layer
//!    (the watch requests of the 290 s before: each watch is opened again after its 290 s
//!    timeout, so it is counted once in any such window); then 5 layers removed one at a time
//!    (their CombLayer deleted): the time until the CombLayer is gone, and its namespace
//!    Terminating and gone.
//!
//! Phases 1 and 2 also print comb's writes against **the floor** a truthful controller needs
//! (issue 23): each object written once (for an edit, the one Deployment), one finalizer per
//! Comb, and one status write and one Event per transition comb recorded (its
//! `comb_transitions_total`, read from the controller's `/metrics`), per kind, with the
//! transitions by the state they reached.
//!
//! What the bench itself does (creating and editing Combs, watching for the outcome) it does as
//! the kit's observer, whose requests the counts leave out.
//!
//! ```text
//! cargo bench -p comb-federation --bench controller                       # the emulator
//! COMB_TEST_BACKEND=kube cargo bench -p comb-federation --bench controller # real servers
//! ```
//!
//! Defaults (emulator / kube): COMB_BENCH_COMBS 300 / 50 (1000 for the issue's 3x1,000),
//! COMB_BENCH_RESYNC 60s, COMB_BENCH_SETTLE 10s / 30s, COMB_BENCH_EDITS 20 / 5,
//! COMB_BENCH_EDIT_COMBS 20 / 5, COMB_BENCH_WORKERS 8, COMB_BENCH_RSS `1000,3000` / `150` (add
//! 10000 for the issue's figure; empty for none), COMB_BENCH_PHASES
//! `edit,converge,plain,floor,rss` (any subset, and `growth`, `layers`; plain and floor need
//! converge), COMB_BENCH_LAYERS 200, COMB_BENCH_LAYER_COMBS 20.
//! COMB_BENCH_LOGS=DIR keeps each controller's log there, COMB_BENCH_RUST_LOG sets its RUST_LOG
//! (default `warn`). COMB_BENCH_AGAINST=PATH runs the
//! edit phase of that other build of `comb` too, in turns with this one's on the same settled
//! Combs (this, other, other, this), and prints its figures beside: an A/B in one run.
//! COMB_BIN=PATH measures that build of `comb` instead of this one's.
//!
//! COMB_BENCH_BUDGET=KIB makes the memory phase a check: the bench fails when `comb run`'s
//! VmRSS over the idle process, per Comb, exceeds KIB at any size measured. CI runs it on the
//! release binary of comb's image (`tests/image/build --print-binary`) at 3,000 Combs with the
//! budget of [docs/benchmarks.md](../../docs/benchmarks.md#the-memory-budget):
//!
//! ```text
//! COMB_BIN=$(tests/image/build --print-binary) COMB_BENCH_PHASES=rss COMB_BENCH_RSS=3000 \
//!   COMB_BENCH_BUDGET=12 cargo test -p comb-federation --bench controller
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};
use comb_api::{
    Comb, CombLayer, CombLayerSpec, CombSpec, CombStatus, DEFAULT_GROUP, LayerBorrowSpec,
    LayerPhase, layer_api_resource,
};
use comb_federation::controller::events;
use comb_sandbox::controls::{LoggedRequest, epoch_micros};
use comb_testkit::fixtures::deployment_image;
use comb_testkit::{Backend, OBSERVER, Setup, World};
use futures::stream::{self, BoxStream};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
    WatchEvent, WatchParams,
};
use kube::core::{GroupVersionKind, TypeMeta};
use kube::runtime::watcher::{self, Event};
use serde_json::{Value, json};

/// The Comb CRs the bench creates at once.
const CREATORS: usize = 16;

/// The three layers: name, context, cluster, namespace.
const LAYERS: [(&str, &str, &str, &str); 3] = [
    ("prod", "prod", "prod", "platform"),
    ("staging", "staging", "prod", "staging"),
    ("dev", "dev", "dev", "platform"),
];

const CONFIG: &str = "
kubeconfig: KUBECONFIG
resync: RESYNC
layers:
  - {name: prod, context: prod, namespaces: [platform]}
  - {name: staging, context: staging, namespaces: [staging], borrow: {from: prod, namespace: platform}}
  - {name: dev, context: dev, namespaces: [platform], borrow: {from: staging, namespace: staging}}
";

// ---------------------------------------------------------------------------------------------
// Settings

struct Settings {
    backend: Backend,
    combs: usize,
    resync: Duration,
    settle: Duration,
    edits: usize,
    edit_combs: usize,
    workers: usize,
    rss_sizes: Vec<usize>,
    /// The sizes of the growth phase (Combs in all), smallest first.
    growth_sizes: Vec<usize>,
    /// The layers phase: how many CombLayers, and how many Combs staging has (each layer
    /// borrows every one).
    layers: usize,
    layer_combs: usize,
    phases: Vec<String>,
    /// Another build of `comb` (`COMB_BENCH_AGAINST`) whose edit phase runs beside this one's.
    against: Option<PathBuf>,
    /// KiB per Comb over the idle process the memory phase may not exceed (`COMB_BENCH_BUDGET`).
    budget: Option<f64>,
    /// How long the API servers must see no request of the controller to call it quiet.
    quiet: Duration,
    /// The longest any wait may take.
    deadline: Duration,
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

fn env_number(name: &str, default: usize) -> Result<usize> {
    env_or(name, &default.to_string())
        .trim()
        .parse()
        .with_context(|| format!("{name} is not a number"))
}

/// Sizes separated by commas; none for an empty value.
fn env_sizes(name: &str, default: &str) -> Result<Vec<usize>> {
    env_or(name, default)
        .split(',')
        .map(str::trim)
        .filter(|size| !size.is_empty())
        .map(|size| {
            size.parse()
                .with_context(|| format!("{name}: sizes separated by commas"))
        })
        .collect()
}

fn env_duration(name: &str, default: &str) -> Result<Duration> {
    let text = env_or(name, default);
    comb_federation::config::parse_positive_duration(&text)
        .map_err(|message| anyhow::anyhow!("{name}: {message}"))
}

impl Settings {
    fn from_env() -> Result<Settings> {
        let backend = Backend::from_env();
        let kube = backend == Backend::Kube;
        let pick = |emulator: &'static str, real: &'static str| if kube { real } else { emulator };
        let rss_sizes = env_sizes("COMB_BENCH_RSS", pick("1000,3000", "150"))?;
        let mut growth_sizes = env_sizes("COMB_BENCH_GROWTH", pick("3000,10000", "150,450"))?;
        growth_sizes.sort_unstable();
        growth_sizes.dedup();
        Ok(Settings {
            backend,
            combs: env_number("COMB_BENCH_COMBS", if kube { 50 } else { 300 })?,
            resync: env_duration("COMB_BENCH_RESYNC", "60s")?,
            settle: env_duration("COMB_BENCH_SETTLE", pick("10s", "30s"))?,
            edits: env_number("COMB_BENCH_EDITS", if kube { 5 } else { 20 })?,
            edit_combs: env_number("COMB_BENCH_EDIT_COMBS", if kube { 5 } else { 20 })?.max(1),
            workers: env_number("COMB_BENCH_WORKERS", 8)?.max(1),
            rss_sizes,
            growth_sizes,
            layers: env_number("COMB_BENCH_LAYERS", 200)?.max(1),
            layer_combs: env_number("COMB_BENCH_LAYER_COMBS", 20)?,
            phases: env_or("COMB_BENCH_PHASES", "edit,converge,plain,floor,rss")
                .split(',')
                .map(|phase| phase.trim().to_string())
                .collect(),
            against: std::env::var_os("COMB_BENCH_AGAINST")
                .filter(|path| !path.is_empty())
                .map(PathBuf::from),
            budget: match std::env::var("COMB_BENCH_BUDGET") {
                Ok(text) if !text.trim().is_empty() => Some(
                    text.trim()
                        .parse::<f64>()
                        .ok()
                        .filter(|kib| *kib > 0.0)
                        .with_context(|| {
                            format!("COMB_BENCH_BUDGET: {text:?} is not a positive number of KiB")
                        })?,
                ),
                _ => None,
            },
            quiet: if kube {
                Duration::from_secs(3)
            } else {
                Duration::from_secs(1)
            },
            deadline: Duration::from_secs(if kube { 900 } else { 1800 }),
        })
    }

    fn runs(&self, phase: &str) -> bool {
        self.phases.iter().any(|p| p == phase)
    }

    fn backend_name(&self) -> &'static str {
        match self.backend {
            Backend::Emulator => "emulator",
            Backend::Kube => "kube (real kube-apiserver, kwok)",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Clusters and the controller process

/// Fresh clusters of the benchmark's shape, recording every request if `record`.
async fn clusters(settings: &Settings, record: bool) -> World {
    let world = Setup::clusters(["prod", "dev"])
        .on(settings.backend)
        .context("staging", "prod", "staging")
        .namespace("prod", "platform")
        .namespace("prod", "staging")
        .namespace("dev", "platform")
        .start()
        .await;
    for cluster in ["prod", "dev"] {
        world.controls(cluster).record_requests(record);
    }
    world
}

/// `comb run` on the benchmark's layers, a process of its own.
struct ControllerProcess {
    child: tokio::process::Child,
    /// Where it serves `/metrics`.
    admin: std::net::SocketAddr,
    stderr: PathBuf,
    _dir: tempfile::TempDir,
}

impl ControllerProcess {
    async fn start(world: &World, resync: Duration, workers: usize) -> Result<ControllerProcess> {
        Self::start_build(
            comb_testkit::bin::comb_path(),
            world,
            CONFIG,
            resync,
            workers,
        )
        .await
    }

    /// `comb run` of the build at `comb`, on the configuration `config` (its `KUBECONFIG` and
    /// `RESYNC` filled in).
    async fn start_build(
        comb: &Path,
        world: &World,
        config: &str,
        resync: Duration,
        workers: usize,
    ) -> Result<ControllerProcess> {
        let dir = tempfile::tempdir()?;
        let kubeconfig = dir.path().join("kubeconfig.yaml");
        world.write_kubeconfig(&kubeconfig);
        let config_path = dir.path().join("comb.yaml");
        std::fs::write(
            &config_path,
            config
                .replace("KUBECONFIG", &kubeconfig.display().to_string())
                .replace("RESYNC", &format!("{}ms", resync.as_millis())),
        )?;
        let stderr = dir.path().join("comb.log");
        // A port free a moment ago: comb's own listener on port 0 would say its port only in a
        // log line at INFO.
        let admin = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
        let mut command = tokio::process::Command::new(comb);
        command
            .arg("run")
            .arg("--config")
            .arg(&config_path)
            .arg("--admin-address")
            .arg(admin.to_string())
            .arg("--workers")
            .arg(workers.to_string())
            .env("RUST_LOG", env_or("COMB_BENCH_RUST_LOG", "warn"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr)?)
            .kill_on_drop(true);
        let child = command.spawn().context("starting comb run")?;
        Ok(ControllerProcess {
            child,
            admin,
            stderr,
            _dir: dir,
        })
    }

    /// Resident and peak resident memory (VmRSS, VmHWM) in KiB.
    fn memory(&self) -> Result<(u64, u64)> {
        let pid = self.child.id().context("comb run has exited")?;
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(name))
                .and_then(|rest| rest.split_whitespace().next())
                .and_then(|kib| kib.parse::<u64>().ok())
                .with_context(|| format!("no {name} in /proc/{pid}/status"))
        };
        Ok((field("VmRSS:")?, field("VmHWM:")?))
    }

    /// The CPU time it spent so far.
    fn cpu(&self) -> Result<Duration> {
        let pid = self.child.id().context("comb run has exited")?;
        process_cpu(&pid.to_string())
    }

    /// The transitions and status writes it recorded so far (`comb_transitions_total`,
    /// `comb_status_writes_total`).
    async fn recorded(&self) -> Result<Recorded> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut stream = tokio::net::TcpStream::connect(self.admin)
            .await
            .with_context(|| format!("connecting to comb's admin address {}", self.admin))?;
        stream
            .write_all(b"GET /metrics HTTP/1.1\r\nHost: comb\r\nConnection: close\r\n\r\n")
            .await?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await?;
        Ok(Recorded::parse(&response))
    }

    /// Runs `work` while watching the process: it failing ends the wait with its last words.
    async fn guard<T>(&mut self, work: impl Future<Output = Result<T>>) -> Result<T> {
        tokio::select! {
            outcome = work => outcome,
            exited = self.child.wait() => {
                let log = std::fs::read_to_string(&self.stderr).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(20).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                bail!("comb run exited ({:?}):\n{}", exited?, tail.join("\n"))
            }
        }
    }

    /// Stops the process; its log (warnings and errors) is kept in `$COMB_BENCH_LOGS/<name>.log`
    /// if that is set.
    async fn stop(mut self, name: &str) -> Result<()> {
        self.child.kill().await?;
        if let Ok(dir) = std::env::var("COMB_BENCH_LOGS") {
            std::fs::create_dir_all(&dir)?;
            std::fs::copy(&self.stderr, Path::new(&dir).join(format!("{name}.log")))?;
        }
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------
// Combs

/// The Deployment and Service `name` of the kit's web Comb.
fn manifests(name: &str, image: &str) -> Value {
    comb_testkit::fixtures::web(name, image)["config"]["manifests"].take()
}

fn spec(name: &str, image: &str) -> Result<CombSpec> {
    Ok(serde_json::from_value(json!({
        "class": "Manifests",
        "config": {
            "manifests": manifests(name, image),
            "endpoints": [{"name": "http", "port": 80, "external": "192.0.2.10:80"}]
        }
    }))?)
}

fn comb_name(index: usize) -> String {
    format!("c{index:05}")
}

/// The Combs of a layer as the observer reads and writes them.
async fn observed_combs(world: &World, context: &str, namespace: &str) -> Api<Comb> {
    Api::namespaced_with(
        world.observer(context).await,
        namespace,
        &comb_api::api_resource(DEFAULT_GROUP),
    )
}

/// Creates Combs `from..to` in every layer (as the observer). A real kube-apiserver answers 503
/// for a moment after a CRD is installed: such a create is tried again.
async fn create_combs(world: &World, from: &[usize; 3], to: &[usize; 3]) -> Result<()> {
    let mut creates = Vec::new();
    for (layer, (_, context, _, namespace)) in LAYERS.iter().enumerate() {
        let api = observed_combs(world, context, namespace).await;
        for index in from[layer]..to[layer] {
            creates.push((api.clone(), namespace.to_string(), comb_name(index)));
        }
    }
    stream::iter(creates)
        .map(|(api, namespace, name)| async move {
            let comb = Comb::new(DEFAULT_GROUP, &namespace, &name, spec(&name, "nginx:1")?);
            let mut tries = 0;
            loop {
                match api.create(&PostParams::default(), &comb).await {
                    Ok(_) => return Ok(()),
                    Err(kube::Error::Api(status)) if status.code == 503 && tries < 50 => {
                        tries += 1;
                        tokio::time::sleep(Duration::from_millis(200)).await;
                    }
                    Err(error) => {
                        return Err(anyhow::Error::from(error))
                            .with_context(|| format!("creating Comb {namespace}/{name}"));
                    }
                }
            }
        })
        .buffer_unordered(CREATORS)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

fn phase_of(comb: &Comb) -> Option<&str> {
    comb.status.as_ref()?.phase.as_ref().map(|p| p.as_str())
}

/// Watches `api` (as the observer) until `count` of its objects satisfy `done`.
async fn watch_until<K>(api: Api<K>, count: usize, done: impl Fn(&K) -> bool) -> Result<()>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let mut satisfied = Satisfied::default();
    let mut relisted = Satisfied::default();
    let events = watcher::watcher(api, watcher::Config::default());
    futures::pin_mut!(events);
    while satisfied.held < count {
        let Some(event) = events.try_next().await? else {
            bail!("the watch ended");
        };
        match event {
            Event::Apply(object) => satisfied.record(name_of(&object), done(&object)),
            Event::Delete(object) => satisfied.forget(&name_of(&object)),
            Event::Init => relisted = Satisfied::default(),
            Event::InitApply(object) => relisted.record(name_of(&object), done(&object)),
            Event::InitDone => satisfied = std::mem::take(&mut relisted),
        }
    }
    Ok(())
}

fn name_of(object: &impl kube::Resource) -> String {
    object.meta().name.clone().unwrap_or_default()
}

/// Which objects a watch has seen satisfy a condition, with their count kept as events come:
/// counting the map after every event made the bench's own watch cost grow with the square of
/// the objects, which at 10,000 Combs took CPU from the controller it measures.
#[derive(Default)]
struct Satisfied {
    by_name: BTreeMap<String, bool>,
    held: usize,
}

impl Satisfied {
    fn record(&mut self, name: String, ok: bool) {
        if self.by_name.insert(name, ok) == Some(true) {
            self.held -= 1;
        }
        self.held += usize::from(ok);
    }

    fn forget(&mut self, name: &str) {
        if self.by_name.remove(name) == Some(true) {
            self.held -= 1;
        }
    }
}

/// Waits until every Comb of the layers (`counts` of them each) is Running.
async fn all_running(world: &World, counts: &[usize; 3]) -> Result<()> {
    let mut waits = Vec::new();
    for (layer, (_, context, _, namespace)) in LAYERS.iter().enumerate() {
        let api = observed_combs(world, context, namespace).await;
        waits.push(watch_until(api, counts[layer], |comb| {
            phase_of(comb) == Some("Running")
        }));
    }
    futures::future::try_join_all(waits).await?;
    Ok(())
}

async fn within<T>(
    limit: Duration,
    what: &str,
    work: impl Future<Output = Result<T>>,
) -> Result<T> {
    tokio::time::timeout(limit, work)
        .await
        .with_context(|| format!("{what}: not within {} s", limit.as_secs()))?
}

// ---------------------------------------------------------------------------------------------
// Requests, from the API servers' logs

/// Which layer a request went to, by its server and namespace.
fn layer_of(cluster: &str, namespace: &str) -> &'static str {
    LAYERS
        .iter()
        .find(|(_, _, c, n)| *c == cluster && *n == namespace)
        .map(|(layer, ..)| *layer)
        .unwrap_or("cluster-wide")
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Class {
    Write,
    Read,
    Watch,
}

fn class_of(verb: &str) -> Class {
    match verb {
        "watch" => Class::Watch,
        "create" | "update" | "patch" | "delete" | "deletecollection" => Class::Write,
        // get, list, and non-resource requests (discovery, /version)
        _ => Class::Read,
    }
}

/// The requests of everyone but the observer, with the layer each went to.
#[derive(Default, Clone)]
struct Requests {
    entries: Vec<(&'static str, LoggedRequest)>,
}

impl Requests {
    /// What both clusters logged since the last [`reset`].
    fn collect(world: &World) -> Requests {
        Requests::collect_from(world, &["prod", "dev"])
    }

    /// What `clusters` logged since the last [`reset`].
    fn collect_from(world: &World, clusters: &[&str]) -> Requests {
        let mut entries = Vec::new();
        for cluster in clusters {
            for request in world.controls(cluster).request_log() {
                if request.user.as_deref() != Some(OBSERVER) {
                    entries.push((layer_of(cluster, &request.namespace), request));
                }
            }
        }
        entries.sort_by_key(|(_, request)| request.at_micros);
        Requests { entries }
    }

    fn count(&self, class: Class) -> u64 {
        self.entries
            .iter()
            .filter(|(_, request)| class_of(&request.verb) == class)
            .count() as u64
    }

    fn in_layer(&self, layer: &str) -> Requests {
        Requests {
            entries: self
                .entries
                .iter()
                .filter(|(l, _)| *l == layer)
                .cloned()
                .collect(),
        }
    }

    /// The requests that arrived from `from` until before `to` (the log's microseconds).
    fn between(&self, from: u64, to: u64) -> Requests {
        Requests {
            entries: self
                .entries
                .iter()
                .filter(|(_, request)| (from..to).contains(&request.at_micros))
                .cloned()
                .collect(),
        }
    }

    fn by_key(&self) -> BTreeMap<String, u64> {
        let mut counts = BTreeMap::new();
        for (_, request) in &self.entries {
            *counts.entry(request.key()).or_default() += 1;
        }
        counts
    }

    /// Answers of 400 and above, by status code.
    fn failures(&self) -> BTreeMap<u16, u64> {
        let mut counts = BTreeMap::new();
        for (_, request) in &self.entries {
            if request.code >= 400 {
                *counts.entry(request.code).or_default() += 1;
            }
        }
        counts
    }

    /// Requests (watches left out) per 1 s from `start` over `length`.
    fn buckets(&self, start: SystemTime, length: Duration) -> Vec<u64> {
        let start = epoch_micros(start);
        let seconds = length.as_secs().max(1) as usize;
        let mut buckets = vec![0u64; seconds];
        for (_, request) in &self.entries {
            if class_of(&request.verb) == Class::Watch || request.at_micros < start {
                continue;
            }
            let second = ((request.at_micros - start) / 1_000_000) as usize;
            if let Some(bucket) = buckets.get_mut(second) {
                *bucket += 1;
            }
        }
        buckets
    }
}

fn reset(world: &World) {
    for cluster in ["prod", "dev"] {
        world.reset_requests(cluster);
    }
}

/// Requests so far of everyone but the observer (from the counts: no log needed).
fn request_total(world: &World) -> u64 {
    ["prod", "dev"]
        .iter()
        .map(|cluster| {
            let controls = world.controls(cluster);
            let observer: u64 = controls.requests_as(OBSERVER).values().sum();
            controls.total_requests().saturating_sub(observer)
        })
        .sum()
}

/// Reads and writes so far of everyone but the observer: [`request_total`] without the
/// watches, which a controller holding thousands of them renews all the time (each after its
/// 290 s timeout).
fn reads_and_writes(world: &World) -> u64 {
    let not_watches = |counts: BTreeMap<String, u64>| -> u64 {
        counts
            .iter()
            .filter(|(key, _)| !key.starts_with("watch "))
            .map(|(_, n)| n)
            .sum()
    };
    ["prod", "dev"]
        .iter()
        .map(|cluster| {
            let controls = world.controls(cluster);
            not_watches(controls.requests())
                .saturating_sub(not_watches(controls.requests_as(OBSERVER)))
        })
        .sum()
}

/// Waits until the controller has sent no request for `quiet` (watches opening count too).
async fn quiet(world: &World, quiet: Duration) -> Result<()> {
    quiet_by(world, quiet, request_total).await
}

/// Waits until `total` (a count of the controller's requests) has not moved for `quiet`.
async fn quiet_by(world: &World, quiet: Duration, total: fn(&World) -> u64) -> Result<()> {
    let mut seen = u64::MAX;
    let mut since = Instant::now();
    loop {
        let now = total(world);
        if now != seen {
            seen = now;
            since = Instant::now();
        } else if since.elapsed() >= quiet {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The phases

/// Counts comb recorded in one of its `/metrics` counters, summed over layers, by a key made of
/// each sample's labels.
#[derive(Clone, Default)]
struct Counts(BTreeMap<String, u64>);

impl Counts {
    /// Every sample of `counter` in a `/metrics` answer, by `key` of its labels (`key` is given
    /// the lookup of a label's value, empty when absent).
    fn parse(
        metrics: &str,
        counter: &str,
        key: impl Fn(&dyn Fn(&str) -> String) -> String,
    ) -> Counts {
        let mut counts = BTreeMap::new();
        let prefix = format!("{counter}{{");
        for line in metrics.lines() {
            let Some(rest) = line.strip_prefix(&prefix) else {
                continue;
            };
            let Some((labels, value)) = rest.split_once("} ") else {
                continue;
            };
            let label = |name: &str| {
                labels
                    .split(',')
                    .find_map(|pair| pair.strip_prefix(&format!("{name}=\"")))
                    .and_then(|value| value.strip_suffix('"'))
                    .unwrap_or_default()
                    .to_string()
            };
            let value = value.trim().parse::<f64>().unwrap_or_default() as u64;
            *counts.entry(key(&label)).or_default() += value;
        }
        Counts(counts)
    }

    /// What was counted after `before`.
    fn since(&self, before: &Counts) -> Counts {
        Counts(
            self.0
                .iter()
                .map(|(key, n)| {
                    let earlier = before.0.get(key).copied().unwrap_or_default();
                    (key.clone(), n.saturating_sub(earlier))
                })
                .filter(|(_, n)| *n > 0)
                .collect(),
        )
    }

    fn total(&self) -> u64 {
        self.0.values().sum()
    }

    fn add(&mut self, other: &Counts) {
        for (key, n) in &other.0 {
            *self.0.entry(key.clone()).or_default() += n;
        }
    }

    /// `via 0.30, conditions 0.02`: each count per `of`.
    fn per(&self, of: usize) -> String {
        self.0
            .iter()
            .map(|(key, n)| format!("{key} {}", per(*n, of)))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// What comb recorded: its transitions, by the state reached (`Running (Healthy)`), and its
/// status writes, by what each changed first (`transition`, `via`, `conditions`, ...).
#[derive(Clone, Default)]
struct Recorded {
    transitions: Counts,
    status_writes: Counts,
}

impl Recorded {
    fn parse(metrics: &str) -> Recorded {
        Recorded {
            transitions: Counts::parse(metrics, "comb_transitions_total", |label| {
                match label("reason") {
                    reason if reason.is_empty() => label("phase"),
                    reason => format!("{} ({reason})", label("phase")),
                }
            }),
            status_writes: Counts::parse(metrics, "comb_status_writes_total", |label| {
                label("change")
            }),
        }
    }

    /// What was recorded after `before`.
    fn since(&self, before: &Recorded) -> Recorded {
        Recorded {
            transitions: self.transitions.since(&before.transitions),
            status_writes: self.status_writes.since(&before.status_writes),
        }
    }

    fn add(&mut self, other: &Recorded) {
        self.transitions.add(&other.transitions);
        self.status_writes.add(&other.status_writes);
    }

    /// The status writes that carried no transition, by what they changed.
    fn beyond_transitions(&self) -> Counts {
        let mut beyond = self.status_writes.clone();
        beyond.0.remove("transition");
        beyond
    }
}

/// The writes a truthful controller needs (issue 23): each object once, one finalizer per
/// Comb, and one status write and one Event per transition it recorded.
#[derive(Default)]
struct Floor {
    /// Writes per object resource (`deployments.apps`): the objects deployed or edited.
    objects: BTreeMap<String, u64>,
    finalizers: u64,
    /// What comb recorded meanwhile: a status write and an Event per transition are the floor.
    recorded: Recorded,
}

/// Where comb's writes land in the request log's resource names.
const COMB_RESOURCE: &str = "combs.comb.internal";
const STATUS_RESOURCE: &str = "combs.comb.internal/status";
const EVENT_RESOURCES: [&str; 2] = ["events", "events.events.k8s.io"];

impl Floor {
    fn of_convergence(objects: BTreeMap<String, u64>, combs: u64, recorded: Recorded) -> Floor {
        Floor {
            objects,
            finalizers: combs,
            recorded,
        }
    }

    /// One more edit: one write of `resource`, and what comb recorded for it.
    fn add_edit(&mut self, resource: &str, recorded: Recorded) {
        *self.objects.entry(resource.to_string()).or_default() += 1;
        self.recorded.add(&recorded);
    }

    /// `(what, floor, comb's writes)` per kind of write, objects first, then the total.
    fn rows(&self, requests: &Requests) -> Vec<(String, u64, u64)> {
        let mut written: BTreeMap<String, u64> = BTreeMap::new();
        for (_, request) in &requests.entries {
            if class_of(&request.verb) == Class::Write {
                *written.entry(request.resource.clone()).or_default() += 1;
            }
        }
        let mut take = |resource: &str| written.remove(resource).unwrap_or_default();
        let transitions = self.recorded.transitions.total();
        let mut rows = Vec::new();
        for (resource, floor) in &self.objects {
            rows.push((resource.clone(), *floor, take(resource)));
        }
        rows.push((
            format!("{COMB_RESOURCE} (finalizer)"),
            self.finalizers,
            take(COMB_RESOURCE),
        ));
        rows.push((
            format!("{STATUS_RESOURCE} (one per transition)"),
            transitions,
            take(STATUS_RESOURCE),
        ));
        let events = EVENT_RESOURCES.iter().map(|resource| take(resource)).sum();
        rows.push((
            "events (one per transition)".to_string(),
            transitions,
            events,
        ));
        // Whatever else comb wrote is above the floor (an object kind no Comb records).
        for (resource, n) in written {
            rows.push((resource, 0, n));
        }
        let floor = rows.iter().map(|(_, floor, _)| floor).sum();
        let comb = rows.iter().map(|(_, _, comb)| comb).sum();
        rows.push(("**all writes**".to_string(), floor, comb));
        rows
    }
}

/// The objects the Combs of every layer record in `managedResources`, per resource name as
/// the request log writes it (`deployments.apps`, `services`).
async fn managed_per_resource(world: &World) -> Result<BTreeMap<String, u64>> {
    let mut counts = BTreeMap::new();
    for (_, context, _, namespace) in LAYERS {
        let client = world.observer(context).await;
        let combs = observed_combs(world, context, namespace).await;
        let mut kinds: BTreeMap<(String, String), u64> = BTreeMap::new();
        for comb in combs.list(&ListParams::default()).await?.items {
            let recorded = comb.status.and_then(|status| status.managed_resources);
            for object in recorded.unwrap_or_default() {
                *kinds.entry((object.api_version, object.kind)).or_default() += 1;
            }
        }
        for ((api_version, kind), n) in kinds {
            let resource = api_resource(&client, &api_version, &kind).await?;
            let name = if resource.group.is_empty() {
                resource.plural
            } else {
                format!("{}.{}", resource.plural, resource.group)
            };
            *counts.entry(name).or_default() += n;
        }
    }
    Ok(counts)
}

#[derive(Default)]
struct Figures {
    /// This build's edits.
    edits: Edits,
    /// `COMB_BENCH_AGAINST`'s build's edits, in the same run.
    against: Option<Edits>,
    convergence: Option<(Requests, Duration, Cpu)>,
    /// The floor of the convergence: the objects the Combs record, their finalizers and the
    /// transitions comb recorded until every Comb was Running.
    convergence_floor: Option<Floor>,
    settled: Option<Settled>,
    plain: Option<Plain>,
    /// The floor's writes alone, made by a client with no work of its own.
    floor_client: Option<Plain>,
    /// `(Combs, VmRSS KiB, VmHWM KiB, time to converge)`.
    memory: Vec<(usize, u64, u64, Duration)>,
    /// VmRSS and VmHWM of phase 2's controller after its settled resync.
    converged_memory: Option<(u64, u64)>,
    growth: Vec<Growth>,
    layers: Option<LayerRun>,
}

/// The plain client's creation of what the Combs deployed.
struct Plain {
    requests: Requests,
    /// From its first write until its Deployments are ready.
    time: Duration,
    /// The objects it created.
    objects: usize,
    cpu: Cpu,
}

/// One size of the growth phase.
struct Growth {
    combs: usize,
    /// comb's convergence, from its start until every Comb is Running.
    comb: Duration,
    comb_cpu: Cpu,
    /// The plain client's, from its first write until its Deployments are ready.
    plain: Duration,
    plain_cpu: Cpu,
    /// comb's writes during its convergence.
    writes: u64,
    /// VmRSS of `comb run` (KiB) once every Comb is Running.
    rss: u64,
}

struct Settled {
    requests: Requests,
    buckets: Vec<u64>,
}

/// The edits of one build: the reaction to each, and every request along the chain.
#[derive(Default)]
struct Edits {
    reaction: Vec<Duration>,
    /// After each edit, a plain client's two writes of the same kinds on the same server, each
    /// seen by its watch: a reaction is these two (the edit, comb's apply) and comb's own work
    /// between them.
    round_trip: Vec<RoundTrips>,
    requests: Vec<Requests>,
    /// The floor of all of them together: one Deployment write each, and the transitions
    /// comb recorded for them (a build without `comb_transitions_total` records none).
    floor: Floor,
}

/// The edit phase: on one world of settled Combs, the edits of this build, and with
/// `COMB_BENCH_AGAINST` those of the other build too, in turns (this, other, other, this), each
/// turn a fresh controller settled before its edits: both builds see the same Combs, servers
/// and load, so that their reactions compare.
async fn edit_phase(settings: &Settings, figures: &mut Figures) -> Result<()> {
    let world = clusters(settings, true).await;
    let count = settings.edit_combs;
    create_combs(&world, &[0; 3], &[count; 3]).await?;
    let this = comb_testkit::bin::comb_path();
    let turns: Vec<(bool, &Path)> = match &settings.against {
        None => vec![(false, this)],
        Some(other) => vec![
            (false, this),
            (true, other.as_path()),
            (true, other.as_path()),
            (false, this),
        ],
    };
    let turns_per_build = if settings.against.is_some() { 2 } else { 1 };
    let per_turn = settings.edits.div_ceil(turns_per_build);
    let mut against = Edits::default();
    let mut edit = 0;
    for (turn, (other, comb)) in turns.into_iter().enumerate() {
        let mut controller = ControllerProcess::start_build(
            comb,
            &world,
            CONFIG,
            Duration::from_secs(3600),
            settings.workers,
        )
        .await?;
        controller
            .guard(within(
                settings.deadline,
                "the edit phase's Combs Running",
                all_running(&world, &[count; 3]),
            ))
            .await?;
        controller.guard(quiet(&world, settings.quiet)).await?;
        let into = if other {
            &mut against
        } else {
            &mut figures.edits
        };
        for _ in 0..per_turn {
            edit_once(settings, &world, &mut controller, edit, into).await?;
            edit += 1;
        }
        controller.stop(&format!("edit-{turn}")).await?;
    }
    if settings.against.is_some() {
        figures.against = Some(against);
    }
    world.shutdown().await;
    Ok(())
}

/// Edits the image of one prod Comb (the `edit`th edit): the time until a watch sees the
/// Deployment with the new image, and every request until the chain is quiet again.
async fn edit_once(
    settings: &Settings,
    world: &World,
    controller: &mut ControllerProcess,
    edit: usize,
    into: &mut Edits,
) -> Result<()> {
    let prod = observed_combs(world, "prod", "platform").await;
    let deployments: Api<Deployment> = Api::namespaced(world.observer("prod").await, "platform");
    let name = comb_name(edit % settings.edit_combs);
    let image = format!("nginx:edit-{edit}");
    // The watch is open before the edit, so that only the edit's effect is timed.
    let mut watch = open_watch(&deployments, &name).await?;
    reset(world);
    let recorded_before = controller.recorded().await?;
    let started = Instant::now();
    let edited = prod
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"config": {"manifests": manifests(&name, &image)}}})),
        )
        .await?;
    let generation = edited.metadata.generation.unwrap_or_default();
    let applied = controller
        .guard(within(Duration::from_secs(60), "the edit applied", async {
            seen_on(&mut watch, |deployment| {
                deployment_image(Some(deployment)).as_deref() == Some(&image)
            })
            .await?;
            Ok(started.elapsed())
        }))
        .await?;
    into.reaction.push(applied);
    // The chain is done when prod's Comb records the edit Running and nobody writes more.
    controller
        .guard(within(
            Duration::from_secs(120),
            "the edit settled",
            async {
                loop {
                    let comb = prod.get(&name).await?;
                    let observed = comb
                        .status
                        .as_ref()
                        .and_then(|status| status.observed_generation)
                        .unwrap_or_default();
                    if observed >= generation && phase_of(&comb) == Some("Running") {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                quiet(world, settings.quiet).await
            },
        ))
        .await?;
    into.requests.push(Requests::collect(world));
    let recorded = controller.recorded().await?.since(&recorded_before);
    into.floor.add_edit("deployments.apps", recorded);
    into.round_trip.push(round_trips(world, edit).await?);
    Ok(())
}

/// The two writes a reaction holds, made by a plain client on the same server and each timed
/// until a watch sees it: the edit (the same merge patch of a Comb, in a namespace no layer
/// watches) and the apply (the edited Deployment, forced server-side apply, under a name no Comb
/// selects). What the server takes for them is not comb's; the rest of the reaction is.
async fn round_trips(world: &World, edit: usize) -> Result<RoundTrips> {
    let name = "bench-round-trip";
    let image = format!("nginx:trip-{edit}");
    let client = world.observer("prod").await;
    let combs: Api<Comb> = Api::namespaced_with(
        client.clone(),
        ROUND_TRIP_NAMESPACE,
        &comb_api::api_resource(DEFAULT_GROUP),
    );
    if combs.get_opt(name).await?.is_none() {
        let namespaces: Api<Namespace> = Api::all(client.clone());
        if namespaces.get_opt(ROUND_TRIP_NAMESPACE).await?.is_none() {
            namespaces
                .create(
                    &PostParams::default(),
                    &serde_json::from_value(json!({"metadata": {"name": ROUND_TRIP_NAMESPACE}}))?,
                )
                .await?;
        }
        let comb = Comb::new(
            DEFAULT_GROUP,
            ROUND_TRIP_NAMESPACE,
            name,
            spec(name, "nginx:1")?,
        );
        combs.create(&PostParams::default(), &comb).await?;
    }
    let edited = until_seen(
        &combs,
        name,
        |comb: &Comb| {
            comb.spec
                .config
                .as_ref()
                .and_then(|config| config.get("manifests"))
                .and_then(|manifests| manifests.pointer("/0/spec/template/spec/containers/0/image"))
                == Some(&json!(image))
        },
        || async {
            combs
                .patch(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(
                        json!({"spec": {"config": {"manifests": manifests(name, &image)}}}),
                    ),
                )
                .await?;
            Ok(())
        },
    )
    .await?;
    let deployments: Api<Deployment> = Api::namespaced(client, "platform");
    let mut deployment = manifests(name, &image)[0].take();
    deployment["metadata"]["name"] = json!(name);
    let applied = until_seen(
        &deployments,
        name,
        |seen: &Deployment| deployment_image(Some(seen)).as_deref() == Some(&image),
        || async {
            deployments
                .patch(
                    name,
                    &PatchParams::apply("comb-bench").force(),
                    &Patch::Apply(&deployment),
                )
                .await?;
            Ok(())
        },
    )
    .await?;
    Ok(RoundTrips {
        edit: edited,
        apply: applied,
    })
}

/// The namespace of prod's server no layer watches, for the plain client's round trips.
const ROUND_TRIP_NAMESPACE: &str = "bench-round-trip";

/// A plain client's two writes of [`round_trips`].
#[derive(Clone, Copy)]
struct RoundTrips {
    edit: Duration,
    apply: Duration,
}

/// How long from `write` until a watch of `name` in `api` sees an object that `seen` accepts
/// (the watch has listed before the write).
async fn until_seen<K, W>(
    api: &Api<K>,
    name: &str,
    seen: impl Fn(&K) -> bool,
    write: impl FnOnce() -> W,
) -> Result<Duration>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    W: Future<Output = Result<()>>,
{
    let mut watch = open_watch(api, name).await?;
    let started = Instant::now();
    write().await?;
    within(
        Duration::from_secs(60),
        "the plain write seen",
        seen_on(&mut watch, seen),
    )
    .await?;
    Ok(started.elapsed())
}

/// A watch of the object `name`, open: listed, then watched from the list's resourceVersion,
/// the watch's answer begun. A write made after this returns is timed without the watch's own
/// setup (kube-rs's `watcher` opens its watch only when polled after its list, so a write timed
/// from its `InitDone` would include opening the watch).
async fn open_watch<K>(
    api: &Api<K>,
    name: &str,
) -> Result<BoxStream<'static, kube::Result<WatchEvent<K>>>>
where
    K: Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
{
    let fields = format!("metadata.name={name}");
    let listed = api
        .list_metadata(&ListParams::default().fields(&fields))
        .await?;
    let version = listed.metadata.resource_version.unwrap_or_default();
    let watch = api
        .watch(&WatchParams::default().fields(&fields), &version)
        .await?;
    Ok(watch.boxed())
}

/// Waits until `watch` brings an object that is `seen`.
async fn seen_on<K>(
    watch: &mut BoxStream<'static, kube::Result<WatchEvent<K>>>,
    seen: impl Fn(&K) -> bool,
) -> Result<()> {
    while let Some(event) = watch.try_next().await? {
        match event {
            WatchEvent::Added(object) | WatchEvent::Modified(object) if seen(&object) => {
                return Ok(());
            }
            WatchEvent::Error(error) => bail!("the watch failed: {}", error.message),
            _ => {}
        }
    }
    bail!("the watch ended")
}

/// An object comb deployed, as a plain client would write it: what the server added dropped.
fn as_written(mut object: Value) -> Value {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.retain(|key, _| matches!(key.as_str(), "name" | "labels" | "annotations"));
        if let Some(annotations) = metadata
            .get_mut("annotations")
            .and_then(Value::as_object_mut)
        {
            annotations.retain(|key, _| {
                key != "deployment.kubernetes.io/revision"
                    && key != "kubectl.kubernetes.io/last-applied-configuration"
            });
        }
    }
    if let Some(object) = object.as_object_mut() {
        object.remove("status");
    }
    if object["kind"] == "Service"
        && let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut)
    {
        // Allocated by the server; another server allocates its own.
        spec.remove("clusterIP");
        spec.remove("clusterIPs");
    }
    object
}

async fn api_resource(client: &kube::Client, api_version: &str, kind: &str) -> Result<ApiResource> {
    let gvk = GroupVersionKind::try_from(&TypeMeta {
        api_version: api_version.into(),
        kind: kind.into(),
    })?;
    Ok(kube::discovery::pinned_kind(client, &gvk).await?.0)
}

/// What comb deployed, per layer: every object the Combs record in `managedResources`.
async fn deployed_objects(world: &World) -> Result<Vec<Vec<(ApiResource, Value)>>> {
    let mut layers = Vec::new();
    for (_, context, _, namespace) in LAYERS {
        let client = world.observer(context).await;
        let combs = observed_combs(world, context, namespace).await;
        let mut wanted: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
        for comb in combs.list(&ListParams::default()).await?.items {
            let recorded = comb.status.and_then(|status| status.managed_resources);
            for object in recorded.unwrap_or_default() {
                wanted
                    .entry((object.api_version, object.kind))
                    .or_default()
                    .push(object.name);
            }
        }
        let mut objects = Vec::new();
        for ((api_version, kind), names) in wanted {
            let resource = api_resource(&client, &api_version, &kind).await?;
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), namespace, &resource);
            let live: BTreeMap<String, DynamicObject> = api
                .list(&ListParams::default())
                .await?
                .items
                .into_iter()
                .map(|object| (object.metadata.name.clone().unwrap_or_default(), object))
                .collect();
            let labelled = live
                .values()
                .filter(|object| {
                    object
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|labels| labels.get("app.kubernetes.io/managed-by"))
                        .is_some_and(|by| by == "comb")
                })
                .count();
            if labelled != names.len() {
                eprintln!(
                    "warning: {namespace} holds {labelled} {kind}s labelled as comb's, the Combs record {}",
                    names.len()
                );
            }
            eprintln!(
                "plain client's objects: {context}/{namespace} {} {kind}",
                names.len()
            );
            for name in names {
                let object = live
                    .get(&name)
                    .with_context(|| format!("{kind} {namespace}/{name} recorded but not there"))?;
                objects.push((resource.clone(), as_written(serde_json::to_value(object)?)));
            }
        }
        layers.push(objects);
    }
    Ok(layers)
}

/// `counts` Combs per layer created on `world`, then a fresh controller started: it, the time
/// from its start until every Comb is Running, and the CPU spent meanwhile. The request logs
/// start at its start.
async fn converge(
    settings: &Settings,
    world: &World,
    counts: [usize; 3],
) -> Result<(ControllerProcess, Duration, Cpu)> {
    create_combs(world, &[0; 3], &counts).await?;
    reset(world);
    let before = Cpu::now(None)?;
    let started = Instant::now();
    let mut controller = ControllerProcess::start(world, settings.resync, settings.workers).await?;
    controller
        .guard(within(
            settings.deadline,
            "every Comb Running",
            all_running(world, &counts),
        ))
        .await?;
    let converged = started.elapsed();
    // comb's process started with the count: all its CPU is the convergence's.
    let cpu = Cpu::now(Some(&controller))?.since(&before);
    Ok((controller, converged, cpu))
}

/// CPU time spent while something ran, all cores, user and system: by `comb run` where it ran,
/// by this process (the emulator's servers when the backend is the emulator, and the bench's
/// own clients), and by the whole machine (with a real backend, its servers are the machine's
/// rest; anything else running on the machine counts there too). It tells whether a slow
/// convergence is comb's work or the server's.
#[derive(Clone, Copy)]
struct Cpu {
    comb: Option<Duration>,
    bench: Duration,
    machine: Duration,
}

impl Cpu {
    /// The counters now, `comb`'s too when given.
    fn now(comb: Option<&ControllerProcess>) -> Result<Cpu> {
        Ok(Cpu {
            comb: comb.map(ControllerProcess::cpu).transpose()?,
            bench: process_cpu("self")?,
            machine: machine_busy()?,
        })
    }

    /// What was spent since `earlier`.
    fn since(&self, earlier: &Cpu) -> Cpu {
        Cpu {
            comb: match (self.comb, earlier.comb) {
                (Some(now), Some(then)) => Some(now.saturating_sub(then)),
                (now, _) => now,
            },
            bench: self.bench.saturating_sub(earlier.bench),
            machine: self.machine.saturating_sub(earlier.machine),
        }
    }
}

/// The kernel's clock ticks of /proc/stat and /proc/PID/stat: USER_HZ, 100 on every Linux
/// architecture this runs on (the ABI fixes it, whatever the kernel's own HZ).
const USER_HZ: u64 = 100;

fn ticks(count: u64) -> Duration {
    Duration::from_millis(count * 1000 / USER_HZ)
}

/// The CPU time the process `pid` (a number, or `self`) spent so far, all its threads, user and
/// system (/proc/PID/stat).
fn process_cpu(pid: &str) -> Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The fields after the command's `(name)`: state is field 3, utime 14 and stime 15.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let field = |number: usize| -> Result<u64> {
        fields
            .get(number - 3)
            .and_then(|value| value.parse().ok())
            .with_context(|| format!("no field {number} in /proc/{pid}/stat"))
    };
    Ok(ticks(field(14)? + field(15)?))
}

/// The CPU time the machine spent busy since boot, all cores: /proc/stat's first line less
/// idle and I/O wait (guest time is counted in user time already).
fn machine_busy() -> Result<Duration> {
    let stat = std::fs::read_to_string("/proc/stat")?;
    let fields: Vec<u64> = stat
        .lines()
        .next()
        .and_then(|line| line.strip_prefix("cpu "))
        .context("/proc/stat has no cpu line")?
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    // user nice system idle iowait irq softirq steal ...
    let busy: u64 = [0, 1, 2, 5, 6, 7]
        .iter()
        .filter_map(|&field| fields.get(field))
        .sum();
    Ok(ticks(busy))
}

/// What comb's convergence left, per layer, for the clients that repeat its writes: the objects
/// it deployed and the Combs as it recorded them.
#[derive(Default)]
struct Deployed {
    objects: Vec<Vec<(ApiResource, Value)>>,
    combs: Vec<Vec<Comb>>,
}

async fn converge_phase(settings: &Settings, figures: &mut Figures) -> Result<Deployed> {
    let world = clusters(settings, true).await;
    let count = settings.combs;
    let (mut controller, converged, cpu) = converge(settings, &world, [count; 3]).await?;
    figures.convergence = Some((Requests::collect(&world), converged, cpu));
    figures.convergence_floor = Some(Floor::of_convergence(
        managed_per_resource(&world).await?,
        (3 * count) as u64,
        controller.recorded().await?,
    ));
    eprintln!(
        "converged: {} Combs in {:.2} s",
        3 * count,
        converged.as_secs_f64()
    );

    controller
        .guard(async {
            tokio::time::sleep(settings.settle).await;
            Ok(())
        })
        .await?;
    reset(&world);
    let window_start = SystemTime::now();
    controller
        .guard(async {
            tokio::time::sleep(settings.resync).await;
            Ok(())
        })
        .await?;
    let requests = Requests::collect(&world);
    let buckets = requests.buckets(window_start, settings.resync);
    figures.settled = Some(Settled { requests, buckets });
    let (rss, hwm) = controller.memory()?;
    figures.converged_memory = Some((rss, hwm));

    let deployed = if settings.runs("plain") || settings.runs("floor") {
        let mut combs = Vec::new();
        for (_, context, _, namespace) in LAYERS {
            let api = observed_combs(&world, context, namespace).await;
            combs.push(api.list(&ListParams::default()).await?.items);
        }
        Deployed {
            objects: deployed_objects(&world).await?,
            combs,
        }
    } else {
        Deployed::default()
    };
    controller.stop("converge").await?;
    world.shutdown().await;
    Ok(deployed)
}

async fn plain_phase(
    settings: &Settings,
    figures: &mut Figures,
    objects: Vec<Vec<(ApiResource, Value)>>,
) -> Result<()> {
    figures.plain = Some(plain_client(settings, objects).await?);
    Ok(())
}

/// On fresh clusters, `objects` (per layer) created once each by a plain client, as many at a
/// time per layer as the controller has workers: its requests, the time until its Deployments
/// are ready, how many objects it wrote, and the CPU spent meanwhile ([`Cpu`], no comb in it).
async fn plain_client(
    settings: &Settings,
    objects: Vec<Vec<(ApiResource, Value)>>,
) -> Result<Plain> {
    let world = clusters(settings, true).await;
    // The API resources come from phase 2's discovery: the plain client only creates.
    let writes = objects
        .into_iter()
        .map(|layer| {
            layer
                .into_iter()
                .map(|(resource, object)| ClientWrite::Object(resource, object))
                .collect()
        })
        .collect();
    let plain = timed_writes(settings, &world, writes, "the plain client's writes").await?;
    world.shutdown().await;
    Ok(plain)
}

/// `writes` (per layer) sent on `world` as many at a time per layer as the controller has
/// workers, its request logs reset first: the requests, the time until the layers' Deployments
/// are ready, the objects created, and the CPU spent meanwhile ([`Cpu`], no comb in it).
async fn timed_writes(
    settings: &Settings,
    world: &World,
    writes: Vec<Vec<ClientWrite>>,
    what: &str,
) -> Result<Plain> {
    let created = |layer: &Vec<ClientWrite>, deployments_only: bool| {
        layer
            .iter()
            .filter(|write| match write {
                ClientWrite::Object(resource, _) => {
                    !deployments_only || resource.kind == "Deployment"
                }
                ClientWrite::Comb(_) => false,
            })
            .count()
    };
    let deployments: Vec<usize> = writes.iter().map(|layer| created(layer, true)).collect();
    let objects = writes.iter().map(|layer| created(layer, false)).sum();
    reset(world);
    let before = Cpu::now(None)?;
    let started = Instant::now();
    let mut writers = Vec::new();
    for ((_, context, _, namespace), writes) in LAYERS.iter().zip(writes) {
        let client = world.client(context).await;
        let workers = settings.workers;
        writers.push(async move {
            stream::iter(writes)
                .map(|write| write.send(client.clone(), namespace))
                .buffer_unordered(workers)
                .try_collect::<Vec<()>>()
                .await
        });
    }
    within(settings.deadline, what, async {
        futures::future::try_join_all(writers).await
    })
    .await?;
    deployments_ready(settings, world, &deployments).await?;
    Ok(Plain {
        time: started.elapsed(),
        cpu: Cpu::now(None)?.since(&before),
        requests: Requests::collect(world),
        objects,
    })
}

/// On fresh clusters, the writes of the convergence's floor made by a client that does nothing
/// else, the same requests as comb's: the Combs created first (as the convergence creates them
/// before comb starts, untimed), then, as many at a time per layer as the controller has
/// workers, each object created once, each Comb's finalizer patched, and for each transition
/// comb recorded a status write of the whole CR (the status comb left, in that transition's
/// phase and reason) and an Event; timed until the Deployments are ready. No watch, no read, no
/// wait between a Comb's writes: what any controller that makes the floor's writes costs this
/// server at least, beside what the plain client's objects alone cost it.
async fn floor_client(
    settings: &Settings,
    deployed: Deployed,
    transitions: &Counts,
) -> Result<Plain> {
    let world = clusters(settings, true).await;
    let mut counts = [0; 3];
    for (count, combs) in counts.iter_mut().zip(&deployed.combs) {
        *count = combs.len();
    }
    create_combs(&world, &[0; 3], &counts).await?;
    let mut paths = deal(transitions, counts.iter().sum()).into_iter();
    let mut writes = Vec::new();
    for (((_, context, _, namespace), objects), combs) in
        LAYERS.iter().zip(deployed.objects).zip(deployed.combs)
    {
        // The Combs as created, to write on (read before the clock starts).
        let mut created: BTreeMap<String, Comb> = observed_combs(&world, context, namespace)
            .await
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .map(|comb| (comb.metadata.name.clone().unwrap_or_default(), comb))
            .collect();
        let mut layer: Vec<ClientWrite> = objects
            .into_iter()
            .map(|(resource, object)| ClientWrite::Object(resource, object))
            .collect();
        for reached in combs {
            let name = reached.metadata.name.clone().unwrap_or_default();
            let fresh = created
                .remove(&name)
                .with_context(|| format!("Comb {namespace}/{name} was not created again"))?;
            layer.push(ClientWrite::Comb(Box::new(CombWrites {
                created: fresh,
                reached,
                path: paths.next().unwrap_or_default(),
            })));
        }
        writes.push(layer);
    }
    let floor = timed_writes(settings, &world, writes, "the floor client's writes").await?;
    world.shutdown().await;
    Ok(floor)
}

/// The transitions comb recorded (`Phase (Reason)` -> count), dealt out to `combs` Combs in
/// turn, those into Running last: each Comb gets its share, the totals by state are comb's,
/// and a Comb's path ends in Running when there is a Running for every Comb.
fn deal(transitions: &Counts, combs: usize) -> Vec<Vec<(String, String)>> {
    let mut states: Vec<(&String, u64)> = transitions.0.iter().map(|(s, n)| (s, *n)).collect();
    states.sort_by_key(|(state, _)| state.starts_with("Running"));
    let mut paths = vec![Vec::new(); combs];
    let mut dealt = 0;
    for (state, count) in states {
        let (phase, reason) = match state.split_once(" (") {
            Some((phase, reason)) => (phase, reason.trim_end_matches(')')),
            None => (state.as_str(), ""),
        };
        for _ in 0..count {
            if let Some(path) = paths.get_mut(dealt % combs.max(1)) {
                path.push((phase.to_string(), reason.to_string()));
            }
            dealt += 1;
        }
    }
    paths
}

/// One unit of the plain or the floor client's work.
enum ClientWrite {
    /// An object comb deployed, created.
    Object(ApiResource, Value),
    /// A Comb's own writes.
    Comb(Box<CombWrites>),
}

/// A Comb as created (to write on), as comb left it, and the transitions to record, each a
/// phase and a reason.
struct CombWrites {
    created: Comb,
    reached: Comb,
    path: Vec<(String, String)>,
}

impl ClientWrite {
    async fn send(self, client: kube::Client, namespace: &str) -> Result<()> {
        match self {
            ClientWrite::Object(resource, object) => {
                let api: Api<DynamicObject> = Api::namespaced_with(client, namespace, &resource);
                let object: DynamicObject = serde_json::from_value(object)?;
                api.create(&PostParams::default(), &object).await?;
            }
            ClientWrite::Comb(comb) => {
                let CombWrites {
                    created: mut cr,
                    reached,
                    path,
                } = *comb;
                // comb's CR carries no managedFields (it does not decode them), and a write
                // that carried them would set them.
                cr.metadata.managed_fields = None;
                let name = cr.metadata.name.clone().unwrap_or_default();
                let resource = comb_api::api_resource(DEFAULT_GROUP);
                let combs = kube::core::Request::new(format!(
                    "/apis/{}/namespaces/{namespace}/{}",
                    resource.api_version, resource.plural
                ));
                // Only the metadata of each answer is decoded: its resourceVersion is what the
                // next write is conditional on, as comb's are.
                let patch = json!({"metadata": {
                    "finalizers": reached.metadata.finalizers,
                    "resourceVersion": cr.metadata.resource_version,
                }});
                let request = combs.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))?;
                let answer: kube::core::PartialObjectMeta<Comb> = client.request(request).await?;
                cr.metadata.resource_version = answer.metadata.resource_version;
                let status = serde_json::to_value(&reached.status)?;
                let message = reached
                    .status
                    .as_ref()
                    .and_then(CombStatus::ready)
                    .and_then(|ready| ready.message.clone())
                    .unwrap_or_default();
                for (phase, reason) in path {
                    let mut body = serde_json::to_value(&cr)?;
                    body["status"] = status.clone();
                    body["status"]["phase"] = json!(phase);
                    let conditions = body["status"]["conditions"].as_array_mut();
                    for condition in conditions.into_iter().flatten() {
                        if condition["type"] == comb_api::READY {
                            condition["reason"] = json!(reason);
                            condition["status"] =
                                json!(if phase == "Running" { "True" } else { "False" });
                        }
                    }
                    let request = combs.replace_subresource(
                        "status",
                        &name,
                        &PostParams::default(),
                        serde_json::to_vec(&body)?,
                    )?;
                    let answer: kube::core::PartialObjectMeta<Comb> =
                        client.request(request).await?;
                    cr.metadata.resource_version = answer.metadata.resource_version;
                    let kind = match phase.as_str() {
                        "Error" | "Blocked" | "NeedsConfig" => events::EventType::Warning,
                        _ => events::EventType::Normal,
                    };
                    let event =
                        events::event_for(DEFAULT_GROUP, &cr, kind, &reason, &message, "bench");
                    events::publish(client.clone(), &event)
                        .await
                        .map_err(anyhow::Error::msg)?;
                }
            }
        }
        Ok(())
    }
}

/// Waits until the Deployments of every layer (`counts` of them each) are ready.
async fn deployments_ready(settings: &Settings, world: &World, counts: &[usize]) -> Result<()> {
    let mut ready = Vec::new();
    for (layer, (_, context, _, namespace)) in LAYERS.iter().enumerate() {
        let api: Api<Deployment> = Api::namespaced(world.observer(context).await, namespace);
        let wanted_count = counts.get(layer).copied().unwrap_or(0);
        ready.push(watch_until(api, wanted_count, |deployment| {
            let wanted = deployment.spec.replicas.unwrap_or(1);
            deployment
                .status
                .as_ref()
                .and_then(|status| status.ready_replicas)
                .unwrap_or_default()
                >= wanted
        }));
    }
    within(settings.deadline, "the Deployments ready", async {
        futures::future::try_join_all(ready).await
    })
    .await?;
    Ok(())
}

/// Convergence at each size of `COMB_BENCH_GROWTH` (Combs in all, a third per layer), each on
/// fresh clusters, and the plain client's for the same objects: how the time grows with the
/// Combs, comb's beside the plain client's, so that what grows faster than linearly in comb
/// shows apart from what grows in the server.
async fn growth_phase(settings: &Settings, figures: &mut Figures) -> Result<()> {
    for &size in &settings.growth_sizes {
        let world = clusters(settings, true).await;
        let (controller, converged, cpu) = converge(settings, &world, split(size)).await?;
        let requests = Requests::collect(&world);
        let (rss, _) = controller.memory()?;
        let objects = deployed_objects(&world).await?;
        controller.stop(&format!("growth-{size}")).await?;
        world.shutdown().await;
        eprintln!("growth: {size} Combs converged in {}", seconds(converged));
        let plain = plain_client(settings, objects).await?;
        eprintln!(
            "growth: the plain client's {size} Combs' objects ready in {}",
            seconds(plain.time)
        );
        figures.growth.push(Growth {
            combs: size,
            comb: converged,
            comb_cpu: cpu,
            plain: plain.time,
            plain_cpu: plain.cpu,
            writes: requests.count(Class::Write),
            rss,
        });
    }
    Ok(())
}

/// A third of `size` per layer, prod taking what does not divide.
fn split(size: usize) -> [usize; 3] {
    let third = size / 3;
    [size - 2 * third, third, third]
}

async fn memory_phase(settings: &Settings, figures: &mut Figures) -> Result<()> {
    let mut sizes = settings.rss_sizes.clone();
    sizes.sort_unstable();
    sizes.dedup();
    sizes.insert(0, 0);
    let world = clusters(settings, false).await;
    let mut created = [0; 3];
    for size in sizes {
        let target = split(size);
        create_combs(&world, &created, &target).await?;
        created = target;
        let started = Instant::now();
        // The usual resync: a Comb Blocked by a slow answer (the controller's requests time out
        // after 5 s) is stepped again at its resync.
        let mut controller =
            ControllerProcess::start(&world, settings.resync, settings.workers).await?;
        controller
            .guard(within(
                settings.deadline,
                "every Comb Running",
                all_running(&world, &target),
            ))
            .await?;
        let converged = started.elapsed();
        controller
            .guard(async {
                tokio::time::sleep(settings.settle).await;
                Ok(())
            })
            .await?;
        let (rss, hwm) = controller.memory()?;
        eprintln!(
            "memory: {size} Combs, VmRSS {:.1} MiB, VmHWM {:.1} MiB, converged in {}",
            rss as f64 / 1024.0,
            hwm as f64 / 1024.0,
            seconds(converged)
        );
        figures.memory.push((size, rss, hwm, converged));
        controller.stop(&format!("rss-{size}")).await?;
    }
    world.shutdown().await;
    if let Some(budget) = settings.budget {
        within_budget(&figures.memory, budget)?;
    }
    Ok(())
}

/// VmRSS over the idle process (the size 0 run), per Comb, at each size measured.
fn per_comb_kib(memory: &[(usize, u64, u64, Duration)]) -> Vec<(usize, f64)> {
    let Some(idle) = memory
        .iter()
        .find(|(size, ..)| *size == 0)
        .map(|(_, rss, ..)| *rss)
    else {
        return Vec::new();
    };
    memory
        .iter()
        .filter(|(size, ..)| *size > 0)
        .map(|(size, rss, ..)| (*size, rss.saturating_sub(idle) as f64 / *size as f64))
        .collect()
}

/// Fails when a size measured used more than `budget` KiB per Comb over the idle process.
fn within_budget(memory: &[(usize, u64, u64, Duration)], budget: f64) -> Result<()> {
    for (size, each) in per_comb_kib(memory) {
        if each > budget {
            bail!(
                "memory budget exceeded: comb run holds {each:.1} KiB per Comb over the idle process \
                 at {} Combs, over the budget of {budget} KiB (docs/benchmarks.md, the memory budget); \
                 find what grew with COMB_BENCH_PHASES=rss and a heap profile before raising it",
                thousands(size as u64)
            );
        }
        eprintln!(
            "memory budget: {each:.1} KiB per Comb at {} Combs, within {budget} KiB",
            thousands(size as u64)
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Layers on demand (issue 34)

/// The layers phase's configuration: staging alone in the file (`layerContext` is its
/// context, so CombLayers live on prod), and a template that lets a CombLayer borrow from it
/// in namespaces `dev-*` of dev, which comb creates.
const LAYERS_CONFIG: &str = "
kubeconfig: KUBECONFIG
resync: RESYNC
layers:
  - {name: staging, context: staging, namespaces: [staging]}
layerTemplates:
  - name: dev
    contexts: [dev]
    namespaces: [dev-*]
    borrowFrom: [staging]
    maxTTL: 24h
    createNamespaces: true
";

/// How long a watch of kube-rs lasts before its watcher opens it again (its `timeoutSeconds`,
/// which comb's watches keep): a watch open throughout a window this long is opened once in
/// it, so the watch requests of the last 290 s are the watches open.
const WATCH_RENEWAL: Duration = Duration::from_secs(290);

/// The layers removed, one at a time, at the end of the layers phase.
const LAYER_REMOVALS: usize = 5;

/// One run of the layers phase. Times are the request log's (microseconds since the epoch).
struct LayerRun {
    /// From each CombLayer's create until the observer saw it Ready, in the order created.
    ready: Vec<Duration>,
    /// From the first create until the last layer was Ready and quiet.
    creating: Duration,
    /// `(layers, VmRSS KiB, VmHWM KiB)` with 0, 1 and every layer settled.
    memory: Vec<(usize, u64, u64)>,
    /// Each cluster's requests (the observer's left out) from the controller's start.
    requests: Vec<(&'static str, Requests)>,
    /// When 0, 1 and every layer were settled: `(layers, at)`.
    settled_at: Vec<(usize, u64)>,
    /// The first layer's creation, and all of them: from its create until it was quiet.
    first: (u64, u64),
    creation: (u64, u64),
    /// The settled window, one resync period with every layer settled.
    window: (u64, u64),
    /// Per removal: the CombLayer gone, its namespace Terminating, its namespace gone, each
    /// from the delete.
    removals: Vec<(Duration, Duration, Duration)>,
    removal: (u64, u64),
}

fn layer_name(index: usize) -> String {
    format!("l{index:04}")
}

fn now_micros() -> u64 {
    epoch_micros(SystemTime::now())
}

fn layer_ready(layer: &CombLayer) -> bool {
    layer
        .status
        .as_ref()
        .is_some_and(|status| status.phase == Some(LayerPhase::Ready))
}

/// Lets `settle` pass while `comb run` serves, then its VmRSS and VmHWM.
async fn settled_memory(
    settings: &Settings,
    controller: &mut ControllerProcess,
) -> Result<(u64, u64)> {
    controller
        .guard(async {
            tokio::time::sleep(settings.settle).await;
            Ok(())
        })
        .await?;
    controller.memory()
}

/// Layers on demand at scale: `COMB_BENCH_LAYER_COMBS` Combs in staging, then
/// `COMB_BENCH_LAYERS` CombLayers created one after another (each once the one before is Ready
/// and its requests have stopped), each borrowing every Comb of staging into a namespace of
/// dev comb creates; one resync period settled; then a few layers removed, one at a time.
async fn layers_phase(settings: &Settings, figures: &mut Figures) -> Result<()> {
    let world = clusters(settings, true).await;
    world.install_layer_crd("prod").await;
    let combs = settings.layer_combs;
    create_combs(&world, &[0; 3], &[0, combs, 0]).await?;
    reset(&world);
    let mut controller = ControllerProcess::start_build(
        comb_testkit::bin::comb_path(),
        &world,
        LAYERS_CONFIG,
        settings.resync,
        settings.workers,
    )
    .await?;
    controller
        .guard(within(
            settings.deadline,
            "staging's Combs Running",
            all_running(&world, &[0, combs, 0]),
        ))
        .await?;
    // Only reads and writes: thousands of watches are renewed all the time.
    let settle = |world| quiet_by(world, settings.quiet, reads_and_writes);
    controller.guard(settle(&world)).await?;
    let (rss, hwm) = settled_memory(settings, &mut controller).await?;
    let mut memory = vec![(0, rss, hwm)];
    let mut settled_at = vec![(0, now_micros())];

    let layers: Api<CombLayer> = Api::all_with(
        world.observer("prod").await,
        &layer_api_resource(DEFAULT_GROUP),
    );
    let mut ready = Vec::new();
    let mut first = (0, 0);
    let creation_start = now_micros();
    let started = Instant::now();
    for index in 0..settings.layers {
        let name = layer_name(index);
        let layer = CombLayer::new(
            DEFAULT_GROUP,
            &name,
            CombLayerSpec {
                template: "dev".to_string(),
                context: Some("dev".to_string()),
                namespaces: vec![format!("dev-{name}")],
                borrow: Some(LayerBorrowSpec {
                    from: "staging".to_string(),
                    namespace: Some("staging".to_string()),
                    ..LayerBorrowSpec::default()
                }),
                ttl: Some("12h".to_string()),
                ..CombLayerSpec::default()
            },
        );
        let at = Instant::now();
        layers
            .create(&PostParams::default(), &layer)
            .await
            .with_context(|| format!("creating CombLayer {name}"))?;
        controller
            .guard(within(
                settings.deadline,
                &format!("CombLayer {name} Ready"),
                watch_until(layers.clone(), index + 1, layer_ready),
            ))
            .await?;
        ready.push(at.elapsed());
        controller.guard(settle(&world)).await?;
        if index == 0 {
            first = (creation_start, now_micros());
            let (rss, hwm) = settled_memory(settings, &mut controller).await?;
            memory.push((1, rss, hwm));
            settled_at.push((1, now_micros()));
        }
        if (index + 1) % 10 == 0 || index + 1 == settings.layers {
            let (rss, _) = controller.memory()?;
            eprintln!(
                "layers: {} Ready in {}, the last in {}, VmRSS {:.1} MiB",
                index + 1,
                seconds(started.elapsed()),
                millis(*ready.last().unwrap_or(&Duration::ZERO)),
                rss as f64 / 1024.0
            );
        }
    }
    let creating = started.elapsed();
    let creation = (creation_start, now_micros());
    let (rss, hwm) = settled_memory(settings, &mut controller).await?;
    memory.push((settings.layers, rss, hwm));
    settled_at.push((settings.layers, now_micros()));

    // One resync period of every layer settled.
    let window_start = now_micros();
    controller
        .guard(async {
            tokio::time::sleep(settings.resync).await;
            Ok(())
        })
        .await?;
    let window = (window_start, now_micros());

    // A few layers removed, one at a time.
    let namespaces: Api<Namespace> = Api::all(world.observer("dev").await);
    let mut removals = Vec::new();
    let removal_start = now_micros();
    for index in 0..settings.layers.min(LAYER_REMOVALS) {
        let name = layer_name(index);
        let namespace = format!("dev-{name}");
        let at = Instant::now();
        layers
            .delete(&name, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting CombLayer {name}"))?;
        let (mut layer_gone, mut terminating, mut namespace_gone) = (None, None, None);
        let removed = async {
            while layer_gone.is_none() || namespace_gone.is_none() {
                if layer_gone.is_none() && layers.get_opt(&name).await?.is_none() {
                    layer_gone = Some(at.elapsed());
                }
                if namespace_gone.is_none() {
                    match namespaces.get_opt(&namespace).await? {
                        None => {
                            namespace_gone = Some(at.elapsed());
                            terminating.get_or_insert(at.elapsed());
                        }
                        Some(seen) if seen.metadata.deletion_timestamp.is_some() => {
                            terminating.get_or_insert(at.elapsed());
                        }
                        Some(_) => {}
                    }
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(())
        };
        controller
            .guard(within(
                settings.deadline,
                &format!("CombLayer {name} and namespace {namespace} gone"),
                removed,
            ))
            .await?;
        removals.push((
            layer_gone.unwrap_or_default(),
            terminating.unwrap_or_default(),
            namespace_gone.unwrap_or_default(),
        ));
        controller.guard(settle(&world)).await?;
    }
    let removal = (removal_start, now_micros());

    let requests = ["prod", "dev"]
        .into_iter()
        .map(|cluster| (cluster, Requests::collect_from(&world, &[cluster])))
        .collect();
    controller.stop("layers").await?;
    world.shutdown().await;
    figures.layers = Some(LayerRun {
        ready,
        creating,
        memory,
        requests,
        settled_at,
        first,
        creation,
        window,
        removals,
        removal,
    });
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The report

fn ratio(a: f64, b: f64) -> String {
    if b == 0.0 {
        "-".to_string()
    } else {
        format!("{:.2}x", a / b)
    }
}

fn per(n: u64, of: usize) -> String {
    if of == 0 {
        return "-".to_string();
    }
    let value = n as f64 / of as f64;
    if n == 0 {
        "0".to_string()
    } else if value >= 10.0 {
        format!("{value:.1}")
    } else if value >= 0.1 {
        format!("{value:.2}")
    } else {
        // The startup's one list and watch per kind and layer, spread over every Comb.
        format!("{value:.3}")
    }
}

fn seconds(duration: Duration) -> String {
    format!("{:.2} s", duration.as_secs_f64())
}

fn millis(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1000.0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(index).copied().unwrap_or_default()
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn failures(requests: &Requests) -> String {
    let failures = requests.failures();
    if failures.is_empty() {
        return "none".to_string();
    }
    failures
        .iter()
        .map(|(code, n)| format!("{n}x {code}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn all_edits(edits: &[Requests]) -> Requests {
    Requests {
        entries: edits
            .iter()
            .flat_map(|edit| edit.entries.iter().cloned())
            .collect(),
    }
}

fn report(settings: &Settings, figures: &Figures) {
    // The layers phase has its own shape and tables.
    if settings.phases.iter().any(|phase| phase != "layers") {
        report_phases(settings, figures);
    }
    if let Some(run) = &figures.layers {
        print_layers(settings, run);
    }
}

/// The tables of every phase but the layers phase.
fn report_phases(settings: &Settings, figures: &Figures) {
    let combs = 3 * settings.combs;
    println!();
    println!(
        "## comb controller benchmark: {}, 3 layers (prod <- staging <- dev), {} Combs per layer, resync {} s, {} workers per layer",
        settings.backend_name(),
        settings.combs,
        settings.resync.as_secs_f64(),
        settings.workers
    );
    println!();

    // Convergence against the plain client.
    if let Some((comb, comb_time, comb_cpu)) = &figures.convergence {
        println!(
            "| convergence of {} Combs | comb | plain client | comb / plain |",
            thousands(combs as u64)
        );
        println!("|---|---|---|---|");
        let plain = figures.plain.as_ref();
        let plain_count = |class| plain.map(|p| p.requests.count(class));
        let cell = |n: Option<u64>| n.map_or("-".to_string(), thousands);
        for (what, class) in [
            ("writes", Class::Write),
            ("reads (get, list)", Class::Read),
            ("watches opened", Class::Watch),
        ] {
            println!(
                "| {what} | {} | {} | {} |",
                thousands(comb.count(class)),
                cell(plain_count(class)),
                plain_count(class).map_or("-".to_string(), |p| ratio(
                    comb.count(class) as f64,
                    p as f64
                ))
            );
        }
        println!(
            "| time | {} | {} | {} |",
            seconds(*comb_time),
            plain.map_or("-".to_string(), |plain| seconds(plain.time)),
            plain.map_or("-".to_string(), |plain| ratio(
                comb_time.as_secs_f64(),
                plain.time.as_secs_f64()
            ))
        );
        print_cpu_rows(comb_cpu, plain.map(|plain| &plain.cpu));
        if let Some(plain) = plain {
            println!(
                "| objects | {} deployed | {} created | |",
                thousands(plain.objects as u64),
                thousands(plain.objects as u64)
            );
        }
        println!(
            "| answers >= 400 | {} | {} | |",
            failures(comb),
            plain.map_or("-".to_string(), |plain| failures(&plain.requests))
        );
        println!();
    }

    // The floor's writes alone, against the plain client and comb.
    if let Some(floor) = &figures.floor_client {
        print_floor_client(floor, figures.plain.as_ref(), figures.convergence.as_ref());
    }

    // Requests by verb and resource.
    let settled = figures.settled.as_ref();
    let edits = all_edits(&figures.edits.requests);
    let edit_count = figures.edits.requests.len();
    let columns: Vec<(String, BTreeMap<String, u64>, usize)> = [
        figures
            .convergence
            .as_ref()
            .map(|(r, ..)| ("convergence, per Comb".to_string(), r.by_key(), combs)),
        figures.plain.as_ref().map(|plain| {
            (
                "plain client, per Comb".to_string(),
                plain.requests.by_key(),
                combs,
            )
        }),
        settled.map(|s| {
            (
                "settled resync, per Comb".to_string(),
                s.requests.by_key(),
                combs,
            )
        }),
        (edit_count > 0).then(|| {
            (
                "one prod image edit, whole chain".to_string(),
                edits.by_key(),
                edit_count,
            )
        }),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !columns.is_empty() {
        let mut keys: Vec<&String> = columns.iter().flat_map(|(_, c, _)| c.keys()).collect();
        keys.sort_by_key(|key| {
            let (verb, resource) = key.split_once(' ').unwrap_or((key, ""));
            let order = match class_of(verb) {
                Class::Write => 0,
                Class::Read => 1,
                Class::Watch => 2,
            };
            (order, resource.to_string(), verb.to_string())
        });
        keys.dedup();
        println!(
            "| requests by verb and resource | {} |",
            columns
                .iter()
                .map(|(name, ..)| name.as_str())
                .collect::<Vec<_>>()
                .join(" | ")
        );
        println!("|---|{}", "---|".repeat(columns.len()));
        for key in &keys {
            println!(
                "| {key} | {} |",
                columns
                    .iter()
                    .map(|(_, counts, of)| per(counts.get(*key).copied().unwrap_or(0), *of))
                    .collect::<Vec<_>>()
                    .join(" | ")
            );
        }
        for (what, class) in [
            ("**writes**", Class::Write),
            ("**reads**", Class::Read),
            ("**watches**", Class::Watch),
        ] {
            println!(
                "| {what} | {} |",
                columns
                    .iter()
                    .map(|(_, counts, of)| {
                        let n: u64 = counts
                            .iter()
                            .filter(|(key, _)| {
                                class_of(key.split(' ').next().unwrap_or_default()) == class
                            })
                            .map(|(_, n)| n)
                            .sum();
                        format!("**{}**", per(n, *of))
                    })
                    .collect::<Vec<_>>()
                    .join(" | ")
            );
        }
        println!();
    }

    // Writes against the floor a truthful controller needs.
    let floors: Vec<(String, &Floor, &Requests, usize)> = [
        figures
            .convergence_floor
            .as_ref()
            .zip(figures.convergence.as_ref())
            .map(|(floor, (requests, ..))| {
                ("convergence, per Comb".to_string(), floor, requests, combs)
            }),
        (edit_count > 0).then(|| {
            (
                format!("one prod image edit (mean of {edit_count})"),
                &figures.edits.floor,
                &edits,
                edit_count,
            )
        }),
    ]
    .into_iter()
    .flatten()
    .collect();
    for (what, floor, requests, of) in floors {
        println!("| writes at the floor: {what} | floor | comb | above the floor |");
        println!("|---|---|---|---|");
        for (kind, at_floor, written) in floor.rows(requests) {
            println!(
                "| {kind} | {} | {} | {} |",
                per(at_floor, of),
                per(written, of),
                per(written.saturating_sub(at_floor), of)
            );
        }
        println!(
            "| transitions recorded | {} |",
            floor.recorded.transitions.per(of)
        );
        let beyond = floor.recorded.beyond_transitions();
        if !beyond.0.is_empty() {
            println!(
                "| status writes without a transition (comb's own count), by what each changed | {} |",
                beyond.per(of)
            );
        }
        println!();
    }

    // Per layer: writes / reads.
    let mut rows: Vec<(String, Requests, usize)> = Vec::new();
    if let Some((r, ..)) = &figures.convergence {
        rows.push(("convergence, per Comb".into(), r.clone(), settings.combs));
    }
    if let Some(s) = settled {
        rows.push((
            "settled resync, per Comb".into(),
            s.requests.clone(),
            settings.combs,
        ));
    }
    if edit_count > 0 {
        rows.push((
            format!("one prod image edit (mean of {edit_count})"),
            edits.clone(),
            edit_count,
        ));
    }
    if !rows.is_empty() {
        println!("| writes / reads by layer | prod | staging | dev | cluster-wide |");
        println!("|---|---|---|---|---|");
        for (what, requests, of) in &rows {
            let cells: Vec<String> = ["prod", "staging", "dev", "cluster-wide"]
                .iter()
                .map(|layer| {
                    let in_layer = requests.in_layer(layer);
                    let of = if *layer == "cluster-wide" && what.contains("per Comb") {
                        *of * 3
                    } else {
                        *of
                    };
                    format!(
                        "{} / {}",
                        per(in_layer.count(Class::Write), of),
                        per(in_layer.count(Class::Read), of)
                    )
                })
                .collect();
            println!("| {what} | {} |", cells.join(" | "));
        }
        println!();
    }

    // The resync, reaction and memory.
    println!("| figure | value |");
    println!("|---|---|");
    if let Some(settled) = settled {
        let total: u64 = settled.buckets.iter().sum();
        let busy = settled.buckets.iter().filter(|n| **n > 0).count();
        let max = settled.buckets.iter().copied().max().unwrap_or(0);
        let mean = total as f64 / settled.buckets.len().max(1) as f64;
        println!(
            "| settled resync of {} Combs ({} s window) | {} requests ({} writes), {} of {} seconds busy, answers >= 400: {} |",
            thousands(combs as u64),
            settled.buckets.len(),
            thousands(total),
            thousands(settled.requests.count(Class::Write)),
            busy,
            settled.buckets.len(),
            failures(&settled.requests)
        );
        println!(
            "| resync burst factor (busiest 1 s / mean) | {} (max {max}/s, mean {mean:.1}/s) |",
            if total == 0 {
                "- (no requests)".to_string()
            } else {
                format!("{:.1}", max as f64 / mean)
            }
        );
    }
    print_edits(settings, "", &figures.edits);
    if let (Some(against), Some(path)) = (&figures.against, &settings.against) {
        print_edits(
            settings,
            &format!(" of `COMB_BENCH_AGAINST` ({})", path.display()),
            against,
        );
    }
    if let Some((rss, hwm)) = figures.converged_memory {
        println!(
            "| RSS of `comb run` after convergence and a settled resync of {} Combs | {:.1} MiB (peak {:.1} MiB) |",
            thousands(combs as u64),
            rss as f64 / 1024.0,
            hwm as f64 / 1024.0
        );
    }
    let per_comb = per_comb_kib(&figures.memory);
    let mut memory = figures.memory.clone();
    memory.sort_by_key(|(size, ..)| *size);
    for (size, rss, hwm, converged) in memory {
        let each = per_comb
            .iter()
            .find(|(measured, _)| *measured == size)
            .map_or(String::new(), |(_, each)| {
                format!(", {each:.1} KiB per Comb over the idle process")
            });
        println!(
            "| RSS of `comb run` at {} Combs | {:.1} MiB (peak {:.1} MiB{each}; converged in {}) |",
            thousands(size as u64),
            rss as f64 / 1024.0,
            hwm as f64 / 1024.0,
            seconds(converged)
        );
    }
    print_growth(&figures.growth);
}

/// The convergence table's CPU rows ([`Cpu`]), comb's and the plain client's side by side.
fn print_cpu_rows(comb: &Cpu, plain: Option<&Cpu>) {
    let cell = |cpu: Option<Duration>| cpu.map_or("-".to_string(), seconds);
    let compare = |comb: Option<Duration>, plain: Option<Duration>| match (comb, plain) {
        (Some(comb), Some(plain)) => ratio(comb.as_secs_f64(), plain.as_secs_f64()),
        _ => "-".to_string(),
    };
    for (what, comb, plain) in [
        ("CPU, `comb run`", comb.comb, None),
        (
            "CPU, the bench process (the emulator's servers, the bench's clients)",
            Some(comb.bench),
            plain.map(|p| p.bench),
        ),
        (
            "CPU, whole machine",
            Some(comb.machine),
            plain.map(|p| p.machine),
        ),
    ] {
        println!(
            "| {what} | {} | {} | {} |",
            cell(comb),
            cell(plain),
            compare(comb, plain)
        );
    }
}

/// The floor client's row beside the plain client's and comb's: what the floor's writes alone
/// cost this server, so that comb's time against the plain client splits into what any truthful
/// controller pays and what comb adds to it.
fn print_floor_client(
    floor: &Plain,
    plain: Option<&Plain>,
    comb: Option<&(Requests, Duration, Cpu)>,
) {
    println!(
        "| the floor's writes alone (a client that makes only them: no watch, no read, no work of its own) | floor client | plain client | floor / plain | comb | comb / floor |"
    );
    println!("|---|---|---|---|---|---|");
    let row = |what: &str,
               floor: f64,
               plain: Option<f64>,
               comb: Option<f64>,
               show: &dyn Fn(f64) -> String| {
        println!(
            "| {what} | {} | {} | {} | {} | {} |",
            show(floor),
            plain.map_or("-".to_string(), show),
            plain.map_or("-".to_string(), |plain| ratio(floor, plain)),
            comb.map_or("-".to_string(), show),
            comb.map_or("-".to_string(), |comb| ratio(comb, floor)),
        );
    };
    let count = |n: f64| thousands(n as u64);
    let secs = |s: f64| seconds(Duration::from_secs_f64(s));
    row(
        "writes",
        floor.requests.count(Class::Write) as f64,
        plain.map(|p| p.requests.count(Class::Write) as f64),
        comb.map(|(requests, ..)| requests.count(Class::Write) as f64),
        &count,
    );
    row(
        "time",
        floor.time.as_secs_f64(),
        plain.map(|p| p.time.as_secs_f64()),
        comb.map(|(_, time, _)| time.as_secs_f64()),
        &secs,
    );
    row(
        "CPU, the bench process (the emulator's servers, the bench's clients)",
        floor.cpu.bench.as_secs_f64(),
        plain.map(|p| p.cpu.bench.as_secs_f64()),
        comb.map(|(_, _, cpu)| cpu.bench.as_secs_f64()),
        &secs,
    );
    row(
        "CPU, whole machine",
        floor.cpu.machine.as_secs_f64(),
        plain.map(|p| p.cpu.machine.as_secs_f64()),
        comb.map(|(_, _, cpu)| cpu.machine.as_secs_f64()),
        &secs,
    );
    println!("| answers >= 400 | {} | | | | |", failures(&floor.requests));
    println!();
}

/// The growth phase's table: each size's convergence, comb's and the plain client's, and how
/// each grew from the smallest size, against how the Combs grew.
fn print_growth(growth: &[Growth]) {
    let Some(first) = growth.first() else {
        return;
    };
    println!();
    println!(
        "| growth: convergence on fresh clusters | comb | plain client | comb / plain | comb's writes per Comb | RSS of `comb run` | CPU of `comb run` / of the bench process, comb's run / the plain client's |"
    );
    println!("|---|---|---|---|---|---|---|");
    for size in growth {
        println!(
            "| {} Combs | {} | {} | {} | {} | {:.1} MiB | {} / {} / {} |",
            thousands(size.combs as u64),
            seconds(size.comb),
            seconds(size.plain),
            ratio(size.comb.as_secs_f64(), size.plain.as_secs_f64()),
            per(size.writes, size.combs),
            size.rss as f64 / 1024.0,
            seconds(size.comb_cpu.comb.unwrap_or_default()),
            seconds(size.comb_cpu.bench),
            seconds(size.plain_cpu.bench),
        );
    }
    for size in &growth[1..] {
        println!(
            "| growth factor {} -> {} Combs ({}) | {} | {} | | | | |",
            thousands(first.combs as u64),
            thousands(size.combs as u64),
            ratio(size.combs as f64, first.combs as f64),
            ratio(size.comb.as_secs_f64(), first.comb.as_secs_f64()),
            ratio(size.plain.as_secs_f64(), first.plain.as_secs_f64()),
        );
    }
}

/// `1 layer`, `200 layers`.
fn layer_count(layers: usize) -> String {
    if layers == 1 {
        "1 layer".to_string()
    } else {
        format!("{layers} layers")
    }
}

/// The layers phase's tables ([`layers_phase`]).
fn print_layers(settings: &Settings, run: &LayerRun) {
    let n = run.ready.len();
    if n == 0 {
        return;
    }
    let removed = run.removals.len();
    println!();
    println!(
        "## layers on demand: {}, {n} CombLayers created one after another, each borrowing all {} Combs of staging ({} Combs on dev); resync {} s, {} workers per layer; `comb run` {}",
        settings.backend_name(),
        settings.layer_combs,
        thousands((n * settings.layer_combs) as u64),
        settings.resync.as_secs_f64(),
        settings.workers,
        comb_testkit::bin::comb_path().display()
    );
    println!();
    // Every cluster's requests in a window of the log, each key prefixed with its cluster.
    let between = |(from, to): (u64, u64)| -> BTreeMap<String, u64> {
        let mut counts = BTreeMap::new();
        for (cluster, requests) in &run.requests {
            for (key, count) in requests.between(from, to).by_key() {
                counts.insert(format!("{cluster}: {key}"), count);
            }
        }
        counts
    };
    let class_total = |counts: &BTreeMap<String, u64>, class: Class| -> u64 {
        counts
            .iter()
            .filter(|(key, _)| {
                let verb = key.split(' ').nth(1).unwrap_or_default();
                class_of(verb) == class
            })
            .map(|(_, n)| n)
            .sum()
    };
    let classes = |counts: &BTreeMap<String, u64>, of: usize| {
        format!(
            "{} writes, {} reads, {} watches opened",
            per(class_total(counts, Class::Write), of),
            per(class_total(counts, Class::Read), of),
            per(class_total(counts, Class::Watch), of)
        )
    };
    let first = between(run.first);
    let creation = between(run.creation);
    let window = between(run.window);
    let removal = between(run.removal);

    let mut ready = run.ready.clone();
    ready.sort_unstable();
    println!("| layers on demand | value |");
    println!("|---|---|");
    println!(
        "| create -> Ready, the first layer | {} |",
        millis(run.ready[0])
    );
    println!(
        "| create -> Ready, per layer (all {n}) | median {}, p90 {}, max {} (the last: {}) |",
        millis(percentile(&ready, 0.5)),
        millis(percentile(&ready, 0.9)),
        millis(ready[n - 1]),
        millis(run.ready[n - 1])
    );
    println!(
        "| all {n} created, each Ready and its requests stopped before the next | {} |",
        seconds(run.creating)
    );
    let idle = run.memory.first().map_or(0, |(_, rss, _)| *rss);
    for (layers, rss, hwm) in &run.memory {
        let each = if *layers > 0 {
            format!(
                ", {:.1} KiB per layer over no layer",
                rss.saturating_sub(idle) as f64 / *layers as f64
            )
        } else {
            String::new()
        };
        println!(
            "| VmRSS of `comb run`, {} settled | {:.1} MiB (peak {:.1} MiB{each}) |",
            layer_count(*layers),
            *rss as f64 / 1024.0,
            *hwm as f64 / 1024.0
        );
    }
    println!(
        "| requests creating the first layer | {} |",
        classes(&first, 1)
    );
    println!(
        "| requests creating a layer (mean of {n}) | {} |",
        classes(&creation, n)
    );
    // The answers >= 400 while creating, by code and request.
    let mut failed: BTreeMap<String, u64> = BTreeMap::new();
    for (cluster, requests) in &run.requests {
        for (_, request) in &requests.between(run.creation.0, run.creation.1).entries {
            if request.code >= 400 {
                *failed
                    .entry(format!("{} {cluster}: {}", request.code, request.key()))
                    .or_default() += 1;
            }
        }
    }
    println!(
        "| answers >= 400 creating them | {} |",
        if failed.is_empty() {
            "none".to_string()
        } else {
            failed
                .iter()
                .map(|(what, count)| format!("{count}x {what}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    );
    println!(
        "| settled window ({} s, {n} layers): all requests | {} (the watches: renewals, each watch is opened again after its 290 s) |",
        (run.window.1 - run.window.0) / 1_000_000,
        classes(&window, 1)
    );
    if removed > 0 {
        let mut layer_gone: Vec<Duration> = run.removals.iter().map(|r| r.0).collect();
        let mut terminating: Vec<Duration> = run.removals.iter().map(|r| r.1).collect();
        let mut namespace_gone: Vec<Duration> = run.removals.iter().map(|r| r.2).collect();
        for times in [&mut layer_gone, &mut terminating, &mut namespace_gone] {
            times.sort_unstable();
        }
        println!(
            "| remove a layer (delete its CombLayer; median of {removed}, one at a time) | CombLayer gone {}, its namespace Terminating {}, gone {} (max {}, {}, {}) |",
            millis(percentile(&layer_gone, 0.5)),
            millis(percentile(&terminating, 0.5)),
            millis(percentile(&namespace_gone, 0.5)),
            millis(layer_gone[removed - 1]),
            millis(terminating[removed - 1]),
            millis(namespace_gone[removed - 1])
        );
        println!(
            "| requests removing a layer (mean of {removed}) | {} |",
            classes(&removal, removed)
        );
    }
    println!();

    // Requests by cluster, verb and resource.
    let columns: Vec<(String, &BTreeMap<String, u64>, usize)> = [
        Some(("the first layer".to_string(), &first, 1)),
        Some((format!("a layer, mean of {n}"), &creation, n)),
        Some((
            format!(
                "settled window ({} s), all",
                (run.window.1 - run.window.0) / 1_000_000
            ),
            &window,
            1,
        )),
        (removed > 0).then(|| (format!("a removal, mean of {removed}"), &removal, removed)),
    ]
    .into_iter()
    .flatten()
    .collect();
    let mut keys: Vec<&String> = columns.iter().flat_map(|(_, c, _)| c.keys()).collect();
    keys.sort_by_key(|key| {
        let (cluster, request) = key.split_once(": ").unwrap_or((key, ""));
        let (verb, resource) = request.split_once(' ').unwrap_or((request, ""));
        let order = match class_of(verb) {
            Class::Write => 0,
            Class::Read => 1,
            Class::Watch => 2,
        };
        (
            cluster.to_string(),
            order,
            resource.to_string(),
            verb.to_string(),
        )
    });
    keys.dedup();
    println!(
        "| requests by cluster, verb and resource (prod: staging and the CombLayers; dev: the layers) | {} |",
        columns
            .iter()
            .map(|(name, ..)| name.as_str())
            .collect::<Vec<_>>()
            .join(" | ")
    );
    println!("|---|{}", "---|".repeat(columns.len()));
    for key in keys {
        println!(
            "| {key} | {} |",
            columns
                .iter()
                .map(|(_, counts, of)| per(counts.get(key).copied().unwrap_or(0), *of))
                .collect::<Vec<_>>()
                .join(" | ")
        );
    }
    println!();

    // Watches open: the watch requests of the 290 s before each point, per cluster and kind.
    let open: Vec<(usize, BTreeMap<String, u64>)> = run
        .settled_at
        .iter()
        .map(|(layers, at)| {
            let from = at.saturating_sub(WATCH_RENEWAL.as_micros() as u64);
            let mut counts = BTreeMap::new();
            for (cluster, requests) in &run.requests {
                for (key, count) in requests.between(from, at + 1).by_key() {
                    if let Some(resource) = key.strip_prefix("watch ") {
                        *counts
                            .entry(format!("{cluster}: {resource}"))
                            .or_insert(0u64) += count;
                        *counts.entry(format!("{cluster}: all")).or_insert(0u64) += count;
                    }
                }
            }
            (*layers, counts)
        })
        .collect();
    let mut kinds: Vec<&String> = open.iter().flat_map(|(_, c)| c.keys()).collect();
    kinds.sort();
    kinds.dedup();
    let none = BTreeMap::new();
    let idle = open
        .iter()
        .find(|(layers, _)| *layers == 0)
        .map_or(&none, |(_, c)| c);
    let most = open.iter().max_by_key(|(layers, _)| *layers);
    println!(
        "| watches open (watch requests in the {} s before; each is renewed once in that time) | {} | per layer ({} layers - none) / {} |",
        WATCH_RENEWAL.as_secs(),
        open.iter()
            .map(|(layers, _)| layer_count(*layers))
            .collect::<Vec<_>>()
            .join(" | "),
        most.map_or(0, |(layers, _)| *layers),
        most.map_or(0, |(layers, _)| *layers)
    );
    println!("|---|{}---|", "---|".repeat(open.len()));
    for kind in kinds {
        let cells: Vec<String> = open
            .iter()
            .map(|(_, counts)| thousands(counts.get(kind).copied().unwrap_or(0)))
            .collect();
        let each = most.map_or("-".to_string(), |(layers, counts)| {
            per(
                counts
                    .get(kind)
                    .copied()
                    .unwrap_or(0)
                    .saturating_sub(idle.get(kind).copied().unwrap_or(0)),
                *layers,
            )
        });
        let row = if kind.ends_with(": all") {
            format!("**{kind}**")
        } else {
            kind.clone()
        };
        println!("| {row} | {} | {each} |", cells.join(" | "));
    }
    println!();
}

/// The edit phase's rows of one build (`whose` tells which, after the figure's name).
fn print_edits(settings: &Settings, whose: &str, edits: &Edits) {
    let count = edits.requests.len();
    if count > 0 {
        let writes: Vec<u64> = edits
            .requests
            .iter()
            .map(|e| e.count(Class::Write))
            .collect();
        let reads: Vec<u64> = edits
            .requests
            .iter()
            .map(|e| e.count(Class::Read))
            .collect();
        println!(
            "| one prod image edit along the chain{whose} ({count} edits, {} Combs per layer) | writes mean {}, max {}; reads mean {}, max {}; answers >= 400: {} |",
            settings.edit_combs,
            per(writes.iter().sum(), count),
            writes.iter().max().copied().unwrap_or(0),
            per(reads.iter().sum(), count),
            reads.iter().max().copied().unwrap_or(0),
            failures(&all_edits(&edits.requests))
        );
    }
    if !edits.reaction.is_empty() {
        let mut sorted = edits.reaction.clone();
        sorted.sort();
        println!(
            "| reaction{whose} (CR edit -> watch sees the Deployment) | median {}, p90 {}, max {} |",
            millis(percentile(&sorted, 0.5)),
            millis(percentile(&sorted, 0.9)),
            millis(percentile(&sorted, 1.0))
        );
    }
    if !edits.round_trip.is_empty() {
        let sorted = |pick: fn(&RoundTrips) -> Duration| {
            let mut trips: Vec<Duration> = edits.round_trip.iter().map(pick).collect();
            trips.sort();
            trips
        };
        let edit_trips = sorted(|trips| trips.edit);
        let apply_trips = sorted(|trips| trips.apply);
        println!(
            "| a plain client's Comb edit seen by its watch{whose} (same server, after each edit) | median {}, p90 {} |",
            millis(percentile(&edit_trips, 0.5)),
            millis(percentile(&edit_trips, 0.9)),
        );
        println!(
            "| a plain client's Deployment apply seen by its watch{whose} | median {}, p90 {} |",
            millis(percentile(&apply_trips, 0.5)),
            millis(percentile(&apply_trips, 0.9)),
        );
        // Per edit: its reaction less the two writes it holds, as the plain client saw them.
        let mut own: Vec<Duration> = edits
            .reaction
            .iter()
            .zip(&edits.round_trip)
            .map(|(reaction, trips)| reaction.saturating_sub(trips.edit + trips.apply))
            .collect();
        own.sort();
        println!(
            "| comb's part of the reaction{whose} (reaction - the two plain writes, per edit) | median {}, p90 {} |",
            millis(percentile(&own, 0.5)),
            millis(percentile(&own, 0.9)),
        );
    }
}

async fn run(settings: &Settings) -> Result<Figures> {
    let mut figures = Figures::default();
    if settings.runs("edit") && settings.edits > 0 {
        edit_phase(settings, &mut figures).await?;
        eprintln!("edit phase done");
    }
    if settings.runs("converge") {
        let deployed = converge_phase(settings, &mut figures).await?;
        eprintln!("convergence phase done");
        if settings.runs("plain") {
            plain_phase(settings, &mut figures, deployed.objects.clone()).await?;
            eprintln!("plain client phase done");
        }
        if settings.runs("floor") {
            let transitions = figures
                .convergence_floor
                .as_ref()
                .map(|floor| floor.recorded.transitions.clone())
                .unwrap_or_default();
            figures.floor_client = Some(floor_client(settings, deployed, &transitions).await?);
            eprintln!("floor client phase done");
        }
    }
    if settings.runs("rss") && !settings.rss_sizes.is_empty() {
        memory_phase(settings, &mut figures).await?;
        eprintln!("memory phase done");
    }
    if settings.runs("growth") {
        growth_phase(settings, &mut figures).await?;
        eprintln!("growth phase done");
    }
    if settings.runs("layers") {
        layers_phase(settings, &mut figures).await?;
        eprintln!("layers phase done");
    }
    Ok(figures)
}

fn main() -> Result<()> {
    // Cargo runs a bench binary with `--bench`; a filter or other flags mean nothing here.
    let settings = Settings::from_env()?;
    // Built (by cargo, as the tests build it) before any cluster runs.
    let comb = comb_testkit::bin::comb_path();
    eprintln!("controller: {}", comb.display());
    // Two threads: the emulator (or the kube proxies) and the bench share the machine with
    // the controller process.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let started = Instant::now();
    let figures = runtime.block_on(run(&settings))?;
    report(&settings, &figures);
    println!();
    println!("(bench ran {})", seconds(started.elapsed()));
    Ok(())
}
