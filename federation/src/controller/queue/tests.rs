use super::*;

const RESYNC: Duration = Duration::from_secs(60);

fn state() -> QueueState {
    QueueState::new(
        RESYNC,
        BackoffPolicy {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(8),
        },
        BackoffPolicy {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(2),
        },
    )
}

fn key(name: &str) -> CombKey {
    CombKey::new("platform", name)
}

fn report(failed: bool) -> StepReport {
    StepReport {
        phase: Some(if failed { "Error" } else { "Running" }.to_string()),
        reason: None,
        failed,
        started_at: jiff::Timestamp::UNIX_EPOCH,
        duration: Duration::from_millis(5),
    }
}

#[test]
fn triggers_for_a_queued_comb_merge_into_one_step() {
    let mut queue = state();
    assert!(queue.enqueue(&key("a"), Trigger::Resource));
    assert!(!queue.enqueue(&key("a"), Trigger::Changed));
    assert!(!queue.enqueue(&key("a"), Trigger::Resync));
    assert_eq!(queue.depth(), 1);
    assert_eq!(
        queue.pop(),
        Some(Job {
            key: key("a"),
            trigger: Trigger::Changed
        })
    );
    assert_eq!(queue.pop(), None);
}

#[test]
fn one_step_at_a_time_per_comb_and_a_rerun_after_it() {
    let mut queue = state();
    let now = Instant::now();
    queue.enqueue(&key("a"), Trigger::Created);
    queue.enqueue(&key("b"), Trigger::Created);
    let first = queue.pop().unwrap();
    let second = queue.pop().unwrap();
    assert_eq!((first.key.clone(), second.key), (key("a"), key("b")));
    // A trigger while a runs does not start a second step of a ...
    assert!(!queue.enqueue(&key("a"), Trigger::Resource));
    assert_eq!(queue.pop(), None);
    assert!(queue.is_busy(&key("a")));
    // ... but queues it once a's step is over.
    queue.finish(&key("a"), report(false), now, 0.0);
    assert_eq!(queue.activity(&key("a")), Some(Activity::Queued));
    assert_eq!(
        queue.pop(),
        Some(Job {
            key: key("a"),
            trigger: Trigger::Resource
        })
    );
    queue.finish(&key("a"), report(false), now, 0.0);
    assert_eq!(queue.activity(&key("a")), Some(Activity::Idle));
    assert!(!queue.is_busy(&key("a")));
}

#[test]
fn failures_back_off_exponentially_and_urgent_triggers_cut_it_short() {
    let mut queue = state();
    let start = Instant::now();
    queue.enqueue(&key("a"), Trigger::Created);
    queue.pop().unwrap();
    queue.finish(&key("a"), report(true), start, 0.0);
    // 1 s * 2^0, jitter 0 keeps half.
    assert_eq!(
        queue.activity(&key("a")),
        Some(Activity::Backoff {
            until: start + Duration::from_millis(500)
        })
    );
    // A resource event does not shorten the backoff ...
    assert!(!queue.enqueue(&key("a"), Trigger::Resource));
    queue.promote_due(start + Duration::from_millis(499));
    assert_eq!(queue.pop(), None);
    // ... the retry comes when it is due.
    queue.promote_due(start + Duration::from_millis(500));
    assert_eq!(queue.pop().unwrap().trigger, Trigger::Retry);
    queue.finish(&key("a"), report(true), start, 0.999);
    let Some(Activity::Backoff { until }) = queue.activity(&key("a")) else {
        panic!("backing off");
    };
    assert!(until > start + Duration::from_millis(1990));
    // The user changed the CR: step now.
    assert!(queue.enqueue(&key("a"), Trigger::Changed));
    assert_eq!(queue.pop().unwrap().trigger, Trigger::Changed);
    // Success resets the count.
    queue.finish(&key("a"), report(false), start, 0.0);
    assert_eq!(queue.activity(&key("a")), Some(Activity::Idle));
    assert_eq!(
        queue.snapshot(start, jiff::Timestamp::UNIX_EPOCH)[0].failures,
        0
    );
}

