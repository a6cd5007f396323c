use futures::StreamExt;

use super::*;

#[test]
fn requests_are_classified_like_kube_apiserver() {
    let cases = [
        ("GET", "/api/v1/namespaces/default/pods", None, "list pods"),
        (
            "GET",
            "/api/v1/namespaces/default/pods",
            Some("watch=true&resourceVersion=5"),
            "watch pods",
        ),
        (
            "GET",
            "/api/v1/namespaces/default/pods",
            Some("watch=1"),
            "watch pods",
        ),
        (
            "GET",
            "/api/v1/namespaces/default/pods",
            Some("watch=false"),
            "list pods",
        ),
        (
            "GET",
            "/api/v1/namespaces/default/pods",
            Some("fieldSelector=metadata.name%3Dweb&watch=true"),
            "watch pods",
        ),
        ("GET", "/api/v1/pods", Some("limit=500"), "list pods"),
        (
            "GET",
            "/api/v1/namespaces/default/pods/web",
            None,
            "get pods",
        ),
        (
            "GET",
            "/api/v1/namespaces/default/pods/web",
            Some("watch=true"),
            "get pods",
        ),
        (
            "GET",
            "/api/v1/namespaces/default/pods/web/log",
            Some("container=a"),
            "get pods/log",
        ),
        (
            "GET",
            "/api/v1/watch/namespaces/default/pods",
            None,
            "watch pods",
        ),
        (
            "GET",
            "/api/v1/watch/namespaces/default/pods/web",
            None,
            "watch pods",
        ),
        (
            "POST",
            "/apis/apps/v1/namespaces/default/deployments",
            None,
            "create deployments.apps",
        ),
        (
            "PUT",
            "/apis/apps/v1/namespaces/default/deployments/web",
            None,
            "update deployments.apps",
        ),
        (
            "PUT",
            "/apis/apps/v1/namespaces/default/deployments/web/status",
            None,
            "update deployments.apps/status",
        ),
        (
            "PATCH",
            "/apis/apps/v1/namespaces/default/deployments/web",
            None,
            "patch deployments.apps",
        ),
        (
            "PATCH",
            "/apis/apps/v1/namespaces/default/deployments/web/scale",
            None,
            "patch deployments.apps/scale",
        ),
        (
            "DELETE",
            "/apis/apps/v1/namespaces/default/deployments/web",
            None,
            "delete deployments.apps",
        ),
        (
            "DELETE",
            "/apis/apps/v1/namespaces/default/deployments",
            None,
            "deletecollection deployments.apps",
        ),
        ("GET", "/api/v1/namespaces", None, "list namespaces"),
        ("GET", "/api/v1/namespaces/default", None, "get namespaces"),
        (
            "DELETE",
            "/api/v1/namespaces/default",
            None,
            "delete namespaces",
        ),
        (
            "PUT",
            "/api/v1/namespaces/default/finalize",
            None,
            "update namespaces/finalize",
        ),
        (
            "PUT",
            "/api/v1/namespaces/default/status",
            None,
            "update namespaces/status",
        ),
        (
            "GET",
            "/apis/comb.internal/v1/namespaces/team/combs",
            None,
            "list combs.comb.internal",
        ),
        (
            "GET",
            "/apis/comb.internal/v1/combs",
            Some("watch=true"),
            "watch combs.comb.internal",
        ),
        (
            "GET",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/combs.comb.internal",
            None,
            "get customresourcedefinitions.apiextensions.k8s.io",
        ),
        ("GET", "/api", None, "get /api"),
        ("GET", "/api/v1", None, "get /api/v1"),
        ("GET", "/apis", None, "get /apis"),
        ("GET", "/apis/apps/v1", None, "get /apis/apps/v1"),
        ("GET", "/version", None, "get /version"),
        (
            "GET",
            "/openapi/v3/apis/apps/v1",
            Some("hash=x"),
            "get /openapi/v3/apis/apps/v1",
        ),
    ];
    for (method, path, query, expected) in cases {
        let method: Method = method.parse().expect("a method");
        let info = RequestInfo::parse(&method, path, query);
        assert_eq!(
            info.key(),
            expected,
            "{method} {path}?{}",
            query.unwrap_or_default()
        );
    }
    let info = RequestInfo::parse(&Method::GET, "/api/v1/namespaces/team/pods/web/log", None);
    assert_eq!(
        (info.namespace.as_str(), info.name.as_str()),
        ("team", "web")
    );
    assert!(!RequestInfo::parse(&Method::GET, "/apis/apps", None).is_resource_request);
}

