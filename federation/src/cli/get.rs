//! `comb get`: every Comb of every layer, one row each.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::process::ExitCode;

use comb_api::{
    Comb, CombEndpoint, CombRef, CombStatus, ConditionStatus, Phase, Reason, UPSTREAM_FALLBACK,
};
use jiff::Timestamp;
use kube::runtime::watcher;
use serde::Serialize;

use crate::cli::common::{Federation, GlobalArgs, StopSignals, block_on};
use crate::cli::output::{DataFormat, Table, human_duration, list, serialize};
use crate::config::Layer;

#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// Only these Combs, each `[LAYER:][NAMESPACE/]NAME` (a part left out matches any);
    /// `layers` lists the CombLayers instead.
    #[arg(value_name = "REF")]
    references: Vec<CombRef>,
    /// Only the Combs of this layer.
    #[arg(long, value_name = "LAYER", conflicts_with = "all_layers")]
    layer: Option<String>,
    /// Every layer (the default; for kubectl's hand).
    #[arg(short = 'A', long)]
    all_layers: bool,
    /// Only the Combs of this namespace.
    #[arg(short = 'n', long, value_name = "NAMESPACE")]
    namespace: Option<String>,
    /// Only the Combs whose labels match this selector (`app=db,tier!=cache`), as kubectl's.
    #[arg(short = 'l', long, value_name = "SELECTOR")]
    selector: Option<String>,
    /// After the table, a line per change of a Comb's phase, reason, upstream or via, until
    /// interrupted.
    #[arg(short = 'w', long)]
    watch: bool,
    /// `wide` adds the last step's message; `name` prints `LAYER:NAMESPACE/NAME` references for
    /// other commands; `json` and `yaml` are for scripts.
    #[arg(short = 'o', long, value_enum, value_name = "FORMAT")]
    output: Option<GetFormat>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum GetFormat {
    Wide,
    Name,
    Json,
    Yaml,
}

impl GetArgs {
    /// `comb get layers` (or `comblayers`, `cmbl`): the CombLayers, as `comb layer list`. A
    /// Comb of that name is `NAMESPACE/layers`.
    pub fn lists_layers(&self) -> bool {
        matches!(self.references.as_slice(), [only]
            if only.layer.is_none()
                && only.namespace.is_none()
                && matches!(only.name.as_str(), "layers" | "comblayers" | "cmbl"))
    }
}

/// The JSON/YAML document of `get`.
#[derive(Debug, Serialize)]
struct RowList<'a> {
    items: &'a [CombRow],
}

pub fn run(global: &GlobalArgs, args: GetArgs) -> anyhow::Result<ExitCode> {
    block_on(async {
        let federation = Federation::open(global)?;
        let layers: Vec<_> = match &args.layer {
            Some(name) => vec![federation.layer(name)?],
            None => federation.config.layers.iter().collect(),
        };
        for reference in &args.references {
            if let Some(layer) = &reference.layer {
                federation.layer(layer)?;
            }
        }
        if args.watch && matches!(args.output, Some(GetFormat::Json | GetFormat::Yaml)) {
            anyhow::bail!("--watch prints table lines; use -o wide, -o name or no -o with it");
        }
        if args.watch {
            return watch(&federation, &layers, &args).await;
        }
        let selector = args.selector.as_deref();
        let (rows, failures) =
            collect_rows(&federation, &layers, args.namespace.as_deref(), selector).await;
        let rows: Vec<CombRow> = rows
            .into_iter()
            .filter(|row| row.is_selected_by(&args.references))
            .collect();
        let text = match args.output {
            None | Some(GetFormat::Wide | GetFormat::Name) => first_lines(&rows, args.output),
            Some(GetFormat::Json) => serialize(&RowList { items: &rows }, DataFormat::Json)?,
            Some(GetFormat::Yaml) => serialize(&RowList { items: &rows }, DataFormat::Yaml)?,
        };
        print!("{text}");
        for failure in &failures {
            eprintln!("comb: {failure}");
        }
        Ok(if failures.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        })
    })
}

