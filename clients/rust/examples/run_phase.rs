//! Runs one phase and prints its events as they arrive, then the result.
//!
//!     cargo run --example run_phase -- [--addr 127.0.0.1:50051] [--job-id ID] [--allow TOOL]...
//!         --workdir DIR PROMPT
//!
//! The working directory must be inside one of the server's workspace roots. The first line names
//! the job and phase, for `cargo run --example watch_phase -- JOB_ID PHASE_ID`.

use std::process::ExitCode;

use helix_runner_client::{pb, Client, RunnerError};

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let args = match Args::parse(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(usage) => {
            eprintln!("{usage}");
            return ExitCode::from(2);
        }
    };
    match run(args).await {
        Ok(status) if status == pb::PhaseStatus::Succeeded => ExitCode::SUCCESS,
        Ok(_) => ExitCode::from(1),
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(1)
        }
    }
}

async fn run(args: Args) -> Result<pb::PhaseStatus, Box<dyn std::error::Error>> {
    let mut client = Client::connect(&args.addr).await?;
    let request = pb::RunPhaseRequest {
        job_id: args.job_id,
        prompt: args.prompt,
        working_dir: args.workdir,
        options: Some(pb::PhaseOptions { allowed_tools: args.allowed_tools, ..Default::default() }),
        ..Default::default()
    };
    let mut phase = client.run_phase(request).await.map_err(explain)?;
    while let Some(event) = phase.next_event().await.map_err(explain)? {
        if event.sequence == 1 {
            // The ids `cargo run --example watch_phase` re-attaches with.
            println!("job {} phase {}", event.job_id, event.phase_id);
        }
        println!("#{:<4} {:<20} {}", event.sequence, event.kind(), summary(&event));
    }
    let result = phase.result().expect("a finished stream has its result");
    println!(
        "{} ({}): {}",
        result.status().as_str_name(),
        result.reason,
        result.result_text.lines().next().unwrap_or("")
    );
    Ok(result.status())
}

/// Adds the decoded ErrorInfo (reason and metadata) to the message.
fn explain(err: RunnerError) -> Box<dyn std::error::Error> {
    let mut metadata: Vec<_> = err.metadata_map().into_iter().collect();
    metadata.sort();
    format!("{err} {metadata:?}").into()
}

fn summary(event: &pb::StreamEvent) -> String {
    use pb::stream_event::Payload as P;
    match &event.payload {
        Some(P::StatusChanged(s)) => format!("{} -> {}", s.from_status().as_str_name(), s.to_status().as_str_name()),
        Some(P::AssistantText(t)) => t.text.clone(),
        Some(P::ToolCallStarted(t)) => format!("{} {}", t.name, t.input_json),
        Some(P::ToolCallFinished(t)) => format!("{} error={} {}", t.name, t.is_error, t.content_preview.trim_end()),
        Some(P::TurnResult(t)) => format!("{} turns={}", t.subtype, t.num_turns),
        _ => String::new(),
    }
}

struct Args {
    addr: String,
    job_id: String,
    workdir: String,
    allowed_tools: Vec<String>,
    prompt: String,
}

impl Args {
    fn parse(mut argv: impl Iterator<Item = String>) -> Result<Self, String> {
        const USAGE: &str =
            "usage: run_phase [--addr HOST:PORT] [--job-id ID] [--allow TOOL]... --workdir DIR PROMPT";
        let mut args = Args {
            addr: "127.0.0.1:50051".into(),
            job_id: format!("example-{}", std::process::id()),
            workdir: String::new(),
            allowed_tools: Vec::new(),
            prompt: String::new(),
        };
        while let Some(arg) = argv.next() {
            let mut value = || argv.next().ok_or_else(|| USAGE.to_owned());
            match arg.as_str() {
                "--addr" => args.addr = value()?,
                "--job-id" => args.job_id = value()?,
                "--workdir" => args.workdir = value()?,
                "--allow" => args.allowed_tools.push(value()?),
                _ if arg.starts_with("--") || !args.prompt.is_empty() => return Err(USAGE.into()),
                _ => args.prompt = arg,
            }
        }
        if args.workdir.is_empty() || args.prompt.is_empty() {
            return Err(USAGE.into());
        }
        Ok(args)
    }
}
