//! Conformance program for the Rust client: runs every scenario against a live server and prints
//! the normalized JSON transcript (see conformance/README.md; the runner compares it with
//! conformance/golden.json, which the other clients' programs must match too).
//!
//!     conformance --address HOST:PORT --workdir DIR --scenarios conformance/scenarios.json --prefix ID

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use helix_runner_client::{pb, Client, PhaseStream, RunnerError};
use serde_json::{json, Value};

const STREAM_TIMEOUT: Duration = Duration::from_secs(90);

type BoxError = Box<dyn std::error::Error>;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    let mut args = BTreeMap::new();
    let mut argv = std::env::args().skip(1);
    while let Some(flag) = argv.next() {
        let value = argv.next().ok_or("every flag takes a value")?;
        args.insert(flag.trim_start_matches("--").to_owned(), value);
    }
    let arg = |name: &str| args.get(name).cloned().ok_or(format!("--{name} is required"));
    let spec: Value = serde_json::from_str(&std::fs::read_to_string(arg("scenarios")?)?)?;
    let client = Client::connect(arg("address")?).await?;
    let mut s = Scenarios {
        client,
        spec,
        prefix: arg("prefix")?,
        workdir: arg("workdir")?,
        out: serde_json::Map::new(),
        run_events: Vec::new(),
        run_result: pb::PhaseResult::default(),
    };
    if args.get("scenario").map(String::as_str) == Some("drain") {
        // Run by the runner alone, against two replicas (conformance/README.md).
        s.drain_follow().await?;
    } else {
        s.run_phase().await?;
        s.watch_from_cursor().await?;
        s.get_job().await?;
        s.list_tool_calls().await?;
        s.cancel_phase().await?;
        s.client_cancel().await?;
        s.breakpoint_approve().await?;
        s.list_jobs().await?;
        s.cost_totals().await?;
        s.errors().await?;
        s.retried_phase().await?;
        s.worktree_phase().await?;
    }
    println!("{}", serde_json::to_string_pretty(&Value::Object(s.out))?);
    Ok(())
}

async fn bounded<T, F: Future<Output = Result<T, RunnerError>>>(f: F) -> Result<T, BoxError> {
    Ok(tokio::time::timeout(STREAM_TIMEOUT, f).await??)
}

struct Normalizer(Vec<(String, String)>);

impl Normalizer {
    fn new(prefix: &str) -> Self {
        Self(vec![(prefix.to_owned(), "<P>".to_owned())])
    }
    fn apply(&self, text: &str) -> String {
        let mut text = text.to_owned();
        for (old, new) in &self.0 {
            text = text.replace(old, new);
        }
        text
    }
}

fn status_name(value: i32) -> Value {
    pb::PhaseStatus::try_from(value).map(|s| json!(s.as_str_name())).unwrap_or(Value::Null)
}

/// The stable part of an event; None for kinds whose presence depends on timing or the CLI
/// (cost_update is throttled by time: see last_cost_update).
fn project_event(event: &pb::StreamEvent, started: &mut HashSet<String>) -> Option<Value> {
    use pb::stream_event::Payload as P;
    let kind = event.kind();
    Some(match event.payload.as_ref()? {
        P::StatusChanged(e) => json!({"kind": kind, "from": status_name(e.from_status), "to": status_name(e.to_status)}),
        P::SessionInit(_) => json!({"kind": kind}),
        P::ToolCallStarted(e) => {
            started.insert(e.tool_use_id.clone());
            json!({"kind": kind, "name": e.name, "input_json": e.input_json})
        }
        P::ToolCallFinished(e) => json!({
            "kind": kind, "name": e.name, "is_error": e.is_error, "content_preview": e.content_preview,
            "matches_a_start": started.contains(&e.tool_use_id),
        }),
        P::AssistantText(e) => json!({"kind": kind, "text": e.text}),
        P::Control(e) => json!({
            "kind": kind, "control_kind": e.kind().as_str_name(), "tool_name": e.tool_name,
            "breakpoint_id": e.breakpoint_id,
        }),
        P::TurnResult(e) => json!({
            "kind": kind, "subtype": e.subtype, "is_error": e.is_error, "num_turns": e.num_turns,
            "result_text": e.result_text,
        }),
        _ => return None,
    })
}