/// `get -w`: the table of the Combs of `layers`, then a row (without the header) whenever what
/// the table shows of one changes, or it is deleted (`PHASE` then reads `<deleted>`), until
/// interrupted. The table is what the watches list when they start, not a list read before
/// them: a change made between such a list and the watch would never show (the way kubectl
/// watches from its list's resourceVersion).
async fn watch(
    federation: &Federation,
    layers: &[&Layer],
    args: &GetArgs,
) -> anyhow::Result<ExitCode> {
    use futures::StreamExt as _;
    use kube::runtime::WatchStreamExt as _;

    let name_only = args.output == Some(GetFormat::Name);
    let mut stop_signals = StopSignals::listen()?;
    let mut config = watcher::Config::default();
    if let Some(selector) = &args.selector {
        config = config.labels(selector);
    }
    let mut watches = Vec::new();
    let mut streams = Vec::new();
    for (layer_index, layer) in layers.iter().enumerate() {
        for api in federation
            .comb_apis(layer, args.namespace.as_deref())
            .await?
        {
            let index = watches.len();
            watches.push(Watch::new(layer_index, layer));
            streams.push(
                watcher(api, config.clone())
                    .default_backoff()
                    .map(move |event| (index, event))
                    .boxed(),
            );
        }
    }
    let mut events = futures::stream::select_all(streams);
    let mut combs = WatchedCombs::default();
    let mut failures = Vec::new();
    // Until every watch listed once (or failed to), changes only build the table.
    let mut table_printed = false;
    loop {
        if !table_printed && watches.iter().all(|watch| watch.listed_once) {
            table_printed = true;
            let rows: Vec<CombRow> = combs
                .rows()
                .filter(|row| row.is_selected_by(&args.references))
                .cloned()
                .collect();
            print!("{}", first_lines(&rows, args.output));
            for failure in &failures {
                eprintln!("comb: {failure}");
            }
            combs.shown = rows.into_iter().map(|row| (row.reference(), row)).collect();
            flush_stdout();
        }
        let (index, event) = tokio::select! {
            () = stop_signals.recv() => break,
            next = events.next() => match next {
                Some(next) => next,
                None => break,
            },
        };
        let watch = &mut watches[index];
        let changed = match event {
            Ok(event) => {
                watch.failing = false;
                combs.apply(watch, event)
            }
            Err(error) => {
                let said = describe_watch_error(&error);
                if !watch.listed_once {
                    // The table waits for no layer that cannot be read; the watch retries.
                    watch.listed_once = true;
                    failures.push(format!(
                        "listing the Combs of layer {} (context {}) failed: {said}",
                        watch.layer.name, watch.layer.context
                    ));
                } else if !watch.failing {
                    // Once per failure, not per retry.
                    eprintln!(
                        "comb: watching the Combs of layer {} failed: {said}",
                        watch.layer.name
                    );
                }
                watch.failing = true;
                Vec::new()
            }
        };
        if !table_printed {
            continue;
        }
        for row in changed {
            if !row.is_selected_by(&args.references) {
                continue;
            }
            let key = row.reference();
            let deleted = row.phase.as_deref() == Some(DELETED);
            let nothing_new = match combs.shown.get(&key) {
                Some(before) => !deleted && before.shows_as(&row),
                // A Comb never shown is not shown deleted.
                None => deleted,
            };
            if nothing_new {
                continue;
            }
            let lines = first_lines(std::slice::from_ref(&row), args.output);
            // The header aligned the first table; a watch line keeps only the row.
            let skip = usize::from(!name_only);
            print!(
                "{}",
                lines
                    .lines()
                    .skip(skip)
                    .map(|l| format!("{l}\n"))
                    .collect::<String>()
            );
            flush_stdout();
            if deleted {
                combs.shown.remove(&key);
            } else {
                combs.shown.insert(key, row);
            }
        }
    }
    Ok(if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// What `get -w` prints for a deleted Comb in the PHASE column.
const DELETED: &str = "<deleted>";

/// The table (`-o wide`: with the messages; `-o name`: the references) of `rows`.
fn first_lines(rows: &[CombRow], output: Option<GetFormat>) -> String {
    match output {
        Some(GetFormat::Name) => rows
            .iter()
            .map(|row| format!("{}\n", row.reference()))
            .collect(),
        _ => table(rows, output == Some(GetFormat::Wide), Timestamp::now()),
    }
}

fn flush_stdout() {
    use std::io::Write as _;
    let _ = std::io::stdout().flush();
}

/// One watch of `get -w`: a layer's Combs, in one namespace or all it manages.
struct Watch<'a> {
    /// The layer's place in the table's order.
    layer_index: usize,
    layer: &'a Layer,
    /// Its first list came in, or failed.
    listed_once: bool,
    /// Its last event was an error (said once until an event comes again).
    failing: bool,
    /// The Combs it holds, and those of a list coming in: a relist after a lost watch does not
    /// say which Combs were deleted meanwhile, the difference does.
    listed: BTreeSet<CombKey>,
    relisting: Option<BTreeSet<CombKey>>,
}

impl<'a> Watch<'a> {
    fn new(layer_index: usize, layer: &'a Layer) -> Watch<'a> {
        Watch {
            layer_index,
            layer,
            listed_once: false,
            failing: false,
            listed: BTreeSet::new(),
            relisting: None,
        }
    }
}

/// A watch's failure in the API server's words.
fn describe_watch_error(error: &watcher::Error) -> String {
    match error {
        watcher::Error::InitialListFailed(error)
        | watcher::Error::WatchStartFailed(error)
        | watcher::Error::WatchFailed(error) => comb_kubeconfigs::describe_error(error),
        other => other.to_string(),
    }
}

/// A Comb's place in the table: its layer's, then namespace and name.
type CombKey = (usize, String, String);

/// The Combs the watches of `get -w` hold, in table order, and the rows printed last.
#[derive(Default)]
struct WatchedCombs {
    rows: BTreeMap<CombKey, CombRow>,
    /// By reference: the row printed last of each Comb shown.
    shown: HashMap<String, CombRow>,
}

impl WatchedCombs {
    fn rows(&self) -> impl Iterator<Item = &CombRow> {
        self.rows.values()
    }

    /// Takes in one event of `watch`: the rows it changed (a deleted Comb's with PHASE
    /// `<deleted>`).
    fn apply(&mut self, watch: &mut Watch<'_>, event: watcher::Event<Comb>) -> Vec<CombRow> {
        let key_of = |row: &CombRow| (watch.layer_index, row.namespace.clone(), row.name.clone());
        match event {
            watcher::Event::Init => {
                watch.relisting = Some(BTreeSet::new());
                Vec::new()
            }
            watcher::Event::InitApply(comb) | watcher::Event::Apply(comb) => {
                let row = CombRow::of(watch.layer, &comb);
                let key = key_of(&row);
                if let Some(relisting) = &mut watch.relisting {
                    relisting.insert(key.clone());
                }
                watch.listed.insert(key.clone());
                self.rows.insert(key, row.clone());
                vec![row]
            }
            watcher::Event::Delete(comb) => {
                let mut row = CombRow::of(watch.layer, &comb);
                let key = key_of(&row);
                watch.listed.remove(&key);
                self.rows.remove(&key);
                row.phase = Some(DELETED.to_string());
                vec![row]
            }
            watcher::Event::InitDone => {
                watch.listed_once = true;
                let relisted = watch.relisting.take().unwrap_or_default();
                let gone: Vec<CombKey> = watch.listed.difference(&relisted).cloned().collect();
                watch.listed = relisted;
                gone.iter()
                    .filter_map(|key| self.rows.remove(key))
                    .map(|mut row| {
                        row.phase = Some(DELETED.to_string());
                        row
                    })
                    .collect()
            }
        }
    }
}

/// One Comb as `get` shows it; also the JSON/YAML item, so scripts see what people see.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CombRow {
    pub layer: String,
    pub namespace: String,
    pub name: String,
    pub class: Option<String>,
    /// Its layer builds it as its class's stub (`stubs` in the configuration).
    pub stub: bool,
    pub phase: Option<String>,
    /// Reason and message of the `Ready` condition: the last step's verdict.
    pub reason: Option<String>,
    pub message: Option<String>,
    /// Where it borrows from: the upstream's context, else its class (e.g. `Static`).
    pub upstream: Option<String>,
    /// The layers the service comes through, nearest first; empty when served here.
    pub via: Vec<String>,
    /// Why it is on a fallback of its layer's chain (its `UpstreamFallback` message), while it is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fallback: Option<String>,
    /// The published endpoints (the upstream's addresses while borrowing).
    pub endpoints: Vec<CombEndpoint>,
    pub creation_timestamp: Option<Timestamp>,
}

impl CombRow {
    /// `LAYER:NAMESPACE/NAME`, a reference every command takes.
    pub fn reference(&self) -> String {
        format!("{}:{}/{}", self.layer, self.namespace, self.name)
    }

    /// Whether one of `references` names this row (each part written must match); no
    /// references select every row.
    fn is_selected_by(&self, references: &[CombRef]) -> bool {
        references.is_empty()
            || references.iter().any(|reference| {
                reference.name == self.name
                    && reference
                        .layer
                        .as_ref()
                        .is_none_or(|layer| *layer == self.layer)
                    && reference
                        .namespace
                        .as_ref()
                        .is_none_or(|namespace| *namespace == self.namespace)
            })
    }

    /// Whether the table shows `other` as it shows this row (AGE aside).
    fn shows_as(&self, other: &CombRow) -> bool {
        let shown = |row: &CombRow| {
            (
                row.class.clone(),
                row.stub,
                row.phase.clone(),
                row.reason.clone(),
                row.message.clone(),
                row.upstream.clone(),
                row.via.clone(),
                row.fallback.clone(),
            )
        };
        shown(self) == shown(other)
    }

    /// The row of `comb` in `layer`.
    pub fn of(layer: &Layer, comb: &Comb) -> CombRow {
        let mut row = CombRow::new(&layer.name, comb);
        row.stub = layer.stubs_comb(&row.namespace, &row.name);
        row
    }

    fn new(layer: &str, comb: &Comb) -> CombRow {
        let status = comb.status.as_ref();
        let ready = status.and_then(CombStatus::ready);
        let upstream = status.and_then(|status| status.upstream.as_ref());
        CombRow {
            layer: layer.to_string(),
            namespace: comb.metadata.namespace.clone().unwrap_or_default(),
            name: comb.metadata.name.clone().unwrap_or_default(),
            class: comb.spec.class.clone(),
            stub: false,
            phase: status.and_then(|status| status.phase.as_ref().map(Phase::to_string)),
            reason: ready.and_then(|ready| ready.reason.as_ref().map(Reason::to_string)),
            message: ready.and_then(|ready| ready.message.clone()),
            upstream: upstream.and_then(|upstream| {
                upstream
                    .context
                    .clone()
                    .or_else(|| upstream.class.as_deref().map(short_upstream_class))
            }),
            via: upstream
                .and_then(|upstream| upstream.via.clone())
                .unwrap_or_default(),
            fallback: status
                .and_then(|status| status.condition(UPSTREAM_FALLBACK))
                .filter(|condition| condition.status == ConditionStatus::True)
                .map(|condition| condition.message.clone().unwrap_or_default()),
            endpoints: status
                .map(|status| status.endpoint_list().to_vec())
                .unwrap_or_default(),
            creation_timestamp: comb.metadata.creation_timestamp.as_ref().map(|time| time.0),
        }
    }
}

/// The rows of every Comb of `layers` (in `namespace` only, if given), and a message for each
/// layer that could not be read: one layer that cannot be read must not hide the others.
pub async fn collect_rows(
    federation: &Federation,
    layers: &[&Layer],
    namespace: Option<&str>,
    selector: Option<&str>,
) -> (Vec<CombRow>, Vec<String>) {
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for layer in layers {
        match federation
            .list_selected_combs(layer, namespace, selector)
            .await
        {
            Ok(combs) => rows.extend(combs.iter().map(|comb| CombRow::of(layer, comb))),
            Err(error) => failures.push(crate::cli::output::one_line(&error)),
        }
    }
    (rows, failures)
}

/// `Kubernetes::Comb::Upstream::Static` reads as `Static`; other names stay.
fn short_upstream_class(class: &str) -> String {
    class
        .strip_prefix("Kubernetes::Comb::Upstream::")
        .unwrap_or(class)
        .to_string()
}

/// Where a row borrows from, marked `(fallback)` while it is on one of its layer's fallbacks
/// (`local (fallback)` while it runs its own).
fn upstream_cell(row: &CombRow) -> String {
    match (&row.upstream, &row.fallback) {
        (Some(upstream), Some(_)) => format!("{upstream} (fallback)"),
        (None, Some(_)) => "local (fallback)".to_string(),
        (upstream, None) => upstream.clone().unwrap_or_default(),
    }
}

/// The table of `get`; `wide` adds the Ready message.
pub fn table(rows: &[CombRow], wide: bool, now: Timestamp) -> String {
    let mut headers = vec![
        "LAYER",
        "NAMESPACE",
        "NAME",
        "CLASS",
        "PHASE",
        "REASON",
        "UPSTREAM",
        "VIA",
        "AGE",
    ];
    if wide {
        headers.push("MESSAGE");
    }
    let mut table = Table::new(headers);
    for row in rows {
        let age = row
            .creation_timestamp
            .map(|created| human_duration(now.as_second() - created.as_second()))
            .unwrap_or_default();
        let mut cells = vec![
            row.layer.clone(),
            row.namespace.clone(),
            row.name.clone(),
            match (&row.class, row.stub) {
                (Some(class), true) => format!("{class} (stub)"),
                (class, _) => class.clone().unwrap_or_default(),
            },
            row.phase.clone().unwrap_or_default(),
            row.reason.clone().unwrap_or_default(),
            upstream_cell(row),
            list(&row.via),
            age,
        ];
        if wide {
            cells.push(row.message.clone().unwrap_or_default());
        }
        table.row(cells);
    }
    table.render()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn comb(value: serde_json::Value) -> Comb {
        Comb::from_value(value).unwrap()
    }

    fn rows() -> Vec<CombRow> {
        let borrowed = comb(json!({
            "apiVersion": "comb.internal/v1", "kind": "Comb",
            "metadata": {"name": "db", "namespace": "platform",
                         "creationTimestamp": "2026-01-01T12:00:00Z"},
            "spec": {"class": "Manifests"},
            "status": {"phase": "Running",
                "conditions": [{"type": "Ready", "status": "True", "reason": "Borrowed",
                                "message": "borrowed from upstream K8s (context staging) via staging, prod"}],
                "upstream": {"class": "K8s", "context": "staging", "reachable": true,
                             "phase": "Running", "via": ["staging", "prod"]}}
        }));
        let fixed = comb(json!({
            "metadata": {"name": "cache", "namespace": "platform",
                         "creationTimestamp": "2026-01-01T11:00:00Z"},
            "spec": {"class": "Manifests"},
            "status": {"phase": "Running",
                "upstream": {"class": "Kubernetes::Comb::Upstream::Static", "via": []}}
        }));
        let fresh = comb(json!({
            "metadata": {"name": "nats", "namespace": "platform"},
            "spec": {"class": "Manifests"}
        }));
        let on_prod = comb(json!({
            "metadata": {"name": "mq", "namespace": "platform"},
            "spec": {"class": "Manifests"},
            "status": {"phase": "Running",
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": "Borrowed",
                     "message": "staging unhealthy for 30s (context unreachable); borrowing from prod"},
                    {"type": "UpstreamFallback", "status": "True", "reason": "UpstreamUnhealthy",
                     "message": "staging unhealthy for 30s (context unreachable); borrowing from prod"}],
                "upstream": {"class": "K8s", "context": "prod", "via": ["prod"]}}
        }));
        let on_own = comb(json!({
            "metadata": {"name": "mail", "namespace": "platform"},
            "spec": {"class": "Manifests"},
            "status": {"phase": "Running",
                "conditions": [
                    {"type": "Ready", "status": "True", "reason": "Healthy",
                     "message": "staging unhealthy for 30s (context unreachable); running locally"},
                    {"type": "UpstreamFallback", "status": "True", "reason": "UpstreamUnhealthy",
                     "message": "staging unhealthy for 30s (context unreachable); running locally"}]}
        }));
        let dev = crate::config::Config::from_yaml(
            "layers: [{name: dev, context: dev, stubs: [nats]}]",
            "test",
            None,
        )
        .unwrap()
        .layers
        .remove(0);
        vec![
            CombRow::of(&dev, &borrowed),
            CombRow::of(&dev, &fixed),
            CombRow::of(&dev, &fresh),
            CombRow::of(&dev, &on_prod),
            CombRow::of(&dev, &on_own),
        ]
    }

    #[test]
    fn rows_from_recorded_status() {
        let rows = rows();
        assert_eq!(rows[0].upstream.as_deref(), Some("staging"));
        assert_eq!(rows[0].via, ["staging", "prod"]);
        assert_eq!(rows[0].reason.as_deref(), Some("Borrowed"));
        assert_eq!(rows[1].upstream.as_deref(), Some("Static"));
        assert_eq!(rows[2].phase, None);
        assert_eq!(rows[2].upstream, None);
        assert_eq!(
            serde_json::to_value(&rows[0]).unwrap(),
            json!({"layer": "dev", "namespace": "platform", "name": "db", "class": "Manifests",
                   "stub": false, "phase": "Running", "reason": "Borrowed",
                   "message": "borrowed from upstream K8s (context staging) via staging, prod",
                   "upstream": "staging", "via": ["staging", "prod"], "endpoints": [],
                   "creationTimestamp": "2026-01-01T12:00:00Z"})
        );
    }

    #[test]
    fn tables_for_people() {
        let now: Timestamp = "2026-01-01T12:05:30Z".parse().unwrap();
        assert_eq!(
            table(&rows()[..3], false, now),
            "LAYER   NAMESPACE   NAME    CLASS              PHASE     REASON     UPSTREAM   VIA             AGE\n\
             dev     platform    db      Manifests          Running   Borrowed   staging    staging, prod   5m30s\n\
             dev     platform    cache   Manifests          Running   <none>     Static     <none>          65m\n\
             dev     platform    nats    Manifests (stub)   <none>    <none>     <none>     <none>          <none>\n"
        );
        let wide = table(&rows()[..1], true, now);
        assert!(
            wide.lines().next().unwrap().ends_with("AGE     MESSAGE"),
            "{wide}"
        );
        assert!(
            wide.contains("5m30s   borrowed from upstream K8s (context staging) via staging, prod")
        );
    }

    #[test]
    fn a_borrower_on_fallback_says_so() {
        let rows = rows();
        let message = "staging unhealthy for 30s (context unreachable); borrowing from prod";
        assert_eq!(rows[3].fallback.as_deref(), Some(message));
        assert_eq!(rows[0].fallback, None, "on its preferred upstream");
        assert_eq!(
            serde_json::to_value(&rows[3]).unwrap()["fallback"],
            json!(message)
        );
        let now: Timestamp = "2026-01-01T12:05:30Z".parse().unwrap();
        assert_eq!(
            table(&rows[3..], false, now),
            "LAYER   NAMESPACE   NAME   CLASS       PHASE     REASON     UPSTREAM           VIA      AGE\n\
             dev     platform    mq     Manifests   Running   Borrowed   prod (fallback)    prod     <none>\n\
             dev     platform    mail   Manifests   Running   Healthy    local (fallback)   <none>   <none>\n"
        );
    }

    #[test]
    fn a_watch_relist_says_which_combs_went_while_it_was_lost() {
        let layer =
            crate::config::Config::from_yaml("layers: [{name: dev, context: dev}]", "test", None)
                .unwrap()
                .layers
                .remove(0);
        let named = |name: &str, phase: &str| {
            comb(json!({
                "metadata": {"name": name, "namespace": "platform"},
                "spec": {"class": "Manifests"},
                "status": {"phase": phase}
            }))
        };
        let phases = |rows: Vec<CombRow>| -> Vec<(String, String)> {
            rows.into_iter()
                .map(|row| (row.name, row.phase.unwrap_or_default()))
                .collect()
        };
        let mut combs = WatchedCombs::default();
        let mut watch = Watch::new(0, &layer);
        let mut take = |combs: &mut WatchedCombs, event| phases(combs.apply(&mut watch, event));
        take(&mut combs, watcher::Event::Init);
        take(
            &mut combs,
            watcher::Event::InitApply(named("db", "Pending")),
        );
        take(
            &mut combs,
            watcher::Event::InitApply(named("nats", "Running")),
        );
        assert_eq!(take(&mut combs, watcher::Event::InitDone), []);
        assert_eq!(
            take(&mut combs, watcher::Event::Apply(named("db", "Running"))),
            [("db".to_string(), "Running".to_string())]
        );
        // The watch was lost; nats went meanwhile, and the relist alone does not say so.
        take(&mut combs, watcher::Event::Init);
        take(
            &mut combs,
            watcher::Event::InitApply(named("db", "Running")),
        );
        assert_eq!(
            take(&mut combs, watcher::Event::InitDone),
            [("nats".to_string(), DELETED.to_string())]
        );
        assert_eq!(
            take(&mut combs, watcher::Event::Delete(named("db", "Running"))),
            [("db".to_string(), DELETED.to_string())]
        );
        assert_eq!(combs.rows().count(), 0);
        assert!(watch.listed_once && watch.listed.is_empty());
    }
}