#[test]
fn globs() {
    let cases = [
        ("*", "/api/v1/pods", true),
        ("/api/v1/*", "/api/v1/namespaces/default/pods", true),
        (
            "/apis/apps/v1/namespaces/*/deployments",
            "/apis/apps/v1/namespaces/x/deployments",
            true,
        ),
        (
            "/apis/apps/v1/namespaces/*/deployments",
            "/apis/apps/v1/namespaces/x/deployments/web",
            false,
        ),
        (
            "*/deployments*",
            "/apis/apps/v1/namespaces/x/deployments/web",
            true,
        ),
        ("/api/v1/pods", "/api/v1/pods", true),
        ("/api/v1/pod?", "/api/v1/pods", true),
        ("/api/v1/pod?", "/api/v1/pod", false),
        ("", "", true),
        ("", "/x", false),
        ("a*b*c", "axxbyyc", true),
        ("a*b*c", "axxbyy", false),
    ];
    for (glob, text, expected) in cases {
        assert_eq!(glob_matches(glob, text), expected, "{glob} ~ {text}");
    }
}

/// An API that answers `ok`, or for watches an endless stream.
fn api() -> Router {
    Router::new().fallback(|request: Request<Body>| async move {
        if request
            .uri()
            .query()
            .is_some_and(|q| q.contains("watch=true"))
        {
            let events = futures::stream::once(async {
                Ok::<_, std::io::Error>(Bytes::from("{\"type\":\"ADDED\"}\n"))
            })
            .chain(futures::stream::once(async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                Ok::<_, std::io::Error>(Bytes::from("{\"type\":\"MODIFIED\"}\n"))
            }))
            .chain(futures::stream::pending());
            Response::new(Body::from_stream(events))
        } else {
            Response::new(Body::from("ok"))
        }
    })
}

/// A watch of Pods through `router`, past its first event.
async fn open_watch(router: &Router) -> axum::body::BodyDataStream {
    let watch = Request::builder()
        .uri("/api/v1/namespaces/default/pods?watch=true")
        .body(Body::empty())
        .expect("a request");
    let response = router.clone().oneshot(watch).await.expect("infallible");
    let mut stream = response.into_body().into_data_stream();
    assert_eq!(
        stream.next().await.expect("an event").expect("data"),
        Bytes::from("{\"type\":\"ADDED\"}\n")
    );
    stream
}

async fn call(router: &Router, method: Method, uri: &str, body: &str) -> (StatusCode, String) {
    let request = Request::builder()
        .method(method)
        .uri(uri)
        .body(Body::from(body.to_string()))
        .expect("a request");
    let response = router.clone().oneshot(request).await.expect("infallible");
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap_or_default();
    (status, String::from_utf8_lossy(&bytes).to_string())
}

