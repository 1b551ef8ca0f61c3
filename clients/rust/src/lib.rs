//! Rust client for the Helix Runner gRPC service (`helix.runner.v1.RunnerService`).
//!
//! The messages and the `RunnerService` client are generated from the repository's `proto/` at
//! build time (prost + tonic, parsed by protox: no `protoc` needed) and live in [`pb`]. On top of
//! them this crate adds a few helpers:
//!
//! - [`Client`]: connects, runs a phase ([`Client::run_phase`]) or attaches to one
//!   ([`Client::watch_phase`]) and hands back a [`PhaseStream`] of events that ends with the
//!   [`pb::PhaseResult`]; [`Client::raw`] gives the generated client for every other RPC.
//! - [`RunnerError`]: a `tonic::Status` with its `google.rpc.ErrorInfo` decoded (`reason`,
//!   `domain`, `metadata`), as the service sends every error.
//! - Moves: a [`PhaseStream`] whose replica drains re-attaches through `WatchPhase` by itself and
//!   goes on gap-free; [`PhaseStream::on_move`] is told each move.
//!
//! ```no_run
//! use helix_runner_client::{pb, Client};
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let mut client = Client::connect("127.0.0.1:50051").await?;
//! let request = pb::RunPhaseRequest {
//!     job_id: "demo".into(),
//!     prompt: "Say hello".into(),
//!     working_dir: "/srv/work".into(),
//!     ..Default::default()
//! };
//! let mut phase = client.run_phase(request).await?;
//! while let Some(event) = phase.next_event().await? {
//!     println!("#{} {}", event.sequence, event.kind());
//! }
//! println!("{:?}", phase.result().map(|r| r.status()));
//! # Ok(())
//! # }
//! ```

mod error;
mod phase;

/// Generated messages, enums and the `RunnerService` client of `helix.runner.v1`.
#[allow(clippy::all, missing_docs)]
pub mod pb {
    tonic::include_proto!("helix.runner.v1");
}

pub use error::{error_info, ErrorInfo, RunnerError, ERROR_DOMAIN, PHASE_MOVED};
pub use phase::{PhaseMove, PhaseStream, PhaseUpdate, DEFAULT_MOVE_TIMEOUT};
pub use pb::runner_service_client::RunnerServiceClient;
pub use tonic::transport::Channel;

use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;

/// Where a short-lived token comes from: asked before each call (e.g. a cache refreshed from an
/// identity provider); `None` sends no token.
pub type TokenSource = std::sync::Arc<dyn Fn() -> Option<String> + Send + Sync>;

/// Adds `authorization: Bearer <token>` to every call, when the server requires a token: a fixed
/// one ([`BearerToken::new`]) or one asked for each call ([`BearerToken::from_source`]).
#[derive(Clone, Default)]
pub struct BearerToken {
    fixed: Option<MetadataValue<Ascii>>,
    source: Option<TokenSource>,
}

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the token itself.
        f.debug_struct("BearerToken").field("fixed", &self.fixed.is_some()).field("source", &self.source.is_some()).finish()
    }
}

impl BearerToken {
    /// A token to send (`None` sends nothing). Fails if the token is not valid header text.
    pub fn new(token: Option<&str>) -> Result<Self, tonic::metadata::errors::InvalidMetadataValue> {
        let fixed = token.map(|t| format!("Bearer {t}").parse()).transpose()?;
        Ok(Self { fixed, source: None })
    }

    /// A token asked of `source` before each call; a call whose token is not valid header text
    /// fails with `UNAUTHENTICATED` before it is sent.
    pub fn from_source(source: TokenSource) -> Self {
        Self { fixed: None, source: Some(source) }
    }
}

impl tonic::service::Interceptor for BearerToken {
    fn call(&mut self, mut request: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        if let Some(value) = &self.fixed {
            request.metadata_mut().insert("authorization", value.clone());
        } else if let Some(source) = &self.source {
            if let Some(token) = source() {
                let value: MetadataValue<Ascii> = format!("Bearer {token}")
                    .parse()
                    .map_err(|_| tonic::Status::unauthenticated("the token source gave a token that is not header text"))?;
                request.metadata_mut().insert("authorization", value);
            }
        }
        Ok(request)
    }
}

