//! Into the namespaces: the calling thread moved into one, a closure run inside one, and a
//! proof that TCP payloads flow from one to another.

use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use nix::sched::{setns, CloneFlags};

use super::CLIENT_NAMESPACE;

/// Moves the calling thread into `t-cl`. Threads inherit the network namespace of the thread
/// that creates them, so call this on the main thread *before* building the tokio runtime:
/// every runtime thread, and every socket the clients open, then lives in `t-cl`. Processes
/// spawned from such a thread also start in `t-cl`.
pub fn enter_client_namespace() -> Result<()> {
    enter_namespace(CLIENT_NAMESPACE)
}

/// Moves the calling thread into the named namespace (`/run/netns/NAME`).
pub fn enter_namespace(name: &str) -> Result<()> {
    let path = format!("/run/netns/{name}");
    let file =
        File::open(&path).with_context(|| format!("opening {path} (is the host set up?)"))?;
    setns(file, CloneFlags::CLONE_NEWNET).with_context(|| format!("setns into {name}"))
}

/// Runs `f` on a fresh thread inside namespace `name` and returns its result.
pub fn in_namespace<T: Send>(name: &str, f: impl FnOnce() -> Result<T> + Send) -> Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            enter_namespace(name)?;
            f()
        })
        .join()
        .map_err(|_| anyhow!("thread inside {name} panicked"))?
    })
}

/// Proves that a TCP payload goes from namespace `from` to `to_ip` (inside namespace `to`) and
/// back within `timeout`: a listener inside `to` echoes a nonce the connector sends. A connect
/// alone proves nothing (paused processes and transparent proxies accept connects).
pub fn probe(from: &str, to: &str, to_ip: &str, timeout: Duration) -> Result<()> {
    let listener = in_namespace(to, || {
        let l = TcpListener::bind((to_ip, 0)).with_context(|| format!("bind {to_ip} in {to}"))?;
        l.set_nonblocking(true)?;
        Ok(l)
    })?;
    let addr: SocketAddr = listener.local_addr()?;
    let nonce = format!(
        "tenure-probe-{}-{}",
        std::process::id(),
        rand::random::<u64>()
    );
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        s.spawn(|| echo_until(&listener, &done, Instant::now() + timeout));
        let sent = in_namespace(from, || {
            let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
            stream.set_read_timeout(Some(timeout))?;
            stream.set_write_timeout(Some(timeout))?;
            stream.write_all(nonce.as_bytes())?;
            let mut back = vec![0; nonce.len()];
            stream.read_exact(&mut back)?;
            Ok(back)
        });
        done.store(true, Ordering::SeqCst);
        match sent {
            Ok(back) if back == nonce.as_bytes() => Ok(()),
            Ok(_) => bail!("{from} -> {addr}: the echo does not match the payload sent"),
            Err(e) => Err(e.context(format!("{from} -> {addr} ({to})"))),
        }
    })
}

fn echo_until(listener: &TcpListener, done: &AtomicBool, deadline: Instant) {
    while !done.load(Ordering::SeqCst) && Instant::now() < deadline {
        match listener.accept() {
            Ok((mut stream, _)) => {
                let _ = stream.set_nonblocking(false);
                let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
                let mut buf = [0u8; 256];
                if let Ok(n) = stream.read(&mut buf) {
                    let _ = stream.write_all(&buf[..n]);
                }
            }
            Err(_) => std::thread::sleep(Duration::from_millis(5)),
        }
    }
}
