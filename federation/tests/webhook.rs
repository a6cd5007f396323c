//! The validating admission webhook over HTTPS: AdmissionReviews posted in-process (trusting the
//! CA it generated), and on the real backend a kube-apiserver that calls it for every create and
//! update of a Comb and refuses what it refuses, with its sentence.

use std::sync::Arc;

use comb_api::DEFAULT_GROUP;
use comb_federation::config::Config;
use comb_federation::engine::class::ClassRegistry;
use comb_federation::webhook::{Certificates, Webhook, WebhookOptions};
use comb_testkit::process::{COMMAND_DEADLINE, OutputWithin as _};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

const CONFIG: &str = r#"
layers:
  - name: prod
    context: prod
    namespaces: [platform]
    stubs: [mailer]
"#;

const KNOWN: &str = "known classes: Kubernetes::Comb::Static, Manifests, Manifests::Stub";

/// The webhook on 127.0.0.1, any port, with a generated CA written to `ca_file`.
async fn start_webhook(ca_file: &std::path::Path) -> (Webhook, CancellationToken) {
    let config = Config::from_yaml(CONFIG, "comb.yaml", None).expect("a valid config");
    let options = WebhookOptions {
        address: "127.0.0.1:0".parse().expect("parses"),
        certificates: Certificates::Generated {
            service: Some("comb-webhook.comb-system".parse().expect("parses")),
            ca_file: Some(ca_file.to_path_buf()),
        },
    };
    let webhook = Webhook::bind(
        &options,
        Arc::new(config),
        Arc::new(ClassRegistry::with_builtins()),
    )
    .await
    .expect("the webhook binds");
    (webhook, CancellationToken::new())
}

fn comb(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "comb.internal/v1",
        "kind": "Comb",
        "metadata": {"name": name, "namespace": "platform"},
        "spec": spec,
    })
}

/// The bad Combs and the sentence each is refused with; then a good one.
fn bad_combs() -> Vec<(Value, String)> {
    vec![
        (
            comb("cache", json!({"class": "Redis"})),
            format!("spec.class: Redis is not a known class; {KNOWN}"),
        ),
        (
            comb(
                "mailer",
                json!({"class": "Manifests", "config": {
                    "endpoints": [{"name": "smtp", "port": 25}, {"name": "imap", "port": 143}],
                    "stub": {"endpoints": [{"name": "smtp", "port": 1025}]}}}),
            ),
            "Manifests::Stub does not keep the contract of Manifests: missing endpoint(s) imap"
                .to_string(),
        ),
        (
            comb(
                "api",
                json!({"class": "Manifests", "config": {"manifests": [
                    {"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": "cfg", "namespace": "kube-system"}}]}}),
            ),
            "ConfigMap kube-system/cfg is in namespace kube-system, not platform; layer prod does not \
             allow it (add kube-system to layers[0].allowNamespaces)"
                .to_string(),
        ),
        (
            // Issue 19's attack: a Secret of another cluster's namespace, copied by naming it.
            comb(
                "thief",
                json!({"class": "Manifests", "upstream": {"class": "K8s", "context": "dev",
                    "namespace": "billing", "name": "ledger",
                    "replicate": [{"kind": "Secret", "name": "ledger-keys"}]}}),
            ),
            "spec.upstream names context dev, namespace billing and copies Secret ledger-keys \
             from it, which layer prod does not allow: add {context: dev, namespaces: [billing], \
             replicate: true} to layers[0].allowUpstreams"
                .to_string(),
        ),
        (
            comb(
                "api",
                json!({"class": "Manifests", "dependsOn": ["platform/api"]}),
            ),
            "spec.dependsOn: platform/api is this Comb itself, and a Comb cannot depend on itself"
                .to_string(),
        ),
    ]
}

fn good_comb() -> Value {
    comb(
        "api",
        json!({"class": "Manifests", "config": {"manifests": [
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}}]}}),
    )
}

fn review(uid: &str, operation: &str, object: Value, old: Option<Value>) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "operation": operation,
            "object": object,
            "oldObject": old,
        },
    })
}