/// The transport of a [`Client`]: a channel that adds the bearer token, if any.
pub type Transport = InterceptedService<Channel, BearerToken>;

/// The protobuf package this crate speaks.
pub const CONTRACT: &str = "helix.runner.v1";

/// The crate version; it follows the helix-runner release whose `proto/` it was built from.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// A RunnerService client with streaming and error helpers.
///
/// Cloning is cheap (the underlying channel is shared); clone to run calls concurrently.
#[derive(Debug, Clone)]
pub struct Client {
    inner: RunnerServiceClient<Transport>,
}

impl Client {
    /// Connects to `address`: `host:port`, or a full `http://host:port` URI.
    pub async fn connect(address: impl AsRef<str>) -> Result<Self, tonic::transport::Error> {
        let address = address.as_ref();
        let uri = if address.contains("://") {
            address.to_owned()
        } else {
            format!("http://{address}")
        };
        let channel = tonic::transport::Endpoint::from_shared(uri)?.connect().await?;
        Ok(Self::new(channel))
    }

    /// Wraps an existing channel (for TLS, custom timeouts and the like).
    pub fn new(channel: Channel) -> Self {
        Self::with_token(channel, BearerToken::default())
    }

    /// Wraps a channel and sends `token` with every call (`BearerToken::new(Some("..."))`).
    pub fn with_token(channel: Channel, token: BearerToken) -> Self {
        Self { inner: RunnerServiceClient::with_interceptor(channel, token) }
    }

    /// The generated client, for every RPC (unary calls included).
    pub fn raw(&mut self) -> &mut RunnerServiceClient<Transport> {
        &mut self.inner
    }

    /// Starts a phase and streams it: events in sequence order, then the result. The stream
    /// follows the phase if its replica hands it over (see [`PhaseStream`]).
    ///
    /// Dropping the returned stream cancels the call (and with it the phase, unless the request
    /// asked for `ON_DISCONNECT_DETACH`).
    pub async fn run_phase(&mut self, request: pb::RunPhaseRequest) -> Result<PhaseStream, RunnerError> {
        let follow = self.follow(request.job_id.clone(), request.phase_id.clone());
        let stream = self.inner.run_phase(request).await?.into_inner();
        Ok(PhaseStream::new(stream).following(follow, 0))
    }

    /// Attaches to a phase: events with a sequence greater than `after_sequence` (recorded ones
    /// first, then live ones), then the result.
    pub async fn watch_phase(
        &mut self,
        job_id: impl Into<String>,
        phase_id: impl Into<String>,
        after_sequence: i64,
    ) -> Result<PhaseStream, RunnerError> {
        let request = pb::WatchPhaseRequest {
            job_id: job_id.into(),
            phase_id: phase_id.into(),
            after_sequence,
        };
        let follow = self.follow(request.job_id.clone(), request.phase_id.clone());
        let stream = self.inner.watch_phase(request).await?.into_inner();
        Ok(PhaseStream::new(stream).following(follow, after_sequence))
    }

    /// How a phase stream re-attaches after a move: WatchPhase through this client's channel.
    fn follow(&self, job_id: String, phase_id: String) -> phase::Follow {
        let client = self.inner.clone();
        phase::Follow::new(
            move |request| {
                let mut client = client.clone();
                Box::pin(async move { Ok(phase::watch_batches(client.watch_phase(request).await?.into_inner())) })
            },
            job_id,
            phase_id,
        )
    }

    /// Returns a job with its phases.
    pub async fn get_job(&mut self, job_id: impl Into<String>) -> Result<pb::Job, RunnerError> {
        let request = pb::GetJobRequest { job_id: job_id.into() };
        let response = self.inner.get_job(request).await?.into_inner();
        response.job.ok_or_else(|| RunnerError::protocol("GetJobResponse without a job"))
    }

    /// Cancels a phase; returns the phase as the server saw it after the request.
    pub async fn cancel_phase(
        &mut self,
        job_id: impl Into<String>,
        phase_id: impl Into<String>,
        reason: impl Into<String>,
    ) -> Result<pb::Phase, RunnerError> {
        let request = pb::CancelPhaseRequest {
            job_id: job_id.into(),
            phase_id: phase_id.into(),
            reason: reason.into(),
        };
        let response = self.inner.cancel_phase(request).await?.into_inner();
        response.phase.ok_or_else(|| RunnerError::protocol("CancelPhaseResponse without a phase"))
    }

