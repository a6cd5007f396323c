//! The Job controller: runs Pods until `completions` succeed (Complete) or more than
//! `backoffLimit` fail (Failed, BackoffLimitExceeded), `parallelism` at a time; honours
//! `suspend`, and deletes finished Jobs after `ttlSecondsAfterFinished`. Failed Pods are
//! replaced at once, without the controller's exponential delay, so failures show quickly.

use std::time::Duration;

use jiff::Timestamp;
use serde_json::{Map, Value, json};

use super::object::{self, add, format_time, insert_nonzero, parse_time};
use super::replicaset::pod_from_template;
use super::{Action, Kind, Plan, pod};

const DEFAULT_BACKOFF_LIMIT: i64 = 6;

/// `(type, reason)` of the terminal condition, if the Job has finished.
pub fn finished(job: &Value) -> Option<(&str, &str)> {
    job["status"]["conditions"]
        .as_array()?
        .iter()
        .find_map(|c| {
            let kind = c["type"].as_str()?;
            (matches!(kind, "Complete" | "Failed") && c["status"] == "True")
                .then(|| (kind, c["reason"].as_str().unwrap_or_default()))
        })
}

/// What the Job controller does for `job`, given the Pods it controls.
pub fn plan(job: &Value, pods: &[&Value], now: Timestamp) -> Plan {
    if object::is_deleting(job) {
        return Plan::default();
    }
    let mut plan = Plan::default();
    let spec = &job["spec"];
    let active: Vec<&Value> = pods.iter().copied().filter(|p| pod::is_active(p)).collect();
    let phase_count = |phase: &str| {
        i64::try_from(
            pods.iter()
                .filter(|p| p["status"]["phase"] == phase)
                .count(),
        )
        .unwrap_or(i64::MAX)
    };
    let succeeded = phase_count("Succeeded");
    let failed = phase_count("Failed");

    if finished(job).is_some() {
        // Nothing runs after the end; only the TTL controller has work left.
        plan.actions
            .extend(active.iter().map(|p| Action::delete(Kind::Pod, p)));
        if let Some(ttl) = spec["ttlSecondsAfterFinished"].as_u64() {
            let end = parse_time(&job["status"]["completionTime"])
                .or_else(|| finish_time(job))
                .unwrap_or(now);
            let due = add(end, Duration::from_secs(ttl));
            if due <= now {
                plan.actions.push(Action::delete(Kind::Job, job));
            } else {
                plan.wake = Some(due);
            }
        }
        return plan;
    }

    let completions = spec["completions"].as_i64();
    let parallelism = spec["parallelism"].as_i64().unwrap_or(1).max(0);
    let backoff_limit = spec["backoffLimit"]
        .as_i64()
        .unwrap_or(DEFAULT_BACKOFF_LIMIT);
    let suspended = spec["suspend"] == true;
    let stamp = format_time(now);
    let mut conditions: Vec<Value> = job["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let condition = |kind: &str, status: &str, reason: &str, message: &str| json!({"type": kind, "status": status, "lastProbeTime": stamp, "lastTransitionTime": stamp, "reason": reason, "message": message});

    let done = match completions {
        Some(n) => succeeded >= n,
        // A work queue: done when one Pod succeeded and none still runs.
        None => succeeded > 0 && active.is_empty(),
    };
    let mut completion_time = None;
    let mut active_count = i64::try_from(active.len()).unwrap_or(i64::MAX);
    if failed > backoff_limit {
        let message = "Job has reached the specified backoff limit";
        conditions.push(condition(
            "FailureTarget",
            "True",
            "BackoffLimitExceeded",
            message,
        ));
        conditions.push(condition("Failed", "True", "BackoffLimitExceeded", message));
        plan.actions
            .extend(active.iter().map(|p| Action::delete(Kind::Pod, p)));
        active_count = 0;
    } else if done {
        let message = "Reached expected number of succeeded pods";
        conditions.push(condition(
            "SuccessCriteriaMet",
            "True",
            "CompletionsReached",
            message,
        ));
        conditions.push(condition("Complete", "True", "CompletionsReached", message));
        completion_time = Some(stamp.clone());
    } else if suspended {
        plan.actions
            .extend(active.iter().map(|p| Action::delete(Kind::Pod, p)));
        active_count = 0;
        set_suspended(
            &mut conditions,
            condition("Suspended", "True", "JobSuspended", "Job suspended"),
        );
    } else {
        if conditions
            .iter()
            .any(|c| c["type"] == "Suspended" && c["status"] == "True")
        {
            set_suspended(
                &mut conditions,
                condition("Suspended", "False", "JobResumed", "Job resumed"),
            );
        }
        // A work queue starts nothing once one Pod has succeeded: the rest only finish.
        let remaining = match completions {
            Some(n) => (n - succeeded).min(parallelism),
            None if succeeded > 0 => 0,
            None => parallelism,
        };
        for _ in active_count..remaining.max(0) {
            plan.actions.push(Action::Create(Kind::Pod, job_pod(job)));
        }
    }

    let mut status = Map::new();
    if !conditions.is_empty() {
        status.insert("conditions".into(), Value::Array(conditions));
    }
    let started = job["status"]["startTime"].clone();
    if started.is_string() {
        status.insert("startTime".into(), started);
    } else if !suspended {
        status.insert("startTime".into(), json!(stamp));
    }
    if let Some(at) = completion_time {
        status.insert("completionTime".into(), json!(at));
    }
    insert_nonzero(&mut status, "active", active_count);
    insert_nonzero(&mut status, "succeeded", succeeded);
    insert_nonzero(&mut status, "failed", failed);
    status.insert("terminating".into(), json!(0));
    status.insert("uncountedTerminatedPods".into(), json!({}));
    let ready = active.iter().filter(|p| pod::is_ready(p)).count();
    status.insert(
        "ready".into(),
        json!(if active_count == 0 { 0 } else { ready }),
    );
    plan.push(Action::status_change(Kind::Job, job, Value::Object(status)));
    plan
}

fn finish_time(job: &Value) -> Option<Timestamp> {
    job["status"]["conditions"]
        .as_array()?
        .iter()
        .filter(|c| c["type"] == "Failed" || c["type"] == "Complete")
        .find_map(|c| parse_time(&c["lastTransitionTime"]))
}

fn set_suspended(conditions: &mut Vec<Value>, wanted: Value) {
    let unchanged = conditions
        .iter()
        .any(|c| c["type"] == "Suspended" && c["status"] == wanted["status"]);
    if !unchanged {
        conditions.retain(|c| c["type"] != "Suspended");
        conditions.push(wanted);
    }
}

/// A Pod of the Job, with the labels the API server puts on a Job's template.
fn job_pod(job: &Value) -> Value {
    let mut pod = pod_from_template(job, Kind::Job);
    let labels = &mut pod["metadata"]["labels"];
    for (key, value) in [
        ("batch.kubernetes.io/controller-uid", object::uid(job)),
        ("batch.kubernetes.io/job-name", object::name(job)),
        ("controller-uid", object::uid(job)),
        ("job-name", object::name(job)),
    ] {
        if labels.get(key).is_none() {
            labels[key] = json!(value);
        }
    }
    pod
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> Timestamp {
        "2024-01-01T00:00:00Z".parse().expect("valid")
    }

    fn job(spec: Value) -> Value {
        let mut spec = spec;
        spec["template"] = json!({"metadata": {"labels": {"app": "migrate"}}, "spec": {"restartPolicy": "Never", "containers": [{"name": "m", "image": "tools"}]}});
        json!({"metadata": {"name": "migrate", "namespace": "default", "uid": "j-uid"}, "spec": spec})
    }

    fn pod_in(phase: &str) -> Value {
        json!({"metadata": {"name": format!("migrate-{phase}")}, "status": {"phase": phase}})
    }

    fn status_of(plan: &Plan) -> Value {
        plan.actions
            .iter()
            .find_map(|a| match a {
                Action::UpdateStatus(Kind::Job, j) => Some(j["status"].clone()),
                _ => None,
            })
            .unwrap_or_else(|| panic!("no status in {:?}", plan.actions))
    }

    fn creates(plan: &Plan) -> usize {
        plan.actions
            .iter()
            .filter(|a| matches!(a, Action::Create(Kind::Pod, _)))
            .count()
    }

    fn condition_types(status: &Value) -> Vec<String> {
        status["conditions"]
            .as_array()
            .map(|c| {
                c.iter()
                    .map(|c| {
                        format!(
                            "{}={} {}",
                            c["type"].as_str().unwrap_or_default(),
                            c["status"].as_str().unwrap_or_default(),
                            c["reason"].as_str().unwrap_or_default()
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    #[test]
    fn jobs_run_pods_to_completion_or_failure() {
        let running = pod_in("Running");
        let ok = pod_in("Succeeded");
        let bad = pod_in("Failed");
        // (spec, pods, pods created, conditions, active, succeeded, failed)
        type Case<'a> = (Value, Vec<&'a Value>, usize, Vec<&'a str>, i64, i64, i64);
        let cases: Vec<Case> = vec![
            (json!({}), vec![], 1, vec![], 0, 0, 0),
            (json!({}), vec![&running], 0, vec![], 1, 0, 0),
            (
                json!({}),
                vec![&ok],
                0,
                vec![
                    "SuccessCriteriaMet=True CompletionsReached",
                    "Complete=True CompletionsReached",
                ],
                0,
                1,
                0,
            ),
            (
                json!({"completions": 3, "parallelism": 2}),
                vec![],
                2,
                vec![],
                0,
                0,
                0,
            ),
            (
                json!({"completions": 3, "parallelism": 2}),
                vec![&ok, &ok, &running],
                0,
                vec![],
                1,
                2,
                0,
            ),
            (json!({"backoffLimit": 1}), vec![&bad], 1, vec![], 0, 0, 1),
            (
                json!({"backoffLimit": 1}),
                vec![&bad, &bad, &running],
                0,
                vec![
                    "FailureTarget=True BackoffLimitExceeded",
                    "Failed=True BackoffLimitExceeded",
                ],
                0,
                0,
                2,
            ),
            (
                json!({"suspend": true}),
                vec![&running],
                0,
                vec!["Suspended=True JobSuspended"],
                0,
                0,
                0,
            ),
            (
                json!({"parallelism": 2}),
                vec![&ok, &running],
                0,
                vec![],
                1,
                1,
                0,
            ),
        ];
        for (spec, pods, created, conditions, active, succeeded, failed) in cases {
            let label = format!("{spec} {pods:?}");
            let p = plan(&job(spec), &pods, now());
            assert_eq!(creates(&p), created, "{label}");
            let status = status_of(&p);
            assert_eq!(condition_types(&status), conditions, "{label}");
            assert_eq!(status["active"].as_i64().unwrap_or(0), active, "{label}");
            assert_eq!(
                status["succeeded"].as_i64().unwrap_or(0),
                succeeded,
                "{label}"
            );
            assert_eq!(status["failed"].as_i64().unwrap_or(0), failed, "{label}");
        }
    }

    #[test]
    fn a_failed_job_says_why_and_stops_its_pods() {
        let bad = pod_in("Failed");
        let running = pod_in("Running");
        let p = plan(&job(json!({"backoffLimit": 0})), &[&bad, &running], now());
        assert!(
            p.actions
                .iter()
                .any(|a| matches!(a, Action::Delete { name, .. } if name == "migrate-Running"))
        );
        let status = status_of(&p);
        assert_eq!(
            status["conditions"][1]["message"],
            "Job has reached the specified backoff limit"
        );
        assert!(status.get("completionTime").is_none());
    }

    #[test]
    fn job_pods_carry_the_job_labels() {
        let p = plan(&job(json!({})), &[], now());
        let Some(Action::Create(Kind::Pod, pod)) = p.actions.first() else {
            panic!("expected a pod: {:?}", p.actions);
        };
        assert_eq!(pod["metadata"]["generateName"], "migrate-");
        assert_eq!(pod["metadata"]["labels"]["job-name"], "migrate");
        assert_eq!(
            pod["metadata"]["labels"]["batch.kubernetes.io/controller-uid"],
            "j-uid"
        );
        assert_eq!(pod["metadata"]["ownerReferences"][0]["kind"], "Job");
    }

    #[test]
    fn finished_jobs_are_deleted_after_their_ttl() {
        let mut j = job(json!({"ttlSecondsAfterFinished": 60}));
        j["status"] = json!({"completionTime": "2023-12-31T23:59:30Z", "conditions": [{"type": "Complete", "status": "True", "reason": "CompletionsReached"}]});
        let p = plan(&j, &[], now());
        assert!(p.actions.is_empty());
        assert_eq!(p.wake, Some("2024-01-01T00:00:30Z".parse().expect("valid")));
        j["status"]["completionTime"] = json!("2023-12-31T23:58:00Z");
        let p = plan(&j, &[], now());
        assert_eq!(
            p.actions,
            vec![Action::Delete {
                kind: Kind::Job,
                namespace: "default".into(),
                name: "migrate".into()
            }]
        );
        assert_eq!(finished(&j), Some(("Complete", "CompletionsReached")));
    }
}
