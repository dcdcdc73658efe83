//! Sending a workspace request again when the replica that had it went away (docs/runtime.md,
//! "Workspace replicas"). The workspace runs as several replicas behind one address; when one
//! dies or is replaced, the calls it held fail with `UNAVAILABLE` and the channel connects to
//! another on the next call. A request whose repetition changes nothing — a read, a lease call,
//! a journal append (a byte-identical retry of committed records is accepted), the run's create,
//! open, close, promote and finish, an audit object put with identical bytes allowed — is sent
//! again when it was lost so (`convert::peers::lost`), with exponential backoff and jitter, for
//! at most [`ATTEMPTS`] more attempts (about 6 s). Requests that are not safe to repeat (a tool
//! call, a commit that appends) are never sent here: their outcome stays unknown and is reported
//! as such.

use std::future::Future;
use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};

use crate::convert::peers::lost;

/// Retries after the first attempt.
pub const ATTEMPTS: usize = 10;

/// Runs `call` until it succeeds, fails with anything but a lost request, or [`ATTEMPTS`] retries
/// have failed; `what` names the request in the debug log.
pub async fn again<T, F, Fut>(what: &str, call: F) -> Result<T, tonic::Status>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, tonic::Status>>,
{
    let steps = ExponentialBuilder::new()
        .with_min_delay(Duration::from_millis(50))
        .with_factor(2.0)
        .with_max_delay(Duration::from_secs(1))
        .with_max_times(ATTEMPTS)
        .with_jitter()
        .build();
    again_after(steps, what, call).await
}

/// [`again`] with the waits between attempts given.
async fn again_after<T, F, Fut>(
    mut steps: impl Iterator<Item = Duration>,
    what: &str,
    mut call: F,
) -> Result<T, tonic::Status>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, tonic::Status>>,
{
    loop {
        match call().await {
            Err(status) if lost(&status) => match steps.next() {
                Some(step) => {
                    tracing::debug!(request = what, error = %status.message(), wait_ms = step.as_millis() as u64, "workspace unavailable; sending the request again");
                    tokio::time::sleep(step).await;
                }
                None => return Err(status),
            },
            other => return other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn quick() -> impl Iterator<Item = Duration> {
        std::iter::repeat_n(Duration::from_millis(1), ATTEMPTS)
    }

    #[test]
    fn a_broken_connection_is_lost_and_a_status_the_server_sent_is_not() {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
        assert!(lost(&tonic::Status::from_error(Box::new(io))));
        assert!(lost(&tonic::Status::unavailable("connection refused")));
        assert!(!lost(&tonic::Status::unknown("the handler failed")));
        assert!(!lost(&tonic::Status::cancelled("the caller gave up")));
    }

    #[tokio::test]
    async fn unavailable_is_tried_again_until_an_answer() {
        let calls = AtomicUsize::new(0);
        let got = again_after(quick(), "test", || {
            let n = calls.fetch_add(1, Ordering::Relaxed);
            async move {
                if n < 3 {
                    Err(tonic::Status::unavailable("connection refused"))
                } else {
                    Ok(n)
                }
            }
        })
        .await;
        assert_eq!(got.unwrap(), 3);
    }

    #[tokio::test]
    async fn other_failures_and_a_lasting_outage_are_returned() {
        let calls = AtomicUsize::new(0);
        let got: Result<(), _> = again_after(quick(), "test", || {
            calls.fetch_add(1, Ordering::Relaxed);
            async { Err(tonic::Status::failed_precondition("stale")) }
        })
        .await;
        assert_eq!(got.unwrap_err().code(), tonic::Code::FailedPrecondition);
        assert_eq!(calls.load(Ordering::Relaxed), 1);

        let calls = AtomicUsize::new(0);
        let got: Result<(), _> = again_after(quick(), "test", || {
            calls.fetch_add(1, Ordering::Relaxed);
            async { Err(tonic::Status::unavailable("gone")) }
        })
        .await;
        assert_eq!(got.unwrap_err().code(), tonic::Code::Unavailable);
        assert_eq!(calls.load(Ordering::Relaxed), ATTEMPTS + 1);
    }
}