#[tokio::test]
async fn admission_reviews_over_https_are_answered_with_one_sentence() {
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.crt");
    let (webhook, shutdown) = start_webhook(&ca_file).await;
    let address = webhook.address();
    let ca_pem = std::fs::read_to_string(&ca_file).unwrap();
    assert_eq!(Some(ca_pem.as_str()), webhook.ca_pem());
    let server = tokio::spawn(webhook.serve(shutdown.clone()));

    // A client that trusts only the written CA, asking for a name the certificate is for.
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .build();
    let client: Client<_, Full<bytes::Bytes>> =
        Client::builder(TokioExecutor::new()).build(connector);
    let post = |body: Value| {
        let client = client.clone();
        async move {
            let request =
                http::Request::post(format!("https://127.0.0.1:{}/validate", address.port()))
                    .header("content-type", "application/json")
                    .body(Full::new(bytes::Bytes::from(body.to_string())))
                    .unwrap();
            let response = client.request(request).await.expect("the webhook answers");
            let status = response.status();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            (
                status,
                serde_json::from_slice::<Value>(&body).unwrap_or(Value::Null),
            )
        }
    };

    for (index, (object, sentence)) in bad_combs().into_iter().enumerate() {
        let uid = format!("uid-{index}");
        let (status, answer) = post(review(&uid, "CREATE", object, None)).await;
        assert_eq!(status, 200);
        assert_eq!(answer["apiVersion"], "admission.k8s.io/v1");
        assert_eq!(answer["kind"], "AdmissionReview");
        let response = &answer["response"];
        assert_eq!(response["uid"], uid.as_str());
        assert_eq!(response["allowed"], false, "{sentence}");
        assert_eq!(response["status"]["message"], sentence.as_str());
        let code = response["status"]["code"].as_u64().unwrap();
        let reason = response["status"]["reason"].as_str().unwrap();
        assert!(
            (code, reason) == (422, "Invalid") || (code, reason) == (403, "Forbidden"),
            "{code} {reason}"
        );
    }

    let (_, answer) = post(review("good", "CREATE", good_comb(), None)).await;
    assert_eq!(answer["response"]["uid"], "good");
    assert_eq!(answer["response"]["allowed"], true);
    assert!(answer["response"].get("status").is_none());

    // An update is judged on a changed spec; deletion, and metadata-only updates (the
    // controller's finalizer) of a Comb it would refuse now, pass.
    let (unknown, _) = bad_combs().remove(0);
    let (_, answer) = post(review("u1", "UPDATE", unknown.clone(), Some(good_comb()))).await;
    assert_eq!(answer["response"]["allowed"], false);
    let mut finalized = unknown.clone();
    finalized["metadata"]["finalizers"] = json!(["comb.internal/cleanup"]);
    let (_, answer) = post(review(
        "u2",
        "UPDATE",
        finalized.clone(),
        Some(unknown.clone()),
    ))
    .await;
    assert_eq!(answer["response"]["allowed"], true);
    let (_, answer) = post(review("d", "DELETE", Value::Null, Some(unknown))).await;
    assert_eq!(answer["response"]["allowed"], true);

    // A Comb in a namespace no layer manages is none of the controller's business.
    let mut elsewhere = finalized;
    elsewhere["metadata"]["namespace"] = json!("elsewhere");
    let (_, answer) = post(review("e", "CREATE", elsewhere, None)).await;
    assert_eq!(answer["response"]["allowed"], true);

    let (status, _) = post(json!({"kind": "NotAReview", "request": 7})).await;
    assert_eq!(status, 400);

    shutdown.cancel();
    server.await.unwrap();
}

