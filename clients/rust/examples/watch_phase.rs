//! Attaches to a running or finished phase from a sequence cursor and prints its events, then
//! the result.
//!
//!     cargo run --example watch_phase -- [--addr 127.0.0.1:50051] JOB_ID PHASE_ID [AFTER_SEQUENCE]

use std::process::ExitCode;

use helix_runner_client::Client;

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    const USAGE: &str = "usage: watch_phase [--addr HOST:PORT] JOB_ID PHASE_ID [AFTER_SEQUENCE]";
    let mut addr = "127.0.0.1:50051".to_owned();
    let mut positional = Vec::new();
    let mut argv = std::env::args().skip(1);
    while let Some(arg) = argv.next() {
        match arg.as_str() {
            "--addr" => match argv.next() {
                Some(value) => addr = value,
                None => return usage(USAGE),
            },
            _ if arg.starts_with("--") => return usage(USAGE),
            _ => positional.push(arg),
        }
    }
    let (job_id, phase_id, after) = match positional.as_slice() {
        [job, phase] => (job.clone(), phase.clone(), 0),
        [job, phase, after] => match after.parse::<i64>() {
            Ok(after) => (job.clone(), phase.clone(), after),
            Err(_) => return usage(USAGE),
        },
        _ => return usage(USAGE),
    };
    match watch(&addr, job_id, phase_id, after).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::from(1)
        }
    }
}

async fn watch(addr: &str, job_id: String, phase_id: String, after: i64) -> Result<(), Box<dyn std::error::Error>> {
    let mut client = Client::connect(addr).await?;
    let mut phase = client.watch_phase(job_id, phase_id, after).await?;
    while let Some(event) = phase.next_event().await? {
        println!("#{:<4} {}", event.sequence, event.kind());
    }
    if let Some(result) = phase.result() {
        println!("{} ({}) last_sequence={}", result.status().as_str_name(), result.reason, result.last_sequence);
    }
    Ok(())
}

fn usage(text: &str) -> ExitCode {
    eprintln!("{text}");
    ExitCode::from(2)
}
