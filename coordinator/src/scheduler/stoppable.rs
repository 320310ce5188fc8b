//! A stream of Flight messages that a supervisor can stop: used for the
//! plans the coordinator answers in the request that reads them (see
//! `coordinator::LocalRun`), which have no job task to drop.

use std::future::Future;
use std::time::Duration;

use futures::StreamExt;
use tokio::time::Instant;
use tonic::Status;

use crate::output::JobStream;

/// When a query must be over (`--query-timeout`), and the status it then
/// ends with.
#[derive(Debug, Clone)]
pub struct Deadline {
    at: Instant,
    status: Status,
}

impl Deadline {
    /// `limit` from now.
    pub fn after(limit: Duration) -> Self {
        Self {
            at: Instant::now() + limit,
            status: Status::deadline_exceeded(format!(
                "the query ran longer than {limit:?} (--query-timeout) and was stopped"
            )),
        }
    }

    fn passed(&self) -> bool {
        Instant::now() >= self.at
    }

    /// Resolves at the deadline with its status.
    pub async fn reached(self) -> Status {
        tokio::time::sleep_until(self.at).await;
        self.status
    }
}

/// `messages` until `stop` gives a status: then that status, and the end
/// (the rest of `messages`, and the plan computing them, are dropped).
/// Past `deadline` the next message, or the end, is its status instead:
/// a plan can hold the thread for seconds inside one poll, and the stop's
/// timer is not always seen fired the moment that poll returns.
/// `guard` lives as long as the stream: dropping it says the run ended.
pub fn until_stopped<G>(
    messages: JobStream,
    stop: impl Future<Output = Status> + Send + 'static,
    deadline: Option<Deadline>,
    guard: G,
) -> JobStream
where
    G: Send + 'static,
{
    let state = (messages, Box::pin(stop), Some(guard));
    futures::stream::unfold(state, move |(mut messages, mut stop, guard)| {
        let deadline = deadline.clone();
        async move {
            guard.as_ref()?;
            let message = tokio::select! {
                // A plan polled without end (its leaves always ready) yields
                // at its cooperative budget; the stop is checked first then.
                biased;
                status = &mut stop => return Some((Err(status), (messages, stop, None))),
                message = messages.next() => message,
            };
            if let Some(deadline) = deadline.filter(Deadline::passed) {
                return Some((Err(deadline.status), (messages, stop, None)));
            }
            message.map(|m| (m, (messages, stop, guard)))
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_flight::FlightData;
    use std::time::Duration;

    fn endless() -> JobStream {
        futures::stream::repeat_with(|| Ok(FlightData::default()))
            .then(|m| async move {
                tokio::task::yield_now().await;
                m
            })
            .boxed()
    }

    #[tokio::test]
    async fn a_stop_ends_the_stream_with_its_status() {
        let stop = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Status::deadline_exceeded("too long")
        };
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let mut stream = until_stopped(endless(), stop, None, tx);
        let mut messages = 0;
        let status = loop {
            match stream.next().await.expect("ends with the status") {
                Ok(_) => messages += 1,
                Err(status) => break status,
            }
        };
        assert!(messages > 0);
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
        assert!(stream.next().await.is_none(), "nothing after the stop");
        assert_eq!(
            rx.try_recv(),
            Err(std::sync::mpsc::TryRecvError::Disconnected)
        );
    }

    #[tokio::test]
    async fn a_stream_that_ends_drops_its_guard() {
        let messages = futures::stream::iter(vec![Ok(FlightData::default())]).boxed();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let stream = until_stopped(messages, std::future::pending(), None, tx);
        assert_eq!(stream.collect::<Vec<_>>().await.len(), 1);
        assert_eq!(
            rx.try_recv(),
            Err(std::sync::mpsc::TryRecvError::Disconnected)
        );
    }

    #[tokio::test]
    async fn past_its_deadline_a_stream_ends_with_the_timeout_even_if_its_stop_was_not_seen() {
        // One message that takes longer than the deadline, computed
        // inside a single poll, and a stop that never fires.
        let slow = futures::stream::once(async {
            std::thread::sleep(Duration::from_millis(30));
            Ok(FlightData::default())
        })
        .boxed();
        let deadline = Deadline::after(Duration::from_millis(10));
        let stream = until_stopped(slow, std::future::pending(), Some(deadline), ());
        let messages: Vec<_> = stream.collect().await;
        assert_eq!(messages.len(), 1, "the status instead of the late message");
        let status = messages[0].as_ref().unwrap_err();
        assert_eq!(status.code(), tonic::Code::DeadlineExceeded);
        assert!(status.message().contains("--query-timeout"), "{status}");
    }

    #[tokio::test]
    async fn within_its_deadline_a_stream_ends_as_it_would() {
        let messages = futures::stream::iter(vec![Ok(FlightData::default())]).boxed();
        let deadline = Deadline::after(Duration::from_secs(60));
        let stream = until_stopped(messages, std::future::pending(), Some(deadline), ());
        let all: Vec<_> = stream.collect().await;
        assert_eq!(all.len(), 1);
        assert!(all[0].is_ok());
    }
}
