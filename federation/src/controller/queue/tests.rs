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
        state: StepState::Recorded {
            phase: if failed { Phase::Error } else { Phase::Running },
            reason: None,
        },
        failed,
        started_at: jiff::Timestamp::UNIX_EPOCH,
        duration: Duration::from_millis(5),
        reads: None,
        again_after: None,
    }
}

/// The next job's Comb and trigger (how long it waited is the clock's).
fn popped(queue: &mut QueueState) -> Option<(CombKey, Trigger)> {
    queue.pop().map(|job| (job.key, job.trigger))
}

#[test]
fn triggers_for_a_queued_comb_merge_into_one_step() {
    let mut queue = state();
    assert!(queue.enqueue(&key("a"), Trigger::Resource));
    assert!(!queue.enqueue(&key("a"), Trigger::Changed));
    assert!(!queue.enqueue(&key("a"), Trigger::Resync));
    assert_eq!(queue.depth(), 1);
    assert_eq!(popped(&mut queue), Some((key("a"), Trigger::Changed)));
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
    assert_eq!(popped(&mut queue), Some((key("a"), Trigger::Resource)));
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
    // Another step a period later moves the resync to the next period.
    let later = start + RESYNC;
    queue.enqueue(&key("a"), Trigger::Resource);
    queue.pop().unwrap();
    queue.finish(&key("a"), report(false), later, 0.0);
    let first = resync_at(queue.epoch, start, RESYNC, &key("a"), 0.0);
    let second = resync_at(queue.epoch, later, RESYNC, &key("a"), 0.0);
    assert_ne!(first, second);
    queue.promote_due(first);
    assert_eq!(queue.pop(), None, "the first resync timer is stale");
    assert_eq!(queue.next_timer(), Some(second));
    queue.promote_due(second);
    assert_eq!(queue.pop().unwrap().trigger, Trigger::Resync);
}

#[test]
fn a_resync_comes_at_the_combs_own_place_about_a_period_later() {
    let epoch = Instant::now();
    for name in ["a", "b", "web", "db-0"] {
        let key = key(name);
        let place = resync_offset(&key);
        assert!((0.0..1.0).contains(&place));
        assert_eq!(place, resync_offset(&key.clone()), "stable");
        let mut now = epoch + Duration::from_millis(1234);
        for _ in 0..5 {
            let at = resync_at(epoch, now, RESYNC, &key, 0.0);
            let wait = at - now;
            assert!(
                wait >= RESYNC / 2 && wait <= RESYNC * 3 / 2,
                "{name}: {wait:?}"
            );
            // Always the same place in the period (to float precision).
            let into = (at - epoch).as_secs_f64() % RESYNC.as_secs_f64();
            let expected = place * RESYNC.as_secs_f64();
            assert!(
                (into - expected).abs() < 1e-3,
                "{name}: {into} vs {expected}"
            );
            now = at + Duration::from_millis(7);
        }
        // A settled Comb, stepped only by its resync, resyncs exactly once a period.
        let once = resync_at(epoch, now, RESYNC, &key, 0.0);
        let twice = resync_at(epoch, once, RESYNC, &key, 0.0);
        assert_eq!(twice - once, RESYNC);
        // The jitter moves it by at most its share of the period.
        let jittered = resync_at(epoch, now, RESYNC, &key, 0.999);
        let moved = (jittered.max(once) - jittered.min(once)).as_secs_f64();
        let bound = RESYNC.as_secs_f64() * RESYNC_JITTER;
        assert!(
            moved <= bound + 1e-3 || (RESYNC.as_secs_f64() - moved) <= bound + 1e-3,
            "{name}: {moved}"
        );
    }
    assert_eq!(
        resync_at(epoch, epoch, Duration::ZERO, &key("a"), 0.5),
        epoch
    );
}

