//! A phase's event stream: batches flattened into events, then the result; it follows the phase
//! when its replica hands it over to another one.

use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio_stream::{Stream, StreamExt};
use tonic::{Code, Status};

use crate::error::RunnerError;
use crate::pb;

/// How long a stream keeps trying to re-attach to a moved phase (at least the `RetryInfo` delay
/// the server sent with `PHASE_MOVED`).
pub const DEFAULT_MOVE_TIMEOUT: Duration = Duration::from_secs(120);
// The first re-attach is immediate (WatchPhase waits for the adopter's events itself); one that
// meets another move, a draining or an unreachable replica is retried after 0.2 s, doubling to 2 s.
const FIRST_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// One hand-over a stream followed: the replica the phase left and the last sequence it had sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhaseMove {
    /// The job of the phase.
    pub job_id: String,
    /// The phase.
    pub phase_id: String,
    /// The replica that drained (`ErrorInfo.metadata["from_replica"]`).
    pub from_replica: String,
    /// The server's cursor: every event up to it was sent before the move.
    pub after_sequence: i64,
    /// The status message of the `PHASE_MOVED` end.
    pub message: String,
}

type OnMove = Arc<dyn Fn(&PhaseMove) + Send + Sync>;
type Reattaching = Pin<Box<dyn Future<Output = Result<BatchStream, RunnerError>> + Send>>;

type OpenFuture = Pin<Box<dyn Future<Output = Result<BatchStream, Status>> + Send>>;
type Open = Arc<dyn Fn(pb::WatchPhaseRequest) -> OpenFuture + Send + Sync>;

/// What a stream needs to re-attach after a move: a way to call WatchPhase, and the phase.
#[derive(Clone)]
pub(crate) struct Follow {
    open: Open,
    job_id: String,
    phase_id: String,
}

impl Follow {
    /// `open` makes a WatchPhase call (through the client's channel).
    pub(crate) fn new(
        open: impl Fn(pb::WatchPhaseRequest) -> OpenFuture + Send + Sync + 'static,
        job_id: String,
        phase_id: String,
    ) -> Self {
        Self { open: Arc::new(open), job_id, phase_id }
    }
}

/// A WatchPhase call's response messages as a batch stream (for [`Follow::new`]).
pub(crate) fn watch_batches<S>(stream: S) -> BatchStream
where
    S: Stream<Item = Result<pb::WatchPhaseResponse, Status>> + Send + 'static,
{
    Box::pin(MapParts { inner: Box::pin(stream) })
}

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
///
/// **Moves.** When the replica serving the stream drains, it hands the phase over to another
/// replica and ends the stream with `UNAVAILABLE` / `PHASE_MOVED`. A stream from [`Client`]
/// (crate::Client) then calls `WatchPhase` after the last sequence it gave, through the same
/// channel (a Kubernetes Service reaches a replica that is not draining once the draining one
/// closes its connection), and goes on: one gap-free sequence, each event once. Each move is in
/// [`moves`](Self::moves) and told to the [`on_move`](Self::on_move) hook. After a move the
/// stream is a watch: dropping it no longer cancels the phase (use `CancelPhase`).
pub struct PhaseStream {
    inner: BatchStream,
    pending: VecDeque<pb::StreamEvent>,
    pending_result: Option<pb::PhaseResult>,
    result: Option<pb::PhaseResult>,
    finished: bool,
    last_sequence: i64,
    moves: Vec<PhaseMove>,
    follow: Option<Follow>,
    move_timeout: Duration,
    on_move: Option<OnMove>,
    reattaching: Option<Reattaching>,
}