#[test]
fn reruns_in_a_row_are_paced_until_the_comb_goes_idle() {
    let mut queue = state();
    let start = Instant::now();
    queue.enqueue(&key("a"), Trigger::Created);
    let mut now = start;
    let mut waits = Vec::new();
    for _ in 0..5 {
        let job = queue.pop().unwrap();
        // Its own writes wake it while it runs.
        queue.enqueue(&job.key, Trigger::Resource);
        queue.finish(&key("a"), report(false), now, 0.0);
        match queue.activity(&key("a")) {
            Some(Activity::Queued) => waits.push(Duration::ZERO),
            Some(Activity::Paced { until }) => {
                waits.push(until - now);
                // Nothing but time (or an urgent trigger) ends the wait.
                assert!(!queue.enqueue(&key("a"), Trigger::Resource));
                now = until;
                queue.promote_due(now);
            }
            other => panic!("{other:?}"),
        }
    }
    let millis: Vec<u128> = waits.iter().map(Duration::as_millis).collect();
    assert_eq!(millis, vec![0, 50, 100, 200, 400]);
    // The rerun keeps its trigger.
    assert_eq!(queue.pop().unwrap().trigger, Trigger::Resource);
    // A step nobody woke ends the streak.
    queue.finish(&key("a"), report(false), now, 0.0);
    assert_eq!(queue.activity(&key("a")), Some(Activity::Idle));
    queue.enqueue(&key("a"), Trigger::Resource);
    queue.pop().unwrap();
    queue.enqueue(&key("a"), Trigger::Resource);
    queue.finish(&key("a"), report(false), now, 0.0);
    assert_eq!(queue.activity(&key("a")), Some(Activity::Queued));
}

#[test]
fn an_urgent_trigger_ends_pacing() {
    let mut queue = state();
    let now = Instant::now();
    queue.enqueue(&key("a"), Trigger::Created);
    for _ in 0..2 {
        queue.pop().unwrap();
        queue.enqueue(&key("a"), Trigger::Resource);
        queue.finish(&key("a"), report(false), now, 0.0);
    }
    assert!(matches!(
        queue.activity(&key("a")),
        Some(Activity::Paced { .. })
    ));
    assert!(queue.enqueue(&key("a"), Trigger::Changed));
    assert_eq!(queue.pop().unwrap().trigger, Trigger::Changed);
}

#[test]
fn a_wake_from_another_comb_is_never_paced() {
    // A dependent that its own writes keep waking is paced; the news that its dependency (or
    // upstream) changed status must still reach it at once, or it sits Blocked behind the wait.
    let mut queue = state();
    let now = Instant::now();
    queue.enqueue(&key("api"), Trigger::Created);
    for _ in 0..2 {
        queue.pop().unwrap();
        queue.enqueue(&key("api"), Trigger::Resource);
        queue.finish(&key("api"), report(false), now, 0.0);
    }
    assert!(matches!(
        queue.activity(&key("api")),
        Some(Activity::Paced { .. })
    ));
    assert!(queue.enqueue(&key("api"), Trigger::Dependency));
    assert_eq!(queue.pop().unwrap().trigger, Trigger::Dependency);
    // Woken from elsewhere while it runs (after its own resources woke it): it runs again at
    // once, not paced, and for that reason.
    queue.enqueue(&key("api"), Trigger::Resource);
    queue.enqueue(&key("api"), Trigger::Upstream);
    queue.finish(&key("api"), report(false), now, 0.0);
    assert_eq!(queue.activity(&key("api")), Some(Activity::Queued));
    assert_eq!(queue.pop().unwrap().trigger, Trigger::Upstream);
    // An urgent trigger still wins over it.
    queue.enqueue(&key("api"), Trigger::Dependency);
    queue.enqueue(&key("api"), Trigger::Changed);
    queue.enqueue(&key("api"), Trigger::Dependency);
    queue.finish(&key("api"), report(false), now, 0.0);
    assert_eq!(queue.pop().unwrap().trigger, Trigger::Changed);
    // Only a loop of status changes between Combs goes on beyond the limit: then it is paced.
    for _ in 0..=ELSEWHERE_RERUNS {
        queue.enqueue(&key("api"), Trigger::Dependency);
        queue.finish(&key("api"), report(false), now, 0.0);
        if queue.activity(&key("api")) != Some(Activity::Queued) {
            break;
        }
        queue.pop().unwrap();
    }
    assert!(matches!(
        queue.activity(&key("api")),
        Some(Activity::Paced { .. })
    ));
}

