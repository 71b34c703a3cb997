//! The plain-S3 baselines `docs/performance-history.md` compares the s3 backend with: a loop of
//! ranged GETs (one request at a time, like a simple reader) and one multipart upload
//! (parts sent one after the other), both straight through `object_store`, no NFS.
//!
//!   cargo run --release -p gateway --example s3_baseline -- \
//!       --endpoint http://127.0.0.1:9000 --bucket b --key base.bin --size-mib 128 put|get
//!
//! Prints one line: `op MiB seconds MiB/s`. Credentials: AWS_* environment or "testing";
//! `--region` (default us-east-1) for stores that check it (Garage: "garage").

use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{GetOptions, GetRange, ObjectStore, PutPayload};
use std::time::Instant;

fn arg(args: &[String], name: &str, default: &str) -> String {
    args.windows(2)
        .find(|w| w[0] == name)
        .map_or(default.to_string(), |w| w[1].clone())
}

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let endpoint = arg(&args, "--endpoint", "http://127.0.0.1:9000");
    let bucket = arg(&args, "--bucket", "bench");
    let key = Path::parse(arg(&args, "--key", "baseline.bin"))?;
    let size: usize = arg(&args, "--size-mib", "128").parse::<usize>()? << 20;
    let block: usize = arg(&args, "--block-mib", "4").parse::<usize>()? << 20;
    let part: usize = arg(&args, "--part-mib", "8").parse::<usize>()? << 20;
    let region = arg(&args, "--region", "us-east-1");
    let op = args.last().cloned().unwrap_or_default();
    let id = std::env::var("AWS_ACCESS_KEY_ID").unwrap_or_else(|_| "testing".into());
    let secret = std::env::var("AWS_SECRET_ACCESS_KEY").unwrap_or_else(|_| "testing".into());
    let store = AmazonS3Builder::new()
        .with_endpoint(&endpoint)
        .with_bucket_name(&bucket)
        .with_region(&region)
        .with_allow_http(true)
        .with_access_key_id(id)
        .with_secret_access_key(secret)
        .with_virtual_hosted_style_request(false)
        .build()?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let t = Instant::now();
    rt.block_on(async {
        match op.as_str() {
            "put" => {
                let mut up = store.put_multipart(&key).await?;
                let data: Vec<u8> = (0..part).map(|i| (i % 251) as u8).collect();
                let mut left = size;
                while left > 0 {
                    let n = left.min(part);
                    up.put_part(PutPayload::from(data[..n].to_vec())).await?;
                    left -= n;
                }
                up.complete().await?;
            }
            "get" => {
                let mut at = 0;
                while at < size {
                    let n = block.min(size - at);
                    let opts = GetOptions {
                        range: Some(GetRange::Bounded(at as u64..(at + n) as u64)),
                        ..Default::default()
                    };
                    let b = store.get_opts(&key, opts).await?.bytes().await?;
                    anyhow::ensure!(b.len() == n, "short GET at {at}");
                    at += n;
                }
            }
            _ => anyhow::bail!("last argument: put | get"),
        }
        Ok::<_, anyhow::Error>(())
    })?;
    let s = t.elapsed().as_secs_f64();
    let mib = (size >> 20) as f64;
    println!("{op} {mib} {s:.3} {:.1}", mib / s);
    Ok(())
}