impl std::fmt::Debug for PhaseStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PhaseStream")
            .field("pending", &self.pending.len())
            .field("result", &self.result)
            .field("finished", &self.finished)
            .field("last_sequence", &self.last_sequence)
            .field("moves", &self.moves)
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
        Self {
            inner,
            pending: VecDeque::new(),
            pending_result: None,
            result: None,
            finished: false,
            last_sequence: 0,
            moves: Vec::new(),
            follow: None,
            move_timeout: DEFAULT_MOVE_TIMEOUT,
            on_move: None,
            reattaching: None,
        }
    }

    /// Makes the stream follow its phase across moves, starting after `after_sequence`.
    pub(crate) fn following(mut self, follow: Follow, after_sequence: i64) -> Self {
        self.follow = Some(follow);
        self.last_sequence = after_sequence;
        self
    }

    /// Calls `hook` with each move the stream follows (to log it); the moves are also in
    /// [`moves`](Self::moves).
    pub fn on_move(mut self, hook: impl Fn(&PhaseMove) + Send + Sync + 'static) -> Self {
        self.on_move = Some(Arc::new(hook));
        self
    }

    /// How long to keep trying to re-attach after a move (default [`DEFAULT_MOVE_TIMEOUT`]).
    pub fn move_timeout(mut self, timeout: Duration) -> Self {
        self.move_timeout = timeout;
        self
    }

    /// Ends the stream with the `PHASE_MOVED` error instead of following the phase.
    pub fn without_reattach(mut self) -> Self {
        self.follow = None;
        self
    }

    /// The moves this stream followed, in order.
    pub fn moves(&self) -> &[PhaseMove] {
        &self.moves
    }

    /// The sequence of the last event given (the re-attach cursor).
    pub fn last_sequence(&self) -> i64 {
        self.last_sequence
    }

    /// Starts re-attaching after `moved` (a `PHASE_MOVED` end), if the stream follows moves.
    fn start_follow(&mut self, moved: &RunnerError) -> bool {
        let Some(follow) = self.follow.clone() else { return false };
        if !moved.phase_moved() {
            return false;
        }
        let meta = |key: &str| moved.metadata(key).unwrap_or_default().to_owned();
        let phase_move = PhaseMove {
            job_id: meta("job_id"),
            phase_id: meta("phase_id"),
            from_replica: meta("from_replica"),
            after_sequence: meta("after_sequence").parse().unwrap_or(0),
            message: moved.message().to_owned(),
        };
        if let Some(hook) = &self.on_move {
            hook(&phase_move);
        }
        // The move names the phase (a request may leave phase_id to the server's default).
        let job_id = if phase_move.job_id.is_empty() { follow.job_id.clone() } else { phase_move.job_id.clone() };
        let phase_id =
            if phase_move.phase_id.is_empty() { follow.phase_id.clone() } else { phase_move.phase_id.clone() };
        self.moves.push(phase_move);
        let timeout = self.move_timeout.max(moved.retry_delay().unwrap_or_default());
        // Our own cursor, not the server's after_sequence: it is what this caller really received.
        let request = pb::WatchPhaseRequest { job_id, phase_id, after_sequence: self.last_sequence };
        self.reattaching = Some(Box::pin(reattach(follow.open, request, timeout)));
        true
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
                // Events at or below the cursor were delivered before a move: never twice.
                if event.sequence <= this.last_sequence {
                    continue;
                }
                this.last_sequence = event.sequence;
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
            if let Some(reattaching) = this.reattaching.as_mut() {
                match reattaching.as_mut().poll(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Ok(stream)) => {
                        this.reattaching = None;
                        this.inner = stream;
                    }
                    Poll::Ready(Err(err)) => {
                        this.reattaching = None;
                        this.finished = true;
                        return Poll::Ready(Some(Err(err)));
                    }
                }
            }
            match this.inner.as_mut().poll_next(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Some(Ok((events, result)))) => {
                    this.pending.extend(events);
                    this.pending_result = result;
                }
                Poll::Ready(Some(Err(status))) => {
                    let err = RunnerError::from(status);
                    if this.start_follow(&err) {
                        continue;
                    }
                    this.finished = true;
                    return Poll::Ready(Some(Err(err)));
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

/// WatchPhase after a move, retried while the answer is another move, a draining or an
/// unreachable replica, for at most `timeout`; the new call's batches with its first one put back.
async fn reattach(open: Open, request: pb::WatchPhaseRequest, timeout: Duration) -> Result<BatchStream, RunnerError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut backoff = FIRST_BACKOFF;
    loop {
        let err = match open(request.clone()).await {
            Ok(mut stream) => {
                match stream.next().await {
                    Some(Ok(first)) => return Ok(Box::pin(tokio_stream::once(Ok(first)).chain(stream))),
                    Some(Err(status)) => RunnerError::from(status),
                    // Ended at once: the stream reports the missing result as it does for any call.
                    None => return Ok(Box::pin(tokio_stream::empty())),
                }
            }
            Err(status) => RunnerError::from(status),
        };
        // Cancelled here is not ours (a dropped stream never gets this far) but the old replica's
        // server stopping under the re-attach at the end of its drain: the phase goes on elsewhere.
        let retry = err.phase_moved()
            || matches!(err.code(), Code::Unavailable | Code::Cancelled)
            || err.reason() == Some("DRAINING");
        if !retry || tokio::time::Instant::now() + backoff > deadline {
            return Err(err);
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
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

    fn moved(after: i64) -> Status {
        use std::collections::HashMap;
        use tonic_types::{ErrorDetails, StatusExt};
        let metadata = HashMap::from([
            ("job_id".to_owned(), "j".to_owned()),
            ("phase_id".to_owned(), "p1".to_owned()),
            ("after_sequence".to_owned(), after.to_string()),
            ("from_replica".to_owned(), "replica-a".to_owned()),
        ]);
        let mut details = ErrorDetails::with_error_info("PHASE_MOVED", crate::ERROR_DOMAIN, metadata);
        details.set_retry_info(Some(Duration::from_millis(10)));
        Status::with_error_details(Code::Unavailable, "phase p1 of job j moved to another replica", details)
    }

    fn watch(events: Vec<i64>, done: bool) -> Result<pb::WatchPhaseResponse, Status> {
        Ok(pb::WatchPhaseResponse {
            events: events.into_iter().map(event).collect(),
            result: done.then(result),
        })
    }

    /// A Follow whose first WatchPhase meets the draining replica (another move) and whose second
    /// reaches the adopter; the cursors asked for are kept.
    fn adopter(asked: Arc<std::sync::Mutex<Vec<i64>>>) -> Follow {
        Follow::new(
            move |request: pb::WatchPhaseRequest| {
                let asked = asked.clone();
                Box::pin(async move {
                    let calls = {
                        let mut asked = asked.lock().unwrap();
                        asked.push(request.after_sequence);
                        asked.len()
                    };
                    if calls == 1 {
                        return Err(moved(request.after_sequence));
                    }
                    // The adopter's first batch repeats the last event before the move.
                    Ok(watch_batches(tokio_stream::iter(vec![watch(vec![2, 3], false), watch(vec![], true)])))
                }) as OpenFuture
            },
            "j".into(),
            "p1".into(),
        )
    }

    #[tokio::test]
    async fn follows_a_moved_phase_gap_free_and_each_event_once() {
        let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let hook_seen = seen.clone();
        let stream = PhaseStream::from_batches(vec![Ok((vec![event(1), event(2)], None)), Err(moved(2))])
            .following(adopter(asked.clone()), 0)
            .on_move(move |m| hook_seen.lock().unwrap().push(m.clone()));
        let mut stream = stream;
        let mut sequences = Vec::new();
        while let Some(e) = stream.next_event().await.unwrap() {
            sequences.push(e.sequence);
        }
        assert_eq!(sequences, vec![1, 2, 3]);
        assert_eq!(stream.result().unwrap().status(), pb::PhaseStatus::Succeeded);
        assert_eq!(*asked.lock().unwrap(), vec![2, 2]);
        let moves = seen.lock().unwrap().clone();
        assert_eq!(moves.len(), 1);
        assert_eq!(moves[0].from_replica, "replica-a");
        assert_eq!(moves[0].after_sequence, 2);
        assert_eq!(stream.moves(), &moves[..]);
    }

    #[tokio::test]
    async fn without_reattach_a_move_is_the_error() {
        let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
        let stream = PhaseStream::from_batches(vec![Ok((vec![event(1)], None)), Err(moved(1))])
            .following(adopter(asked.clone()), 0)
            .without_reattach();
        let err = stream.collect().await.unwrap_err();
        assert!(err.phase_moved());
        assert_eq!(err.retry_delay(), Some(Duration::from_millis(10)));
        assert!(asked.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_reattach_cancelled_by_a_stopping_server_is_tried_again() {
        let calls = Arc::new(std::sync::Mutex::new(0));
        let counted = calls.clone();
        let follow = Follow::new(
            move |_request: pb::WatchPhaseRequest| {
                let counted = counted.clone();
                Box::pin(async move {
                    let n = {
                        let mut c = counted.lock().unwrap();
                        *c += 1;
                        *c
                    };
                    if n == 1 {
                        return Err(Status::cancelled("CANCELLED"));
                    }
                    Ok(watch_batches(tokio_stream::iter(vec![watch(vec![2], false), watch(vec![], true)])))
                }) as OpenFuture
            },
            "j".into(),
            "p1".into(),
        );
        let stream = PhaseStream::from_batches(vec![Ok((vec![event(1)], None)), Err(moved(1))]).following(follow, 0);
        let (events, result) = stream.collect().await.unwrap();
        assert_eq!(events.iter().map(|e| e.sequence).collect::<Vec<_>>(), vec![1, 2]);
        assert_eq!(result.status(), pb::PhaseStatus::Succeeded);
        assert_eq!(*calls.lock().unwrap(), 2);
    }

    #[tokio::test]
    async fn a_reattach_refused_for_good_ends_the_stream_with_that_error() {
        let follow = Follow::new(
            |_request: pb::WatchPhaseRequest| Box::pin(async { Err(Status::not_found("no such phase")) }) as OpenFuture,
            "j".into(),
            "p1".into(),
        );
        let stream = PhaseStream::from_batches(vec![Err(moved(0))]).following(follow, 0);
        let err = stream.collect().await.unwrap_err();
        assert_eq!(err.code(), Code::NotFound);
    }

    #[test]
    fn kind_names_the_payload_field() {
        let mut e = event(1);
        assert_eq!(e.kind(), "");
        e.payload = Some(pb::stream_event::Payload::ToolCallStarted(Default::default()));
        assert_eq!(e.kind(), "tool_call_started");
    }
}
