//! A phase's event stream: batches flattened into events, then the result.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio_stream::Stream;
use tonic::Status;

use crate::error::RunnerError;
use crate::pb;

/// One item of a [`PhaseStream`].
#[derive(Debug, Clone, PartialEq)]
pub enum PhaseUpdate {
    /// An event, in sequence order.
    Event(pb::StreamEvent),
    /// The final result; always the last item.
    Result(pb::PhaseResult),
}

/// A response message of `RunPhase` or `WatchPhase` (both carry events or the result).
pub(crate) trait Batch {
    fn into_parts(self) -> (Vec<pb::StreamEvent>, Option<pb::PhaseResult>);
}

impl Batch for pb::RunPhaseResponse {
    fn into_parts(self) -> (Vec<pb::StreamEvent>, Option<pb::PhaseResult>) {
        (self.events, self.result)
    }
}

impl Batch for pb::WatchPhaseResponse {
    fn into_parts(self) -> (Vec<pb::StreamEvent>, Option<pb::PhaseResult>) {
        (self.events, self.result)
    }
}

type Parts = (Vec<pb::StreamEvent>, Option<pb::PhaseResult>);
type BatchStream = Pin<Box<dyn Stream<Item = Result<Parts, Status>> + Send>>;

/// The events of one phase, then its result, from `RunPhase` or `WatchPhase`.
///
/// Read it with [`next_event`](Self::next_event) (then [`result`](Self::result)), with
/// [`next_update`](Self::next_update), as a [`Stream`] of [`PhaseUpdate`]s, or all at once with
/// [`collect`](Self::collect). A stream that ends without a result is an error
/// (`INTERNAL`, reason-less). Dropping it cancels the call.
pub struct PhaseStream {
    inner: BatchStream,
    pending: VecDeque<pb::StreamEvent>,
    pending_result: Option<pb::PhaseResult>,
    result: Option<pb::PhaseResult>,
    finished: bool,
}

impl std::fmt::Debug for PhaseStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PhaseStream")
            .field("pending", &self.pending.len())
            .field("result", &self.result)
            .field("finished", &self.finished)
            .finish()
    }
}

impl PhaseStream {
    pub(crate) fn new<S, B>(stream: S) -> Self
    where
        S: Stream<Item = Result<B, Status>> + Send + 'static,
        B: Batch + 'static,
    {
        let mapped = MapParts { inner: Box::pin(stream) };
        Self::from_parts(Box::pin(mapped))
    }

    fn from_parts(inner: BatchStream) -> Self {
        Self { inner, pending: VecDeque::new(), pending_result: None, result: None, finished: false }
    }

    /// A stream over ready-made batches (for tests of code that consumes phases).
    pub fn from_batches<I>(batches: I) -> Self
    where
        I: IntoIterator<Item = Result<(Vec<pb::StreamEvent>, Option<pb::PhaseResult>), Status>>,
        I::IntoIter: Send + 'static,
    {
        Self::from_parts(Box::pin(tokio_stream::iter(batches)))
    }

    /// The next event or the result; `None` after the result.
    pub async fn next_update(&mut self) -> Result<Option<PhaseUpdate>, RunnerError> {
        poll_fn(|cx| Pin::new(&mut *self).poll_next(cx)).await.transpose()
    }

    /// The next event; `None` once the result has arrived (see [`result`](Self::result)).
    pub async fn next_event(&mut self) -> Result<Option<pb::StreamEvent>, RunnerError> {
        match self.next_update().await? {
            Some(PhaseUpdate::Event(event)) => Ok(Some(event)),
            Some(PhaseUpdate::Result(_)) | None => Ok(None),
        }
    }

    /// The result, once it has been read.
    pub fn result(&self) -> Option<&pb::PhaseResult> {
        self.result.as_ref()
    }