#[test]
fn a_failed_step_with_a_pending_trigger_still_backs_off() {
    let mut queue = state();
    let now = Instant::now();
    queue.enqueue(&key("a"), Trigger::Created);
    queue.pop().unwrap();
    queue.enqueue(&key("a"), Trigger::Resource);
    queue.finish(&key("a"), report(true), now, 0.0);
    assert!(matches!(
        queue.activity(&key("a")),
        Some(Activity::Backoff { .. })
    ));
    assert_eq!(queue.pop(), None);
}

#[test]
fn resync_follows_the_last_step_and_stale_timers_are_ignored() {
    let mut queue = state();
    let start = Instant::now();
    queue.enqueue(&key("a"), Trigger::Created);
    queue.pop().unwrap();
    queue.finish(&key("a"), report(false), start, 0.0);
    // Another step later moves the resync.
    let later = start + Duration::from_secs(10);
    queue.enqueue(&key("a"), Trigger::Resource);
    queue.pop().unwrap();
    queue.finish(&key("a"), report(false), later, 0.0);
    queue.promote_due(start + RESYNC);
    assert_eq!(queue.pop(), None, "the first resync timer is stale");
    assert_eq!(queue.next_timer(), Some(later + RESYNC));
    queue.promote_due(later + RESYNC);
    assert_eq!(queue.pop().unwrap().trigger, Trigger::Resync);
}

#[test]
fn paused_and_closed_queues_hand_out_nothing() {
    let mut queue = state();
    queue.enqueue(&key("a"), Trigger::Created);
    queue.paused = true;
    assert_eq!(queue.pop(), None);
    assert_eq!(queue.depth(), 1);
    queue.paused = false;
    queue.closed = true;
    assert_eq!(queue.pop(), None);
}

#[test]
fn forgetting_waits_for_the_running_step() {
    let mut queue = state();
    let now = Instant::now();
    queue.enqueue(&key("a"), Trigger::Created);
    queue.enqueue(&key("b"), Trigger::Created);
    queue.pop().unwrap();
    queue.forget(&key("a"));
    queue.forget(&key("b"));
    assert_eq!(queue.activity(&key("b")), None);
    assert_eq!(queue.pop(), None);
    queue.finish(&key("a"), report(false), now, 0.0);
    assert_eq!(queue.activity(&key("a")), None);
}

#[test]
fn the_debug_view() {
    let mut queue = state();
    let now = Instant::now();
    queue.enqueue(&key("b"), Trigger::Created);
    queue.enqueue(&key("a"), Trigger::Created);
    queue.pop().unwrap(); // b runs
    queue.pop().unwrap(); // a runs
    queue.finish(&key("a"), report(true), now, 1.0);
    let view = queue.snapshot(now, jiff::Timestamp::UNIX_EPOCH);
    let json = serde_json::to_value(&view).unwrap();
    assert_eq!(
        json,
        serde_json::json!([
            {"namespace": "platform", "name": "a", "state": "backoff",
             "backoffUntil": "1970-01-01T00:00:01Z", "failures": 1, "lastPhase": "Error",
             "lastStepAt": "1970-01-01T00:00:00Z", "lastStepMillis": 5},
            {"namespace": "platform", "name": "b", "state": "running", "failures": 0},
        ])
    );
}

#[tokio::test]
async fn workers_wake_for_new_work_and_timers() {
    let fast = BackoffPolicy {
        initial: Duration::from_millis(10),
        max: Duration::from_millis(10),
    };
    let queue = std::sync::Arc::new(WorkQueue::new(RESYNC, fast, fast));
    let worker = {
        let queue = queue.clone();
        tokio::spawn(async move { queue.next().await })
    };
    queue.enqueue(&key("a"), Trigger::Created);
    let job = tokio::time::timeout(Duration::from_secs(10), worker)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(job.trigger, Trigger::Created);
    queue.finish(&key("a"), report(true));
    let retry = tokio::time::timeout(Duration::from_secs(10), queue.next())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(retry.trigger, Trigger::Retry);
    queue.close();
    assert_eq!(queue.next().await, None);
}
