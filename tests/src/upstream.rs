//! The borrowing tests' layers over the kit's clusters: `prod` and `dev` on
//! two API servers, and `staging`, a second context on prod's server whose Combs live in
//! namespace `staging`. Each context is a layer of the same name. Steps are driven directly
//! (resolution, then one reconcile step), the way the federation controller runs them.

use std::collections::BTreeMap;

use comb_api::{Comb, CombSpec, CombStatus, DEFAULT_GROUP, UpstreamSpec};
use comb_federation::engine::borrow::{BorrowEnv, Controlling, resolution};
use comb_federation::engine::class::{ClassRegistry, CombInstance, Settings};
use comb_federation::engine::kube_ops::KubeOps;
use comb_federation::engine::reconcile::{Dependencies, StepEnv, reconcile};
use comb_federation::engine::tenancy::UpstreamGrant;
use comb_kubeconfigs::ClientPool;
use comb_sandbox::controls::Controls;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use crate::fixtures::db_spec;
use crate::{Backend, Setup, World, wait_until};

/// The clusters, and the engine's view of them.
pub struct Layers {
    world: World,
    pub pool: ClientPool,
    registry: ClassRegistry,
    pub settings: Settings,
}

/// The cluster a context talks to.
pub fn cluster_of(context: &str) -> &'static str {
    match context {
        "dev" => "dev",
        _ => "prod",
    }
}

impl Layers {
    pub async fn start() -> Layers {
        let world = Setup::clusters(["prod", "dev"])
            .context("staging", "prod", "staging")
            .namespace("staging", "staging")
            .namespace_everywhere("platform")
            .start()
            .await;
        // The borrowing tests are about borrowing: their Combs' own `spec.upstream` may name any
        // of the layers and copy from them, as if every layer's `allowUpstreams` said so
        // (what it takes is the tenancy tests' business).
        let mut settings = Settings::default();
        settings.tenancy.upstreams.grants = ["prod", "staging", "dev"]
            .into_iter()
            .map(|context| UpstreamGrant {
                context: context.to_string(),
                namespaces: None,
                replicate: true,
            })
            .collect();
        Layers {
            pool: world.pool.clone(),
            world,
            registry: ClassRegistry::with_builtins(),
            settings,
        }
    }

    pub async fn client(&self, context: &str) -> kube::Client {
        self.pool
            .client(context)
            .await
            .expect("client of the context")
    }

    pub async fn ops(&self, context: &str) -> KubeOps {
        KubeOps::new(self.client(context).await, comb_api::LabelKeys::default())
    }

    /// The test controls of a cluster (`prod` or `dev`).
    pub fn controls(&self, cluster: &str) -> Controls {
        self.world.controls(cluster)
    }

    /// Counted API requests to `cluster` (`prod` or `dev`) since the last reset, by `<verb>
    /// <resource>`, but for the test's own reads.
    pub fn requests(&self, cluster: &str) -> BTreeMap<String, u64> {
        self.world.requests(cluster)
    }

    /// Counts from zero again on every cluster.
    pub fn reset_requests(&self) {
        for cluster in ["prod", "dev"] {
            self.world.reset_requests(cluster);
        }
    }

    /// The federation's view for the Combs of `context`: its layer's context, every layer.
    pub fn env(&self, context: &str) -> BorrowEnv {
        let mut env = BorrowEnv::new(self.pool.clone(), context);
        env.layers = ["prod", "staging", "dev"]
            .iter()
            .map(|layer| (layer.to_string(), layer.to_string()))
            .collect::<BTreeMap<_, _>>();
        env
    }

    async fn combs(&self, context: &str, namespace: &str) -> Api<Comb> {
        self.world.combs(context, namespace).await
    }

    /// Creates the Comb CR `namespace/name` in `context` and builds the Comb from what was
    /// stored.
    pub async fn comb(
        &self,
        context: &str,
        namespace: &str,
        name: &str,
        spec: Value,
    ) -> CombInstance {
        let stored = self.world.create_comb(context, namespace, name, spec).await;
        self.build(&stored).await
    }

    /// A Comb stored with `stored` but built from `spec`: one the CRD's CEL rules would refuse
    /// now (a real API server evaluates them, the emulator does not), as if admitted before.
    pub async fn comb_admitted_earlier(
        &self,
        context: &str,
        namespace: &str,
        name: &str,
        stored: Value,
        spec: Value,
    ) -> CombInstance {
        let stored: CombSpec = serde_json::from_value(stored).expect("a spec");
        let mut cr = self
            .combs(context, namespace)
            .await
            .create(
                &PostParams::default(),
                &Comb::new(DEFAULT_GROUP, namespace, name, stored),
            )
            .await
            .expect("Comb created");
        cr.spec = serde_json::from_value(spec).expect("a spec");
        self.build(&cr).await
    }

