//! When a failed model call is tried again, and after how long (docs/runtime.md, "Model call
//! retries"): exponential backoff from the runtime's `model_retry_backoff`, doubling per attempt,
//! with full jitter (a uniformly random wait between zero and the step), for at most the
//! endpoint's `max_retries` retries. A `Retry-After` the endpoint sends (seconds or an HTTP-date,
//! on 429 or 503 typically) is honoured instead of the backoff. No wait is longer than one attempt
//! may take (the endpoint's timeout): the schedule stops growing there, and an endpoint that asks
//! for a longer wait is not retried — the call fails at once instead of holding the run.
//!
//! The schedule is backon's; its own jitter adds a random part on top of each step, so the full
//! jitter is applied here to its un-jittered steps.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBackoff, ExponentialBuilder};

use crate::model::provider::CallError;

/// What to do after a failed attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NextAttempt {
    /// Wait this long, then try again.
    After(Duration),
    /// Do not try again; why, when it is not simply that the failure is final.
    GiveUp(Option<String>),
}

/// The retry schedule of one model call (all attempts of one round).
#[derive(Debug)]
pub struct RetryPolicy {
    steps: ExponentialBackoff,
    cap: Duration,
}

impl RetryPolicy {
    /// `retries` retries after the first attempt, the first step `base`, no wait above `cap`.
    pub fn new(base: Duration, retries: u32, cap: Duration) -> Self {
        let steps = ExponentialBuilder::new()
            .with_min_delay(base.min(cap))
            .with_factor(2.0)
            .with_max_delay(cap)
            .with_max_times(usize::try_from(retries).unwrap_or(usize::MAX))
            .build();
        RetryPolicy { steps, cap }
    }

    /// After `error`: how long to wait before the next attempt, or that there is none.
    pub fn next(&mut self, error: &CallError) -> NextAttempt {
        self.next_with(error, rand::random::<f64>())
    }

    /// [`Self::next`] with the jitter's random fraction (in `[0, 1)`) given, for tests.
    fn next_with(&mut self, error: &CallError, fraction: f64) -> NextAttempt {
        if !error.retryable {
            return NextAttempt::GiveUp(None);
        }
        let Some(step) = self.steps.next() else {
            return NextAttempt::GiveUp(None);
        };
        match error.retry_after {
            Some(asked) if asked > self.cap => NextAttempt::GiveUp(Some(format!(
                "the endpoint asked to wait {} s before retrying, longer than one attempt may take ({} s)",
                asked.as_secs(),
                self.cap.as_secs()
            ))),
            Some(asked) => NextAttempt::After(asked),
            None => NextAttempt::After(jittered(step, fraction)),
        }
    }
}

/// `fraction` of `step`, in whole milliseconds (backon's steps are computed in `f32`, a few
/// nanoseconds off their exact values).
fn jittered(step: Duration, fraction: f64) -> Duration {
    // `as` saturates; a step is at most the endpoint's timeout.
    Duration::from_millis((step.as_secs_f64() * 1000.0 * fraction.clamp(0.0, 1.0)).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(retryable: bool, retry_after: Option<u64>) -> CallError {
        CallError {
            retryable,
            status: Some(503),
            message: "overloaded".into(),
            retry_after: retry_after.map(Duration::from_secs),
        }
    }

    #[test]
    fn steps_double_under_full_jitter_up_to_the_cap_and_stop_at_the_limit() {
        let ms = Duration::from_millis;
        let mut p = RetryPolicy::new(ms(100), 5, ms(500));
        let e = failed(true, None);
        // The whole step at the top of the jitter's range, none at the bottom, half in between.
        assert_eq!(p.next_with(&e, 1.0), NextAttempt::After(ms(100)));
        assert_eq!(p.next_with(&e, 0.0), NextAttempt::After(ms(0)));
        assert_eq!(p.next_with(&e, 0.5), NextAttempt::After(ms(200)));
        assert_eq!(p.next_with(&e, 1.0), NextAttempt::After(ms(500)));
        assert_eq!(p.next_with(&e, 1.0), NextAttempt::After(ms(500)));
        assert_eq!(p.next_with(&e, 1.0), NextAttempt::GiveUp(None));
    }

    #[test]
    fn random_waits_stay_within_the_step() {
        let mut p = RetryPolicy::new(Duration::from_millis(100), 1000, Duration::from_secs(60));
        let e = failed(true, None);
        let mut step = Duration::from_millis(100);
        for _ in 0..20 {
            let NextAttempt::After(wait) = p.next(&e) else {
                panic!("a retry was left");
            };
            assert!(wait <= step, "{wait:?} over {step:?}");
            step = (step * 2).min(Duration::from_secs(60));
        }
    }

    #[test]
    fn retry_after_is_honoured_within_the_cap_and_refused_beyond_it() {
        let mut p = RetryPolicy::new(Duration::from_millis(10), 3, Duration::from_secs(30));
        assert_eq!(
            p.next_with(&failed(true, Some(7)), 0.0),
            NextAttempt::After(Duration::from_secs(7))
        );
        let NextAttempt::GiveUp(Some(why)) = p.next_with(&failed(true, Some(31)), 0.0) else {
            panic!("a wait over the cap is not taken");
        };
        assert!(why.contains("31 s"), "{why}");
    }

    #[test]
    fn a_final_failure_is_not_retried_and_retry_after_counts_against_the_limit() {
        let mut p = RetryPolicy::new(Duration::from_millis(10), 1, Duration::from_secs(30));
        assert_eq!(
            p.next_with(&failed(false, Some(1)), 0.0),
            NextAttempt::GiveUp(None)
        );
        assert_eq!(
            p.next_with(&failed(true, Some(1)), 0.0),
            NextAttempt::After(Duration::from_secs(1))
        );
        assert_eq!(
            p.next_with(&failed(true, Some(1)), 0.0),
            NextAttempt::GiveUp(None)
        );
    }
}
