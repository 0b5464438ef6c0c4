//! `tenured`: one Tenure node. Parses the configuration, sets up logging, runs until
//! SIGINT/SIGTERM; SIGHUP loads the token file and the TLS files again. `tenured restore …` seeds a data
//! directory from a backup instead.

use tenure_node::config::Config;

/// mimalloc instead of glibc's malloc: ≈ 8 % less CPU per write and ≈ 9 % less memory at a
/// million leases (docs/benchmarks.md), for ≈ 50 MiB more resident at small scale.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// What a node logs unless `RUST_LOG` says otherwise. openraft logs every failed Raft call
/// (ten a second for a peer that is down); the node's network layer reports a peer that does
/// not answer once, then every 30 s, naming it, so those per-call lines are off.
const DEFAULT_LOG: &str = "info,openraft=warn,openraft::replication=off,\
     openraft::engine::handler::replication_handler=off,sled=warn";

/// The allocator's variable that says how long freed memory waits before it goes back to
/// the system.
const PURGE_DELAY: &str = "MIMALLOC_PURGE_DELAY";

/// Its older name, which mimalloc v3 still reads.
const RESET_DELAY: &str = "MIMALLOC_RESET_DELAY";

/// What a node sets it to, in milliseconds: mimalloc v2's default. At 0 every free that
/// empties a page would return it at once, and renews at 1k leases ran 10–20 % slower.
const PURGE_DELAY_MS: &str = "10";

fn main() -> anyhow::Result<()> {
    if std::env::var_os(PURGE_DELAY).is_none() && std::env::var_os(RESET_DELAY).is_none() {
        purge_sooner();
    }
    // Logs go to stderr, in colour only on a terminal (not in journald or `docker logs`).
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(terminal)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| DEFAULT_LOG.into()),
        )
        .init();
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime.enable_all();
    if std::env::args_os()
        .nth(1)
        .is_some_and(|arg| arg == "restore")
    {
        return runtime.build()?.block_on(restore());
    }
    let config = Config::load()?;
    config.validate()?;
    if let Some(threads) = config.worker_threads {
        runtime.worker_threads(threads);
    }
    runtime.build()?.block_on(serve(config))
}

/// Starts this program again, in place (the same process), with [`PURGE_DELAY`] at
/// [`PURGE_DELAY_MS`].
///
/// mimalloc v3 keeps a freed page for a second, and a freed arena for ten, before it gives
/// them back, and gives them back only when the thread that freed them allocates again: a
/// node that has just loaded a million leases and gone quiet kept 53 MiB (leader) and 7–12
/// MiB (followers) of memory it no longer used (docs/benchmarks.md). The allocator reads its
/// options from the environment once, before `main`; setting one from here would take an
/// `unsafe` call, which the workspace forbids. An operator who sets the variable (or its older
/// name) keeps their value; a node started through a loader or under another name is left
/// as it is. Should the start fail, the node runs on with the allocator's default.
fn purge_sooner() {
    use std::os::unix::process::CommandExt;
    let program = match std::env::current_exe() {
        Ok(program) => program,
        Err(error) => {
            eprintln!("tenured: could not find its own binary ({error}); {PURGE_DELAY} stays the allocator's default");
            return;
        }
    };
    let mut args = std::env::args_os();
    let name = args.next();
    // Only the program itself: not a loader that started it (`ld.so tenured …`), nor under
    // another name than it was called by, which supervisors and `pgrep` go by.
    let same =
        |name: &std::ffi::OsStr| std::path::Path::new(name).file_name() == program.file_name();
    if !name.as_deref().is_some_and(same) {
        return;
    }
    let mut again = std::process::Command::new(&program);
    if let Some(name) = name {
        again.arg0(name);
    }
    // Only returns if it failed.
    let error = again.args(args).env(PURGE_DELAY, PURGE_DELAY_MS).exec();
    eprintln!(
        "tenured: could not start again with {PURGE_DELAY}={PURGE_DELAY_MS} ({error}); running on"
    );
}

/// Runs the node until SIGINT or SIGTERM.
async fn serve(config: Config) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(&config.listen).await?;
    tracing::info!(id = config.id, listen = %config.listen, data_dir = %config.data_dir.display(), "tenured starting");
    // Installed before the node starts, so that an early SIGHUP is not the default (exit).
    use tokio::signal::unix::{signal, SignalKind};
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sighup = signal(SignalKind::hangup())?;
    let running = tenure_node::app::start(config, listener).await?;

    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => break,
            _ = sigterm.recv() => break,
            // SIGHUP: load the token file and the TLS files again (revoke and add tokens,
            // rotate certificates, without a restart).
            _ = sighup.recv() => {
                if let Err(e) = running.node.reload() {
                    tracing::error!("SIGHUP: {e:#}; what did not load stays in force as it was");
                }
            }
        }
    }
    tracing::info!("shutting down");
    running.shutdown().await;
    Ok(())
}

/// `tenured restore`: its own flags (not the node's), then one line saying what it wrote.
async fn restore() -> anyhow::Result<()> {
    use clap::Parser;
    let args = std::env::args_os().skip(2);
    let restore = tenure_node::store::restore::Restore::parse_from(
        std::iter::once("tenured restore".into()).chain(args),
    );
    let restored = restore.run().await?;
    let peers = restore
        .peers
        .iter()
        .map(|(id, addr)| format!("{id}={addr}"))
        .collect::<Vec<_>>()
        .join(",");
    println!(
        "restored {} live leases from index {} at index {}, term {} ({} bytes) into {}\n\
         start it: tenured --id {} --data-dir {} --peers {peers}",
        restored.live_leases,
        restored.from_index,
        restored.index,
        restored.term,
        restored.snapshot_bytes,
        restore.data_dir.display(),
        restore.id,
        restore.data_dir.display(),
    );
    if restore.peers.len() > 1 {
        println!(
            "start the other members with the same --peers on empty data directories: they \
             receive the state from it"
        );
    }
    Ok(())
}