fn project_events(events: &[pb::StreamEvent]) -> Value {
    let mut started = HashSet::new();
    Value::Array(events.iter().filter_map(|e| project_event(e, &mut started)).collect())
}

fn gap_free(events: &[pb::StreamEvent], first: i64) -> bool {
    events.iter().enumerate().all(|(i, e)| e.sequence == first + i as i64)
}

fn tokens(usage: &Option<pb::TokenUsage>) -> (i64, i64) {
    usage.as_ref().map(|t| (t.input_tokens, t.output_tokens)).unwrap_or((0, 0))
}

fn project_model_cost(m: &pb::ModelCost) -> Value {
    let (input, output) = tokens(&m.tokens);
    json!({"model": m.model, "input_tokens": input, "output_tokens": output,
           "pricing_source": m.pricing_source().as_str_name()})
}

fn project_phase_cost(cost: &Option<pb::PhaseCost>) -> Value {
    let cost = cost.clone().unwrap_or_default();
    let (input, output) = tokens(&cost.tokens);
    json!({
        "reported_usd": cost.reported_usd,
        "computed_usd": cost.computed_usd,
        "computed_only": cost.computed_only,
        "input_tokens": input,
        "output_tokens": output,
        "models": cost.models.iter().map(project_model_cost).collect::<Vec<_>>(),
        "unpriced_models": cost.unpriced_models,
    })
}

fn project_totals(totals: &Option<pb::CostTotals>) -> Value {
    let t = totals.clone().unwrap_or_default();
    let (input, output) = tokens(&t.tokens);
    json!({
        "reported_usd": t.reported_usd,
        "computed_usd": t.computed_usd,
        "input_tokens": input,
        "output_tokens": output,
        "phase_count": t.phase_count,
        "computed_only_phase_count": t.computed_only_phase_count,
        "models": t.models.iter().map(project_model_cost).collect::<Vec<_>>(),
        "unpriced_models": t.unpriced_models,
    })
}

/// Project totals also hold the cancelled phases, whose partial usage depends on when they were killed.
fn project_scope(project: &pb::CostTotals, job: &pb::CostTotals) -> Value {
    json!({
        "phase_count": project.phase_count,
        "computed_only_phase_count": project.computed_only_phase_count,
        "reported_usd": project.reported_usd,
        "models": project.models.iter().map(|m| m.model.clone()).collect::<Vec<_>>(),
        "unpriced_models": project.unpriced_models,
        "covers_the_job": project.computed_usd >= job.computed_usd && tokens(&project.tokens).0 >= tokens(&job.tokens).0,
    })
}

fn project_tool_stats(stats: &[pb::ToolStats]) -> Value {
    stats
        .iter()
        .map(|s| json!({"name": s.name, "count": s.count, "failures": s.failures, "unfinished": s.unfinished}))
        .collect()
}

fn last_cost_update(events: &[pb::StreamEvent]) -> Value {
    use pb::stream_event::Payload as P;
    events
        .iter()
        .rev()
        .find_map(|e| match &e.payload {
            Some(P::CostUpdate(c)) => Some(project_phase_cost(&c.cost)),
            _ => None,
        })
        .unwrap_or(Value::Null)
}

fn project_result(r: &pb::PhaseResult, norm: &Normalizer) -> Value {
    json!({
        "job_id": norm.apply(&r.job_id),
        "phase_id": r.phase_id,
        "status": status_name(r.status),
        "reason": norm.apply(&r.reason),
        "result_subtype": r.result_subtype,
        "is_error": r.is_error,
        "exit_code": r.exit_code,
        "num_turns": r.num_turns,
        "result_text": r.result_text,
        "result_count": r.result_count,
        "errors": r.errors,
        "cost": project_phase_cost(&r.cost),
        "tool_stats": project_tool_stats(&r.tool_stats),
        "has_session_id": !r.session_id.is_empty(),
        "has_start_and_end_time": r.start_time.is_some() && r.end_time.is_some(),
    })
}

