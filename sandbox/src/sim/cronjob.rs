//! The CronJob controller: at each scheduled time (unless `suspend`) a Job
//! `<cronjob>-<minutes since the epoch>` from `jobTemplate`, within the concurrency policy;
//! `status.active`, `lastScheduleTime` and `lastSuccessfulTime`; finished Jobs beyond the
//! history limits deleted.

use std::time::Duration;

use jiff::Timestamp;
use jiff::tz::TimeZone;
use serde_json::{Map, Value, json};

use super::cron::Schedule;
use super::object::{self, add, format_time, parse_time};
use super::{Action, Kind, Plan, job};

const SCHEDULED_TIMESTAMP: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";
const MAX_MISSED_RUNS: u32 = 100_000;

/// What the CronJob controller does for `cronjob`, given the Jobs it controls.
pub fn plan(cronjob: &Value, jobs: &[&Value], now: Timestamp) -> Plan {
    if object::is_deleting(cronjob) {
        return Plan::default();
    }
    let spec = &cronjob["spec"];
    let mut plan = Plan::default();
    let (running, finished): (Vec<&Value>, Vec<&Value>) = jobs
        .iter()
        .copied()
        .filter(|j| !object::is_deleting(j))
        .partition(|j| job::finished(j).is_none());
    let mut active: Vec<&Value> = running.clone();

    // History limits.
    let mut prune = |kind: &str, limit: u64| {
        let mut done: Vec<&Value> = finished
            .iter()
            .copied()
            .filter(|j| job::finished(j).is_some_and(|(k, _)| k == kind))
            .collect();
        done.sort_by_key(|j| scheduled_time(j));
        let surplus = done
            .len()
            .saturating_sub(usize::try_from(limit).unwrap_or(usize::MAX));
        plan.actions.extend(
            done.iter()
                .take(surplus)
                .map(|j| Action::delete(Kind::Job, j)),
        );
    };
    prune(
        "Complete",
        spec["successfulJobsHistoryLimit"].as_u64().unwrap_or(3),
    );
    prune(
        "Failed",
        spec["failedJobsHistoryLimit"].as_u64().unwrap_or(1),
    );

    let mut last_schedule = cronjob["status"]["lastScheduleTime"].clone();
    let schedule = Schedule::parse(spec["schedule"].as_str().unwrap_or_default()).ok();
    let zone = match spec["timeZone"].as_str() {
        Some(name) => TimeZone::get(name).ok(),
        None => Some(TimeZone::UTC),
    };
    if let (Some(schedule), Some(zone)) = (schedule, zone) {
        let since = parse_time(&last_schedule)
            .or_else(|| parse_time(&cronjob["metadata"]["creationTimestamp"]))
            .unwrap_or(now);
        // The most recent missed time: only that one runs, as the controller does. The walk is
        // bounded like the controller's count of missed start times.
        let mut due = None;
        let mut next = schedule.next_after(since, &zone);
        let mut steps = 0;
        while let Some(at) = next.filter(|at| *at <= now && steps < MAX_MISSED_RUNS) {
            due = Some(at);
            next = schedule.next_after(at, &zone);
            steps += 1;
        }
        let suspended = spec["suspend"] == true;
        if let Some(at) = due.filter(|_| !suspended) {
            let too_late = spec["startingDeadlineSeconds"]
                .as_u64()
                .is_some_and(|deadline| add(at, Duration::from_secs(deadline)) < now);
            let policy = spec["concurrencyPolicy"].as_str().unwrap_or("Allow");
            let blocked = policy == "Forbid" && !running.is_empty();
            if !too_late && !blocked {
                if policy == "Replace" {
                    plan.actions
                        .extend(running.iter().map(|j| Action::delete(Kind::Job, j)));
                    active.clear();
                }
                plan.actions
                    .push(Action::Create(Kind::Job, job_for(cronjob, at)));
                last_schedule = json!(format_time(at));
            }
        }
        if !suspended {
            plan.wake = next;
        }
    }

    let mut status = Map::new();
    if !active.is_empty() {
        let refs: Vec<Value> = active
            .iter()
            .map(|j| {
                json!({
                    "kind": "Job",
                    "namespace": object::namespace(j),
                    "name": object::name(j),
                    "uid": object::uid(j),
                    "apiVersion": "batch/v1",
                    "resourceVersion": j["metadata"]["resourceVersion"],
                })
            })
            .collect();
        status.insert("active".into(), Value::Array(refs));
    }
    if last_schedule.is_string() {
        status.insert("lastScheduleTime".into(), last_schedule);
    }
    let last_success = finished
        .iter()
        .filter(|j| job::finished(j).is_some_and(|(k, _)| k == "Complete"))
        .filter_map(|j| parse_time(&j["status"]["completionTime"]))
        .max()
        .map(|at| json!(format_time(at)))
        .unwrap_or_else(|| cronjob["status"]["lastSuccessfulTime"].clone());
    if last_success.is_string() {
        status.insert("lastSuccessfulTime".into(), last_success);
    }
    plan.push(Action::status_change(
        Kind::CronJob,
        cronjob,
        Value::Object(status),
    ));
    plan
}