    /// Reads to the end: every remaining event and the result.
    pub async fn collect(mut self) -> Result<(Vec<pb::StreamEvent>, pb::PhaseResult), RunnerError> {
        let mut events = Vec::new();
        while let Some(event) = self.next_event().await? {
            events.push(event);
        }
        let result = self.result.take().ok_or_else(|| RunnerError::protocol("no PhaseResult"))?;
        Ok((events, result))
    }
}

impl Stream for PhaseStream {
    type Item = Result<PhaseUpdate, RunnerError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if let Some(event) = this.pending.pop_front() {
                return Poll::Ready(Some(Ok(PhaseUpdate::Event(event))));
            }
            if let Some(result) = this.pending_result.take() {
                this.result = Some(result.clone());
                this.finished = true;
                return Poll::Ready(Some(Ok(PhaseUpdate::Result(result))));
            }
            if this.finished {
                return Poll::Ready(None);
            }
            match this.inner.as_mut().poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok((events, result)))) => {
                    this.pending.extend(events);
                    this.pending_result = result;
                }
                Poll::Ready(Some(Err(status))) => {
                    this.finished = true;
                    return Poll::Ready(Some(Err(status.into())));
                }
                Poll::Ready(None) => {
                    this.finished = true;
                    let err = RunnerError::protocol("the phase stream ended without a PhaseResult");
                    return Poll::Ready(Some(Err(err)));
                }
            }
        }
    }
}

/// Maps a stream of response messages to (events, result) pairs.
struct MapParts<B> {
    inner: Pin<Box<dyn Stream<Item = Result<B, Status>> + Send>>,
}

impl<B: Batch> Stream for MapParts<B> {
    type Item = Result<Parts, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx).map(|item| item.map(|r| r.map(Batch::into_parts)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(sequence: i64) -> pb::StreamEvent {
        pb::StreamEvent { sequence, ..Default::default() }
    }

    fn result() -> pb::PhaseResult {
        pb::PhaseResult { status: pb::PhaseStatus::Succeeded as i32, last_sequence: 3, ..Default::default() }
    }

    #[tokio::test]
    async fn flattens_batches_and_ends_with_the_result() {
        let stream = PhaseStream::from_batches(vec![
            Ok((vec![event(1), event(2)], None)),
            Ok((vec![event(3)], None)),
            Ok((vec![], Some(result()))),
        ]);
        let (events, result) = stream.collect().await.unwrap();
        assert_eq!(events.iter().map(|e| e.sequence).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert_eq!(result.status(), pb::PhaseStatus::Succeeded);
    }

    #[tokio::test]
    async fn next_event_then_result() {
        let mut stream = PhaseStream::from_batches(vec![Ok((vec![event(1)], None)), Ok((vec![], Some(result())))]);
        assert_eq!(stream.next_event().await.unwrap().unwrap().sequence, 1);
        assert!(stream.result().is_none());
        assert!(stream.next_event().await.unwrap().is_none());
        assert_eq!(stream.result().unwrap().last_sequence, 3);
        assert!(stream.next_update().await.unwrap().is_none());
    }

    #[tokio::test]
    async fn a_status_or_a_missing_result_is_an_error() {
        let mut failing = PhaseStream::from_batches(vec![
            Ok((vec![event(1)], None)),
            Err(Status::cancelled("gone")),
        ]);
        assert!(failing.next_event().await.unwrap().is_some());
        assert_eq!(failing.next_event().await.unwrap_err().code(), tonic::Code::Cancelled);

        let truncated = PhaseStream::from_batches(vec![Ok((vec![event(1)], None))]);
        let err = truncated.collect().await.unwrap_err();
        assert_eq!(err.code(), tonic::Code::Internal);
        assert!(err.message().contains("without a PhaseResult"));
    }

    #[test]
    fn kind_names_the_payload_field() {
        let mut e = event(1);
        assert_eq!(e.kind(), "");
        e.payload = Some(pb::stream_event::Payload::ToolCallStarted(Default::default()));
        assert_eq!(e.kind(), "tool_call_started");
    }
}
