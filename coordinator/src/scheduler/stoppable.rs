//! A stream of Flight messages that a supervisor can stop: used for the
//! plans the coordinator answers in the request that reads them (see
//! `coordinator::LocalRun`), which have no job task to drop.

use std::future::Future;

use futures::StreamExt;
use tonic::Status;

use crate::output::JobStream;

/// `messages` until `stop` gives a status: then that status, and the end
/// (the rest of `messages`, and the plan computing them, are dropped).
/// `guard` lives as long as the stream: dropping it says the run ended.
pub fn until_stopped<G>(
    messages: JobStream,
    stop: impl Future<Output = Status> + Send + 'static,
    guard: G,
) -> JobStream
where
    G: Send + 'static,
{
    let state = (messages, Box::pin(stop), Some(guard));
    futures::stream::unfold(state, |(mut messages, mut stop, guard)| async move {
        guard.as_ref()?;
        tokio::select! {
            // A plan polled without end (its leaves always ready) yields
            // at its cooperative budget; the stop is checked first then.
            biased;
            status = &mut stop => Some((Err(status), (messages, stop, None))),
            message = messages.next() => message.map(|m| (m, (messages, stop, guard))),
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
        let mut stream = until_stopped(endless(), stop, tx);
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
        let stream = until_stopped(messages, std::future::pending(), tx);
        assert_eq!(stream.collect::<Vec<_>>().await.len(), 1);
        assert_eq!(
            rx.try_recv(),
            Err(std::sync::mpsc::TryRecvError::Disconnected)
        );
    }
}