/// The real kube-apiserver calls the webhook: each bad Comb is refused with its sentence, a good
/// one is admitted.
#[tokio::test]
async fn a_real_api_server_refuses_what_the_webhook_refuses() {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};

    if !comb_sandbox::real::available_or_skip(
        "webhook::a_real_api_server_refuses_what_the_webhook_refuses",
    ) {
        return;
    }
    let world = comb_testkit::Setup::clusters(["prod"])
        .on(comb_sandbox::Backend::Kube)
        .namespace("prod", "platform")
        .start()
        .await;
    let client = world.client("prod").await;

    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.crt");
    let (webhook, shutdown) = start_webhook(&ca_file).await;
    let port = webhook.address().port();
    let ca_pem = webhook.ca_pem().unwrap().to_string();
    let server = tokio::spawn(webhook.serve(shutdown.clone()));

    use base64::Engine as _;
    let configuration: ValidatingWebhookConfiguration = serde_json::from_value(json!({
        "metadata": {"name": "comb"},
        "webhooks": [{
            "name": "validate.comb.internal",
            "clientConfig": {
                "url": format!("https://127.0.0.1:{port}/validate"),
                "caBundle": base64::engine::general_purpose::STANDARD.encode(ca_pem),
            },
            "rules": [{
                "apiGroups": ["comb.internal"],
                "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"],
                "resources": ["combs"],
                "scope": "Namespaced",
            }],
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "admissionReviewVersions": ["v1"],
            "timeoutSeconds": 10,
        }],
    }))
    .unwrap();
    Api::<ValidatingWebhookConfiguration>::all(client.clone())
        .create(&PostParams::default(), &configuration)
        .await
        .expect("the webhook is registered");

    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(DEFAULT_GROUP, "v1", "Comb"));
    let combs: Api<DynamicObject> = Api::namespaced_with(client.clone(), "platform", &resource);
    let create = |object: Value| {
        let combs = combs.clone();
        async move {
            let object: DynamicObject = serde_json::from_value(object).unwrap();
            combs.create(&PostParams::default(), &object).await
        }
    };

    // The CRD is served and the webhook configuration is in effect a moment after they are
    // written: retry the first refusal until both hold.
    let bad = bad_combs();
    comb_testkit::wait_until(
        "the webhook to refuse the first bad Comb",
        async || match create(bad[0].0.clone()).await {
            Err(kube::Error::Api(status)) if status.message.contains("denied the request") => {
                Ok(())
            }
            Ok(created) => {
                let name = created.metadata.name.unwrap();
                combs.delete(&name, &Default::default()).await.unwrap();
                Err(format!("{name} admitted"))
            }
            Err(error) => Err(error.to_string()),
        },
    )
    .await;
    for (object, sentence) in bad {
        match create(object).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(
                    status.message,
                    format!(
                        "admission webhook \"validate.comb.internal\" denied the request: {sentence}"
                    )
                );
                assert!(status.code == 422 || status.code == 403, "{status:?}");
            }
            other => panic!("{sentence}: not refused: {other:?}"),
        }
    }
    let created = create(good_comb()).await.expect("a good Comb is admitted");
    assert_eq!(created.metadata.name.as_deref(), Some("api"));

    // Updating it into one the layer does not allow is refused too.
    let mut worse: DynamicObject = created;
    worse.data["spec"]["class"] = json!("Redis");
    let refused = combs
        .replace("api", &PostParams::default(), &worse)
        .await
        .expect_err("an update to an unknown class is refused");
    assert!(
        refused
            .to_string()
            .contains(&format!("spec.class: Redis is not a known class; {KNOWN}")),
        "{refused}"
    );

    shutdown.cancel();
    server.await.unwrap();
    world.shutdown().await;
}

/// The chart's own certificates (helm-generated, without cert-manager) are what comb serves:
/// the Secret it mounts at --webhook-cert-dir loads, and its CA is the caBundle.
#[test]
fn the_charts_generated_certificate_is_served_and_its_ca_is_the_ca_bundle() {
    use base64::Engine as _;
    let helm = comb_sandbox::real::default_bin_dir().join("helm");
    if !helm.exists() {
        comb_sandbox::real::record_skip(&format!(
            "webhook::the_charts_generated_certificate_is_served_and_its_ca_is_the_ca_bundle: \
             skipped: no helm at {} (tests/kube/build builds it)",
            helm.display()
        ));
        return;
    }
    let chart = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/comb");
    let output = std::process::Command::new(&helm)
        .args(["template", "comb"])
        .arg(&chart)
        .args(["--set", "webhook.enabled=true"])
        .output_within(COMMAND_DEADLINE);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    let documents: Vec<Value> = text
        .split("\n---\n")
        .filter_map(|document| serde_saphyr::from_str::<Value>(document).ok())
        .filter(|document| document.is_object())
        .collect();
    let of_kind = |kind: &str| {
        documents
            .iter()
            .find(|document| document["kind"] == kind)
            .unwrap_or_else(|| panic!("the chart renders a {kind}"))
    };
    let secret = of_kind("Secret");
    let configuration = of_kind("ValidatingWebhookConfiguration");
    let webhook = &configuration["webhooks"][0];
    assert_eq!(
        secret["data"]["ca.crt"],
        webhook["clientConfig"]["caBundle"]
    );
    assert_eq!(webhook["failurePolicy"], "Fail");
    assert_eq!(
        webhook["rules"][0]["operations"],
        json!(["CREATE", "UPDATE"])
    );

    let dir = tempfile::tempdir().unwrap();
    for key in ["tls.crt", "tls.key"] {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(secret["data"][key].as_str().unwrap())
            .unwrap();
        std::fs::write(dir.path().join(key), decoded).unwrap();
    }
    comb_federation::webhook::ServingTls::from_dir(dir.path())
        .expect("comb serves the chart's certificate");
}