fn scheduled_time(job: &Value) -> String {
    object::annotation(job, SCHEDULED_TIMESTAMP)
        .unwrap_or_else(|| {
            job["metadata"]["creationTimestamp"]
                .as_str()
                .unwrap_or_default()
        })
        .to_string()
}

/// The Job for the run scheduled at `at`, named after it so a run is created only once.
fn job_for(cronjob: &Value, at: Timestamp) -> Value {
    let template = &cronjob["spec"]["jobTemplate"];
    let mut metadata = object::child_metadata(cronjob, Kind::CronJob, &template["metadata"]);
    let minutes = at.as_second().div_euclid(60);
    metadata.insert(
        "name".into(),
        json!(format!("{}-{minutes}", object::name(cronjob))),
    );
    metadata.entry("annotations").or_insert_with(|| json!({}))[SCHEDULED_TIMESTAMP] =
        json!(format_time(at));
    json!({"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": template["spec"]})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> Timestamp {
        text.parse().expect("valid time")
    }

    fn cronjob(extra: Value) -> Value {
        let mut spec = json!({"schedule": "*/5 * * * *", "jobTemplate": {"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "b", "image": "backup"}]}}}}});
        if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        json!({"metadata": {"name": "backup", "namespace": "default", "uid": "cj-uid", "creationTimestamp": "2024-01-01T00:00:00Z"}, "spec": spec})
    }

    fn job_named(name: &str, finished: Option<&str>) -> Value {
        let conditions = match finished {
            Some(kind) => json!([{"type": kind, "status": "True"}]),
            None => json!([]),
        };
        json!({"metadata": {"name": name, "namespace": "default", "uid": format!("{name}-uid"), "annotations": {SCHEDULED_TIMESTAMP: name}}, "status": {"conditions": conditions}})
    }

    fn created(plan: &Plan) -> Vec<String> {
        plan.actions
            .iter()
            .filter_map(|a| match a {
                Action::Create(Kind::Job, j) => Some(object::name(j).to_string()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn jobs_start_on_schedule_unless_suspended() {
        let first_run = at("2024-01-01T00:05:00Z").as_second() / 60;
        let second_run = at("2024-01-01T00:10:00Z").as_second() / 60;
        let running = job_named("backup-1", None);
        // (spec extras, now, jobs, created, wake)
        type Case<'a> = (Value, &'a str, Vec<&'a Value>, Vec<String>, Option<&'a str>);
        let cases: Vec<Case> = vec![
            (
                json!({}),
                "2024-01-01T00:04:00Z",
                vec![],
                vec![],
                Some("2024-01-01T00:05:00Z"),
            ),
            (
                json!({}),
                "2024-01-01T00:05:00Z",
                vec![],
                vec![format!("backup-{first_run}")],
                Some("2024-01-01T00:10:00Z"),
            ),
            // Missed runs: only the most recent one is started.
            (
                json!({}),
                "2024-01-01T00:12:00Z",
                vec![],
                vec![format!("backup-{second_run}")],
                Some("2024-01-01T00:15:00Z"),
            ),
            (
                json!({"suspend": true}),
                "2024-01-01T00:12:00Z",
                vec![],
                vec![],
                None,
            ),
            (
                json!({"concurrencyPolicy": "Forbid"}),
                "2024-01-01T00:05:00Z",
                vec![&running],
                vec![],
                Some("2024-01-01T00:10:00Z"),
            ),
            (
                json!({"concurrencyPolicy": "Allow"}),
                "2024-01-01T00:05:00Z",
                vec![&running],
                vec![format!("backup-{first_run}")],
                Some("2024-01-01T00:10:00Z"),
            ),
            (
                json!({"startingDeadlineSeconds": 60}),
                "2024-01-01T00:07:00Z",
                vec![],
                vec![],
                Some("2024-01-01T00:10:00Z"),
            ),
            (
                json!({"schedule": "not a schedule"}),
                "2024-01-01T00:07:00Z",
                vec![],
                vec![],
                None,
            ),
        ];
        for (extra, now, jobs, expected, wake) in cases {
            let p = plan(&cronjob(extra.clone()), &jobs, at(now));
            assert_eq!(created(&p), expected, "{extra} at {now}");
            assert_eq!(p.wake, wake.map(at), "{extra} at {now}");
        }
    }

    #[test]
    fn a_started_job_comes_from_the_template_and_is_recorded() {
        let p = plan(&cronjob(json!({})), &[], at("2024-01-01T00:05:00Z"));
        let Some(Action::Create(Kind::Job, job)) = p.actions.first() else {
            panic!("expected a job: {:?}", p.actions);
        };
        assert_eq!(
            job["metadata"]["annotations"][SCHEDULED_TIMESTAMP],
            "2024-01-01T00:05:00Z"
        );
        assert_eq!(job["metadata"]["ownerReferences"][0]["kind"], "CronJob");
        assert_eq!(
            job["spec"]["template"]["spec"]["containers"][0]["image"],
            "backup"
        );
        let Some(Action::UpdateStatus(Kind::CronJob, cj)) = p.actions.last() else {
            panic!("expected a status: {:?}", p.actions);
        };
        assert_eq!(
            cj["status"],
            json!({"lastScheduleTime": "2024-01-01T00:05:00Z"})
        );

        // Once the Job exists it is listed as active.
        let mut recorded = cronjob(json!({}));
        recorded["status"] = cj["status"].clone();
        let running = job_named("backup-1", None);
        let p = plan(&recorded, &[&running], at("2024-01-01T00:06:00Z"));
        let Some(Action::UpdateStatus(Kind::CronJob, cj)) = p.actions.last() else {
            panic!("expected a status: {:?}", p.actions);
        };
        assert_eq!(cj["status"]["active"][0]["name"], "backup-1");
    }

    #[test]
    fn replace_stops_the_running_job_and_history_is_pruned() {
        let running = job_named("backup-1", None);
        let p = plan(
            &cronjob(json!({"concurrencyPolicy": "Replace"})),
            &[&running],
            at("2024-01-01T00:05:00Z"),
        );
        assert_eq!(p.deleted_names(), ["backup-1"]);

        let done: Vec<Value> = (1..=5)
            .map(|i| job_named(&format!("backup-{i}"), Some("Complete")))
            .collect();
        let failed: Vec<Value> = (6..=7)
            .map(|i| job_named(&format!("backup-{i}"), Some("Failed")))
            .collect();
        let jobs: Vec<&Value> = done.iter().chain(&failed).collect();
        let p = plan(&cronjob(json!({})), &jobs, at("2024-01-01T00:04:00Z"));
        assert_eq!(p.deleted_names(), ["backup-1", "backup-2", "backup-6"]);
    }
}