    /// Starts a new phase of the job from a checkpoint of a phase (running, paused or ended): its
    /// CLI resumes the phase's session cut at `point` in a new worktree at that checkpoint's files.
    /// Watch the fork with [`watch_phase`](Self::watch_phase) (`response.phase.phase_id`).
    pub async fn fork_phase(&mut self, request: pb::ForkPhaseRequest) -> Result<pb::ForkPhaseResponse, RunnerError> {
        Ok(self.inner.fork_phase(request).await?.into_inner())
    }

    /// Takes a paused or held phase back to a checkpoint in place (a REWOUND event marks the
    /// rewound part of its history, which stays).
    pub async fn rewind_phase(
        &mut self,
        request: pb::RewindPhaseRequest,
    ) -> Result<pb::RewindPhaseResponse, RunnerError> {
        Ok(self.inner.rewind_phase(request).await?.into_inner())
    }
}

impl pb::StreamEvent {
    /// The name of the payload field that is set (`"tool_call_started"`, ...), or `""` for an
    /// event whose payload this client does not know (sent by a newer server).
    pub fn kind(&self) -> &'static str {
        use pb::stream_event::Payload as P;
        match &self.payload {
            None => "",
            Some(P::SessionInit(_)) => "session_init",
            Some(P::AssistantText(_)) => "assistant_text",
            Some(P::Thinking(_)) => "thinking",
            Some(P::ToolCallStarted(_)) => "tool_call_started",
            Some(P::ToolCallFinished(_)) => "tool_call_finished",
            Some(P::ApiRetry(_)) => "api_retry",
            Some(P::ApiError(_)) => "api_error",
            Some(P::RateLimit(_)) => "rate_limit",
            Some(P::Task(_)) => "task",
            Some(P::Compaction(_)) => "compaction",
            Some(P::CliStatus(_)) => "cli_status",
            Some(P::Hook(_)) => "hook",
            Some(P::PermissionDenied(_)) => "permission_denied",
            Some(P::PartialDelta(_)) => "partial_delta",
            Some(P::TurnResult(_)) => "turn_result",
            Some(P::ControlResponse(_)) => "control_response",
            Some(P::ControlRequest(_)) => "control_request",
            Some(P::UserMessage(_)) => "user_message",
            Some(P::ToolProgress(_)) => "tool_progress",
            Some(P::SessionWritesLost(_)) => "session_writes_lost",
            Some(P::CostUpdate(_)) => "cost_update",
            Some(P::Stderr(_)) => "stderr",
            Some(P::StatusChanged(_)) => "status_changed",
            Some(P::Control(_)) => "control",
            Some(P::ParseError(_)) => "parse_error",
            Some(P::Unknown(_)) => "unknown",
            Some(P::Gateway(_)) => "gateway",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::service::Interceptor;

    #[test]
    fn bearer_token_sets_authorization_only_when_given() {
        let mut with = BearerToken::new(Some("s3cret")).unwrap();
        let request = with.call(tonic::Request::new(())).unwrap();
        assert_eq!(request.metadata().get("authorization").unwrap(), "Bearer s3cret");

        let mut without = BearerToken::default();
        assert!(without.call(tonic::Request::new(())).unwrap().metadata().get("authorization").is_none());
        assert!(BearerToken::new(Some("bad\ntoken")).is_err());
    }

    #[test]
    fn a_token_source_is_asked_before_each_call() {
        let issued = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = issued.clone();
        let mut rotating = BearerToken::from_source(std::sync::Arc::new(move || {
            Some(format!("t-{}", counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1))
        }));
        for expected in ["Bearer t-1", "Bearer t-2"] {
            let request = rotating.call(tonic::Request::new(())).unwrap();
            assert_eq!(request.metadata().get("authorization").unwrap(), expected);
        }
        let mut broken = BearerToken::from_source(std::sync::Arc::new(|| Some("bad\ntoken".to_string())));
        assert_eq!(broken.call(tonic::Request::new(())).unwrap_err().code(), tonic::Code::Unauthenticated);
        assert!(!format!("{:?}", BearerToken::new(Some("s3cret")).unwrap()).contains("s3cret"));
    }
}