#[tokio::test]
async fn requests_are_counted_and_reset() {
    let controls = Controls::new();
    let router = controls.wrap(api());
    call(
        &router,
        Method::GET,
        "/apis/apps/v1/namespaces/default/deployments",
        "",
    )
    .await;
    call(
        &router,
        Method::GET,
        "/apis/apps/v1/namespaces/default/deployments",
        "",
    )
    .await;
    call(
        &router,
        Method::POST,
        "/api/v1/namespaces/default/configmaps",
        "{}",
    )
    .await;
    call(&router, Method::GET, "/version", "").await;
    let (status, body) = call(&router, Method::GET, "/_sandbox/requests", "").await;
    assert_eq!(status, StatusCode::OK);
    let counts: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(
        counts,
        json!({"create configmaps": 1, "get /version": 1, "list deployments.apps": 2})
    );
    assert_eq!(controls.request_count("list", "deployments.apps"), 2);
    assert_eq!(controls.total_requests(), 4);

    let (status, _) = call(&router, Method::POST, "/_sandbox/requests/reset", "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(controls.requests().is_empty());
}

#[tokio::test]
async fn impersonated_requests_are_counted_by_user() {
    let controls = Controls::new();
    let router = controls.wrap(api());
    let deployer = "system:serviceaccount:apps:deployer";
    for impersonate in [Some(deployer), None, Some(deployer)] {
        let mut request = Request::builder()
            .method(Method::POST)
            .uri("/api/v1/namespaces/apps/configmaps");
        if let Some(user) = impersonate {
            request = request.header("Impersonate-User", user);
        }
        let request = request.body(Body::from("{}")).expect("a request");
        let response = router.clone().oneshot(request).await.expect("infallible");
        assert_eq!(response.status(), StatusCode::OK, "the header is accepted");
    }
    assert_eq!(controls.request_count("create", "configmaps"), 3);
    assert_eq!(
        controls.requests_as(deployer),
        [("create configmaps".to_string(), 2)].into()
    );
    assert!(
        controls
            .requests_as("system:serviceaccount:apps:other")
            .is_empty()
    );
    let (status, body) = call(&router, Method::GET, "/_sandbox/requests/impersonated", "").await;
    assert_eq!(status, StatusCode::OK);
    let counts: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(counts, json!({deployer: {"create configmaps": 2}}));

    controls.reset_requests();
    assert!(controls.requests_as(deployer).is_empty());
}

#[tokio::test]
async fn faults_answer_the_next_matching_requests() {
    let controls = Controls::new();
    let router = controls.wrap(api());
    let fault = r#"{"method": "GET", "path": "/apis/apps/v1/*", "verb": "list", "status": 503, "count": 2}"#;
    let (status, body) = call(&router, Method::POST, "/_sandbox/faults", fault).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let list = "/apis/apps/v1/namespaces/default/deployments";

    // A get on the same path prefix is not a list: it passes.
    assert_eq!(
        call(&router, Method::GET, &format!("{list}/web"), "")
            .await
            .0,
        StatusCode::OK
    );
    for _ in 0..2 {
        let (status, body) = call(&router, Method::GET, list, "").await;
        assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
        let body: Value = serde_json::from_str(&body).expect("a Status");
        assert_eq!(body["kind"], "Status");
        assert_eq!(body["reason"], "ServiceUnavailable");
        assert_eq!(body["code"], 503);
    }
    assert_eq!(
        call(&router, Method::GET, list, "").await,
        (StatusCode::OK, "ok".to_string())
    );
    assert!(controls.faults().is_empty());
    // Faulted requests reached the server: they are counted.
    assert_eq!(controls.request_count("list", "deployments.apps"), 3);

    controls.inject(Fault::status("PUT", "*/deployments/web", 409, 5));
    let (status, body) = call(&router, Method::PUT, &format!("{list}/web"), "{}").await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert!(
        body.contains(r#"Operation cannot be fulfilled on deployments.apps \"web\""#),
        "{body}"
    );
    let (_, armed) = call(&router, Method::GET, "/_sandbox/faults", "").await;
    assert_eq!(
        serde_json::from_str::<Value>(&armed).expect("json")[0]["count"],
        4
    );
    assert_eq!(
        call(&router, Method::DELETE, "/_sandbox/faults", "")
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(
        call(&router, Method::PUT, &format!("{list}/web"), "{}")
            .await
            .0,
        StatusCode::OK
    );

    let (status, body) = call(
        &router,
        Method::POST,
        "/_sandbox/faults",
        r#"{"status": "x"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

#[tokio::test]
async fn delay_faults_hold_requests_back() {
    let controls = Controls::new();
    let router = controls.wrap(api());
    // A lower bound only: the request cannot be answered before its delay.
    controls.inject(Fault::delay(
        "GET",
        "/version",
        Duration::from_millis(100),
        1,
    ));
    let started = tokio::time::Instant::now();
    assert_eq!(
        call(&router, Method::GET, "/version", "").await.0,
        StatusCode::OK
    );
    assert!(started.elapsed() >= Duration::from_millis(100));
    assert!(controls.faults().is_empty());
}

#[tokio::test]
async fn a_partition_refuses_requests_and_cuts_watches_until_healed() {
    let controls = Controls::new();
    let router = controls.wrap(api());
    let mut stream = open_watch(&router).await;

    let (status, _) = call(&router, Method::POST, "/_sandbox/partition", "").await;
    assert_eq!(status, StatusCode::OK);
    assert!(stream.next().await.expect("the cut").is_err());
    let (status, body) = call(&router, Method::GET, "/api/v1/pods", "").await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    assert!(body.contains("partitioned"), "{body}");
    // The controls still answer, and refused requests are not counted.
    assert_eq!(
        call(&router, Method::GET, "/_sandbox/partition", "")
            .await
            .1,
        r#"{"partitioned":true,"mode":"refuse"}"#
    );
    assert_eq!(controls.request_count("list", "pods"), 0);

    call(&router, Method::POST, "/_sandbox/heal", "").await;
    assert_eq!(
        call(&router, Method::GET, "/api/v1/pods", "").await,
        (StatusCode::OK, "ok".to_string())
    );
}

#[tokio::test]
async fn unknown_controls_say_what_exists() {
    let router = Controls::new().wrap(api());
    let (status, body) = call(&router, Method::GET, "/_sandbox/nope", "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(body.contains("POST partition"), "{body}");
}

#[tokio::test]
async fn the_request_log_records_requests_only_while_asked() {
    let controls = Controls::new();
    let router = controls.wrap(api());
    call(&router, Method::GET, "/api/v1/namespaces/apps/pods", "").await;
    assert!(controls.request_log().is_empty(), "off by default");

    let (status, _) = call(&router, Method::POST, "/_sandbox/requests/log", "").await;
    assert_eq!(status, StatusCode::OK);
    let before = epoch_micros(std::time::SystemTime::now());
    let request = Request::builder()
        .method(Method::PUT)
        .uri("/apis/apps/v1/namespaces/apps/deployments/web/status")
        .header("Impersonate-User", "observer")
        .body(Body::from("{}"))
        .expect("a request");
    router.clone().oneshot(request).await.expect("infallible");
    controls.inject(Fault::status("GET", "/api/v1/nodes", 503, 1));
    call(&router, Method::GET, "/api/v1/nodes", "").await;
    let log = controls.request_log();
    assert_eq!(
        log.iter()
            .map(|r| (
                r.key(),
                r.namespace.as_str(),
                r.name.as_str(),
                r.user.as_deref(),
                r.code
            ))
            .collect::<Vec<_>>(),
        vec![
            (
                "update deployments.apps/status".to_string(),
                "apps",
                "web",
                Some("observer"),
                200
            ),
            ("list nodes".to_string(), "", "", None, 503),
        ]
    );
    assert!(log.iter().all(|r| r.at_micros >= before));
    let (status, body) = call(&router, Method::GET, "/_sandbox/requests/log", "").await;
    assert_eq!(status, StatusCode::OK);
    let served: Vec<LoggedRequest> = serde_json::from_str(&body).expect("json");
    assert_eq!(served, log);

    controls.reset_requests();
    assert!(controls.request_log().is_empty(), "reset empties it");
    call(&router, Method::GET, "/version", "").await;
    assert_eq!(controls.request_log().len(), 1, "and recording goes on");
    let (status, _) = call(&router, Method::DELETE, "/_sandbox/requests/log", "").await;
    assert_eq!(status, StatusCode::OK);
    call(&router, Method::GET, "/version", "").await;
    assert!(controls.request_log().is_empty());
}

#[tokio::test]
async fn a_hanging_partition_takes_requests_and_answers_them_once_healed() {
    let controls = Controls::new();
    let router = controls.wrap(api());
    let mut stream = open_watch(&router).await;

    let (status, body) = call(
        &router,
        Method::POST,
        "/_sandbox/partition",
        r#"{"mode": "hang"}"#,
    )
    .await;
    assert_eq!(
        (status, body.as_str()),
        (StatusCode::OK, r#"{"partitioned":true,"mode":"hang"}"#)
    );
    assert_eq!(controls.partition_mode(), Some(PartitionMode::Hang));
    // Neither the open watch nor a new request gets an answer while it hangs: the connection
    // stays open and quiet.
    let quiet = Duration::from_millis(200);
    assert!(
        tokio::time::timeout(quiet, stream.next()).await.is_err(),
        "the watch stays open and quiet"
    );
    let waiting = tokio::spawn({
        let router = router.clone();
        async move { call(&router, Method::GET, "/api/v1/pods", "").await }
    });
    tokio::time::sleep(quiet).await;
    assert!(!waiting.is_finished(), "the request waits");
    assert_eq!(
        call(&router, Method::GET, "/_sandbox/partition", "")
            .await
            .1,
        r#"{"partitioned":true,"mode":"hang"}"#,
        "the controls still answer"
    );

    call(&router, Method::POST, "/_sandbox/heal", "").await;
    assert_eq!(
        waiting.await.expect("the request ends"),
        (StatusCode::OK, "ok".to_string()),
        "what waited is served once healed"
    );
    assert_eq!(
        stream
            .next()
            .await
            .expect("the watch goes on")
            .expect("data"),
        Bytes::from("{\"type\":\"MODIFIED\"}\n")
    );

    // A hang that turns into a refusing partition cuts the watch and refuses what waited.
    controls.partition_as(PartitionMode::Hang);
    let waiting = tokio::spawn({
        let router = router.clone();
        async move { call(&router, Method::GET, "/api/v1/pods", "").await }
    });
    tokio::time::sleep(quiet).await;
    controls.partition();
    assert!(stream.next().await.expect("the cut").is_err());
    assert_eq!(
        waiting.await.expect("the request ends").0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let (status, body) = call(
        &router,
        Method::POST,
        "/_sandbox/partition",
        r#"{"mode": "sideways"}"#,
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(body.contains("refuse"), "{body}");
}
