use helix_runner_client::{pb, Client};

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut client = Client::connect(&args[0]).await?;
    let request = pb::RunPhaseRequest { job_id: "quickstart".into(), prompt: "Say hello".into(), working_dir: args[1].clone(), ..Default::default() };
    let mut phase = client.run_phase(request).await?;
    while let Some(event) = phase.next_event().await? {
        println!("{} {}", event.sequence, event.kind());
    }
    let result = phase.result().unwrap();
    println!("job {} phase {}", result.job_id, result.phase_id); // what watch_phase needs
    println!("{} {}", result.status().as_str_name(), result.result_text);
    Ok(())
}
