//! Benchmark program (driven by benchmarks/bench_clients.py): runs one phase and reports, as JSON,
//! how many events arrived, when the first and last arrived, and the live latency of every
//! assistant text that carries a `ts=<unix ns>` stamp written by the benchmark's fake CLI.
//!
//!     bench_events ADDRESS WORKDIR JOB_ID PROMPT

use std::time::{SystemTime, UNIX_EPOCH};

use helix_runner_client::{pb, Client};

fn now_ns() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock after 1970").as_nanos() as i64
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [address, workdir, job_id, prompt] = args.as_slice() else {
        return Err("usage: bench_events ADDRESS WORKDIR JOB_ID PROMPT".into());
    };
    let mut client = Client::connect(address).await?;
    let request = pb::RunPhaseRequest {
        job_id: job_id.clone(),
        prompt: prompt.clone(),
        working_dir: workdir.clone(),
        ..Default::default()
    };
    let mut phase = client.run_phase(request).await?;
    let (mut events, mut first, mut last) = (0u64, 0i64, 0i64);
    let mut latencies = Vec::new();
    while let Some(event) = phase.next_event().await? {
        let now = now_ns();
        if events == 0 {
            first = now;
        }
        last = now;
        events += 1;
        if let Some(pb::stream_event::Payload::AssistantText(text)) = &event.payload {
            if let Some(stamp) = text.text.strip_prefix("ts=").and_then(|s| s.split(' ').next()) {
                latencies.push(now - stamp.parse::<i64>()?);
            }
        }
    }
    let status = phase.result().map(|r| r.status().as_str_name()).unwrap_or("");
    let latencies: Vec<String> = latencies.iter().map(i64::to_string).collect();
    println!(
        "{{\"events\":{events},\"first_ns\":{first},\"last_ns\":{last},\"status\":\"{status}\",\"latencies_ns\":[{}]}}",
        latencies.join(",")
    );
    Ok(())
}
