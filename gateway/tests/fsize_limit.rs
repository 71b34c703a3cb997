//! The gateway starts under a file-size limit (`ulimit -f`, systemd `LimitFSIZE=`):
//! the `fs` backend's probe of the largest file (`backend/fs/maxsize.rs`) stays under
//! RLIMIT_FSIZE, since a length past it raises SIGXFSZ, which killed the gateway at
//! every start (exit 153) before the probe knew of the limit.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn the_gateway_starts_under_a_file_size_limit() {
    let dir = tempfile::tempdir().unwrap();
    let (data, state) = (dir.path().join("data"), dir.path().join("state"));
    std::fs::create_dir_all(&data).unwrap();
    std::fs::create_dir_all(&state).unwrap();
    let cfg = dir.path().join("gw.toml");
    std::fs::write(
        &cfg,
        format!(
            "[engine]\ncores = [0]\nidle = \"adaptive\"\nhugepages = \"off\"\n\
             [tcp]\nlisten = \"127.0.0.1:0\"\n[rdma]\nprovider = \"off\"\n\
             [backend]\nkind = \"fs\"\nroot = \"{}\"\n[state]\ndir = \"{}\"\n\
             [[exports]]\npath = \"/\"\nclients = [\"127.0.0.1/32\"]\n",
            data.display(),
            state.display()
        ),
    )
    .unwrap();
    let log = dir.path().join("log");
    // 1 GiB (bash counts 1024-byte blocks): far below any file system's largest file.
    let script = format!(
        "ulimit -f 1048576 && exec '{}' --config '{}' 2>'{}'",
        env!("CARGO_BIN_EXE_gateway"),
        cfg.display(),
        log.display()
    );
    let mut child = Command::new("bash")
        .args(["-c", &script])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        let mut text = String::new();
        if let Ok(mut f) = std::fs::File::open(&log) {
            f.read_to_string(&mut text).unwrap();
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the gateway exited under ulimit -f: {status:?}\n{text}");
        }
        if text.contains("gateway: serving") {
            break text;
        }
        assert!(
            Instant::now() < deadline,
            "not serving within 30 s:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(
        !text.contains("could not find the largest file size"),
        "{text}"
    );
    child.kill().unwrap();
    child.wait().unwrap();
}
