//! Errors of the service: a gRPC status plus its decoded `google.rpc.ErrorInfo`.

use std::collections::HashMap;
use std::fmt;

use tonic::{Code, Status};
use tonic_types::StatusExt;

pub use tonic_types::ErrorInfo;

use crate::pb;

/// The `ErrorInfo.domain` of every error the service sends.
pub const ERROR_DOMAIN: &str = "runner.helix";

/// `ErrorInfo.reason` of a phase stream that ended because its replica handed the phase over to
/// another one (a drain): metadata `job_id`, `phase_id`, `after_sequence` (every event up to it was
/// delivered) and `from_replica`; `WatchPhase(after_sequence)` on any replica gives the rest.
pub const PHASE_MOVED: &str = "PHASE_MOVED";

/// Decodes the `google.rpc.ErrorInfo` detail of a status (from its `grpc-status-details-bin`
/// trailer), if it carries one.
pub fn error_info(status: &Status) -> Option<ErrorInfo> {
    status.get_details_error_info()
}

/// A failed call: the gRPC status and, when the server sent one, its `ErrorInfo`.
#[derive(Debug, Clone)]
pub struct RunnerError {
    status: Status,
    info: Option<ErrorInfo>,
}

impl RunnerError {
    /// Wraps a status, decoding its details.
    pub fn from_status(status: Status) -> Self {
        let info = error_info(&status);
        Self { status, info }
    }

    /// An error raised by this client when the server broke the protocol (e.g. a stream that
    /// ended without its result).
    pub(crate) fn protocol(message: &str) -> Self {
        Self { status: Status::new(Code::Internal, message), info: None }
    }

    /// The gRPC status code.
    pub fn code(&self) -> Code {
        self.status.code()
    }

    /// The status message.
    pub fn message(&self) -> &str {
        self.status.message()
    }

    /// The decoded `ErrorInfo`, if the status carried one.
    pub fn info(&self) -> Option<&ErrorInfo> {
        self.info.as_ref()
    }

    /// `ErrorInfo.reason` (e.g. `"PHASE_NOT_FOUND"`), if any.
    pub fn reason(&self) -> Option<&str> {
        self.info.as_ref().map(|i| i.reason.as_str())
    }

    /// `ErrorInfo.domain` (`"runner.helix"` for this service's errors), if any.
    pub fn domain(&self) -> Option<&str> {
        self.info.as_ref().map(|i| i.domain.as_str())
    }

    /// One `ErrorInfo.metadata` value (e.g. `"job_id"`), if present.
    pub fn metadata(&self, key: &str) -> Option<&str> {
        self.info.as_ref().and_then(|i| i.metadata.get(key)).map(String::as_str)
    }

    /// All `ErrorInfo.metadata` (empty without an ErrorInfo).
    pub fn metadata_map(&self) -> HashMap<String, String> {
        self.info.as_ref().map(|i| i.metadata.clone()).unwrap_or_default()
    }

    /// Whether this ended a phase stream because the phase moved to another replica (`PHASE_MOVED`).
    pub fn phase_moved(&self) -> bool {
        self.domain() == Some(ERROR_DOMAIN) && self.reason() == Some(PHASE_MOVED)
    }

    /// The delay of the status's `google.rpc.RetryInfo`, when the server sent one.
    pub fn retry_delay(&self) -> Option<std::time::Duration> {
        self.status.get_details_retry_info().and_then(|info| info.retry_delay)
    }

    /// The reason as the contract's `ErrorReason` enum, when it is one this client knows and
    /// the error comes from the service's domain.
    pub fn error_reason(&self) -> Option<pb::ErrorReason> {
        let info = self.info.as_ref()?;
        if info.domain != ERROR_DOMAIN {
            return None;
        }
        pb::ErrorReason::from_str_name(&format!("ERROR_REASON_{}", info.reason))
    }

    /// Whether the error has this reason.
    pub fn is(&self, reason: pb::ErrorReason) -> bool {
        self.error_reason() == Some(reason)
    }

    /// The underlying status.
    pub fn status(&self) -> &Status {
        &self.status
    }

    /// Consumes the error, returning the status.
    pub fn into_status(self) -> Status {
        self.status
    }
}

impl From<Status> for RunnerError {
    fn from(status: Status) -> Self {
        Self::from_status(status)
    }
}

impl fmt::Display for RunnerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}: {}", self.code(), self.message())?;
        if let Some(reason) = self.reason() {
            write!(f, " [{reason}]")?;
        }
        Ok(())
    }
}

impl std::error::Error for RunnerError {}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic_types::ErrorDetails;

    fn status(reason: &str, domain: &str) -> Status {
        let details = ErrorDetails::with_error_info(
            reason,
            domain,
            HashMap::from([("job_id".to_owned(), "j-1".to_owned())]),
        );
        Status::with_error_details(Code::NotFound, "job j-1 does not exist", details)
    }

    #[test]
    fn decodes_error_info_from_status_details() {
        let err = RunnerError::from(status("JOB_NOT_FOUND", ERROR_DOMAIN));
        assert_eq!(err.code(), Code::NotFound);
        assert_eq!(err.message(), "job j-1 does not exist");
        assert_eq!(err.reason(), Some("JOB_NOT_FOUND"));
        assert_eq!(err.domain(), Some(ERROR_DOMAIN));
        assert_eq!(err.metadata("job_id"), Some("j-1"));
        assert_eq!(err.error_reason(), Some(pb::ErrorReason::JobNotFound));
        assert!(err.is(pb::ErrorReason::JobNotFound));
        assert_eq!(err.to_string(), "NotFound: job j-1 does not exist [JOB_NOT_FOUND]");
    }

    #[test]
    fn survives_statuses_without_details_and_foreign_or_unknown_reasons() {
        let plain = RunnerError::from(Status::unavailable("connection refused"));
        assert!(plain.info().is_none() && plain.reason().is_none());
        assert!(plain.metadata_map().is_empty());
        assert_eq!(plain.error_reason(), None);

        let foreign = RunnerError::from(status("JOB_NOT_FOUND", "example.com"));
        assert_eq!(foreign.reason(), Some("JOB_NOT_FOUND"));
        assert_eq!(foreign.error_reason(), None);

        let newer = RunnerError::from(status("SOMETHING_NEW", ERROR_DOMAIN));
        assert_eq!(newer.reason(), Some("SOMETHING_NEW"));
        assert_eq!(newer.error_reason(), None);
    }
}