/// The most resyncs in one second over the mean per second, for `combs` Combs that all
/// stepped at `now` (a start), over the following `periods` periods, each resync followed by
/// the next as a settled Comb's would be.
fn burst_factor(combs: usize, period: Duration, periods: u32) -> (f64, usize) {
    let epoch = Instant::now();
    let now = epoch + Duration::from_millis(321);
    let keys: Vec<CombKey> = (0..combs)
        .map(|i| CombKey::new(format!("team-{}", i % 17), format!("comb-{i}")))
        .collect();
    let seconds = usize::try_from(period.as_secs() * u64::from(periods + 1)).unwrap();
    let mut buckets = vec![0usize; seconds + 1];
    let mut counted = 0;
    // A deterministic stand-in for the queue's random jitter, drawn once per Comb.
    let jitter = |i: usize| ((i * 7919) % 1000) as f64 / 1000.0;
    for (i, key) in keys.iter().enumerate() {
        let mut at = now;
        for _ in 0..periods {
            at = resync_at(epoch, at, period, key, jitter(i));
            let second = usize::try_from((at - now).as_secs()).unwrap();
            // Count whole periods after the first half period: where every Comb has its turn.
            if second < buckets.len() {
                buckets[second] += 1;
                counted += 1;
            }
        }
    }
    // The window every Comb's resyncs cover evenly: from the first resync on, whole periods.
    let first = buckets.iter().position(|&n| n > 0).unwrap();
    let window = usize::try_from(period.as_secs() * u64::from(periods - 1)).unwrap();
    let window = &buckets[first..first + window];
    let mean = window.iter().sum::<usize>() as f64 / window.len() as f64;
    let max = *window.iter().max().unwrap();
    (max as f64 / mean, counted)
}

#[test]
fn resyncs_of_many_combs_that_started_together_are_spread() {
    for (combs, period) in [
        (3_000, Duration::from_secs(60)),
        (10_000, Duration::from_secs(60)),
        (1_000, Duration::from_secs(30)),
    ] {
        let (factor, counted) = burst_factor(combs, period, 4);
        println!("{combs} Combs at {period:?}: burst factor {factor:.2} ({counted} resyncs)");
        assert!(
            factor <= 2.0,
            "{combs} Combs at {period:?}: burst factor {factor:.2}"
        );
    }
}