/// The canonical gRPC code name (`NOT_FOUND`).
fn code_name(code: tonic::Code) -> &'static str {
    use tonic::Code as C;
    match code {
        C::Ok => "OK",
        C::Cancelled => "CANCELLED",
        C::Unknown => "UNKNOWN",
        C::InvalidArgument => "INVALID_ARGUMENT",
        C::DeadlineExceeded => "DEADLINE_EXCEEDED",
        C::NotFound => "NOT_FOUND",
        C::AlreadyExists => "ALREADY_EXISTS",
        C::PermissionDenied => "PERMISSION_DENIED",
        C::ResourceExhausted => "RESOURCE_EXHAUSTED",
        C::FailedPrecondition => "FAILED_PRECONDITION",
        C::Aborted => "ABORTED",
        C::OutOfRange => "OUT_OF_RANGE",
        C::Unimplemented => "UNIMPLEMENTED",
        C::Internal => "INTERNAL",
        C::Unavailable => "UNAVAILABLE",
        C::DataLoss => "DATA_LOSS",
        C::Unauthenticated => "UNAUTHENTICATED",
    }
}

fn project_error(rpc: &str, err: &RunnerError, norm: &Normalizer) -> Value {
    let metadata: BTreeMap<String, String> =
        err.metadata_map().into_iter().map(|(k, v)| (k, norm.apply(&v))).collect();
    json!({
        "rpc": rpc,
        "code": code_name(err.code()),
        "message": norm.apply(err.message()),
        "domain": err.domain(),
        "reason": err.reason(),
        "metadata": metadata,
    })
}

/// Whether a tool call finished without error: one cancelled while it ran ends killed, or not at all.
fn completed_a_tool(events: &[pb::StreamEvent]) -> bool {
    events.iter().any(|e| matches!(&e.payload, Some(pb::stream_event::Payload::ToolCallFinished(f)) if !f.is_error))
}

struct Scenarios {
    client: Client,
    spec: Value,
    prefix: String,
    workdir: String,
    out: serde_json::Map<String, Value>,
    run_events: Vec<pb::StreamEvent>,
    run_result: pb::PhaseResult,
}

impl Scenarios {
    fn s(&self, scenario: &str, key: &str) -> String {
        self.spec[scenario][key].as_str().unwrap_or_default().to_owned()
    }

    fn job(&self, name: &str) -> String {
        format!("{}-{name}", self.prefix)
    }

    fn norm(&self) -> Normalizer {
        Normalizer::new(&self.prefix)
    }

    fn request(&self, scenario: &str) -> pb::RunPhaseRequest {
        let options = &self.spec["options"];
        pb::RunPhaseRequest {
            job_id: self.job(&self.s(scenario, "job")),
            phase_id: self.s(scenario, "phase_id"),
            project_id: self.prefix.clone(),
            prompt: self.s(scenario, "prompt"),
            working_dir: self.workdir.clone(),
            options: Some(pb::PhaseOptions {
                model: options["model"].as_str().unwrap_or_default().to_owned(),
                allowed_tools: options["allowed_tools"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|t| t.as_str().map(str::to_owned))
                    .collect(),
                ..Default::default()
            }),
        }
    }

    /// The request of a cancel scenario and the file its tool writes once it really runs.
    fn long_tool_request(&self, scenario: &str) -> (pb::RunPhaseRequest, String) {
        let mut request = self.request(scenario);
        let started = Path::new(&self.workdir).join(format!("{}.started", request.job_id));
        let started = started.to_string_lossy().into_owned();
        let name = self.s("long_tool", "env");
        request.options.get_or_insert_with(Default::default).env.insert(name, started.clone());
        (request, started)
    }