    /// Changes the spec (a merge patch) and builds the Comb anew, as the controller does when a
    /// spec changes. The recorded status is the CR's.
    pub async fn edit(
        &self,
        context: &str,
        comb: &CombInstance,
        spec_patch: Value,
    ) -> CombInstance {
        let patched = self
            .world
            .patch_comb_spec(context, comb.namespace(), comb.name(), spec_patch)
            .await;
        self.build(&patched).await
    }

    async fn build(&self, cr: &Comb) -> CombInstance {
        self.registry
            .build(cr, &self.settings, &|_: &CombInstance| false)
            .await
            .expect("the Comb builds")
    }

    /// The recorded status of `namespace/name` in `context`, as the API server has it.
    pub async fn recorded(&self, context: &str, namespace: &str, name: &str) -> CombStatus {
        let cr = self
            .combs(context, namespace)
            .await
            .get(name)
            .await
            .expect("Comb exists");
        cr.status.unwrap_or_default()
    }

    /// One step: resolution (the controlling code first), then reconcile.
    pub async fn step(
        &self,
        context: &str,
        comb: &mut CombInstance,
        controlling: &Controlling,
    ) -> CombStatus {
        let env = self.env(context);
        let upstream = resolution(comb, controlling, &env).await;
        let ops = self.ops(context).await;
        let outcome = reconcile(
            comb,
            StepEnv {
                ops: &ops,
                dependencies: &Dependencies::Unknown,
                fallback: None,
                hold_progress_until: None,
            },
            upstream,
        )
        .await;
        outcome.carry_into(comb);
        outcome.status
    }

    /// Steps until `done` holds for the recorded status, stepping again after a short pause.
    pub async fn settle(
        &self,
        context: &str,
        comb: &mut CombInstance,
        controlling: &Controlling,
        done: impl Fn(&CombStatus) -> bool,
    ) -> CombStatus {
        let name = comb.name().to_string();
        wait_until(format!("{name} to settle in {context}"), async || {
            let status = self.step(context, comb, controlling).await;
            if done(&status) {
                Ok(status)
            } else {
                Err(status)
            }
        })
        .await
    }

    /// What a cloud's load-balancer controller does, where nobody does it: a real control plane
    /// here has none (the emulator's simulation assigns an address itself), so on it the
    /// LoadBalancer Service `namespace/name` of `cluster` gets `ip` as its ingress.
    pub async fn provide_load_balancer(
        &self,
        cluster: &str,
        namespace: &str,
        name: &str,
        ip: &str,
    ) {
        if self.world.backend() != Backend::Kube {
            return;
        }
        Api::<k8s_openapi::api::core::v1::Service>::namespaced(
            self.client(cluster).await,
            namespace,
        )
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [{"ip": ip}]}}})),
        )
        .await
        .expect("the Service's load balancer recorded");
    }

    /// The object of `api_version`/`kind` named `name` in `namespace` of `cluster` (`prod` or
    /// `dev`, each its own context), as its API server has it now.
    pub async fn peek(
        &self,
        cluster: &str,
        api_version: &str,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Option<Value> {
        self.world
            .peek(cluster, api_version, kind, namespace, name)
            .await
    }
}

/// The chain of `db` Combs the upstream tests walk: prod serving (a LoadBalancer), staging
/// (namespace staging of prod's server) borrowing from prod, dev (another server) borrowing
/// from staging; with the controlling code of each borrowing layer.
pub struct DbChain {
    pub prod: CombInstance,
    pub staging: CombInstance,
    pub dev: CombInstance,
    pub staging_borrows: Controlling,
    pub dev_borrows: Controlling,
}

impl Layers {
    /// Creates the three `db` Combs of [`DbChain`].
    pub async fn db_chain(&self) -> DbChain {
        DbChain {
            prod: self
                .comb("prod", "platform", "db", db_spec("LoadBalancer", None))
                .await,
            staging: self
                .comb("staging", "staging", "db", db_spec("ClusterIP", None))
                .await,
            dev: self
                .comb("dev", "platform", "db", db_spec("ClusterIP", None))
                .await,
            staging_borrows: borrow(
                "staging",
                json!({"class": "K8s", "layer": "prod", "namespace": "platform"}),
            ),
            dev_borrows: borrow(
                "dev",
                json!({"class": "K8s", "layer": "staging", "namespace": "staging"}),
            ),
        }
    }
}

/// The controlling code borrowing with `answer` (e.g. the layer's borrow).
pub fn borrow(layer: &str, answer: Value) -> Controlling {
    Controlling::new(
        format!("the borrow of layer {layer}"),
        UpstreamSpec::Declared(answer.as_object().cloned().expect("an object")),
    )
}