#[test]
fn the_queue_spreads_the_resyncs_of_combs_that_stepped_at_once() {
    let mut queue = state();
    let now = Instant::now();
    let keys: Vec<CombKey> = (0..3_000).map(|i| key(&format!("comb-{i}"))).collect();
    for key in &keys {
        queue.enqueue(key, Trigger::Created);
    }
    let mut i = 0;
    while let Some(job) = queue.pop() {
        queue.finish(&job.key, report(false), now, (i % 997) as f64 / 997.0);
        i += 1;
    }
    // Step the clock one second at a time over two and a half periods and count the resyncs;
    // each resync step ends within its second, as a settled one does.
    let mut per_second = Vec::new();
    for second in 1..=150u64 {
        let at = now + Duration::from_secs(second);
        queue.promote_due(at);
        let mut due = 0;
        let mut jobs = Vec::new();
        while let Some(job) = queue.pop() {
            assert_eq!(job.trigger, Trigger::Resync);
            jobs.push(job);
            due += 1;
        }
        for job in jobs {
            queue.finish(&job.key, report(false), at, 0.0);
        }
        per_second.push(due);
    }
    assert_eq!(
        per_second[..90].iter().sum::<usize>(),
        keys.len(),
        "each once a period"
    );
    assert!(
        per_second[..29].iter().all(|&n| n == 0),
        "none before half a period"
    );
    let busy = &per_second[30..150];
    let mean = busy.iter().sum::<usize>() as f64 / busy.len() as f64;
    let max = *busy.iter().max().unwrap();
    let factor = max as f64 / mean;
    println!(
        "3000 Combs at 60s through the queue, two periods: max {max}/s, mean {mean:.1}/s, \
         burst factor {factor:.2}"
    );
    assert!(factor <= 2.0, "burst factor {factor:.2}");
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
    let mut json = serde_json::to_value(&view).unwrap();
    // The next resync is at a's own place in the period, half a period away at least.
    let next = json[0]["nextResyncAt"].take();
    let next: jiff::Timestamp = serde_json::from_value(next).unwrap();
    let wait = next.as_second();
    assert!((30..=90).contains(&wait), "{next}");
    json[0].as_object_mut().unwrap().remove("nextResyncAt");
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

#[test]
fn a_step_that_held_progress_back_comes_again_when_it_is_due() {
    let mut queue = state();
    let now = Instant::now();
    queue.enqueue(&key("a"), Trigger::Created);
    queue.pop().unwrap();
    let held_back = StepReport {
        again_after: Some(Duration::from_secs(3)),
        ..report(false)
    };
    queue.finish(&key("a"), held_back, now, 0.0);
    assert_eq!(queue.activity(&key("a")), Some(Activity::Idle));
    queue.promote_due(now + Duration::from_millis(2_999));
    assert_eq!(queue.pop(), None);
    queue.promote_due(now + Duration::from_secs(3));
    assert_eq!(queue.pop().map(|job| job.trigger), Some(Trigger::Resync));
    // Then the resync period again.
    queue.finish(&key("a"), report(false), now + Duration::from_secs(3), 0.0);
    queue.promote_due(now + Duration::from_secs(10));
    assert_eq!(queue.pop(), None);
}

#[test]
fn the_depth_follows_every_move_in_and_out_of_queued() {
    // The depth is a count kept as entries move: after each operation it must equal the
    // entries that are queued, counted.
    let mut queue = state();
    let now = Instant::now();
    let counted = |queue: &QueueState| {
        queue
            .entries
            .values()
            .filter(|entry| entry.activity == Activity::Queued)
            .count()
    };
    let check = |queue: &QueueState, step: &str| {
        assert_eq!(queue.depth(), counted(queue), "after {step}");
    };
    queue.enqueue(&key("a"), Trigger::Created);
    queue.enqueue(&key("b"), Trigger::Created);
    queue.enqueue(&key("c"), Trigger::Created);
    check(&queue, "three created");
    queue.forget(&key("c"));
    check(&queue, "a queued one forgotten");
    let a = queue.pop().unwrap();
    check(&queue, "a popped");
    queue.enqueue(&a.key, Trigger::Resource);
    queue.finish(&a.key, report(false), now, 0.0);
    check(&queue, "a queued again after its step");
    let a = queue.pop().unwrap();
    queue.finish(&a.key, report(true), now, 0.0);
    check(&queue, "a backing off");
    queue.promote_due(now + Duration::from_secs(60));
    check(&queue, "a's retry due");
    let b = queue.pop().unwrap();
    queue.forget(&b.key);
    queue.finish(&b.key, report(false), now, 0.0);
    check(&queue, "b forgotten while running");
    while let Some(job) = queue.pop() {
        queue.finish(&job.key, report(false), now, 0.0);
    }
    check(&queue, "all done");
    assert_eq!(queue.depth(), 0);
}

#[tokio::test(start_paused = true)]
async fn a_job_says_how_long_it_waited_for_a_worker() {
    let mut queue = state();
    queue.enqueue(&key("a"), Trigger::Created);
    tokio::time::advance(Duration::from_millis(30)).await;
    let job = queue.pop().unwrap();
    assert_eq!(job.waited, Duration::from_millis(30));
    // A retry waits from when it came due, not from when the step failed.
    queue.finish(&job.key, report(true), Instant::now(), 0.0);
    tokio::time::advance(Duration::from_secs(60)).await;
    let due = Instant::now();
    queue.promote_due(due);
    tokio::time::advance(Duration::from_millis(7)).await;
    let job = queue.pop().unwrap();
    assert_eq!(job.waited, Duration::from_millis(7));
}