    /// Waits (bounded) until the tool's process wrote its file: then it is running, not just announced.
    async fn until_running(&self, started: &str) -> bool {
        let wait = self.spec["long_tool"]["wait_seconds"].as_u64().unwrap_or(30);
        let deadline = Instant::now() + Duration::from_secs(wait);
        while !Path::new(started).exists() {
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        true
    }

    /// RunPhase while the runner drains the serving replica: the stream follows the phase to the
    /// adopter by itself (one move told to the hook) and is one gap-free stream to the result.
    async fn drain_follow(&mut self) -> Result<(), BoxError> {
        use pb::stream_event::Payload as P;
        use std::sync::{Arc, Mutex};
        let (request, _started) = self.long_tool_request("drain");
        let moved_from = Arc::new(Mutex::new(Vec::<String>::new()));
        let hook = moved_from.clone();
        let phase = bounded(self.client.run_phase(request))
            .await?
            .on_move(move |m| hook.lock().unwrap().push(m.from_replica.clone()));
        let limit = Duration::from_secs(self.spec["drain"]["timeout_seconds"].as_u64().unwrap_or(100));
        let (events, result) = tokio::time::timeout(limit, phase.collect()).await??;
        let steps: Vec<Value> = events
            .iter()
            .filter_map(|e| match &e.payload {
                Some(P::ToolCallFinished(f)) => Some(json!(f.content_preview.trim())),
                _ => None,
            })
            .collect();
        let norm = self.norm();
        let attempts: Vec<Value> = result
            .attempts
            .iter()
            .map(|a| json!({
                "number": a.number, "end_kind": a.end_kind().as_str_name(), "replica_id": a.replica_id,
                "reason": norm.apply(&a.reason),
            }))
            .collect();
        let moved_from = moved_from.lock().unwrap().clone();
        self.out.insert(
            "drain_follow".into(),
            json!({
                "gap_free": gap_free(&events, 1),
                "last_sequence_is_last_event": events.last().map(|e| e.sequence) == Some(result.last_sequence),
                "moved_from": moved_from,
                "steps": steps,
                "status": status_name(result.status),
                "result_text": result.result_text,
                "attempts": attempts,
            }),
        );
        Ok(())
    }

    async fn run_phase(&mut self) -> Result<(), BoxError> {
        let request = self.request("run");
        let phase = bounded(self.client.run_phase(request)).await?;
        let (events, result) = bounded(phase.collect()).await?;
        let (job, phase_id) = (self.job(&self.s("run", "job")), self.s("run", "phase_id"));
        self.out.insert(
            "run_phase".into(),
            json!({
                "events": project_events(&events),
                "gap_free": gap_free(&events, 1),
                "ids_match": events.iter().all(|e| e.job_id == job && e.phase_id == phase_id),
                "last_sequence_is_last_event": events.last().map(|e| e.sequence) == Some(result.last_sequence),
                "last_cost_update": last_cost_update(&events),
                "result": project_result(&result, &self.norm()),
            }),
        );
        self.run_events = events;
        self.run_result = result;
        Ok(())
    }

    async fn watch_from_cursor(&mut self) -> Result<(), BoxError> {
        let cursor = self
            .run_events
            .iter()
            .find(|e| e.kind() == "tool_call_started")
            .map(|e| e.sequence)
            .ok_or("the run had no tool call")?;
        let (job, phase_id) = (self.job(&self.s("run", "job")), self.s("run", "phase_id"));
        let phase = bounded(self.client.watch_phase(job, phase_id, cursor)).await?;
        let (events, result) = bounded(phase.collect()).await?;
        let pairs = |events: &[pb::StreamEvent]| -> Vec<(i64, &'static str)> {
            events.iter().map(|e| (e.sequence, e.kind())).collect()
        };
        let tail: Vec<_> = pairs(&self.run_events).into_iter().filter(|(seq, _)| *seq > cursor).collect();
        self.out.insert(
            "watch_from_cursor".into(),
            json!({
                "cursor_event": "tool_call_started",
                "gap_free_after_cursor": gap_free(&events, cursor + 1),
                "same_as_run_tail": pairs(&events) == tail,
                "events": project_events(&events),
                "result_status": status_name(result.status),
                "result_last_sequence_matches_run": result.last_sequence == self.run_result.last_sequence,
            }),
        );
        Ok(())
    }

    async fn get_job(&mut self) -> Result<(), BoxError> {
        let job = bounded(self.client.get_job(self.job(&self.s("run", "job")))).await?;
        let norm = self.norm();
        let phases: Vec<Value> = job
            .phases
            .iter()
            .map(|p| {
                json!({
                    "phase_id": p.phase_id,
                    "status": status_name(p.status),
                    "status_reason": norm.apply(&p.status_reason),
                    "prompt": p.prompt,
                    "model": p.model,
                    "last_sequence_matches_result": p.last_sequence == self.run_result.last_sequence,
                    "result_status": p.result.as_ref().map(|r| status_name(r.status)),
                    "tool_stats": project_tool_stats(&p.tool_stats),
                })
            })
            .collect();
        self.out.insert(
            "get_job".into(),
            json!({
                "job_id": norm.apply(&job.job_id),
                "project_id": norm.apply(&job.project_id),
                "status": status_name(job.status),
                "has_times": job.create_time.is_some() && job.update_time.is_some(),
                "phases": phases,
                "cost": project_totals(&job.cost),
            }),
        );
        Ok(())
    }

    async fn list_tool_calls(&mut self) -> Result<(), BoxError> {
        use pb::stream_event::Payload as P;
        let request = pb::ListToolCallsRequest { job_id: self.job(&self.s("run", "job")), ..Default::default() };
        let response = bounded(async { Ok(self.client.raw().list_tool_calls(request).await?.into_inner()) }).await?;
        let starts: BTreeMap<&str, i64> = self
            .run_events
            .iter()
            .filter_map(|e| match &e.payload {
                Some(P::ToolCallStarted(t)) => Some((t.tool_use_id.as_str(), e.sequence)),
                _ => None,
            })
            .collect();
        let calls: Vec<Value> = response
            .tool_calls
            .iter()
            .map(|c| {
                json!({
                    "phase_id": c.phase_id,
                    "name": c.name,
                    "status": c.status().as_str_name(),
                    "input_json": c.input_json,
                    "result_preview": c.result_preview,
                    "start_sequence_matches_event": starts.get(c.tool_use_id.as_str()) == Some(&c.start_sequence),
                    "ends_after_start": c.end_sequence > c.start_sequence,
                })
            })
            .collect();
        self.out.insert(
            "list_tool_calls".into(),
            json!({
                "tool_calls": calls,
                "stats": project_tool_stats(&response.stats),
                "next_page_token": response.next_page_token,
            }),
        );
        Ok(())
    }

    async fn until_tool_started(phase: &mut PhaseStream) -> Result<Vec<pb::StreamEvent>, RunnerError> {
        let mut seen = Vec::new();
        while let Some(event) = phase.next_event().await? {
            let started = event.kind() == "tool_call_started";
            seen.push(event);
            if started {
                return Ok(seen);
            }
        }
        Err(tonic::Status::internal("the phase ended before its tool call started").into())
    }

    async fn cancel_phase(&mut self) -> Result<(), BoxError> {
        let (request, started) = self.long_tool_request("cancel");
        let (job, phase_id) = (request.job_id.clone(), request.phase_id.clone());
        let mut phase = bounded(self.client.run_phase(request)).await?;
        let before = bounded(Self::until_tool_started(&mut phase)).await?;
        let running = self.until_running(&started).await;
        let cancelled = bounded(self.client.clone().cancel_phase(job, phase_id, self.s("cancel", "reason"))).await?;
        let (rest, result) = bounded(phase.collect()).await?;
        let events: Vec<_> = before.iter().chain(rest.iter()).cloned().collect();
        let norm = self.norm();
        self.out.insert(
            "cancel_phase".into(),
            json!({
                "events_until_cancel": project_events(&before),
                "tool_running_when_cancelled": running && !completed_a_tool(&events),
                "cancel_returned": {"job_id": norm.apply(&cancelled.job_id), "phase_id": cancelled.phase_id},
                "gap_free": gap_free(&events, 1),
                "last_event": project_events(&events[events.len() - 1..]),
                "result": {"status": status_name(result.status), "reason": norm.apply(&result.reason)},
            }),
        );
        Ok(())
    }

    async fn client_cancel(&mut self) -> Result<(), BoxError> {
        let (request, started) = self.long_tool_request("client_cancel");
        let (job, phase_id) = (request.job_id.clone(), request.phase_id.clone());
        let mut phase = bounded(self.client.run_phase(request)).await?;
        let before = bounded(Self::until_tool_started(&mut phase)).await?;
        let running = self.until_running(&started).await;
        // Dropping the stream cancels the call; the server cancels the phase. Watch it end.
        drop(phase);
        let watch = bounded(self.client.watch_phase(job, phase_id, 0)).await?;
        let (events, result) = bounded(watch.collect()).await?;
        let norm = self.norm();
        let starts = events.iter().take(before.len()).map(|e| e.sequence).eq(before.iter().map(|e| e.sequence));
        self.out.insert(
            "client_cancel".into(),
            json!({
                "events_until_cancel": project_events(&before),
                "tool_running_when_cancelled": running && !completed_a_tool(&events),
                "watched": {
                    "gap_free": gap_free(&events, 1),
                    "starts_like_the_run": starts,
                    "last_event": project_events(&events[events.len().saturating_sub(1)..]),
                    "result": {"status": status_name(result.status), "reason": norm.apply(&result.reason)},
                },
            }),
        );
        Ok(())
    }

    async fn breakpoint_approve(&mut self) -> Result<(), BoxError> {
        use pb::stream_event::Payload as P;
        let mut request = self.request("breakpoint");
        let (job, phase_id) = (request.job_id.clone(), request.phase_id.clone());
        if let Some(options) = request.options.as_mut() {
            options.breakpoints = vec![pb::Breakpoint {
                breakpoint_id: self.s("breakpoint", "breakpoint_id"),
                condition: Some(pb::breakpoint::Condition::ToolName(self.s("breakpoint", "tool_name"))),
                ..Default::default()
            }];
        }
        let mut client = self.client.clone();
        let (events, pending, result) = bounded(async {
            let mut phase = client.run_phase(request).await?;
            let (mut events, mut pending) = (Vec::new(), Value::Null);
            while let Some(event) = phase.next_event().await? {
                if let Some(P::Control(control)) = &event.payload {
                    if control.kind() == pb::ControlEventKind::BreakpointHit {
                        let inspect = pb::InspectPhaseRequest { job_id: job.clone(), phase_id: phase_id.clone(), ..Default::default() };
                        let inspection = client.raw().inspect_phase(inspect).await?.into_inner().inspection.unwrap_or_default();
                        pending = inspection
                            .pending_calls
                            .iter()
                            .map(|p| {
                                let call = p.call.clone().unwrap_or_default();
                                json!({"name": call.name, "input_json": call.input_json, "breakpoint_id": p.breakpoint_id})
                            })
                            .collect();
                        let resolve = pb::ResolveToolCallRequest {
                            job_id: job.clone(),
                            phase_id: phase_id.clone(),
                            tool_use_id: control.tool_use_id.clone(),
                            decision: Some(pb::resolve_tool_call_request::Decision::Approve(pb::ApproveDecision {})),
                        };
                        client.raw().resolve_tool_call(resolve).await?;
                    }
                }
                events.push(event);
            }
            let result = phase.result().cloned().unwrap_or_default();
            Ok((events, pending, result))
        })
        .await?;
        self.out.insert(
            "breakpoint_approve".into(),
            json!({
                "events": project_events(&events),
                "gap_free": gap_free(&events, 1),
                "pending_at_hit": pending,
                "result": {"status": status_name(result.status), "reason": self.norm().apply(&result.reason)},
            }),
        );
        Ok(())
    }

    async fn list_jobs(&mut self) -> Result<(), BoxError> {
        let norm = self.norm();
        let page_size = self.spec["list_jobs"]["page_size"].as_i64().unwrap_or(0) as i32;
        let mut pages = Vec::new();
        let mut page_token = String::new();
        loop {
            let request =
                pb::ListJobsRequest { project_id: self.prefix.clone(), page_size, page_token, ..Default::default() };
            let page = bounded(async { Ok(self.client.raw().list_jobs(request).await?.into_inner()) }).await?;
            pages.push(
                page.jobs
                    .iter()
                    .map(|j| json!({"job_id": norm.apply(&j.job_id), "status": status_name(j.status), "phases": j.phases.len()}))
                    .collect::<Vec<_>>(),
            );
            page_token = page.next_page_token;
            if page_token.is_empty() {
                break;
            }
        }
        let request = pb::ListJobsRequest {
            project_id: self.prefix.clone(),
            statuses: vec![pb::PhaseStatus::Cancelled as i32],
            ..Default::default()
        };
        let cancelled = bounded(async { Ok(self.client.raw().list_jobs(request).await?.into_inner()) }).await?;
        self.out.insert(
            "list_jobs".into(),
            json!({
                "pages": pages,
                "cancelled_only": cancelled.jobs.iter().map(|j| norm.apply(&j.job_id)).collect::<Vec<_>>(),
            }),
        );
        Ok(())
    }

    async fn cost_totals(&mut self) -> Result<(), BoxError> {
        let job = self.job(&self.s("run", "job"));
        let scopes = [
            ("phase", pb::GetCostTotalsRequest { job_id: job.clone(), phase_id: self.s("run", "phase_id"), ..Default::default() }),
            ("job", pb::GetCostTotalsRequest { job_id: job.clone(), ..Default::default() }),
            ("project", pb::GetCostTotalsRequest { project_id: self.prefix.clone(), ..Default::default() }),
        ];
        let mut totals = Vec::new();
        for (_, request) in scopes {
            let response = bounded(async { Ok(self.client.raw().get_cost_totals(request).await?.into_inner()) }).await?;
            totals.push(response.totals.unwrap_or_default());
        }
        let (phase, job, project) = (&totals[0], &totals[1], &totals[2]);
        self.out.insert(
            "cost_totals".into(),
            json!({
                "phase": project_totals(&Some(phase.clone())),
                "job": project_totals(&Some(job.clone())),
                "project": project_scope(project, job),
            }),
        );
        Ok(())
    }

    async fn errors(&mut self) -> Result<(), BoxError> {
        let run_job = self.job(&self.s("run", "job"));
        let run_phase_id = self.s("run", "phase_id");
        let cursor = self.spec["errors"]["cursor"].as_i64().ok_or("errors.cursor")?;
        // The cursor error names the phase's last sequence: keep the transcript independent of it.
        let mut norm = self.norm();
        norm.0.push((cursor.to_string(), "<cursor>".into()));
        norm.0.push((self.run_result.last_sequence.to_string(), "<last_sequence>".into()));

        let mut c = self.client.clone();
        let mut results: Vec<(&str, Result<(), RunnerError>)> = Vec::new();
        results.push(("GetJob", c.get_job(self.job(&self.s("errors", "missing_job"))).await.map(drop)));
        results.push(("WatchPhase", watch_to_end(&mut c, &run_job, &self.s("errors", "missing_phase"), 0).await));
        results.push(("WatchPhase", watch_to_end(&mut c, &run_job, &run_phase_id, cursor).await));
        results.push(("RunPhase", run_to_end(&mut c, self.request("run")).await));
        let invalid = pb::RunPhaseRequest {
            job_id: self.job("invalid"),
            prompt: String::new(),
            working_dir: self.workdir.clone(),
            ..Default::default()
        };
        results.push(("RunPhase", run_to_end(&mut c, invalid).await));
        let pause = pb::PausePhaseRequest { job_id: run_job.clone(), phase_id: run_phase_id.clone(), ..Default::default() };
        results.push(("PausePhase", c.raw().pause_phase(pause).await.map(drop).map_err(RunnerError::from)));

        let out: Vec<Value> = results
            .into_iter()
            .map(|(rpc, result)| match result {
                Ok(()) => json!({"rpc": rpc, "code": "OK"}),
                Err(err) => project_error(rpc, &err, &norm),
            })
            .collect();
        self.out.insert("errors".into(), Value::Array(out));
        Ok(())
    }

    async fn retried_phase(&mut self) -> Result<(), BoxError> {
        use pb::stream_event::Payload as P;
        let spec = self.spec["retry"].clone();
        let mut request = self.request("retry");
        let millis = |key: &str| {
            let ms = spec[key].as_i64().unwrap_or(0);
            Some(prost_types::Duration { seconds: ms / 1000, nanos: ((ms % 1000) * 1_000_000) as i32 })
        };
        let options = request.options.get_or_insert_with(Default::default);
        for (name, value) in spec["env"].as_object().into_iter().flatten() {
            options.env.insert(name.clone(), value.as_str().unwrap_or_default().to_owned());
        }
        options.retry = Some(pb::RetryPolicy {
            max_attempts: spec["max_attempts"].as_i64().unwrap_or(0) as i32,
            initial_backoff: millis("initial_backoff_ms"),
            max_backoff: millis("max_backoff_ms"),
            disable_jitter: true,
            ..Default::default()
        });
        let phase = bounded(self.client.run_phase(request)).await?;
        let (events, result) = bounded(phase.collect()).await?;
        let attempt_controls = [pb::ControlEventKind::AttemptStarted, pb::ControlEventKind::RetryScheduled];
        let controls: Vec<Value> = events
            .iter()
            .filter_map(|e| match &e.payload {
                Some(P::Control(c)) if attempt_controls.contains(&c.kind()) => Some(json!({
                    "control_kind": c.kind().as_str_name(), "attempt": c.attempt, "max_attempts": c.max_attempts,
                    "end_kind": c.end_kind().as_str_name(), "resumes_a_session": !c.resumed_session_id.is_empty(),
                })),
                _ => None,
            })
            .collect();
        let first_session = result.attempts.first().map(|a| a.session_id.clone()).unwrap_or_default();
        let attempts: Vec<Value> = result
            .attempts
            .iter()
            .map(|a| json!({
                "number": a.number, "status": status_name(a.status), "end_kind": a.end_kind().as_str_name(),
                "retryable": a.retryable, "api_error_status": a.api_error_status,
                "resumed_the_first_session": !a.resumed_session_id.is_empty() && a.resumed_session_id == first_session,
            }))
            .collect();
        self.out.insert(
            "retried_phase".into(),
            json!({
                "gap_free": gap_free(&events, 1),
                "controls": controls,
                "result": {"status": status_name(result.status), "result_text": result.result_text, "attempts": attempts},
            }),
        );
        Ok(())
    }

    async fn worktree_phase(&mut self) -> Result<(), BoxError> {
        let (job, phase_id) = (self.job(&self.s("worktree", "job")), self.s("worktree", "phase_id"));
        let mut request = self.request("worktree");
        request.working_dir = Path::new(&self.workdir)
            .join(format!("{}-{}", self.prefix, self.s("worktree", "repo")))
            .to_string_lossy()
            .into_owned();
        request.options.get_or_insert_with(Default::default).workspace = pb::WorkspaceMode::GitWorktree as i32;
        let phase = bounded(self.client.run_phase(request)).await?;
        let (events, result) = bounded(phase.collect()).await?;
        let art = result.artifacts.clone().unwrap_or_default();
        let page_size = self.spec["worktree"]["page_size"].as_i64().unwrap_or(0) as i32;
        let (mut paged, mut token, mut pages) = (Vec::new(), String::new(), 0);
        let total = loop {
            let request = pb::GetPhaseDiffRequest {
                job_id: job.clone(),
                phase_id: phase_id.clone(),
                page_size,
                page_token: token.clone(),
            };
            let page = self.client.raw().get_phase_diff(request).await.map_err(RunnerError::from)?.into_inner();
            paged.extend_from_slice(&page.chunk);
            pages += 1;
            token = page.next_page_token;
            if token.is_empty() || pages > 1000 {
                break page.total_bytes;
            }
        };
        let changed: Vec<Value> = art
            .changed_files
            .iter()
            .map(|f| json!({"path": f.path, "status": f.status, "lines_added": f.lines_added, "lines_deleted": f.lines_deleted}))
            .collect();
        self.out.insert(
            "worktree_phase".into(),
            json!({
                "events": project_events(&events),
                "gap_free": gap_free(&events, 1),
                "result": {"status": status_name(result.status), "result_text": result.result_text},
                "artifacts": {
                    "git_available": art.git_available,
                    "branch": self.norm().apply(&art.branch),
                    "has_base_commit": !art.base_commit.is_empty(),
                    "changed_files": changed,
                    "diff_non_empty": !art.diff.is_empty(),
                    "diff_truncated": art.diff_truncated,
                    "diff_bytes_match": art.diff_bytes == art.diff.len() as i64,
                },
                "paged_diff": {
                    "several_pages": pages > 1,
                    "total_bytes_match": total == paged.len() as i64,
                    "equals_the_result_diff": paged == art.diff.as_bytes(),
                },
            }),
        );
        Ok(())
    }
}

async fn watch_to_end(c: &mut Client, job: &str, phase: &str, after: i64) -> Result<(), RunnerError> {
    let stream = tokio::time::timeout(STREAM_TIMEOUT, c.watch_phase(job, phase, after))
        .await
        .map_err(|_| tonic::Status::deadline_exceeded("timed out"))??;
    stream.collect().await.map(drop)
}

async fn run_to_end(c: &mut Client, request: pb::RunPhaseRequest) -> Result<(), RunnerError> {
    let stream = tokio::time::timeout(STREAM_TIMEOUT, c.run_phase(request))
        .await
        .map_err(|_| tonic::Status::deadline_exceeded("timed out"))??;
    stream.collect().await.map(drop)
}
