//! The real backend's LoadBalancer controller, as cloud-provider-kind or MetalLB is for kind:
//! every Service of type LoadBalancer gets an ingress IP from its cluster's pool
//! ([`crate::real::addresses`]), decided as the emulator decides ([`LoadBalancerPool`]); with
//! the sandbox network, kube-proxy serves those addresses and the router sends the pool's
//! traffic to the cluster's node. The names a Service publishes (external-dns's annotation) go
//! into the sandbox's zone ([`ExternalNames`]).

use std::sync::Arc;

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::WatchStreamExt as _;
use kube::runtime::watcher::{self, Event};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::network::dns::{ExternalNames, published_names};
use crate::load_balancer::LoadBalancerPool;

/// Hands out ingress IPs of `pool` in `cluster` until `shutdown`.
pub async fn run(
    cluster: String,
    client: kube::Client,
    mut pool: LoadBalancerPool,
    names: Arc<ExternalNames>,
    shutdown: CancellationToken,
) {
    let services: Api<Service> = Api::all(client.clone());
    let mut events = watcher::watcher(services, watcher::Config::default())
        .default_backoff()
        .boxed();
    let mut listed: Vec<Value> = Vec::new();
    loop {
        let event = tokio::select! {
            () = shutdown.cancelled() => return,
            event = events.next() => event,
        };
        match event {
            Some(Ok(Event::Init)) => listed.clear(),
            Some(Ok(Event::InitApply(service))) => {
                listed.extend(serde_json::to_value(service).ok());
            }
            Some(Ok(Event::InitDone)) => {
                // What is handed out already first, so nothing is handed out twice.
                listed.iter().for_each(|service| pool.hold(service));
                for service in std::mem::take(&mut listed) {
                    settle(&cluster, &client, &mut pool, &names, &service).await;
                }
            }
            Some(Ok(Event::Apply(service))) => {
                if let Ok(service) = serde_json::to_value(service) {
                    settle(&cluster, &client, &mut pool, &names, &service).await;
                }
            }
            Some(Ok(Event::Delete(service))) => {
                if let Ok(service) = serde_json::to_value(service) {
                    pool.release(&service);
                    publish(&cluster, &names, &service, Vec::new());
                }
            }
            Some(Err(error)) => {
                tracing::debug!(%cluster, %error, "watching Services for their load balancers");
            }
            None => return,
        }
    }
}

/// Gives `service` the ingress it should have, and publishes its names.
async fn settle(
    cluster: &str,
    client: &kube::Client,
    pool: &mut LoadBalancerPool,
    names: &ExternalNames,
    service: &Value,
) {
    publish(cluster, names, service, published_names(service));
    let Some(status) = pool.status_for(service) else {
        return;
    };
    let (Some(namespace), Some(name)) = (
        service["metadata"]["namespace"].as_str(),
        service["metadata"]["name"].as_str(),
    ) else {
        return;
    };
    // A merge patch keeps what it does not name: a load balancer's ingress is removed by name.
    let ingress = status["loadBalancer"]["ingress"].clone();
    let patch = json!({"status": {"loadBalancer": {"ingress": ingress}}});
    let api: Api<Service> = Api::namespaced(client.clone(), namespace);
    if let Err(error) = api
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        // Handed back: the next event of the Service asks again.
        let mut assigned = service.clone();
        assigned["status"] = status;
        pool.release(&assigned);
        tracing::debug!(%cluster, service = %format!("{namespace}/{name}"), %error, "writing a load balancer's ingress");
    }
}

fn publish(
    cluster: &str,
    names: &ExternalNames,
    service: &Value,
    records: Vec<(String, std::net::Ipv4Addr)>,
) {
    let key = format!(
        "{}/{}",
        service["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default(),
        service["metadata"]["name"].as_str().unwrap_or_default()
    );
    if let Err(error) = names.set(cluster, &key, records) {
        tracing::warn!(%cluster, service = %key, %error, "writing the sandbox's external names");
    }
}
